"""offload-regression's verdicts from the strict device emulation: one pair per site found.

For each tiny model (text, VL, MoE) four passes run (`model_passes.run_pass`): the stock code and
the trainer's patch set, each without offload (the reference numbers) and under offload with the
strict device mode. A site is one host tensor that met device compute (`model_passes.sites`).
For every site found on either side:
- `upstream:<model>:<Module><tensor>`: `affected` where the stock code mixes it in, `pass` where not;
- `trainer:<model>:<Module><tensor>`: `fail` where the trainer's code still mixes it in, else `pass`.
And one verdict per side over all models (`upstream`, `trainer`), which also fails the trainer (and
is an `error` upstream) when a pass raised or its numbers differ from its reference.
"""
from __future__ import annotations

from typing import Any

from harness.checks.offload_regression.offload_setup import HOST_BUFFERS
from harness.results.records import Status, Verdict

NOTE = f"emulated: strict device semantics on the CPU, {HOST_BUFFERS}"


def emulated_passes(model_config, seed: int, trainer_patches: list) -> dict[str, dict[str, dict[str, Any]]]:
    """model kind -> pass name -> what the pass saw; {} for a kind this transformers lacks."""
    from harness.checks.offload_regression.model_passes import MODEL_KINDS, run_pass
    from trainers.models import Qwen35Unavailable, build_config

    passes: dict[str, dict[str, dict[str, Any]]] = {}
    for kind in MODEL_KINDS:
        try:
            build_config(kind, model_config)
        except Qwen35Unavailable:
            continue
        passes[kind] = {name: run_pass(kind, model_config, seed, patches, strict)
                        for name, patches, strict in (("reference_stock", [], False),
                                                      ("reference_trainer", trainer_patches, False),
                                                      ("upstream", [], True), ("trainer", trainer_patches, True))}
    return passes


def _site_message(side: str, site: dict[str, Any] | None) -> str:
    if site is None:
        return f"{side} code keeps this tensor off device compute under offload"
    what = (f"{site['key']} met device compute from the host in {', '.join(site['modules'])} "
            f"({', '.join(site['calls'])} at {', '.join(site['where'])}; {site['count']} calls)")
    return what if side == "upstream" else f"the trainer's code still mixes a host tensor in: {what}"


def _problem(side: str, kind: str, p: dict[str, Any], ref: dict[str, Any], rtol: float) -> str:
    from harness.checks.offload_regression.model_passes import same_numbers

    if ref.get("raised"):
        return f"{kind}: the reference run without offload failed: {ref.get('error_class')} at {ref.get('error_site')}"
    if p.get("raised"):
        return f"{kind}: the {side} step under offload failed: {p.get('error_class')} at {p.get('error_site')}"
    if not same_numbers(p, ref, rtol):
        return (f"{kind}: numbers under offload differ from the run without offload: loss {p.get('loss')} vs "
                f"{ref.get('loss')}, grad norm {p.get('grad_norm')} vs {ref.get('grad_norm')} (rtol {rtol})")
    return ""


def site_verdicts(passes: dict, deciding: bool, rtol: float = 1e-5) -> list[Verdict]:
    """The per-site verdicts and one verdict per side (see the module docstring)."""
    from harness.checks.offload_regression.model_passes import site_label, sites

    suffix = "" if deciding else "/strict-emulation"
    out: list[Verdict] = []
    found = {"upstream": [], "trainer": []}
    problems = {"upstream": [], "trainer": []}
    for kind, kind_passes in passes.items():
        seen = {side: sites(kind_passes[side]["mixes"]) for side in ("upstream", "trainer")}
        for key in sorted(set(seen["upstream"]) | set(seen["trainer"])):
            site = seen["upstream"].get(key) or seen["trainer"][key]
            label = site_label(kind, site)
            for side, bad in (("upstream", Status.AFFECTED), ("trainer", Status.FAIL)):
                mine = seen[side].get(key)
                metrics = {"model": kind, "site": key, **({"found": mine} if mine else {})}
                out.append(Verdict(f"{side}:{label}{suffix}", bad if mine else Status.PASS,
                                   f"[{NOTE}] {_site_message(side, mine)}", metrics, emulated=True))
                if mine:
                    found[side].append(label)
        for side, reference in (("upstream", "reference_stock"), ("trainer", "reference_trainer")):
            problem = _problem(side, kind, kind_passes[side], kind_passes[reference], rtol)
            if problem:
                problems[side].append(problem)
    for side, bad in (("upstream", Status.AFFECTED), ("trainer", Status.FAIL)):
        if problems[side]:
            status, message = (Status.FAIL if side == "trainer" else Status.ERROR), "; ".join(problems[side])
        elif found[side]:
            status = bad
            message = f"{len(found[side])} sites mix a host tensor into device compute: {', '.join(found[side])}"
        else:
            status, message = Status.PASS, (f"no host tensor meets device compute in {', '.join(passes)}; forward and "
                                            f"backward give the numbers of the run without offload (rtol {rtol})")
        summary = {kind: {k: {f: p.get(f) for f in ("loss", "grad_norm", "raised", "error_class", "error_site",
                                                     "seconds", "patches")}
                          for k, p in kind_passes.items()} for kind, kind_passes in passes.items()}
        out.append(Verdict(f"{side}{suffix}", status, f"[{NOTE}] {message}", {"passes": summary, "sites": found[side]},
                           emulated=True))
    return out
