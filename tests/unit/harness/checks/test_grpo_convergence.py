"""grpo-convergence's own entry points: a trainer stopped at a non-finite loss fails naming its step, and its
command line is checked before anything runs."""
import json

import pytest

from harness.checks import CheckOptions
from harness.checks import grpo_convergence as check
from harness.checks.grpo_convergence import launch
from harness.checks.grpo_convergence.references import reference_path
from harness.results.records import Status

REFERENCE = json.loads(reference_path("fsdp", "text").read_text())


def _records(curve):
    return [{"step": i, "reward_mean": v} for i, v in enumerate(curve)]

def test_a_run_stopped_at_a_non_finite_loss_fails_naming_the_step(tmp_path, monkeypatch):
    """The trainer's stop (exit 4, its last metrics line says why) is the check's failure, with the step."""
    pytest.importorskip("transformers")
    stopped = "training stopped at step 2: non-finite loss = nan, grad_norm = nan"

    def trainer_that_diverges(command, log, timeout=launch.RUN_TIMEOUT):
        metrics = command[command.index("--metrics") + 1]
        lines = [*_records([0.1, 0.2]), {"step": 2, "loss": "nan", "grad_norm": "nan", "stopped": stopped,
                                         "non_finite": ["loss", "grad_norm"]}]
        with open(metrics, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(line) + "\n" for line in lines)
        log.write_text(f"error: {stopped}\n")
        return 4, 0.1

    monkeypatch.setattr(launch, "run_trainer", trainer_that_diverges)
    result = check.run_with(CheckOptions(model="text", steps=3, work_dir=tmp_path), reference=REFERENCE)
    assert result.status is Status.FAIL and result.message == f"{stopped} (trainer exited 4)"
    assert [(v.name, v.status, v.message) for v in result.verdicts] == [("finite", Status.FAIL, stopped)]

@pytest.mark.parametrize("args, expected", [
    (["--lr", "nan"], "--lr: expected a finite number >= 0, got nan"),
    (["--lr=-1"], "--lr: expected a finite number >= 0, got -1.0"),
    (["--steps", "0"], "--steps: expected a whole number of at least 1, got 0"),
    (["--seed=-2"], "--seed: expected a whole number from 0"),
    (["--work-dir", "FILE"], "--work-dir FILE: exists and is not a directory"),
    (["--max-ranks", "0"], "--max-ranks: expected a whole number of ranks, at least 1, got 0"),
])
def test_its_own_command_line_is_checked_before_it_runs(tmp_path, monkeypatch, capsys, args, expected):
    (tmp_path / "FILE").write_text("not a directory")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(check, "run_with", lambda *a, **k: pytest.fail("ran with bad options"))
    assert check.main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {expected}") and err.count("\n") == 1
