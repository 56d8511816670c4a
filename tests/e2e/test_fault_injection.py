"""Fault injection: a real matrix run killed at random moments, again and again (seeded), never loses or
damages a finished result, and the next run completes the rest.

Six cells of two cheap checks (tests/resources/checks/misbehaving.py); each try is killed by SIGKILL, SIGTERM or
SIGINT, half the time after a random delay (landing in start-up, uv, the environment capture, a check or a write),
half the time shortly after the next cell is written (so finished results are at stake whatever the machine's speed).
"""
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.results.records import load_cell

ROOT = Path(__file__).resolve().parents[2]
MATRIX = """\
[matrix]
name = "faults"
checks = ["misbehave", "misbehave-too"]

[axes]
backend = ["fsdp", "megatron"]
model = ["text", "vl", "moe"]
device = ["cpu"]
"""
KILLS = 24  # runs killed while there is work left
BUDGET_S = 900  # the whole test, kills and the final run; far above what it takes on a quiet machine
pytestmark = pytest.mark.slow


def _finished(out: Path) -> dict[str, bytes]:
    cells = out / "cells"
    return {p.name: p.read_bytes() for p in sorted(cells.glob("*.json"))} if cells.is_dir() else {}


def _temporaries(out: Path) -> set[str]:
    return {p.name for p in (out / "cells").glob(".*.tmp")} if (out / "cells").is_dir() else set()


def _assert_whole(out: Path, files: dict[str, bytes], returncode: int, before: set[str]) -> None:
    for name, data in files.items():
        json.loads(data)  # valid JSON
        cell = load_cell(out / "cells" / name)
        assert [c.check for c in cell.checks] == ["misbehave", "misbehave-too"], name  # complete
        assert all(c.status.value == "pass" for c in cell.checks), name
    # A writer killed by SIGKILL between its temporary file and the rename cannot remove the temporary (it is
    # never read: results are *.json); after any other ending the run leaves none of its own.
    if returncode != -signal.SIGKILL:
        assert not _temporaries(out) - before, f"a run that exited with {returncode} left a temporary file"


def _wait_for_a_new_cell(run: subprocess.Popen, out: Path, had: int, limit_s: float = 120) -> None:
    # Half the kills wait for a cell to finish first: on a slow machine, kills after a random delay alone
    # mostly land before the first cell is written, and survival of finished results is then hardly tested.
    deadline = time.monotonic() + limit_s
    while run.poll() is None and len(_finished(out)) <= had and time.monotonic() < deadline:
        time.sleep(0.05)


def test_random_kills_never_damage_a_finished_result_and_the_next_run_completes(tmp_path, project_env):
    (tmp_path / "m.toml").write_text(MATRIX)
    env = {**project_env, "MISBEHAVE": "slow", "MISBEHAVE_SECONDS": "0.3", "CI": "1"}
    rng = random.Random(20261123)
    start = time.monotonic()
    signals = [signal.SIGKILL] * 4 + [signal.SIGTERM, signal.SIGINT]
    kills, rounds, survived = 0, 0, 0
    # A round ends when a run finishes before its signal: that run is the one that completes the rest.
    # Rounds go on (each in a fresh results directory, environments kept) until KILLS runs were killed mid-way
    # and finished cells were at stake in at least KILLS // 2 of those kills' checks: on a loaded machine more
    # kills land before a cell is written, so it takes more rounds, not a weaker test.
    while kills < KILLS or survived < KILLS // 2:
        out, kept, rounds = tmp_path / f"out{rounds}", {}, rounds + 1
        argv = [sys.executable, "-m", "harness", "run", str(tmp_path / "m.toml"), "--out", str(out), "--env-root",
                str(tmp_path / "envs"), "--no-index-check", "--no-report", "--retries", "0"]
        while True:
            assert time.monotonic() - start < BUDGET_S, (f"only {kills} kills, {survived} finished cells checked "
                                                         f"after a kill, within {BUDGET_S} s")
            before = _temporaries(out)
            run = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if rng.random() < 0.5:
                time.sleep(rng.uniform(0.3, 8.0))  # anywhere: start-up, uv, capture, a check, a write
            else:
                _wait_for_a_new_cell(run, out, len(kept))  # just after a write, so finished cells are at stake
                time.sleep(rng.uniform(0.0, 1.5))
            sig = rng.choice(signals)
            run.send_signal(sig)
            _, err = run.communicate(timeout=120)
            assert run.returncode in (-sig, 130, 0), err.decode()[-2000:]  # 0: it finished before the signal
            now = _finished(out)
            for name, data in kept.items():
                assert now.get(name) == data, f"{sig.name} changed or lost the finished {name}"
            _assert_whole(out, now, run.returncode, before)
            if run.returncode == 0:
                assert len(now) == 6, "a run that exits 0 has finished every cell"
                break
            kills, survived, kept = kills + 1, survived + len(kept), now
    print(f"{kills} runs killed mid-way in {rounds} rounds; finished cells checked after a kill: {survived}")
