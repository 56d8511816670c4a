"""harness.checks.support.ranks: ranks forked from the test's process join one gloo group; a failing rank,
a hang and an interruption each end every rank, and the outcome says which; ranks are forked only from a
process without native threads."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")

from harness.checks.support.ranks import ForkedRanks, run_ranks  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def _all_reduce() -> int:
    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    value = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(value)
    print(f"rank {dist.get_rank()} of {dist.get_world_size()}: {value.item()}", flush=True)
    dist.destroy_process_group()
    return 0 if value.item() == 3.0 else 7


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def test_two_ranks_join_one_group_and_log_to_one_file(tmp_path):
    outcome = run_ranks(_all_reduce, 2, tmp_path / "ranks.log", timeout=120)
    assert outcome.ok and outcome.exit_codes == [0, 0], outcome
    log = (tmp_path / "ranks.log").read_text()
    assert "rank 0 of 2: 3.0" in log and "rank 1 of 2: 3.0" in log


def test_a_failing_rank_ends_its_waiting_peer_and_is_named(tmp_path):
    def fail_on_rank_one() -> None:
        if os.environ["RANK"] == "1":
            raise RuntimeError("rank one broke")
        time.sleep(120)  # as a peer blocked in a collective would

    outcome = run_ranks(fail_on_rank_one, 2, tmp_path / "ranks.log", timeout=120)
    assert not outcome.ok and not outcome.timed_out
    assert outcome.exit_codes == [None, 1]  # rank 0 killed by us, rank 1 failed
    assert outcome.seconds < 60
    assert "RuntimeError: rank one broke" in (tmp_path / "ranks.log").read_text()


def test_ranks_past_the_deadline_are_killed(tmp_path):
    with ForkedRanks(lambda: time.sleep(120), 2, tmp_path / "ranks.log") as ranks:
        pids = list(ranks.pids.values())
        outcome = ranks.wait(timeout=1.0)
    assert outcome.timed_out and outcome.exit_codes == [None, None]
    assert all(_gone(pid) for pid in pids)


def test_leaving_the_block_early_kills_the_ranks(tmp_path):
    with pytest.raises(KeyboardInterrupt), ForkedRanks(lambda: time.sleep(120), 2, tmp_path / "ranks.log") as ranks:
        pids = list(ranks.pids.values())
        raise KeyboardInterrupt
    assert all(_gone(pid) for pid in pids)


def test_an_exit_code_is_passed_through(tmp_path):
    outcome = run_ranks(lambda: 3, 1, tmp_path / "ranks.log", timeout=60)
    assert outcome.exit_codes == [3] and not outcome.ok


NATIVE_POOL = """
import json, threading, torch
from harness.checks.support import ranks as forked_ranks
before = (forked_ranks.native_threads(), forked_ranks.fork_safe())
python_thread = threading.Thread(target=threading.Event().wait, daemon=True)
python_thread.start()  # a Python thread (a test runner's) does not make forking unsafe
with_python_thread = forked_ranks.fork_safe()
torch.set_num_threads(2)
torch.ones(512, 512) @ torch.ones(512, 512)  # starts an OpenMP pool: native threads a fork drops
print(json.dumps({"before": before, "python": with_python_thread,
                  "after": (forked_ranks.native_threads(), forked_ranks.fork_safe())}))
"""


def test_ranks_are_forked_only_from_a_process_without_native_threads():
    env = {**os.environ, "OMP_NUM_THREADS": "1"}  # no pool at import: the test starts one
    done = subprocess.run([sys.executable, "-c", NATIVE_POOL], capture_output=True, text=True, env=env, check=True,
                          cwd=ROOT)
    seen = json.loads(done.stdout)
    assert seen["before"] == [0, True] and seen["python"] is True
    assert seen["after"][0] >= 1 and seen["after"][1] is False
