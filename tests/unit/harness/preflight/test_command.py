"""Pre-flight on a small matrix resolved against a local folder of wheels (no network): each install verdict is
named correctly, written where the report shows it until a runner result replaces it, and keeps the cells that
cannot install out of the nightly's dispatch."""
from __future__ import annotations

import json

import pytest
from wheel_helpers import offline_index, sdist, wheel

from harness import cli
from harness.preflight import resolve as verdicts
from harness.preflight.store import installable_jobs
from harness.report.build import build_report
from harness.results.records import CellResult, CheckResult, Status, write_json_atomic
from harness.results.sources import load_results

MATRIX = """
[matrix]
name = "mini"
checks = ["stack-smoke", "patch-parity"]
runner = "linux-x64-gpu"

[axes]
torch = ["9.0.0"]
transformers = ["4.99.0"]
backend = ["fsdp"]
model = ["text"]
device = ["cuda"]

[[include]]   # vllm 9.0.0 declares transformers<5: a conflict cell
vllm = "9.0.0"
transformers = "5.3.0"

[[include]]   # a source release only
transformers = "5.3.0"
requirements = ["causal-conv1d==1.7.0"]

[[include]]   # wheels for Windows only
transformers = "5.3.0"
torch_npu = "9.0.0"
"""
BASE = "fsdp-text-tf4.99.0-torch9.0.0-cuda"
CONFLICT = "fsdp-text-tf5.3.0-torch9.0.0-vllm9.0.0-cuda"
SOURCE = "fsdp-text-tf5.3.0-torch9.0.0-cuda"
PLATFORM = "fsdp-text-tf5.3.0-torch9.0.0-tnpu9.0.0-cuda"


@pytest.fixture
def preflighted(tmp_path, monkeypatch):
    links = tmp_path / "links"
    links.mkdir()
    wheel(links, "torch", "9.0.0")
    wheel(links, "transformers", "4.99.0")
    wheel(links, "transformers", "5.3.0")
    wheel(links, "vllm", "9.0.0", requires=("torch==9.0.0", "transformers<5"))
    sdist(links, "causal-conv1d", "1.7.0")
    wheel(links, "torch-npu", "9.0.0", tag="cp311-cp311-win_amd64")
    offline_index(monkeypatch, links)
    path = tmp_path / "mini.toml"
    path.write_text(MATRIX)
    out = tmp_path / "reports" / "mini"  # reports/<matrix name>, as a run writes it
    status = cli.main(["preflight", str(path), "--out", str(out), "--python", "3.11", "--cache", str(tmp_path / "c")])
    assert status == 0
    summary = json.loads((out / "preflight" / "preflight.json").read_text())
    return out, {entry["cell"]: entry for entry in summary["cells"]}


def test_each_verdict_is_named_with_its_reason(preflighted):
    out, cells = preflighted
    assert cells[BASE]["verdict"] == verdicts.INSTALLS
    assert "torch==9.0.0" in (out / cells[BASE]["lock"]).read_text().split()
    assert cells[CONFLICT]["verdict"] == verdicts.CONFLICT
    assert "transformers<5" in cells[CONFLICT]["reason"] and cells[CONFLICT]["lock"] is None
    assert cells[SOURCE]["verdict"] == verdicts.NEEDS_BUILD
    assert cells[SOURCE]["built"] == ["causal-conv1d==1.7.0"]
    assert "transformers==5.3.0" in (out / cells[SOURCE]["lock"]).read_text().split()  # the rest still resolves
    assert cells[PLATFORM]["verdict"] == verdicts.NOT_ON_RUNNER
    assert "torch-npu==9.0.0" in cells[PLATFORM]["reason"] and "win_amd64" in cells[PLATFORM]["reason"]


def test_the_report_shows_them_marked_until_a_runner_result_replaces_them(preflighted):
    out, _ = preflighted
    cells, problems = load_results(out)  # no cells/ folder yet: only the pre-flight
    assert not problems and {c.cell_id for c in cells} == {BASE, CONFLICT, SOURCE, PLATFORM}
    report = build_report(cells)
    row = next(r for r in report.rows if BASE in r.cells)
    assert "CPU pre-flight" in row.environment["origin"]
    assert all(e.status is Status.SKIP and "awaits a GPU runner" in e.message for e in row.entries.values())
    assert all(e.origin == "awaits a runner" for e in row.entries.values())
    conflict = next(r for r in report.rows if CONFLICT in r.cells)
    assert all(e.status is Status.ERROR and e.failure_class == "install-conflict" and e.install.kind == "conflict"
               for e in conflict.entries.values())
    # Each row's verdict names its true cause: never "broken" (no check ran) nor "not tested" (it awaits a runner).
    from harness.report.row_verdicts import row_verdict

    kinds = {cid: row_verdict(report.columns, r) for r in report.rows for cid in r.cells}
    assert kinds[CONFLICT].kind == "conflict" and kinds[CONFLICT].reason.startswith("cannot be installed together")
    assert kinds[PLATFORM].kind == "runner"
    assert kinds[BASE].kind == "awaits" and kinds[BASE].reason.startswith("no check has run yet: awaits a GPU runner")
    assert kinds[SOURCE].kind == "awaits" and "needs a build on the runner" in kinds[SOURCE].reason
    # A cell that only installs does not show support: the ranges count no passing combination.
    assert all(not r.passing for r in report.ranges)

    runner = CellResult("mini", BASE, {"backend": "fsdp", "model": "text", "device": "cuda", "torch": "9.0.0",
                                       "transformers": "4.99.0"},
                        checks=[CheckResult("stack-smoke", Status.PASS, "ran on the runner")], finished="2026-11-27")
    write_json_atomic(out / "cells" / f"{BASE}.json", runner.to_dict())
    cells, _ = load_results(out)
    base = [c for c in cells if c.cell_id == BASE]
    assert len(base) == 1 and base[0].checks[0].message == "ran on the runner"


def test_the_nightly_dispatches_only_cells_that_can_install(preflighted):
    out, _ = preflighted
    jobs = {"include": [{"session": f"cell-mini({c})", "matrix": "mini", "cell": c} for c in
                        (BASE, CONFLICT, SOURCE, PLATFORM)] + [{"session": "cell-other(x)", "matrix": "other",
                                                                  "cell": "x"}]}
    kept, dropped = installable_jobs(jobs, out.parent)
    assert [j["cell"] for j in kept["include"]] == [BASE, SOURCE, "x"]  # a matrix never pre-flighted keeps its jobs
    assert len(dropped) == 2 and CONFLICT in dropped[0]


def test_a_second_preflight_answers_from_the_cache(preflighted, tmp_path, capsys):
    status = cli.main(["preflight", str(tmp_path / "mini.toml"), "--out", str(tmp_path / "again"), "--python", "3.11",
                       "--cache", str(tmp_path / "c"), "--json"])
    assert status == 0
    assert "0 resolved" in capsys.readouterr().err


def test_bad_options_are_one_line_input_errors(tmp_path, capsys):
    assert cli.main(["preflight", "matrices/cuda.toml", "--python", "3.x; rm"]) == 2
    assert "--python" in capsys.readouterr().err


# app needs a package with Windows wheels only: the first row leaves it out, as its install does
EXCLUDING = MATRIX.split("[[include]]", 1)[0] + """
[[include]]
transformers = "5.3.0"
requirements = ["app==1.0"]
install = { exclude = ["gpu-cluster-only"] }

[[include]]   # the same need, not left out
transformers = "5.4.0"
requirements = ["app==1.0"]
"""


def test_a_rows_exclude_is_resolved_as_its_install_applies_it(tmp_path, monkeypatch):
    links = tmp_path / "links"
    links.mkdir()
    for name, version in (("torch", "9.0.0"), ("transformers", "4.99.0"), ("transformers", "5.3.0"),
                          ("transformers", "5.4.0")):
        wheel(links, name, version)
    wheel(links, "app", "1.0", requires=("gpu-cluster-only==1.0",))
    wheel(links, "gpu-cluster-only", "1.0", tag="cp311-cp311-win_amd64")
    offline_index(monkeypatch, links)
    path = tmp_path / "excl.toml"
    path.write_text(EXCLUDING)
    out = tmp_path / "reports" / "excl"
    argv = ["preflight", str(path), "--out", str(out), "--python", "3.11", "--cache", str(tmp_path / "c")]
    assert cli.main(argv) == 0
    cells = {e["cell"]: e for e in json.loads((out / "preflight" / "preflight.json").read_text())["cells"]}
    excluded = cells["fsdp-text-tf5.3.0-torch9.0.0-cuda"]
    assert excluded["verdict"] == verdicts.INSTALLS, excluded
    assert "gpu-cluster-only" not in (out / excluded["lock"]).read_text()
    assert cells["fsdp-text-tf5.4.0-torch9.0.0-cuda"]["verdict"] == verdicts.NOT_ON_RUNNER


def test_verdicts_do_not_depend_on_the_terminals_width(tmp_path, monkeypatch):
    """uv wraps its sentences at COLUMNS: a narrow terminal must not turn a runner's limit into a conflict."""
    monkeypatch.setenv("COLUMNS", "30")
    test_a_rows_exclude_is_resolved_as_its_install_applies_it(tmp_path, monkeypatch)
