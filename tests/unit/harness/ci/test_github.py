"""GitHub Actions glue (harness/ci/github.py and the workflows it serves): workflows validate offline, the job
matrix comes from nox's listing with each cell's runner label and image, the job summary stays under 1 MiB, and
a partial nightly run carries the previous results it did not run."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import matrix
from harness.ci import github as ci
from harness.errors import InputError

ROOT = Path(__file__).resolve().parents[4]


def _listing():
    done = subprocess.run([sys.executable, "-m", "nox", "-f", str(ROOT / "noxfile.py"), "-l", "--json", "-t", "cell"],
                          capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        pytest.skip(f"nox unavailable: {done.stderr[-300:]}")
    return json.loads(done.stdout)


def test_workflows_validate_against_the_github_schema():
    tool = shutil.which("check-jsonschema") or str(Path(sys.executable).parent / "check-jsonschema")
    if not Path(tool).exists():
        pytest.skip("check-jsonschema is not installed")
    workflows = sorted(str(p) for p in (ROOT / ".github" / "workflows").glob("*.yml"))
    assert len(workflows) >= 2
    done = subprocess.run([tool, "--builtin-schema", "vendor.github-workflows", *workflows], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    # The local stand-ins act uses in place of GitHub's actions (python -m harness.ci.act).
    actions = sorted(str(p) for p in (ROOT / ".github" / "act").glob("*/action.yml"))
    assert actions
    done = subprocess.run([tool, "--builtin-schema", "vendor.github-actions", *actions], capture_output=True,
                          text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_job_matrix_has_one_job_per_cell_with_its_runner_and_image():
    listing = _listing()
    jobs = ci.job_matrix(listing, ROOT / "matrices")["include"]
    loaded = [matrix.load(p) for p in (ROOT / "matrices").glob("*.toml")]
    cells = {c.id: c for m in loaded if not m.offline for c in m.cells}  # an offline box's cells run on the box
    assert sorted(j["cell"] for j in jobs) == sorted(cells)
    for job in jobs:
        cell = cells[job["cell"]]
        assert job["runner"] == cell.runner and job["image"] == cell.axes.get("image", "")
    a3 = [j for j in jobs if "a3-ubuntu" in j["image"]]
    assert a3 and all(j["runner"] == "linux-aarch64-a3-8" for j in a3)


def test_container_and_plain_jobs_split_the_cells():
    listing = _listing()
    with_image = ci.job_matrix(listing, ROOT / "matrices", container=True)["include"]
    without = ci.job_matrix(listing, ROOT / "matrices", container=False)["include"]
    assert all(j["image"] for j in with_image) and not any(j["image"] for j in without)
    assert len(with_image) + len(without) == len(ci.job_matrix(listing, ROOT / "matrices")["include"])


def test_a_listing_without_cells_or_with_a_foreign_cell_is_refused():
    with pytest.raises(InputError, match="no cell sessions"):
        ci.job_matrix([{"session": "tests", "call_spec": {}}], ROOT / "matrices")
    with pytest.raises(InputError, match="not a cell"):
        ci.job_matrix([{"session": "cell-cpu(fsdp-text-tf9.9.9)", "call_spec": {"cell": "fsdp-text-tf9.9.9"}}],
                      ROOT / "matrices")


def test_the_summary_is_cut_on_a_line_below_the_limit_with_a_link():
    line = "| ✅ pass | fsdp-text-tf5.3.0 | é |\n"
    big = line * 100_000
    cut = ci.cut_summary(big, "https://example.org/report.html")
    assert len(cut.encode("utf-8")) <= ci.SUMMARY_LIMIT
    assert cut.endswith("Full report: <https://example.org/report.html>**\n")
    body = cut.split("\n\n**Summary cut")[0] + "\n"
    assert body.strip() and set(filter(None, body.splitlines())) == {line.rstrip("\n")}
    small = "# report\n"
    assert ci.cut_summary(small, "x") == small


def test_a_summary_cut_inside_a_details_block_closes_it():
    block = "<details><summary>works: transformers 5.3.0</summary>\n\n" + "- entry\n" * 400 + "\n</details>\n"
    cut = ci.cut_summary(block * 400, "https://example.org/report.html")
    assert len(cut.encode("utf-8")) <= ci.SUMMARY_LIMIT
    assert cut.count("<details>") == cut.count("</details>") > 0


def _workflow_steps(name: str, job: str) -> dict[str, dict]:
    yaml = pytest.importorskip("yaml")
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    return {step.get("name") or step.get("uses", ""): step for step in data["jobs"][job]["steps"]}


def _run_step(script: str, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """A workflow `run:` script under bash -e as GitHub runs it, with `python` being this interpreter
    (the step's `pip install -e .` is left out: the harness is importable from PYTHONPATH)."""
    shim = cwd / "bin"
    shim.mkdir(exist_ok=True)
    (shim / "python").unlink(missing_ok=True)
    (shim / "python").symlink_to(sys.executable)
    script = script.replace("python -m pip install -e .\n", "")
    return subprocess.run(["bash", "-e", "-c", script], cwd=cwd, capture_output=True, text=True, timeout=300,
                          env={**env, "PATH": f"{shim}:{env['PATH']}", "PYTHONPATH": str(ROOT)})


def _cells(directory: Path, statuses: dict[str, str]) -> None:
    from harness.results.records import CellResult, CheckResult, Status, write_json_atomic

    for tf, status in statuses.items():
        cell = CellResult("cpu", f"fsdp-text-tf{tf}", {"backend": "fsdp", "model": "text", "transformers": tf},
                          checks=[CheckResult("stack-smoke", Status(status), "m")], finished=f"2026-11-2{len(tf)}")
        write_json_atomic(directory / "cells" / f"{cell.cell_id}.json", cell.to_dict())


def test_the_nightly_compares_with_the_last_published_run_carries_history_and_gates(tmp_path):
    """The report job's own script, run here: the previous night (restored from the cache into previous/)
    is compared, its history.json carried forward, and the gate job fails naming the new failure."""
    steps = _workflow_steps("nightly.yml", "report")
    names = list(steps)
    assert names.index("Restore the previous published results") < names.index(
        "Render, compare with the previous results, carry history forward")
    assert steps["Restore the previous published results"]["uses"].startswith("actions/cache/restore@")
    assert steps["actions/cache/save@v4"]["with"]["path"] == "previous/"
    _cells(tmp_path / "previous" / "cpu", {"5.3.0": "pass", "5.9.0": "pass"})
    _cells(tmp_path / "reports" / "cpu", {"5.3.0": "pass", "5.9.0": "fail"})
    (tmp_path / "previous" / "cpu" / "history.json").write_text(json.dumps({"history_version": 1, "last_known_good": {
        "fsdp/text/old-check": {"versions": {"transformers": "5.2.0"}, "cell": "old", "date": "2026-11-01",
                                "lock": ""}}}))
    output, summary = tmp_path / "output.txt", tmp_path / "summary.md"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PAGES_URL": "https://example.github.io/r/",
           "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary)}
    done = _run_step(steps["Render, compare with the previous results, carry history forward"]["run"], tmp_path, env)
    assert done.returncode == 0, done.stderr  # the page is still rendered and published
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    assert outputs["status"] == "5" and "fsdp-text-tf5.9.0 stack-smoke" in outputs["new_failures"]
    history = json.loads((tmp_path / "reports" / "cpu" / "history.json").read_text())
    assert "fsdp/text/old-check" in history["last_known_good"]  # carried forward from the previous night
    assert "fsdp/text/stack-smoke" in history["last_known_good"]
    assert "NEW FAILURE" in summary.read_text()

    gate = _workflow_steps("nightly.yml", "gate")["Fail on a new failure (report --fail-on-new)"]
    done = _run_step(gate["run"], tmp_path, {**env, "STATUS": outputs["status"],
                                             "NEW_FAILURES": outputs["new_failures"]})
    assert done.returncode == 5 and "::error" in done.stdout and "fsdp-text-tf5.9.0 stack-smoke" in done.stdout
    assert _run_step(gate["run"], tmp_path, {**env, "STATUS": "0", "NEW_FAILURES": ""}).returncode == 0

    # Tonight's results become tomorrow's previous ones.
    assert _run_step(steps["Keep these results as the next run's previous ones"]["run"], tmp_path, env).returncode == 0
    assert (tmp_path / "previous" / "cpu" / "cells" / "fsdp-text-tf5.9.0.json").exists()


def test_a_partial_nightly_run_publishes_and_keeps_the_whole_table_and_the_scheduled_run_carries_nothing(tmp_path):
    """A manual run of some cells (`tags`) fills in the cells and matrices it did not run from the previous
    results, says so in a note, and still gates on its own cells; the scheduled run (`cell`) carries nothing."""
    steps = _workflow_steps("nightly.yml", "report")
    render = steps["Render, compare with the previous results, carry history forward"]
    assert render["env"]["TAGS"] == "${{ inputs.tags || 'cell' }}"
    for tags in ("smoke", "cell"):
        work = tmp_path / tags
        _cells(work / "previous" / "cpu", {"5.3.0": "pass", "5.9.0": "pass"})
        _cells(work / "previous" / "npu", {"5.5.4": "pass"})
        (work / "previous" / "cpu" / "cells" / "fsdp-text-tf5.3.0" / "logs").mkdir(parents=True)
        (work / "previous" / "cpu" / "cells" / "fsdp-text-tf5.3.0" / "logs" / "stack-smoke.log").write_text("old log")
        _cells(work / "reports" / "cpu", {"5.9.0": "fail"})
        output = work / "output.txt"
        env = {"PATH": os.environ["PATH"], "HOME": str(work), "PAGES_URL": "https://example.github.io/r/",
               "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(work / "summary.md"), "TAGS": tags}
        done = _run_step(render["run"], work, env)
        assert done.returncode == 0, done.stderr
        outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
        assert outputs["status"] == "5" and "fsdp-text-tf5.9.0 stack-smoke" in outputs["new_failures"]
        cells = sorted(p.name for p in (work / "reports" / "cpu" / "cells").glob("*.json"))
        page = (work / "reports" / "cpu" / "report.md").read_text()
        if tags == "cell":
            assert cells == ["fsdp-text-tf5.9.0.json"] and not (work / "reports" / "npu").exists()
            assert "Carried from the previous" not in page
            continue
        assert cells == ["fsdp-text-tf5.3.0.json", "fsdp-text-tf5.9.0.json"]
        assert (work / "reports" / "cpu" / "cells" / "fsdp-text-tf5.3.0" / "logs" / "stack-smoke.log").read_text() \
            == "old log"
        assert json.loads((work / "reports" / "cpu" / "cells" / "fsdp-text-tf5.9.0.json").read_text())[
            "checks"][0]["status"] == "fail"  # what this run ran is never replaced
        assert "Carried from the previous published results" in page and "fsdp-text-tf5.3.0" in page
        assert (work / "reports" / "npu" / "report.html").exists()  # a matrix it did not touch is still published
        assert _run_step(steps["Keep these results as the next run's previous ones"]["run"], work, env).returncode == 0
        assert (work / "previous" / "npu" / "cells" / "fsdp-text-tf5.5.4.json").exists()
        assert (work / "previous" / "cpu" / "cells" / "fsdp-text-tf5.3.0.json").exists()


def test_carry_copies_only_whole_cell_results_it_lacks(tmp_path):
    from harness.ci.github import carry

    _cells(tmp_path / "prev", {"5.3.0": "pass", "5.9.0": "pass"})
    (tmp_path / "prev" / "cells" / "broken.json").write_text("{not json")
    (tmp_path / "prev" / "cells" / "other-name.json").write_text(
        (tmp_path / "prev" / "cells" / "fsdp-text-tf5.3.0.json").read_text())  # a result under another cell's name
    (tmp_path / "prev" / "cells" / "link.json").symlink_to(tmp_path / "prev" / "cells" / "fsdp-text-tf5.9.0.json")
    _cells(tmp_path / "now", {"5.9.0": "fail"})
    assert carry(tmp_path / "prev", tmp_path / "now") == ["fsdp-text-tf5.3.0"]
    assert sorted(p.name for p in (tmp_path / "now" / "cells").iterdir()) == [
        "fsdp-text-tf5.3.0.json", "fsdp-text-tf5.9.0.json"]
    notes = json.loads((tmp_path / "now" / "run.json").read_text())["notes"]
    assert notes[-1]["cells"] == ["fsdp-text-tf5.3.0"]
    assert carry(tmp_path / "prev", tmp_path / "now") == []  # nothing left to carry: no second note
    assert len(json.loads((tmp_path / "now" / "run.json").read_text())["notes"]) == 1
    with pytest.raises(InputError, match="no cells/ directory"):
        carry(tmp_path / "missing", tmp_path / "now")


@pytest.mark.parametrize(("workflow", "job", "paths"), [
    ("ci.yml", "tests", "reports/tests/*.xml"),  # nox -s tests / tests-e2e / tests-affected ... --junitxml
    ("ci.yml", "cpu-smoke", "reports/cpu/report.junit.xml"),
    ("nightly.yml", "report", "reports/*/report.junit.xml"),
])
def test_workflows_hand_the_junit_files_to_a_test_reporter(workflow, job, paths):
    steps = _workflow_steps(workflow, job)
    reporter = next(s for s in steps.values() if str(s.get("uses", "")).startswith("mikepenz/action-junit-report@"))
    assert reporter["with"]["report_paths"] == paths and reporter["if"] == "always()"
    assert reporter["with"]["annotate_only"] is True  # no checks: write, so forks' pull requests work too
    noxfile = (ROOT / "noxfile.py").read_text()
    assert "reports\" / \"tests\"" in noxfile or "reports/tests" in noxfile
