import os
import pytest

from xlpos_prep.io import InputError, Shard, atomic_output, read_tokens


def test_shards_cover_all_lines_in_order():
    for total in (0, 1, 7, 100):
        for n in (1, 3, 8):
            spans = [Shard(i, n).bounds(total) for i in range(n)]
            assert spans[0][0] == 0 and spans[-1][1] == total
            assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize("bad", ["3/3", "a/b", "1", "-1/2"])
def test_bad_shard_spec_is_rejected(bad):
    with pytest.raises(ValueError):
        Shard.parse(bad)


def test_atomic_output_leaves_nothing_on_failure(tmp_path):
    out = tmp_path / "x.txt"
    with pytest.raises(RuntimeError):
        with atomic_output(str(out)) as f:
            f.write("partial")
            raise RuntimeError("boom")
    assert list(tmp_path.iterdir()) == []


def test_empty_sentence_error_names_file_and_line(tmp_path):
    p = tmp_path / "s.txt"
    p.write_text("a b\n\nc\n")
    with pytest.raises(InputError, match=r"s.txt:2: empty sentence"):
        read_tokens(str(p))


def test_atomic_output_has_the_permissions_of_a_plain_file(tmp_path):
    plain, atomic = tmp_path / "plain.txt", tmp_path / "atomic.txt"
    plain.write_text("x")
    with atomic_output(str(atomic)) as f:
        f.write("x")
    assert (atomic.stat().st_mode & 0o777) == (plain.stat().st_mode & 0o777)


def test_a_waiting_lock_is_taken_when_its_holder_ends(tmp_path, capsys):
    import subprocess
    import sys
    import time

    from xlpos_prep.io import directory_lock
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time\nfrom xlpos_prep.io import directory_lock\n"
                               "with directory_lock(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(1.5)",
         str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        held_at = time.monotonic()
        with pytest.raises(InputError, match=f"in use by another run \\(pid {holder.pid}"):
            with directory_lock(tmp_path):
                pass
        with directory_lock(tmp_path, wait=True):
            assert time.monotonic() - held_at >= 1.0  # taken only once the holder let it go (after 1.5 s)
            assert (tmp_path / ".xlpos.lock").read_text().split()[0] == str(os.getpid())
        assert "waiting for it to end" in capsys.readouterr().err
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()


def _slow_setup(delay: float) -> None:
    import time
    from xlpos_prep.io import pool_worker_setup
    time.sleep(delay)  # the window between a worker's fork and its setup, made wide
    pool_worker_setup()


def test_a_pool_worker_terminated_before_its_setup_dies_of_sigterm_never_of_the_parents_handler():
    import signal
    import time
    from xlpos_prep import io
    previous = signal.signal(signal.SIGTERM, io._interrupt)  # what run_cli installs: SIGTERM raises KeyboardInterrupt
    try:
        pool = io.fork_pool(2, _slow_setup, (1.0,))
        workers = list(pool._pool)
        time.sleep(0.2)  # forked, still before pool_worker_setup
        pool.terminate()
        pool.join()
        # held back until the default action was in place: killed by the signal, not exiting on a KeyboardInterrupt
        assert [w.exitcode for w in workers] == [-signal.SIGTERM] * 2
        assert signal.SIGTERM not in signal.pthread_sigmask(signal.SIG_BLOCK, [])  # this process: unblocked again
    finally:
        signal.signal(signal.SIGTERM, previous)
