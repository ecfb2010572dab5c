#!/usr/bin/env bash
# `xlpos-prep prepare` of a large corpus on a Slurm cluster, as three dependent submissions:
#   1. one job: the steps made once for the whole corpus (alignment, oracle, reorderers, sentencepiece);
#   2. a job array of SHARDS tasks, after 1 succeeded: task I runs the per-sentence steps (reorder, positions,
#      spm-encode) of block I of every split, into WORK/shards/I-of-SHARDS/;
#   3. one job, after every task of 2 succeeded: the merge (the final orders, pieces and XL positions, exactly
#      what one machine's run writes), the reordering scores and the data-bin.
# WORK must be on storage every node sees. Every job skips what is done: after a failure (a task killed, a node
# lost), submit the same command again and only what is missing runs. docs/cluster.md has the details.
#
# usage: recipes/slurm_prepare.sh SHARDS PREPARE-OPTIONS...
#   recipes/slurm_prepare.sh 64 --work /scratch/wmt14 --src en --tgt de --workers 8 \
#       --align-lines 1000000 --reorder-train-lines 100000 --spm-vocab 32000 --spm-type bpe
# environment:
#   SBATCH_GLOBAL, SBATCH_SHARD, SBATCH_MERGE  further sbatch options of each job, one string each (partition,
#                                              --time, --cpus-per-task to match --workers, --mem)
#   SLURM_LOGS   directory of the jobs' output (default WORK/logs/slurm)
#   XLPOS_PREP   the command the jobs run (default xlpos-prep, found on the nodes' PATH)
#   DRY_RUN=1    print the sbatch commands instead of submitting them
set -euo pipefail

die() { echo "slurm_prepare.sh: $*" >&2; exit 2; }

[[ $# -ge 1 && $1 =~ ^[1-9][0-9]*$ ]] || die "the first argument must be SHARDS, a number of shard jobs (1 or more)"
shards=$1
shift
work=""
args=("$@")
for ((k = 0; k < ${#args[@]}; k++)); do
  case ${args[k]} in
    --work) work=${args[k + 1]:-} ;;
    --work=*) work=${args[k]#--work=} ;;
    --global-steps | --shard | --shard=* | --merge | --merge=*)
      die "${args[k]%%=*}: this script adds it to each job; give only the options every run shares" ;;
  esac
done
[[ -n $work ]] || die "--work is required (a directory every node sees)"
prep=${XLPOS_PREP:-xlpos-prep}
logs=${SLURM_LOGS:-$work/logs/slurm}
printf -v options ' %q' "$@"  # each option quoted for the jobs' shell

submit() {  # NAME SBATCH-OPTIONS... -> the job's id (DRY_RUN: prints the command; the id is NAME)
  local name=$1 out
  shift
  if [[ ${DRY_RUN:-0} == 1 ]]; then
    printf 'sbatch' >&2
    printf ' %q' "$@" >&2
    printf '\n' >&2
    echo "$name"
  else
    out=$(sbatch --parsable "$@") || die "sbatch failed: $out"
    echo "${out%%;*}"  # --parsable prints ID or ID;CLUSTER
  fi
}

if [[ ${DRY_RUN:-0} != 1 ]]; then
  command -v sbatch >/dev/null || die "sbatch not found: run this on a Slurm login node (DRY_RUN=1 prints the jobs)"
  mkdir -p "$logs"
fi

# (word splitting of SBATCH_* is wanted: each holds several options)
# shellcheck disable=SC2086
global=$(submit GLOBAL_JOB --job-name=xlpos-global --output="$logs/%x-%j.out" ${SBATCH_GLOBAL:-} \
  --wrap="exec $prep prepare$options --global-steps")
# shellcheck disable=SC2086
array=$(submit SHARD_JOBS --job-name=xlpos-shard --output="$logs/%x-%A_%a.out" --array="0-$((shards - 1))" \
  --dependency="afterok:$global" --kill-on-invalid-dep=yes ${SBATCH_SHARD:-} \
  --wrap="exec $prep prepare$options --shard \${SLURM_ARRAY_TASK_ID}/$shards")
# shellcheck disable=SC2086
merge=$(submit MERGE_JOB --job-name=xlpos-merge --output="$logs/%x-%j.out" --dependency="afterok:$array" \
  --kill-on-invalid-dep=yes ${SBATCH_MERGE:-} --wrap="exec $prep prepare$options --merge $shards")

echo "submitted: global steps $global, $shards shard tasks $array, merge $merge (output: $logs)"
