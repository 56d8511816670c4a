"""harness.checks.support.ranks: ranks forked from the test's process join one gloo group; a failing rank,
a hang and an interruption each end every rank, and the outcome says which."""
from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("torch")

from harness.checks.support.ranks import ForkedRanks, run_ranks  # noqa: E402


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
