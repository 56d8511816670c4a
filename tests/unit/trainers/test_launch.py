"""Both trainers' one way out (trainers/launch.py): bad input is one line and exit 2 with nothing written, a
run that meets a non-finite loss or gradient norm stops there (exit 4) and its metrics file says so.
`python -m trainers.X` giving the same line and status: tests/e2e/test_trainer_entry.py (fresh interpreters)."""
import json
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("module", ["trainers.fsdp", "trainers.megatron"])
@pytest.mark.parametrize("args, expected", [
    (("--mode", "fully-async", "--tis-cap", "nan"), "tis_cap=nan (expected a finite number)"),
    (("--temperature", "inf"), "temperature=inf (expected a finite number)"),
    (("--model-config", "README.md"), "model_config=README.md: not a JSON file"),
    (("--config", "no-such.toml"), "--config no-such.toml: not a readable TOML file"),
])
def test_bad_input_is_one_line_and_exit_2_before_anything_is_written(tmp_path, monkeypatch, capsys, module, args,
                                                                      expected):
    import importlib

    monkeypatch.chdir(ROOT)
    main = importlib.import_module(f"{module}.__main__").main
    code = main([*args, "--metrics", str(tmp_path / "out" / "metrics.jsonl")])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().count("\n") == 0 and err.startswith("error: ") and expected in err
    assert not (tmp_path / "out").exists()  # refused before the metrics file (or any model) was made


def test_a_model_config_for_another_model_is_named_not_a_transformers_traceback(tmp_path, capsys):
    from trainers.fsdp.__main__ import main
    from trainers.models import default_config

    vl = tmp_path / "vl.json"
    vl.write_text(json.dumps(default_config("vl")))
    assert main(["--model", "text", "--model-config", str(vl)]) == 2
    assert f"model_config={vl}: unknown key 'text_config'" in capsys.readouterr().err


@pytest.mark.parametrize("mode", ["sync", "fully-async"])
def test_a_non_finite_loss_stops_the_run_at_its_step(tmp_path, mode, capsys):
    """A learning rate of 1e30 is a valid number; after one update the weights are not, nor is the next loss."""
    from trainers.fsdp.__main__ import main

    metrics = tmp_path / "metrics.jsonl"
    code = main(["--lr", "1e30", "--steps", "4", "--batch-prompts", "2", "--group-size", "2", "--mode", mode,
                 "--metrics", str(metrics), "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 4
    records = [json.loads(line) for line in metrics.read_text().splitlines()]
    last = records[-1]
    step = last["step"]
    assert 0 < step < 4 and len(records) == step + 1  # stopped at the first non-finite step, no step after it
    assert last["stopped"] == f"training stopped at step {step}: non-finite loss = nan, grad_norm = nan"
    assert last["non_finite"] == ["loss", "grad_norm"]
    assert err[-1] == f"error: {last['stopped']}"


def test_the_stop_needs_every_rank_to_agree(monkeypatch):
    """A rank whose own numbers are finite stops too when another rank's were not (its peers would otherwise
    wait for it in a collective)."""
    from trainers.errors import NonFiniteTraining
    from trainers.grpo.loop import GRPOLoop
    from trainers.grpo.metrics import MetricsWriter

    loop = GRPOLoop()
    loop.rank, loop.world, loop.writer = 1, 2, MetricsWriter(None)
    monkeypatch.setattr(loop, "_all_sum", lambda values, group=None, op=None: [1.0])  # another rank said "bad"
    with pytest.raises(NonFiniteTraining, match="step 3: non-finite loss or grad_norm on another rank"):
        loop.stop_if_not_finite(3, {"loss": 0.5, "grad_norm": 1.0})
    monkeypatch.setattr(loop, "_all_sum", lambda values, group=None, op=None: values)
    loop.stop_if_not_finite(3, {"loss": 0.5, "grad_norm": 1.0})  # all finite everywhere: goes on


def test_a_relaunch_exits_with_the_ranks_status_and_prints_their_line_once(monkeypatch, capsys):
    """torchrun ends with 1 whatever its workers said; the launcher reads their statuses instead."""
    from trainers import launch

    def torchrun(command, env):
        folder = Path(env[launch.STATUS_DIR_ENV])
        for rank in (1, 0):  # the same bad input on every rank
            (folder / f"rank-{rank}.json").write_text(json.dumps({"rank": rank, "code": 2, "line": "bad input"}))
        (folder / "rank-9.json").write_text("not json")
        return 1

    monkeypatch.setattr(launch.subprocess, "call", torchrun)
    assert launch.relaunch("trainers.fsdp", [], 2) == 2
    assert capsys.readouterr().err == "error: bad input\n"

    def diverging(command, env):
        folder = Path(env[launch.STATUS_DIR_ENV])
        (folder / "rank-1.json").write_text(json.dumps({"rank": 1, "code": 4, "line": "stopped on rank 1"}))
        (folder / "rank-0.json").write_text(json.dumps({"rank": 0, "code": 3, "line": "refused on rank 0"}))
        return 1

    monkeypatch.setattr(launch.subprocess, "call", diverging)
    assert launch.relaunch("trainers.fsdp", [], 2) == 3  # the lowest rank's status
    assert capsys.readouterr().err == "error (rank 0): refused on rank 0\nerror (rank 1): stopped on rank 1\n"
    monkeypatch.setattr(launch.subprocess, "call", lambda command, env: 7)  # no rank stopped on its own terms
    assert launch.relaunch("trainers.fsdp", [], 2) == 7 and capsys.readouterr().err == ""


def test_a_rank_under_a_relaunch_leaves_its_line_to_the_launcher(tmp_path, monkeypatch, capsys):
    from trainers import launch
    from trainers.errors import TrainerError

    class Refused(TrainerError):
        exit_code = 3

    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv(launch.STATUS_DIR_ENV, str(tmp_path))
    launch.report_stop(Refused("this stack refuses"))
    assert capsys.readouterr().err == ""
    assert launch.rank_statuses(tmp_path) == [{"rank": 1, "code": 3, "line": "this stack refuses"}]
    monkeypatch.delenv(launch.STATUS_DIR_ENV)  # a torchrun the user started: each rank says it itself
    launch.report_stop(Refused("this stack refuses"))
    assert capsys.readouterr().err == "error: this stack refuses\n"
