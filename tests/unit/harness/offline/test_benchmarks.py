"""An offline run's benchmarks: run on the box's interpreter after the rows with their wheelhouse overlay, or a
record of why not (left out of the wheelhouse, or failed); and their figures merged into bench/figures.json only
when they come from the box's accelerator."""
from __future__ import annotations

import json
import sys

import pytest
from wheel_helpers import offline_index, wheel

from harness.benchmarks import suite
from harness.errors import HarnessError
from harness.offline import benchmarks

# A stand-in benchmark module: as harness.benchmarks.grpo does, it puts --packages first on its path; it writes
# its argv and the version of tinybench it imports (from its overlay), or fails where a .mode file says so.
MODULE = """
import json, os, sys
args = sys.argv[1:]
out = args[args.index("--out") + 1]
if os.path.exists(out + ".mode"):
    sys.exit(3)
sys.path.insert(0, args[args.index("--packages") + 1])
import tinybench
json.dump({"argv": args, "tinybench": tinybench.__version__, "summary": {}}, open(out, "w"))
"""


@pytest.fixture
def bench(tmp_path, monkeypatch):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "stand_in_bench.py").write_text(MODULE)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "mods"))
    monkeypatch.setitem(benchmarks.BENCHMARKS, "tiny-bench", ("a test's benchmark", ("tinybench==1.0",),
                                                              "stand_in_bench"))
    links = tmp_path / "wheels"
    links.mkdir()
    built = wheel(links, "tinybench", "1.0")
    offline_index(monkeypatch, links)
    manifest = {"benchmarks": {"tiny-bench": {"add": ["tinybench==1.0"], "left_out": None}},
                "files": [{"name": "tinybench", "version": "1.0", "file": built.name}]}
    return tmp_path, links, manifest


def test_a_benchmark_runs_with_its_overlay_on_the_rows_device(bench):
    tmp_path, links, manifest = bench
    result = benchmarks.run("tiny-bench", manifest, links, tmp_path / "overlays", tmp_path / "out", "cuda")
    assert result["status"] == "measured", result
    figures = result["figures"]
    assert figures["tinybench"] == "1.0"  # imported from the overlay, not this interpreter
    assert figures["argv"][:3] == ["--here", "--device", "cuda"] and "--packages" in figures["argv"]
    assert json.loads((tmp_path / "out" / "benchmarks" / "tiny-bench.json").read_text()) == result


def test_a_benchmark_left_out_of_the_wheelhouse_records_why_and_runs_nothing(bench):
    tmp_path, links, manifest = bench
    manifest["benchmarks"]["tiny-bench"] = {"add": [], "left_out": "its wheels do not fit"}
    result = benchmarks.run("tiny-bench", manifest, links, tmp_path / "overlays", tmp_path / "out", "cuda")
    assert result["status"] == "not run" and result["reason"] == "its wheels do not fit"
    assert not (tmp_path / "overlays").exists()
    result = benchmarks.run("tiny-bench", {}, links, tmp_path / "overlays", tmp_path / "out", "cuda")
    assert result["status"] == "not run" and "built without it" in result["reason"]


def test_a_failing_benchmark_is_recorded_with_its_log(bench):
    tmp_path, links, manifest = bench
    (tmp_path / "out" / "benchmarks").mkdir(parents=True)
    (tmp_path / "out" / "benchmarks" / ".tiny-bench.figures.json.mode").write_text("--fail")
    result = benchmarks.run("tiny-bench", manifest, links, tmp_path / "overlays", tmp_path / "out", "cuda")
    assert result["status"] == "failed" and result["reason"] == "exit status 3"


def _record(folder, device: str, status: str = "measured") -> None:
    (folder / "benchmarks").mkdir(parents=True)
    figures = {"date": "2026-12-01", "summary": {"seconds_to_threshold": {"ours": 1.0, "trl": 3.0}},
               "device": {"type": device, "devices": ["NVIDIA H200"], "driver": "580.1", "torch": "2.11.0+cu130"}}
    (folder / "benchmarks" / "grpo-vs-trl.json").write_text(json.dumps(
        {"benchmark": "grpo-vs-trl", "device": device, "status": status, "figures": figures}))


def test_evidence_figures_go_into_the_figures_file_with_their_gpu_and_date(tmp_path, capsys):
    _record(tmp_path / "evidence", "cuda")
    out = tmp_path / "figures.json"
    out.write_text(json.dumps({"report": {"render_cpu_s": 1.0}}))
    assert suite.main(["--from-evidence", str(tmp_path / "evidence"), "--out", str(out)]) == 0
    figures = json.loads(out.read_text())
    group = figures[suite.EVIDENCE_KEY]
    assert figures["report"] == {"render_cpu_s": 1.0}  # the other figures are kept
    assert group["machine"] == "NVIDIA H200, driver 580.1, torch 2.11.0+cu130" and group["date"] == "2026-12-01"
    from harness.docsgen.figures import measured_table

    row = next(line for line in measured_table(figures).splitlines() if "offline evidence run" in line)
    assert "ours: 1.00 s; TRL: 3.00 s" in row and "NVIDIA H200" in row


def test_evidence_figures_carry_the_box_revision_and_never_this_checkout_s(tmp_path, monkeypatch):
    monkeypatch.setenv("HARNESS_REVISION", "checkout-here")  # what this checkout would say: not the box's
    _record(tmp_path / "without", "cuda")
    group = suite.evidence_figures(tmp_path / "without")
    assert group["harness_revision"] is None
    from harness.docsgen.figures import measured_table

    row = next(line for line in measured_table({suite.EVIDENCE_KEY: group}).splitlines() if "evidence run" in line)
    assert "not recorded" in row and "checkout-here" not in row
    _record(tmp_path / "with", "cuda")
    record = tmp_path / "with" / "benchmarks" / "grpo-vs-trl.json"
    data = json.loads(record.read_text())
    data["figures"]["harness_revision"] = "0123456789ab"
    record.write_text(json.dumps(data))
    assert suite.evidence_figures(tmp_path / "with")["harness_revision"] == "0123456789ab"
    data["figures"]["harness_revision"] = 12
    record.write_text(json.dumps(data))
    with pytest.raises(HarnessError, match="figures.harness_revision: expected a git revision as text"):
        suite.evidence_figures(tmp_path / "with")


def test_a_cpu_dry_run_is_not_gpu_evidence(tmp_path):
    _record(tmp_path / "evidence", "cpu")
    with pytest.raises(HarnessError, match="measured on .cpu."):
        suite.evidence_figures(tmp_path / "evidence")
    assert suite.main(["--from-evidence", str(tmp_path / "nothing"), "--out", str(tmp_path / "f.json")]) == 2
    assert not (tmp_path / "f.json").exists()


def test_json_text_without_orjson_is_the_same_data(monkeypatch):
    from harness.report import json_files

    data = {"cell": "fsdp-text", "why": "caf\u00e9 \u2705 \U0001f600", "n": [1, 2.5, None, True], "nested": {"a": []}}
    with_orjson = json_files.json_text(data)
    monkeypatch.setattr(json_files, "orjson", None)
    without = json_files.json_text(data)
    assert json.loads(without) == json.loads(with_orjson) == data
    assert without.isascii() and without.endswith("\n") and "\n" not in without[:-1]


def test_an_unknown_benchmark_name_names_the_matrix_file(tmp_path):
    from harness.errors import InputError

    with pytest.raises(InputError, match=r"m.toml: matrix.benchmarks: unknown benchmark 'nope'"):
        benchmarks.check_names(("grpo-vs-trl", "nope"), tmp_path / "m.toml")
    assert sys.executable  # the registry's own name passes
