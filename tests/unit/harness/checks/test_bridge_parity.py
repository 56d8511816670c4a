"""bridge-parity's own entry: every verdict passes through the guard that names its bridge, and max_ranks keeps
only the jobs that fit, reaches the check command and is refused when bad."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from harness.checks import CheckOptions, bridge_parity
from harness.checks.bridge_parity import megatron_bridge
from harness.errors import InputError
from harness.results.records import Status

PROJECT = {"tp": 1, "ep": 1, "bridge": "project-mapping", "max_abs_logprob_error": 1e-6, "max_rel_grad_error": 1e-4,
           "worst_grad": "lm_head.weight", "finite": True, "roundtrip_exact": True, "roundtrip_mismatched": []}


def test_the_check_passes_every_verdict_through_the_guard(tmp_path, monkeypatch):
    from harness.checks.support import ranks

    monkeypatch.setattr(ranks, "preload", lambda *names: None)
    monkeypatch.setattr(bridge_parity, "ask_bridges", lambda: {})
    monkeypatch.setattr(bridge_parity, "_run_job", lambda job, *a: ({"text-hybrid": PROJECT}, "forked"))
    monkeypatch.setattr(megatron_bridge, "installed_version", lambda: "0.6.2")
    monkeypatch.setattr(megatron_bridge, "verdicts", lambda *a, **k: [bridge_parity.parity_verdict(
        "megatron-bridge/text-hybrid-tp1/logprobs", PROJECT, None)])  # a wiring that credits Megatron-Bridge wrongly
    monkeypatch.setattr(bridge_parity, "JOBS", {"tp1": (1, 1, "text-hybrid"), "megatron-bridge-tp1": (1, 1, "")})
    monkeypatch.setattr(bridge_parity, "_skip_reason", lambda: None)
    result = bridge_parity.run(CheckOptions(backend="megatron", work_dir=tmp_path),
                               jobs=("tp1", "megatron-bridge-tp1"))
    verdicts = {v.name: v for v in result.verdicts}
    assert verdicts["text-hybrid-tp1"].status == Status.PASS
    assert verdicts["megatron-bridge/text-hybrid-tp1/logprobs"].status == Status.FAIL and result.status == Status.FAIL


def test_max_ranks_keeps_only_the_jobs_that_fit():
    library = ("megatron-bridge-tp1", "megatron-bridge-tp2", "megatron-bridge-ep2")
    assert bridge_parity.default_jobs(1, False) == ("tp1",)
    assert bridge_parity.default_jobs(1, True) == ("tp1", "megatron-bridge-tp1")
    assert bridge_parity.default_jobs(None, False) == ("tp1", "tp2", "ep2")
    assert bridge_parity.default_jobs(2, True) == ("tp1", "tp2", "ep2", *library)


MATRIX = textwrap.dedent("""\
    [matrix]
    name = "t"
    checks = ["bridge-parity"]
    max_ranks = {value}

    [axes]
    transformers = ["5.3.0"]
    torch = ["2.13.0"]
    backend = ["megatron"]
    model = ["text"]
    device = ["cpu"]
    """)


def test_max_ranks_reaches_the_check_command(tmp_path):
    from harness import matrix
    from harness.execution import cell as run

    path = tmp_path / "m.toml"
    path.write_text(MATRIX.format(value=1))
    cell = matrix.load(path).cells[0]
    assert cell.max_ranks == 1
    assert run._check_args(cell, run.RunOptions(out_dir=tmp_path), "bridge-parity")[-2:] == ["--max-ranks", "1"]


@pytest.mark.parametrize("value", ["0", "-2", "true", '"1"', "1.5"])
def test_a_bad_max_ranks_is_one_line_naming_the_key(tmp_path, value):
    from harness import matrix

    path = tmp_path / "m.toml"
    path.write_text(MATRIX.format(value=value))
    with pytest.raises(InputError) as info:
        matrix.load(path)
    message = str(info.value)
    assert "matrix.max_ranks" in message and "(line 4)" in message and str(path) in message and "\n" not in message
    assert InputError.exit_code == 2


def test_the_check_command_refuses_a_bad_max_ranks_with_exit_status_2(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness", "check", "bridge-parity", "--backend", "megatron",
                           "--max-ranks", "0", "--work-dir", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1].endswith("--max-ranks: expected a whole number of ranks, at least 1, "
                                                         "got 0")


def test_each_hybrid_case_has_its_mtp_on_verdicts_and_a_lost_one_fails(tmp_path):
    passed = {"compared": 71, "mtp_tensors": 15, "unwritten": [], "renamed": [], "differs": []}
    results = {"text-hybrid": {**PROJECT, "mtp": {"text-hybrid": passed}},  # the VL round trip left no record
               "moe-hybrid": {**PROJECT, "mtp": {"moe-hybrid": {**passed, "unwritten": ["mtp.fc.weight"]}}}}
    verdicts = {v.name: v for v in bridge_parity.project_verdicts("tp2", results, tmp_path)}
    assert set(verdicts) == {"text-hybrid-tp2", "text-hybrid-mtp-tp2", "vl-hybrid-mtp-tp2", "moe-hybrid-tp2",
                             "moe-hybrid-mtp-tp2"}  # MTP off and on
    assert verdicts["text-hybrid-mtp-tp2"].status == Status.PASS and verdicts["text-hybrid-tp2"].status == Status.PASS
    assert verdicts["text-hybrid-mtp-tp2"].metrics["bridge"] == "project-mapping"
    assert verdicts["vl-hybrid-mtp-tp2"].status == Status.FAIL
    assert "unwritten ['mtp.fc.weight']" in verdicts["moe-hybrid-mtp-tp2"].message


def test_the_mtp_verdicts_name_the_project_mapping_as_the_trainer_does():
    from trainers.megatron.bridge import PROJECT_MAPPING

    assert bridge_parity.mtp.PROJECT_MAPPING == PROJECT_MAPPING


def test_the_bridges_are_asked_once_here_after_the_projects_jobs_and_before_megatron_bridges_preload(tmp_path,
                                                                                                   monkeypatch):
    """The project's ranks never import a bridge library to ask it, and Megatron-Bridge's preload comes after the
    question (so it reuses what asking imported, and the answer is what a process without the TE stand-in gets)."""
    from harness.checks.bridge_parity import library
    from harness.checks.support import ranks

    events = []
    answers = {"text": {"model_type": "qwen3_5_text", "megatron_bridge_error": "ModuleNotFoundError: te"},
               "moe": {"model_type": "qwen3_5_moe_text", "megatron_bridge_error": "ModuleNotFoundError: te"}}

    def job(name, *args):
        events.append(name)
        if name in megatron_bridge.JOBS:
            return {}, "forked"
        return {case: {**PROJECT, "model": case.split("-")[0]} for case in bridge_parity.JOBS[name][2].split(",")}, \
            "forked"

    monkeypatch.setattr(ranks, "preload", lambda *names: None)
    monkeypatch.setattr(bridge_parity, "_run_job", job)
    monkeypatch.setattr(bridge_parity, "ask_bridges", lambda: events.append("ask") or answers)
    monkeypatch.setattr(library, "preload", lambda: events.append("megatron-bridge preload"))
    monkeypatch.setattr(megatron_bridge, "installed_version", lambda: "0.6.2")
    monkeypatch.setattr(bridge_parity, "_skip_reason", lambda: None)
    result = bridge_parity.run(CheckOptions(backend="megatron", work_dir=tmp_path),
                               jobs=("tp1", "tp2", "megatron-bridge-tp1", "megatron-bridge-tp2"))
    assert events == ["tp1", "tp2", "ask", "megatron-bridge preload", "megatron-bridge-tp1", "megatron-bridge-tp2"]
    assert result.metrics["megatron_bridge_error"] == "ModuleNotFoundError: te"
    assert set(result.metrics["seconds_by_part"]) >= {"bridge-support", "megatron-bridge-preload"}
    events.clear()  # without Megatron-Bridge's jobs the question still comes after the project's
    monkeypatch.setattr(megatron_bridge, "installed_version", lambda: None)
    result = bridge_parity.run(CheckOptions(backend="megatron", work_dir=tmp_path), jobs=("tp1", "ep2"))
    assert events == ["tp1", "ep2", "ask"]
    verdict = next(v for v in result.verdicts if v.name == "moe-hybrid-ep2")  # each case records the answer
    assert verdict.status == Status.PASS and verdict.metrics["bridge"] == "project-mapping", verdict.message
    assert result.metrics["bridge"] == "project-mapping" and result.metrics["megatron_bridge_error"].endswith("te")
