"""What the report says, pinned: every format rendered from fixed results is compared with goldens, so a
change made for speed or size cannot change what a person or a tool reads.

Inputs: the result files of a real run of tests/resources/matrices/browser.toml (tests/resources/report-run)
and synthetic cells (every status, sub-verdicts, known failures, changes, plots and hostile text).
report.json and support.json are compared as data, report.md and report.junit.xml as text, and report.html
by what a browser shows: its text and every attribute but class, with the plots' shared parts put back
where each plot shows them (`<use>`). Goldens are in tests/resources/report-golden/; after a change meant
to alter the report, `REPORT_GOLDEN_WRITE=1 pytest tests/unit/harness/report/test_report_golden.py` rewrites them.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
from report_helpers import shown

from harness.report import order, synthetic
from harness.report.build import build_report
from harness.report.pipeline import render, write_report
from harness.report.synthetic import HOSTILE_TITLE, hostile_cells, synthetic_cells

RESOURCES = Path(__file__).resolve().parents[3] / "resources"
RUN = RESOURCES / "report-run"
GOLDEN = RESOURCES / "report-golden"
WRITE = os.environ.get("REPORT_GOLDEN_WRITE") == "1"
# The registry of checks as the goldens were written: a check added to harness/checks later changes the
# synthetic cells and the column order, not what the renderers say about the same results.
CHECKS_THEN = {"stack-smoke": ("fsdp", "megatron"), "patch-parity": ("fsdp",), "offload-regression": ("fsdp",),
               "nested-chunking": ("fsdp", "megatron"), "bridge-parity": ("megatron",),
               "grpo-convergence": ("fsdp", "megatron"), "launch-plans": ("fsdp", "megatron"),
               "vllm-rollout": ("fsdp", "megatron"), "vllm-chat-parity": ("fsdp", "megatron")}


@pytest.fixture(autouse=True)
def checks_then(monkeypatch):
    registry = {name: SimpleNamespace(backends=backends) for name, backends in CHECKS_THEN.items()}
    monkeypatch.setattr(synthetic, "CHECKS", registry)
    monkeypatch.setattr(order, "CHECKS", registry)
def comparable(fmt: str, text: str):
    if fmt in ("json", "support"):
        return json.loads(text)
    return shown(text) if fmt == "html" else text


def real_run_outputs(tmp_path: Path) -> dict[str, str]:
    """Every format `harness report` writes for the real run's results."""
    shutil.copytree(RUN, tmp_path / "run")
    return {path.name: path.read_text(encoding="utf-8") for path in write_report(tmp_path / "run")}


def synthetic_report():
    cells = [*synthetic_cells(80, seed=5), *hostile_cells()]
    kinds = ("new failure", "fixed", "still failing", "unchanged")
    changes = {(c.cell_id, k.check): kinds[(i + j) % 4] for i, c in enumerate(cells) for j, k in enumerate(c.checks)}
    return build_report(cells, title=HOSTILE_TITLE, notes=["<script>window.pwned=5</script>", "a note"],
                        problems=["cells/x.json: not a readable cell result"], changes=changes,
                        last_known_good=["fsdp/text/stack-smoke: transformers 5.23.0"])


def digest(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _golden_name(name: str) -> str:
    return name + (".shown" if name.endswith(".html") else "")


def test_a_real_runs_report_says_what_it_said(tmp_path):
    outputs = real_run_outputs(tmp_path)
    formats = {"report.md": "md", "report.html": "html", "report.json": "json", "report.junit.xml": "junit",
               "support.json": "support"}
    assert set(outputs) == set(formats)
    for name, text in outputs.items():
        got = comparable(formats[name], text)
        golden = GOLDEN / "real-run" / _golden_name(name)
        if WRITE:
            golden.parent.mkdir(parents=True, exist_ok=True)
            golden.write_text("\n".join(got) + "\n" if isinstance(got, list) else text, encoding="utf-8")
            continue
        expected = golden.read_text(encoding="utf-8")
        expected = expected.splitlines() if name.endswith(".html") else comparable(formats[name], expected)
        if isinstance(got, list):
            got = "\n".join(got).splitlines()  # as written: a text node with a newline is split alike
        assert got == expected, f"{name} differs from {golden.relative_to(RESOURCES)}"


def test_synthetic_and_hostile_reports_say_what_they_said():
    report = synthetic_report()
    got = {fmt: digest(comparable(fmt, render(report, fmt))) for fmt in ("md", "html", "json", "junit", "support")}
    golden = GOLDEN / "synthetic.sha256.json"
    if WRITE:
        golden.write_text(json.dumps(got, indent=1) + "\n")
    assert got == json.loads(golden.read_text())


@pytest.mark.parametrize("broken", ["message", "plot part", "link"])
def test_the_comparison_sees_a_changed_report(tmp_path, broken):
    """A report that says something else, however small, fails the comparison."""
    page = real_run_outputs(tmp_path)["report.html"]
    synthetic = render(synthetic_report(), "html")
    if broken == "message":
        changed = page.replace("Qwen3.5 (text) is unavailable", "Qwen3.5 (text) is available", 1)
        assert changed != page and shown(changed) != shown(page)
    elif broken == "plot part":
        changed = re.sub(r'(<g id="pp0">.*?points=")(\d+)', lambda m: m.group(1) + str(int(m.group(2)) + 1),
                         synthetic, count=1, flags=re.DOTALL)
        assert changed != synthetic and shown(changed) != shown(synthetic)
    else:
        changed = page.replace('href="cells/', 'href="cell/', 1)
        assert changed != page and shown(changed) != shown(page)
