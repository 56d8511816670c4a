"""Synthetic cell results for tests and the report benchmark: many versions, every status, verdicts,
emulated results, known failures, convergence curves, hostile messages and hostile link paths.

Deterministic for a given (n, seed). Each cell has a distinct (version combination, backend, model).
"""
from __future__ import annotations

import functools
import math
import random

from harness.checks import CHECKS
from harness.results.records import CellResult, CheckResult, Status, Verdict

TRANSFORMERS = ["5.1.0", "5.2.0", "5.2.1", "5.3.0", "5.4.0", "5.5.0", "5.5.3", "5.6.0", "5.7.0", "5.8.0",
                "5.8.1", "5.9.0", "5.10.0", "5.10.2", "5.11.0", "5.12.0", "5.15.0", "5.18.1", "5.20.0",
                "5.22.0", "5.23.0"]
TORCH = ["2.11.0", "2.12.1", "2.13.0", "2.14.1"]
TENSORDICT = ["0.9.1", "0.10.0", "0.12.2", "0.15.3"]
VLLM = ["0.16.0", "0.17.1", "0.18.0", "0.19.2", "0.20.0"]
DEVICES = ["cpu", "cuda", "npu"]
BACKENDS = ["fsdp", "megatron"]
MODELS = ["text", "vl", "moe"]
HOSTILE_MESSAGES = [
    "</table><script>alert(1)</script>",
    "[x](javascript:alert(1)) and ![img](http://evil.example/a.png)",
    "| pipe | `tick` *star* _under_ ~strike~ $x^2$ #1 @maintainer",
    "line one\nline two\r\n# heading\n- item",
    '<img src=x onerror="alert(1)"> <a href="javascript:alert(2)">click</a>',
    "&lt;script&gt; &amp; &#60;b&#62; entities",
    "see https://evil.example/phish or www.evil.example",
    "bidi \u202eevil\u202c and \x00\x1b[31mansi\x1b[0m",
    '"quotes" \'single\' onmouseover=alert(3)',
    # Would change the page's title and set a global if a browser ran it (tests/e2e/test_browser.py looks).
    "<script>window.pwned=1;document.title='pwned'</script>",
    '<img src=x onerror="window.pwned=2;document.title=\'pwned\'"><svg onload="window.pwned=3">',
]
HOSTILE_TITLE = "<script>alert('title');window.pwned=4</script> | `x`"
HOSTILE_LINKS = ["javascript:alert(1)", "../../etc/passwd", "/etc/passwd", "http://evil.example/log",
                 "cells/x/../../secret", "C:\\logs\\x.log", "//evil.example/x"]
_CHOICES = [Status.PASS] * 60 + [Status.FAIL] * 8 + [Status.AFFECTED] * 6 + [Status.SKIP] * 6 + \
    [Status.XFAIL] * 6 + [Status.TIMEOUT] * 4 + [Status.CRASH] * 4 + [Status.ERROR] * 6


def _curve(rng: random.Random, steps: int, noise: float, rate: float = 0.2) -> list[float]:
    """A logistic rise of the reward from about 0.4 to 0.9, with uniform noise."""
    return [round(0.4 + 0.5 / (1 + math.exp(-rate * (s - steps / 3))) + noise * (rng.random() - 0.5), 4)
            for s in range(steps)]


@functools.cache
def _reference(steps: int) -> tuple[float, ...]:
    return tuple(_curve(random.Random(0), steps, 0.0))


def _message(rng: random.Random, status: Status, check: str) -> str:
    if rng.random() < 0.04:
        return rng.choice(HOSTILE_MESSAGES)
    return {
        Status.PASS: f"{check} ok in {rng.uniform(0.1, 9):.2f} s",
        Status.FAIL: f"max logit error {rng.uniform(0.01, 0.3):.3f} above tolerance 1e-4",
        Status.AFFECTED: "upstream bug reproduced: index is on cpu under CPU offload",
        Status.SKIP: "Qwen3.5 unavailable in this transformers version",
        Status.XFAIL: "fails as declared in the matrix file",
        Status.TIMEOUT: "no result within 600 s; log tail kept",
        Status.CRASH: "killed by signal 9 (out of memory?)",
        Status.ERROR: "RuntimeError: unexpected exception in the check",
    }[status]


def _check(rng: random.Random, cell_id: str, name: str, device: str, tf: str) -> CheckResult:
    status = Status.SKIP if tf == "5.1.0" else rng.choice(_CHOICES)
    log = f"cells/{cell_id}/logs/{name}.log" if rng.random() > 0.01 else rng.choice(HOSTILE_LINKS)
    result = CheckResult(name, status, _message(rng, status, name), duration=round(rng.uniform(0.5, 120), 2), log=log)
    if status is Status.XFAIL:
        result.original_status = Status.FAIL
        result.known_failure = {"reason": "mbridge 0.15.1 lacks qwen3_5_moe", "expires": "2027-06-30",
                                "link": "https://github.com/verl-project/verl/issues/6627"}
    if name == "offload-regression" and status is not Status.SKIP:
        upstream = Status.AFFECTED if tf.startswith(("5.2", "5.3", "5.4", "5.5", "5.6", "5.7", "5.8")) else Status.PASS
        emulated = device == "cpu"
        result.verdicts = [Verdict("upstream", upstream, "pos_embed indices device", emulated=emulated),
                           Verdict("trainer", status if status is not Status.AFFECTED else Status.PASS,
                                   "patched method", emulated=emulated)]
    if name == "grpo-convergence" and status is not Status.SKIP:
        steps = rng.randint(20, 60)
        reference = list(_reference(steps))
        result.metrics = {"reward_curve": _curve(rng, steps, 0.08, rng.uniform(0.1, 0.3)), "reference_curve": reference}
        if rng.random() < 0.5:
            result.metrics["band"] = 0.08
        else:
            result.metrics["band_lower"] = [round(r - 0.1, 4) for r in reference]
            result.metrics["band_upper"] = [round(r + 0.06, 4) for r in reference]
    return result


def synthetic_cells(n: int, seed: int = 0) -> list[CellResult]:
    """`n` realistic random cells; the same (n, seed) always gives the same cells."""
    rng = random.Random(seed)
    axes_values = [DEVICES, TRANSFORMERS, TORCH, TENSORDICT, VLLM, BACKENDS, MODELS]
    combos = math.prod(len(v) for v in axes_values)
    repeats = max(1, math.ceil(n / combos))  # beyond every combination, vary the container image
    cells = []
    for index in rng.sample(range(combos * repeats), n):
        picked, rest = [], index
        for values in axes_values:
            rest, i = divmod(rest, len(values))
            picked.append(values[i])
        device, tf, torch, td, vllm, backend, model = picked
        axes = {"device": device, "transformers": tf, "torch": torch, "tensordict": td, "backend": backend,
                "model": model}
        if device == "npu":
            axes.update(torch_npu=f"{torch}.post1", vllm_ascend=f"{vllm}rc1")
        else:
            axes["vllm"] = vllm
        if rest:
            axes["image"] = f"registry.example/qwen35:{rest}"
        cell_id = f"{backend}-{model}-{device}-tf{tf}-torch{torch}-td{td}-vllm{vllm}" + (f"-img{rest}" if rest else "")
        names = [c for c, spec in CHECKS.items() if backend in spec.backends]
        cells.append(CellResult(
            matrix="synthetic", cell_id=cell_id, axes=axes, tags=[device, backend],
            checks=[_check(rng, cell_id, name, device, tf) for name in names],
            environment={"python": "3.11.7", "os": "Linux-6.1-x86_64", "cpu": "synthetic CPU", "torch": torch,
                         "devices": [device], "packages": {"transformers": tf, "tensordict": td}},
            lock=f"cells/{cell_id}/lock.txt", started="2026-11-22T10:00:00Z", finished="2026-11-22T10:05:00Z",
            duration=300.0,
        ))
    return cells


def hostile_cells() -> list[CellResult]:
    """One cell per hostile message: in the check's message, a verdict name, a known failure, axes and links."""
    cells = []
    for i, message in enumerate(HOSTILE_MESSAGES):
        check = CheckResult("stack-smoke", Status.FAIL, message, log=HOSTILE_LINKS[i % len(HOSTILE_LINKS)],
                            verdicts=[Verdict("<b onmouseover=alert(1)>v</b>", Status.PASS, message)],
                            known_failure={"reason": message, "link": "javascript:alert(document.cookie)",
                                           "expires": "<i>soon</i>"})
        odd = CheckResult("<svg onload=alert(1)>|x", Status.PASS, "odd check name", log="cells/ok/logs/odd.log")
        cells.append(CellResult(
            matrix="cpu", cell_id=f"cell-{i}", checks=[check, odd],
            axes={"transformers": f"5.{i}.0", "backend": "fsdp", "model": "text",
                  "image": "<img src=x onerror=alert(1)>" if i == 0 else "registry.example/img:1"},
            lock=HOSTILE_LINKS[(i + 3) % len(HOSTILE_LINKS)] if i % 2 else f"cells/cell-{i}/lock.txt",
            environment={"python": "3.11\" onmouseover=\"alert(1)", "os": "<b>linux</b>"},
        ))
    return cells
