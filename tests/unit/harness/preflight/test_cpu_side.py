"""The CPU pre-flight on a cell's exact wheels, on a small fake CUDA matrix: only the checks the registry says need
no accelerator are started (device forced to cpu), an accelerator check never is, each result is marked, a
constraint of this machine that rules a cell out is named, and the report shows "from CPU pre-flight" and "awaits a
runner" until a runner's result replaces the row."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from wheel_helpers import offline_index, wheel

from harness import checks, cli, matrix
from harness.checks import CheckSpec
from harness.execution import forkclient, runner
from harness.preflight import cpu_side as cpuside
from harness.report.build import build_report
from harness.report.pipeline import render
from harness.results import sources
from harness.results.records import CellResult, CheckResult, Status, write_json_atomic
from harness.results.sources import load_results

RESOURCES = Path(__file__).resolve().parents[3] / "resources" / "checks"
MATRIX = """
[matrix]
name = "mini"
checks = ["cpu-probe", "gpu-probe", "part-probe", "bridge-parity"]
runner = "linux-x64-gpu"

[axes]
torch = ["9.0.0"]
transformers = ["5.3.0", "5.9.0"]
backend = ["fsdp"]
model = ["text"]
device = ["cuda"]

[[tags]]
tag = "cpu-side"
when = { transformers = "==5.3.0" }
"""
CELL = "fsdp-text-tf5.3.0-torch9.0.0-cuda"
OTHER = "fsdp-text-tf5.9.0-torch9.0.0-cuda"


@pytest.fixture
def mini(tmp_path, monkeypatch):
    """The fake matrix, its probe checks registered here (planning) and in the check processes (running)."""
    monkeypatch.setitem(checks.CHECKS, "cpu-probe", CheckSpec("cpu-probe", "cpu_side_probe", "probe",
                                                              needs_accelerator=False))
    monkeypatch.setitem(checks.CHECKS, "gpu-probe", CheckSpec("gpu-probe", "cpu_side_forbidden", "needs a GPU"))
    monkeypatch.setitem(checks.CHECKS, "part-probe", CheckSpec("part-probe", "cpu_side_probe", "probe",
                                                               cpu_part="its device-free part"))
    monkeypatch.setenv("HARNESS_EXTRA_CHECKS", "cpu-probe=cpu_side_probe,gpu-probe=cpu_side_forbidden,"
                                               "part-probe=cpu_side_probe")
    monkeypatch.setenv("PYTHONPATH", str(RESOURCES))
    probes = tmp_path / "probes"
    probes.mkdir()
    monkeypatch.setenv("CPU_SIDE_PROBE_DIR", str(probes))
    path = tmp_path / "mini.toml"
    path.write_text(MATRIX)
    return matrix.load(path), probes


def test_the_registry_decides_what_runs_on_cpu():
    cell = next(c for c in matrix.load(Path("matrices/cuda.toml")).select(tags=["cpu-side"]))
    planned = cpuside.plan(cell)
    assert planned["bridge-parity"] is None  # not on this backend
    assert {name for name, mark in planned.items() if mark == sources.RAN} == {
        "nested-chunking", "vllm-chat-parity", "launch-plans", "multi-turn-tokens"}
    assert planned["patch-parity"] == sources.PART
    assert {name for name, mark in planned.items() if mark == sources.AWAITS} == {
        "stack-smoke", "offload-regression", "gate-precision", "grpo-convergence", "vllm-rollout"}
    # The slice: one cell per vLLM release, chosen by the matrix's tag.
    releases = [c.axes["vllm"] for c in matrix.load(Path("matrices/cuda.toml")).select(tags=["cpu-side"])]
    assert sorted(releases) == ["0.32.0", "0.33.0"]


def test_an_undeclared_check_awaits_a_runner():
    assert CheckSpec("new-check", "somewhere", "not judged yet").needs_accelerator


def _here(cell, log):
    """This interpreter as the cell's environment: no install, the checks run in the tests' own packages."""
    return cpuside.CpuSideEnv(Path(sys.prefix), "CPU pre-flight in a test"), "torch==9.0.0\n"


def test_only_checks_that_need_no_accelerator_run_and_each_is_marked(mini, tmp_path, monkeypatch):
    # The probes import no torch: the cell's check server preloads the check entry alone (seconds, not the
    # half-minute of torch and transformers); its checks are still forked from it.
    init = forkclient.CheckProcesses.__init__
    monkeypatch.setattr(forkclient.CheckProcesses, "__init__",
                        lambda self, *args, **kwargs: init(self, *args, **{**kwargs, "preload": (runner.ENTRY,)}))
    m, probes = mini
    cells = m.select(tags=["cpu-side"])
    assert [c.id for c in cells] == [CELL]
    out = tmp_path / "reports" / "mini"
    [result] = cpuside.run(m, cells, out, tmp_path / "envs", prepare=_here)

    assert not (probes / "accelerator-check-ran").exists(), "an accelerator check was started on the CPU side"
    started = [json.loads(p.read_text()) for p in sorted(probes.glob("ran-*"))]
    assert len(started) == 2  # cpu-probe whole, part-probe's part
    assert all(s == {"HARNESS_DEVICE": "cpu", "HARNESS_CHECK_PART": "no-accelerator", "CUDA_VISIBLE_DEVICES": ""}
               for s in started)
    by_name = {c.check: c for c in result.checks}
    assert [c.check for c in result.checks] == ["cpu-probe", "gpu-probe", "part-probe", "bridge-parity"]
    assert by_name["cpu-probe"].status is Status.PASS
    assert by_name["cpu-probe"].metrics[sources.CPU_SIDE_KEY] == sources.RAN
    assert by_name["part-probe"].metrics[sources.CPU_SIDE_KEY] == sources.PART
    assert by_name["gpu-probe"].status is Status.SKIP and "awaits a GPU runner" in by_name["gpu-probe"].message
    assert by_name["gpu-probe"].metrics[sources.CPU_SIDE_KEY] == sources.AWAITS
    assert sources.CPU_SIDE_KEY not in by_name["bridge-parity"].metrics  # not applicable: no mark
    # The accelerator cell's own axes, links relative to the report directory, the origin said in the row.
    assert result.axes["device"] == "cuda" and result.environment["cpu_side"] is True
    assert result.lock == f"cpu-side/cells/{CELL}/lock.txt" and (out / result.lock).is_file()
    assert by_name["cpu-probe"].log.startswith("cpu-side/cells/") and (out / by_name["cpu-probe"].log).is_file()
    assert "check server ready" in (out / "cpu-side" / "cells" / CELL / "logs" / "setup.log").read_text()  # forked
    written = json.loads((out / "cpu-side" / "cells" / f"{CELL}.json").read_text())
    assert written["environment"]["preflight"] == "installs" and written["axes"]["device"] == "cuda"


def _cpu_side_row(out: Path) -> None:
    cell = next(c for c in matrix.load(Path("matrices/cuda.toml")).select(tags=["cpu-side"]))
    ran = [CheckResult(name, Status.FAIL if name == "vllm-chat-parity" else Status.PASS, f"{name} <ran>")
           for name, mark in cpuside.plan(cell).items() if mark in (sources.RAN, sources.PART)]
    result = cpuside.mark(CellResult("cuda", cell.id, {**cell.axes, "device": "cpu"}, list(cell.tags), checks=ran,
                                     finished="2026-11-27T12:00:00+00:00", lock=f"cells/{cell.id}/lock.txt"), cell)
    write_json_atomic(out / "cpu-side" / "cells" / f"{cell.id}.json", result.to_dict())
    # The same cell's install-only pre-flight: the CPU-side result is shown instead.
    install_only = CellResult("cuda", cell.id, dict(cell.axes), list(cell.tags),
                              checks=[CheckResult("stack-smoke", Status.SKIP, "install verdict only")],
                              environment={"preflight": "installs"})
    write_json_atomic(out / "preflight" / "cells" / f"{cell.id}.json", install_only.to_dict())
    return cell


def test_the_report_shows_the_origin_until_a_runner_result_replaces_it(tmp_path):
    out = tmp_path / "cuda"
    cell = _cpu_side_row(out)
    cells, problems = load_results(out)
    assert not problems and [c.cell_id for c in cells] == [cell.id]
    report = build_report(cells)
    [row] = report.rows
    entries = {e.check: e for e in row.entries.values()}
    assert entries["launch-plans"].origin == "from CPU pre-flight"
    assert entries["patch-parity"].origin == "part from CPU pre-flight, the rest awaits a runner"
    assert entries["vllm-rollout"].origin == "awaits a runner" and entries["vllm-rollout"].status is Status.SKIP
    assert entries["bridge-parity"].origin is None
    # A failed CPU-side verdict is rerun by the CPU pre-flight of that cell, not by `repro` on the cell's GPU.
    assert entries["vllm-chat-parity"].repro == f"python -m harness cpu-side matrices/cuda.toml --cells {cell.id}"
    assert "on the cell's exact wheels" in row.environment["origin"]
    assert row.axes[report.axes.index("device")] == "cuda"
    # A CPU-side row counts for neither side of the passing ranges (its failure is on CPU, not the runner).
    assert not any(r.tested for r in report.ranges)
    html = render(report, "html")
    assert '<div class="ex">from CPU pre-flight</div>' in html and '<div class="ex">awaits a runner</div>' in html
    assert "launch-plans &lt;ran&gt;" in html and "<ran>" not in html
    assert "— from CPU pre-flight" in render(report, "md")
    assert any(e.get("origin") == "awaits a runner" for r in json.loads(render(report, "json"))["rows"]
               for e in r["entries"])

    runner = CellResult("cuda", cell.id, dict(cell.axes), list(cell.tags), finished="2026-11-28",
                        checks=[CheckResult("vllm-rollout", Status.PASS, "ran on the GPU runner")])
    write_json_atomic(out / "cells" / f"{cell.id}.json", runner.to_dict())
    cells, _ = load_results(out)
    assert len(cells) == 1 and cells[0].checks[0].message == "ran on the GPU runner"
    [row] = build_report(cells).rows
    assert all(e.origin is None for e in row.entries.values())
    assert "CPU pre-flight" not in row.environment.get("origin", "")


def test_a_constraint_of_this_machine_that_rules_a_cell_out_is_named(mini, tmp_path, monkeypatch, capsys):
    m, probes = mini
    links = tmp_path / "links"
    links.mkdir()
    wheel(links, "torch", "9.0.0")
    wheel(links, "transformers", "5.3.0")
    offline_index(monkeypatch, links)
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("torch<=8.9.0\n")
    monkeypatch.setenv("UV_CONSTRAINT", str(constraints))
    out = tmp_path / "reports" / "mini"
    status = cli.main(["cpu-side", str(m.path), "--out", str(out), "--env-root", str(tmp_path / "envs")])
    assert status == 0
    result = json.loads((out / "cpu-side" / "cells" / f"{CELL}.json").read_text())
    assert result["environment"]["preflight"] == "not installable on this runner"
    by_name = {c["check"]: c for c in result["checks"]}
    assert by_name["cpu-probe"]["status"] == "error" and "torch<=8.9.0" in by_name["cpu-probe"]["message"]
    assert by_name["cpu-probe"]["metrics"]["cpu_side"] == "ran"
    assert by_name["gpu-probe"]["status"] == "skip" and by_name["gpu-probe"]["metrics"]["cpu_side"] == "awaits"
    assert not list(probes.iterdir())  # nothing was started
    assert f"{CELL}  not installable on this runner" in capsys.readouterr().out


def test_the_install_drops_this_machines_local_builds_and_skips_cuda_kernel_builds(mini, tmp_path, monkeypatch):
    m, _ = mini
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "local-builds"))
    monkeypatch.setenv("UV_FIND_LINKS", f"{tmp_path / 'local-builds'},{tmp_path / 'runner-index'}")
    cell = m.select(tags=["cpu-side"])[0]
    env = cpuside.runner_uv_env(cell)
    assert env["UV_FIND_LINKS"] == str(tmp_path / "runner-index") and "PIP_FIND_LINKS" not in env
    assert "CAUSAL_CONV1D_SKIP_CUDA_BUILD" not in env  # the cell has no causal-conv1d
    cuda_cell = next(c for c in matrix.load(Path("matrices/cuda.toml")).select(tags=["cpu-side"]))
    assert cpuside.kernel_builds(cuda_cell) == {"CAUSAL_CONV1D_FORCE_BUILD": "TRUE",
                                               "CAUSAL_CONV1D_SKIP_CUDA_BUILD": "TRUE"}
    line = cpuside.origin_line(cuda_cell, "2026-11-27")
    assert "causal-conv1d" in line and line.endswith("; vllm on its CPU platform (VLLM_TARGET_DEVICE=cpu)")
    assert "VLLM_TARGET_DEVICE" not in cpuside.origin_line(cell, "2026-11-27")  # no vLLM in this cell


@pytest.mark.parametrize("argv, expected", [
    (["--tags", "nothing-has-it"], "no cell has tag 'nothing-has-it'"),
    (["--env-root", "/dev/null/x"], "--env-root"),
])
def test_bad_selections_are_one_line_input_errors(mini, tmp_path, capsys, argv, expected):
    m, _ = mini
    status = cli.main(["cpu-side", str(m.path), "--out", str(tmp_path / "o"), *argv])
    err = capsys.readouterr().err
    assert status == 2 and expected in err and len(err.strip().splitlines()) == 1


def test_a_cpu_cell_is_refused(tmp_path, capsys):
    path = tmp_path / "cpu.toml"
    path.write_text(MATRIX.replace('device = ["cuda"]', 'device = ["cpu"]').replace(
        '"cpu-probe", "gpu-probe", "part-probe", "bridge-parity"', '"stack-smoke"'))
    assert cli.main(["cpu-side", str(path), "--out", str(tmp_path / "o")]) == 2
    assert "is a CPU cell" in capsys.readouterr().err


def test_patch_parity_gives_its_target_audit_alone_when_asked_for_its_cpu_part(monkeypatch, tmp_path):
    from harness.checks import CheckOptions, patch_parity

    monkeypatch.setenv(checks.PART_VARIABLE, checks.NO_ACCELERATOR)
    result = patch_parity.run(CheckOptions(work_dir=tmp_path))
    assert result.verdicts and all(v.name.startswith("target-audit:") for v in result.verdicts)
    assert result.message.startswith("target audit only") and result.metrics["part"] == "target audit"
