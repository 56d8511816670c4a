"""patch-parity's packed-sp verdicts: a 2-rank sequence-parallel forward of a packed row (gloo on CPU) against
each sequence run alone, for the trainer's code and, in a verl row, for verl's.

The ranks (packed_sp_ranks.py) are forked from the check's process where that is safe, else a torchrun job
(harness.checks.support.ranks.run_job). Trainer (`packed-sp:text`): trainers.patches.sequence_parallel with the
trainer's packed-forward patch; the logits of every sequence must match its own stock forward, computed here,
within the float32 output tolerance. Without the row's boundaries (`broken`) the linear attention mixes the
sequences and the verdict fails.

verl (`verl:packed-sp:text`): verl 0.9's Ulysses forward of a packed row through Qwen3.5's linear attention first
builds flash-linear-attention's context-parallel context (verl's `_build_fla_cp_context`, which imports
`fla.ops.cp`); the kernels it feeds are Triton kernels, which have no CPU path. The ranks call that function on
their gloo group, and the verdict is a skip that names verl's line importing fla and what the call raised (or
returned): verl's side needs a GPU runner with flash-linear-attention. A verl release without that function is a
plain skip (`packed-sp:text/verl`) that records nothing of verl as run. Where verl's Qwen3.5 module does not import
on the row's stack (verl 0.9.1 against transformers 5.23.0: a class it imports is gone), verl's verdict fails with
its ImportError and line, and the trainer's verdict on the same ranks stands.
"""
from __future__ import annotations

import importlib
import inspect
from pathlib import Path

from harness.checks.patch_parity import packed_sp_ranks as worker
from harness.checks.support import ranks as rank_launch
from harness.checks.support import verl
from harness.results.records import Status, Verdict
from trainers.worst import worst

NAME = "packed-sp:text"
TIMEOUT = 300.0
THREADS = {"OMP_NUM_THREADS": "1"}


def launch(seed: int, work: Path, pass_boundaries: bool = True, with_verl: bool = False) -> tuple[dict | None, str]:
    """Run the ranks: (what rank 0 wrote, None if a rank failed or ran out of time; "forked" or "torchrun")."""
    import torch

    work.mkdir(parents=True, exist_ok=True)
    out, log = work / "packed-sp.pt", work / "packed-sp.log"
    out.unlink(missing_ok=True)
    log.unlink(missing_ok=True)  # the ranks append to it
    args = ["--seed", str(seed), "--out", str(out)] + ([] if pass_boundaries else ["--no-boundaries"])
    args += ["--verl"] if with_verl else []
    if with_verl:  # imported here once, not on each forked rank (verl resolves its platform at use, not at import)
        rank_launch.preload(*worker.VERL_IMPORTS)
    ok, launcher = rank_launch.run_job(worker.main, "harness.checks.patch_parity.packed_sp_ranks", args,
                                       worker.RANKS, log, TIMEOUT, THREADS)
    return (torch.load(out, weights_only=True) if ok and out.exists() else None), launcher


def sequence_errors(logits, seed: int) -> list[float]:
    """Max |logit error| of each packed sequence against that sequence's own stock forward (same weights)."""
    import torch

    from trainers.models import build_model
    from trainers.patches import packed_forward

    model = build_model("text", {}, seed=seed).eval()
    alone = worker.sequences(model.config.vocab_size, seed)
    packed = packed_forward.pack_sequences(alone)
    errors = []
    with torch.no_grad():
        for tokens, part in zip(alone, packed.split(logits), strict=True):
            own = model(input_ids=tokens[None], position_ids=torch.arange(tokens.numel())[None], use_cache=False)
            errors.append(float((own.logits - part).abs().max()))
    return errors


def trainer_verdict(errors: list[float], tolerance: float, boundaries_passed: bool, launcher: str) -> Verdict:
    """Pass when every sequence's error is within `tolerance` (a NaN anywhere fails)."""
    error = worst(errors)
    ok = error <= tolerance
    metrics = {"ranks": worker.RANKS, "lengths": list(worker.LENGTHS), "max_abs_error": error,
               "per_sequence": errors, "boundaries_passed": boundaries_passed, "tolerance": tolerance,
               "launcher": launcher}
    given = "" if boundaries_passed else " (the linear attention given no cu_seqlens)"
    return Verdict(NAME, Status.PASS if ok else Status.FAIL,
                   f"the trainer's {worker.RANKS}-rank sequence-parallel forward{given} of {len(errors)} packed "
                   f"sequences (gloo, {launcher} ranks) {'matches' if ok else 'differs from'} each sequence's own "
                   f"forward: max |logit error| {error:.2e} ({'<=' if ok else '>'} {tolerance})", metrics)


def _import_line(function) -> str:
    """verl's `file:line` where `function` imports fla, and the line itself."""
    lines, first = inspect.getsourcelines(function)
    offset = next((i for i, line in enumerate(lines) if "import" in line and "fla" in line), 0)
    module = inspect.getmodule(function).__name__.replace(".", "/")
    return f"{module}.py:{first + offset}: {lines[offset].strip()}"


def verl_verdict(probe: dict | None) -> Verdict:
    """verl's side from what the ranks' call of verl's function recorded (None: the ranks gave no record)."""
    if probe is None:
        return Verdict(f"{NAME}/verl", Status.ERROR, "verl's side not measured: the sequence-parallel ranks failed "
                       f"before calling {worker.VERL_CONTEXT} (see the {NAME} verdict); nothing of verl ran")
    if probe.get("cannot_run_here"):
        return verl.verdict(NAME, Status.SKIP, probe["cannot_run_here"], [], metrics={"call": probe})
    if probe.get("import_error"):  # verl's Qwen3.5 module does not import on this row's stack: verl's failure
        return verl.verdict(NAME, Status.FAIL, f"verl's code raises {probe['import_error']} importing "
                            f"{worker.VERL_CONTEXT.rsplit('.', 1)[0]}, so its Ulysses forward of a packed Qwen3.5 "
                            "row cannot start on this stack", [], metrics={"call": probe})
    if probe.get("called") is None:
        return Verdict(f"{NAME}/verl", Status.SKIP, f"verl {verl.installed()} has no {worker.VERL_CONTEXT}: no "
                       "context-parallel path for Qwen3.5's linear attention to call on CPU; nothing of verl ran")
    module_name, _, attribute = probe["called"].rpartition(".")
    function = getattr(importlib.import_module(module_name), attribute)
    outcome = f"raised {probe['error']}" if probe["error"] else f"returned a {probe['returned']}"
    return verl.verdict(NAME, Status.SKIP, f"needs an accelerator: on {worker.RANKS} gloo ranks, verl's {attribute} "
                        "(which its Qwen3.5 linear-attention forward calls on a packed row split across Ulysses "
                        f"ranks) {outcome}; it imports flash-linear-attention's context-parallel module "
                        f"({_import_line(function)}), whose Triton kernels have no CPU path: a GPU runner with "
                        "flash-linear-attention runs verl's side",
                        ran=[function], metrics={"call": probe})


def packed_sp_verdicts(tolerance: float, seed: int, work: Path, max_ranks: int | None = None,
                       broken: bool = False) -> list[Verdict]:
    """The trainer's verdict and, in a verl row, verl's (`broken`: the row's boundaries left out)."""
    if max_ranks is not None and max_ranks < worker.RANKS:
        return [Verdict(NAME, Status.SKIP, f"needs {worker.RANKS} ranks; this row allows {max_ranks}")]
    with_verl = verl.installed() is not None
    result, launcher = launch(seed, work, pass_boundaries=not broken, with_verl=with_verl)
    if result is None:
        log = work / "packed-sp.log"
        tail = log.read_text(encoding="utf-8", errors="replace")[-1500:] if log.exists() else ""
        verdicts = [Verdict(NAME, Status.FAIL, f"the {worker.RANKS} sequence-parallel ranks ({launcher}) failed "
                            f"or ran out of time ({TIMEOUT:.0f} s); log tail: {tail}", {"launcher": launcher})]
    else:
        verdicts = [trainer_verdict(sequence_errors(result["logits"], seed), tolerance,
                                    result["boundaries_passed"], launcher)]
    if with_verl:
        verdicts.append(verl_verdict(result.get("verl") if result else None))
    return verdicts
