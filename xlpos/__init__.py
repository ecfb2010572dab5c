"""xlpos fairseq plugin: `--user-dir xlpos` registers the task, models and the checkpoint-loading fix."""
