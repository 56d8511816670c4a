"""grpo-convergence passes on the trainer as it is, and fails on a trainer that does not learn
and on a reference curve that the run does not follow."""
import copy
import json

import pytest

from harness.checks import CheckOptions
from harness.checks import grpo_convergence as check
from harness.results.records import Status

REFERENCE = json.loads(check.reference_path("fsdp", "text").read_text())


def _records(curve):
    return [{"step": i, "reward_mean": v} for i, v in enumerate(curve)]


def test_reference_states_its_tolerances_and_versions():
    for key in ("curve", "band", "threshold", "margin", "steps", "seed", "smooth", "made_with"):
        assert key in REFERENCE
    assert len(REFERENCE["curve"]) == REFERENCE["steps"]
    assert {"torch", "transformers", "tensordict", "python", "date", "command"} <= set(REFERENCE["made_with"])
    # the reference itself starts well below the threshold and ends above it
    assert REFERENCE["curve"][0] < REFERENCE["threshold"] - REFERENCE["margin"] < REFERENCE["curve"][-1]


def test_evaluate_passes_the_reference_and_fails_a_shifted_one():
    status, _, metrics, verdicts = check.evaluate(_records(REFERENCE["curve"]), REFERENCE)
    assert status is Status.PASS and metrics["max_deviation"] == 0.0
    shifted = copy.deepcopy(REFERENCE)
    shifted["curve"] = [v + 1.5 * REFERENCE["band"] for v in REFERENCE["curve"]]
    status, _, metrics, verdicts = check.evaluate(_records(REFERENCE["curve"]), shifted)
    assert status is Status.FAIL
    assert {v.name: v.status for v in verdicts}["band"] is Status.FAIL


def test_evaluate_fails_a_flat_curve_and_skips_the_band_when_not_comparable():
    flat = _records([REFERENCE["curve"][0]] * REFERENCE["steps"])
    status, _, _, verdicts = check.evaluate(flat, REFERENCE)
    by_name = {v.name: v.status for v in verdicts}
    assert status is Status.FAIL and by_name == {"threshold": Status.FAIL, "gain": Status.FAIL, "band": Status.FAIL}
    _, _, _, verdicts = check.evaluate(flat, REFERENCE, comparable=False)
    assert {v.name: v.status for v in verdicts}["band"] is Status.SKIP


def test_moving_average():
    assert check.moving_average([1.0, 2.0, 3.0, 4.0], 2) == [1.0, 1.5, 2.5, 3.5]


@pytest.mark.slow
def test_check_passes_then_fails_against_a_shifted_reference(tmp_path):
    result = check.run(CheckOptions(model="text", work_dir=tmp_path))
    if result.status is Status.SKIP:
        pytest.skip(result.message)
    assert result.status is Status.PASS, result.message
    assert len(result.metrics["per_step"]) == REFERENCE["steps"]
    assert result.metrics["gain"] >= REFERENCE["margin"]
    # The trainer's rollout engine compared its first batch with transformers' generate (trainers.rollout).
    check_record = result.metrics["per_step"][0]["rollout_check"]
    assert check_record["same_tokens"] and check_record["max_logit_diff"] < 1e-4
    shifted = copy.deepcopy(REFERENCE)
    shifted["curve"] = [v - 0.15 for v in REFERENCE["curve"]]
    status, _, _, _ = check.evaluate(result.metrics["per_step"], shifted)
    assert status is Status.FAIL


@pytest.mark.slow
def test_check_fails_when_the_trainer_cannot_learn(tmp_path):
    # 8 steps keep it short: the band is then not comparable (skip), threshold and gain decide
    result = check.run_with(CheckOptions(model="text", steps=8, work_dir=tmp_path), trainer_args={"lr": 0.0})
    if result.status is Status.SKIP:
        pytest.skip(result.message)
    assert result.status is Status.FAIL
    statuses = {v.name: v.status for v in result.verdicts}
    assert statuses["threshold"] is Status.FAIL and statuses["gain"] is Status.FAIL


def _async_records(staleness, depth=1, capacity=1):
    return [{"step": i, "reward_mean": 0.5, "staleness": s, "weight_version": i - s, "queue_max_depth": depth,
             "queue_capacity": capacity} for i, s in enumerate(staleness)]


def test_bounded_verdict_catches_stale_samples_an_overfull_queue_and_a_sync_run():
    assert check.bounded_verdict(_async_records([0, 1, 2, 2]), 2).status is Status.PASS
    assert check.bounded_verdict(_async_records([0, 1, 3]), 2).status is Status.FAIL
    assert check.bounded_verdict(_async_records([0, 1, 1], depth=3, capacity=2), 2).status is Status.FAIL
    assert check.bounded_verdict(_records([0.2, 0.3]), 1).status is Status.FAIL  # ran sync: no staleness


def test_fully_async_results_combine_with_prefixed_verdicts():
    from harness.results.records import CheckResult, Verdict

    good = CheckResult(check.NAME, Status.PASS, "ok", verdicts=[Verdict("band", Status.PASS, "in")])
    bad = CheckResult(check.NAME, Status.FAIL, "stale", verdicts=[Verdict("bounded", Status.FAIL, "3 > 2")])
    combined = check._combine([(1, good), (2, bad)])
    assert combined.status is Status.FAIL
    assert [v.name for v in combined.verdicts] == ["staleness1/band", "staleness2/bounded"]
    assert check.reference_path("fsdp", "text", 2).name == "grpo_fsdp_text_async2.json"


@pytest.mark.slow
def test_fully_async_check_passes_at_staleness_1_with_its_distribution(tmp_path):
    result = check.run_with(CheckOptions(model="text", work_dir=tmp_path, mode="fully-async"), staleness=(1,))
    if result.status is Status.SKIP:
        pytest.skip(result.message)
    assert result.status is Status.PASS, result.message
    assert {v.name for v in result.verdicts} == {f"staleness1/{n}" for n in (
        "threshold", "gain", "band", "bounded", "schedule", "correction")}
    run = result.metrics["staleness1"]
    assert run["staleness_distribution"] == {"0": 1, "1": run["steps"] - 1}
    # the importance-sampling statistics reach the result: its metrics and the correction verdict's message
    assert run["importance_sampling"]["corrected_updates"] == run["steps"] - 1
    correction = next(v for v in result.verdicts if v.name == "staleness1/correction")
    assert "ratio mean" in correction.message and "clipped fraction" in correction.message
    assert correction.message in result.message  # the report's line shows the statistics
    assert 0.0 <= run["overlap_fraction"] <= 1.0


def test_only_cpu_runs_with_hf_rollout_or_one_vllm_rank_go_to_forked_ranks(tmp_path, monkeypatch):
    from harness.checks.support import forked_ranks

    def command(device, nproc=2, **args):
        monkeypatch.setenv("HARNESS_DEVICE", device)
        return check.trainer_command("fsdp", "text", 3, 0, tmp_path / "m.jsonl", args, nproc=nproc)

    monkeypatch.setattr(forked_ranks, "fork_safe", lambda: False)  # native threads here: torchrun, whatever the run
    assert check.forked_trainer(command("cpu", lr=0.005)) is None
    monkeypatch.setattr(forked_ranks, "fork_safe", lambda: True)  # not this test process's threads: the decision

    module, argv, nproc = check.forked_trainer(command("cpu", lr=0.005))
    assert (module, nproc) == ("trainers.fsdp", 2) and argv[argv.index("--lr") + 1] == "0.005"
    # With more than one rank each rank's vLLM starts processes of its own; on one rank it runs inside it.
    assert check.forked_trainer(command("cpu", rollout="vllm")) is None
    assert check.forked_trainer(command("cpu", nproc=1, rollout="vllm"))[2] == 1
    assert check.forked_trainer(command("cuda")) is None  # a device runtime does not survive fork
    assert check.forked_trainer(command("cuda", nproc=1, rollout="vllm")) is None


def test_a_run_stopped_at_a_non_finite_loss_fails_naming_the_step(tmp_path, monkeypatch):
    """The trainer's stop (exit 4, its last metrics line says why) is the check's failure, with the step."""
    pytest.importorskip("transformers")
    stopped = "training stopped at step 2: non-finite loss = nan, grad_norm = nan"

    def trainer_that_diverges(command, log, timeout=check.RUN_TIMEOUT):
        metrics = command[command.index("--metrics") + 1]
        lines = [*_records([0.1, 0.2]), {"step": 2, "loss": "nan", "grad_norm": "nan", "stopped": stopped,
                                         "non_finite": ["loss", "grad_norm"]}]
        with open(metrics, "w", encoding="utf-8") as handle:
            handle.writelines(json.dumps(line) + "\n" for line in lines)
        log.write_text(f"error: {stopped}\n")
        return 4, 0.1

    monkeypatch.setattr(check, "run_trainer", trainer_that_diverges)
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


@pytest.mark.slow
def test_a_diverging_two_rank_run_fails_at_its_step(tmp_path):
    """The real trainer on 2 ranks: both stop at the same step (neither waits in a collective), the check fails."""
    result = check.run_with(CheckOptions(model="text", steps=4, work_dir=tmp_path), trainer_args={"lr": 1e30})
    if result.status is Status.SKIP:
        pytest.skip(result.message)
    assert result.status is Status.FAIL and result.message.startswith("training stopped at step ")
    # 4 from forked ranks; under torchrun (where this process cannot fork safely) its agent reports a failed rank as 1
    assert result.message.endswith(("(trainer exited 4)", "(trainer exited 1)")) and result.verdicts[0].name == "finite"


@pytest.mark.parametrize("device, visible, max_ranks, expected", [
    ("cpu", None, None, (2, {"tp": 2}, None)),
    ("cpu", None, 1, (1, {"tp": 1}, "max_ranks 1")),
    ("cuda", 1, None, (1, {"tp": 1}, "1 visible cuda device")),  # a one-GPU box: rank 1 has no device
    ("cuda", 2, None, (2, {"tp": 2}, None)),
    ("cuda", 4, 4, (2, {"tp": 2}, None)),  # never more than the reference's ranks
])
def test_a_run_fits_the_ranks_there_are(monkeypatch, device, visible, max_ranks, expected):
    monkeypatch.setenv("HARNESS_DEVICE", device)
    monkeypatch.setattr(check, "visible_devices", lambda kind: visible if kind == "cuda" else None)
    assert check.fit_ranks(2, "megatron", {"tp": 2, "lr": 0.005}, max_ranks) == \
        (expected[0], {**expected[1], "lr": 0.005}, expected[2])
    ranks, args, _ = check.fit_ranks(2, "fsdp", {"lr": 0.005}, max_ranks)
    assert ranks == expected[0] and args == {"lr": 0.005}  # FSDP shards over whatever ranks there are


def test_the_device_count_comes_from_the_trainers_device_plan():
    from trainers.runtime.device import plan

    assert check.visible_devices("cpu") is None and plan("cpu").device_count() is None


def test_megatron_keeps_what_fits_and_gives_up_expert_parallel_first():
    assert check.fit_ranks(8, "megatron", {"tp": 2, "ep": 2}, 2) == (2, {"tp": 2, "ep": 1}, "max_ranks 2")


@pytest.mark.slow
def test_one_rank_follows_the_two_rank_reference(tmp_path):
    """Measured when written: one rank gives the two-rank curve (max deviation 0.000), so the band still holds."""
    result = check.run(CheckOptions(model="text", work_dir=tmp_path, max_ranks=1))
    assert result.status is Status.PASS, result.message
    assert (result.metrics["ranks"], result.metrics["reference_ranks"]) == (1, 2)
    assert result.message.endswith("; 1 rank of the reference's 2 (max_ranks 1)")
    assert {v.name: v.status for v in result.verdicts}["band"] is Status.PASS
