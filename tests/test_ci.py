"""GitHub Actions glue: workflows validate offline, the job matrix comes from nox's listing with
each cell's runner label and image, and the job summary stays under 1 MiB."""
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness import matrix
from harness.ci import github as ci
from harness.errors import InputError

ROOT = Path(__file__).resolve().parent.parent


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
    cells = {c.id: c for p in (ROOT / "matrices").glob("*.toml") for c in matrix.load(p).cells}
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
