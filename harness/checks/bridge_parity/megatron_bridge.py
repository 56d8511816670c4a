"""bridge-parity's verdicts for Megatron-Bridge's own Qwen3.5 bridges, kept apart from the project mapping's.

Megatron-Bridge (0.6+) registers Qwen35Bridge and Qwen35MoEBridge (megatron/bridge/models/qwen/
qwen35_bridge.py) and Qwen35VLBridge (qwen_vl/qwen35_vl_bridge.py). Where megatron-bridge is installed,
library.py runs on the ranks of three jobs (TP=1, TP=2, EP=2, as the project mapping's): Megatron-Bridge
converts, the ranks measure. Five verdicts per model and job (`megatron-bridge/<model>-<tp1|tp2|ep2>/<aspect>`),
each naming the bridge class and release (`metrics["bridge"]`), in two kinds (`metrics["measures"]`):
- Megatron-Bridge's conversion (CONVERSION): `roundtrip` (HF -> Megatron -> HF bitwise), `project-mapping`
  (Megatron-Bridge's Megatron weights equal the project mapping's) and `mtp-roundtrip` (MTP on: the model saved
  with one MTP layer, built with the provider's MTP block, every tensor back under its released name, judged by
  mtp.verdict; the Megatron MTP parameters Megatron-Bridge has no mapping for are named);
- its weights run through layers (RUN_ON_LAYERS): `logprobs` and `grads` (against HF, the project's
  tolerances). On a CPU rank those layers are this project's stand-ins for Transformer Engine's (STAND_INS:
  the CPU TE-layout spec with MaskedGatedDeltaNet, CpuRMSNorm and CpuLayerNormColumnParallelLinear), so the
  verdicts are marked emulated and name them; on every device the logits and the gradient reduction are this
  project's (PROJECT_CODE), and the message says so.
A model whose bridge is not the one registered for it fails. `megatron-bridge/vl` and
`megatron-bridge/vl/mtp-roundtrip` are skips whose reason is read from the installed code (the line that builds
the vision tower from Transformer Engine modules).
megatron-bridge is installed only where the row pins it, so where `import megatron.bridge` fails every
verdict is an error naming the exception and the line of Megatron-Bridge's code that raised it (found in the
traceback): the row asked for it and it could not be measured.

`attributed` is the guard every verdict passes before it is reported: a verdict named for Megatron-Bridge
whose result came from another bridge (the project mapping) fails, so the report never credits
Megatron-Bridge with the project mapping's numbers.
"""
from __future__ import annotations

import importlib.metadata
import linecache
import traceback

from harness.checks.bridge_parity import mtp
from harness.results.records import Status, Verdict

PREFIX = "megatron-bridge/"
DISTRIBUTION = "megatron-bridge"
CASES = ("text-hybrid", "moe-hybrid")
# bridge-parity's jobs for Megatron-Bridge -> (tensor parallel, expert parallel, models); verdicts carry the suffix
JOBS = {"megatron-bridge-tp1": (1, 1, CASES), "megatron-bridge-tp2": (2, 1, CASES),
        "megatron-bridge-ep2": (1, 2, ("moe-hybrid",))}
CLASSES = {"text-hybrid": "Qwen35Bridge", "moe-hybrid": "Qwen35MoEBridge", "vl": "Qwen35VLBridge"}
MTP = "mtp-roundtrip"  # the round trip of the same model saved with its MTP layer
ASPECTS = ("roundtrip", "logprobs", "grads", "project-mapping", MTP)
CONVERSION = ("roundtrip", "project-mapping", MTP)  # Megatron-Bridge's own load, export and mapping
RUN_ON_LAYERS = ("logprobs", "grads")  # its weights through a forward and backward
STAND_INS = ("the CPU TE-layout spec (bridge_parity/te_layout.py)", "MaskedGatedDeltaNet", "CpuRMSNorm",
             "CpuLayerNormColumnParallelLinear")
MTP_STAND_IN = ("this project's te_layout.mtp_block_spec (TE's parameter layout from megatron-core's local modules; "
                "the provider's asks for Transformer Engine's)")
PROJECT_CODE = ("this project's logits (megatron_logits)", "gradient reduction (trainers/megatron/grads.py)")


def installed_version() -> str | None:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def raising_line(exc: BaseException) -> str:
    """'megatron/bridge/...py line N: <source>' for the innermost frame of Megatron-Bridge's own code."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "/megatron/bridge/" in f.filename.replace("\\", "/")]
    if not frames:
        return ""
    frame = frames[-1]
    path = "megatron/bridge/" + frame.filename.replace("\\", "/").split("/megatron/bridge/", 1)[1]
    source = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
    return f"{path} line {frame.lineno}: `{source}`"


def _named(case: str, version: str) -> str:
    return f"megatron-bridge {version} ({CLASSES[case]})"


def _metrics(data: dict, imported: dict, keys: tuple[str, ...]) -> dict:
    return {"bridge": data["bridge"], "tp": data.get("tp"), "ep": data.get("ep"),
            "transformer_engine_stand_in": imported.get("transformer_engine_stand_in"),
            "stand_in_served": imported.get("stand_in_served"),
            "cpu_overrides": sorted(k for k, v in data.get("overrides", {}).items() if "why" in v),
            **{k: data.get(k) for k in keys}}


def _on_layers(data: dict) -> tuple[str, bool]:
    """What ran Megatron-Bridge's weights, for the message of a RUN_ON_LAYERS verdict, and whether it is an
    emulation (the project's CPU stand-ins in place of Transformer Engine's layers)."""
    project = f"with {' and '.join(PROJECT_CODE)}"
    if data.get("layers") == "provider":
        return f"on the provider's own layers, {project}", False
    return f"emulated on this project's CPU layers ({', '.join(STAND_INS)}), {project}", True


def _aspects(case: str, data: dict, imported: dict, atol: float, rtol: float) -> list[Verdict]:
    bridge = data["bridge"]
    layers, emulated = _on_layers(data)
    nonfinite = data.get("nonfinite_grads") or []
    wrong_class = (f"; Megatron-Bridge picked {data['bridge_class']}, not {data['expected_class']}"
                   if data["bridge_class"] != data["expected_class"] else "")
    checks = {
        "roundtrip": (not data["roundtrip_mismatched"] and not data["roundtrip_extra"],
                      f"HF -> Megatron -> HF bitwise equal ({data['roundtrip_compared']} tensors)",
                      f"round trip not exact: {len(data['roundtrip_mismatched'])} tensors differ or are missing "
                      f"{data['roundtrip_mismatched'][:5]}, {len(data['roundtrip_extra'])} extra",
                      ("roundtrip_compared", "roundtrip_mismatched", "roundtrip_extra")),
        "logprobs": (data["finite"] and data["max_abs_logprob_error"] <= atol,
                     f"log-prob error {data['max_abs_logprob_error']:.2g} <= {atol}",
                     f"log-prob error {data['max_abs_logprob_error']:.3g} > {atol}"
                     + ("" if data["finite"] else " (non-finite log-probs)"),
                     ("max_abs_logprob_error", "finite")),
        "grads": (data["max_rel_grad_error"] <= rtol and not nonfinite,
                  f"gradients within {data['max_rel_grad_error']:.2g} <= {rtol} ({data['grads_compared']} tensors)",
                  f"gradient error {data['max_rel_grad_error']:.3g} > {rtol} ({data['worst_grad']})"
                  + (f"; non-finite gradients in {nonfinite[:5]}" if nonfinite else ""),
                  ("max_rel_grad_error", "worst_grad", "grads_compared", "nonfinite_grads")),
        "project-mapping": (not data["project_mismatched"] and not data["project_unmatched"],
                            f"the same Megatron weights as the project mapping ({data['project_compared']} tensors)",
                            f"Megatron weights differ from the project mapping's: {data['project_mismatched'][:5]} "
                            f"(max abs diff {data['project_max_abs_diff']:.3g}), unmatched "
                            f"{data['project_unmatched'][:5]}",
                            ("project_compared", "project_mismatched", "project_unmatched", "project_max_abs_diff")),
    }
    out = []
    for aspect, (ok, good, bad, keys) in checks.items():
        metrics = _metrics(data, imported, keys)
        metrics.update({"tolerance": atol} if aspect == "logprobs" else {"grad_tolerance": rtol} if aspect == "grads"
                       else {})
        status = Status.PASS if ok and not wrong_class else Status.FAIL
        if aspect in CONVERSION:
            metrics["measures"] = "conversion"
            message, on_stand_ins = f"Megatron-Bridge's conversion, bridge {bridge}", False
        else:
            metrics.update(measures="run-on-layers", layers=data.get("layers", "cpu-te-layout"))
            message, on_stand_ins = f"bridge {bridge}'s weights {layers}", emulated
        out.append(Verdict(f"{PREFIX}{case}/{aspect}", status, f"{message}: {good if ok else bad}{wrong_class}",
                           metrics=metrics, emulated=on_stand_ins))
    out.append(_mtp_verdict(case, data, imported, wrong_class))
    return out


def _mtp_verdict(case: str, data: dict, imported: dict, wrong_class: str) -> Verdict:
    """MTP on (`<model>-<job>/mtp-roundtrip`): mtp.verdict's judgement of Megatron-Bridge's round trip of the
    checkpoint with its MTP layer, naming the Megatron MTP parameters it has no mapping for."""
    found = mtp.verdict(f"{PREFIX}{case}/{MTP}", data.get("mtp"), data["bridge"], data.get("tp"), data.get("ep"))
    unmapped = (data.get("mtp") or {}).get("unmapped") or []
    note = (f"; Megatron-Bridge's mapping registry has no entry for {len(unmapped)} of the model's Megatron MTP "
            f"parameters: {unmapped[:mtp.SHOWN]}" if unmapped else "")
    if any(".local_experts." in name for name in unmapped):
        note += (" (megatron-core's SequentialMLP experts, as moe_grouped_gemm is off on CPU: grouped-GEMM experts "
                 "are Transformer Engine's; its MTP expert mappings name only the grouped-GEMM layout "
                 "`mtp_model_layer.mlp.experts.linear_fc1.weight*`, its decoder's both)")
    stand_in = bool((data.get("mtp") or {}).get("mtp_block_spec"))
    if stand_in:  # the model Megatron-Bridge converts has this project's CPU MTP block (provider._mtp_spec)
        note += f"; its MTP block built by {MTP_STAND_IN}"
    metrics = {**_metrics(data, imported, ()), **found.metrics, "measures": "conversion", "unmapped": unmapped,
               "mtp_block_spec": MTP_STAND_IN if stand_in else "the provider's"}
    status = Status.FAIL if wrong_class else found.status
    return Verdict(found.name, status, f"Megatron-Bridge's conversion, {found.message}{note}{wrong_class}",
                   metrics=metrics)


def verdicts(job: str, results: dict | None, version: str | None, atol: float, rtol: float,
             log_tail: str = "") -> list[Verdict]:
    """The Megatron-Bridge verdicts of one job from what its rank 0 wrote (None or {}: the ranks produced nothing);
    the VL skip and an import failure come with the first job only (they do not depend on the layout)."""
    if version is None:
        return []
    first = job == next(iter(JOBS))
    suffix = job.rsplit("-", 1)[1]
    cases = JOBS[job][2]
    if not results:
        return [Verdict(f"{PREFIX}{case}-{suffix}/{aspect}", Status.FAIL, f"the Megatron-Bridge ranks produced no "
                        f"result; log tail: {log_tail}", metrics={"bridge": _named(case, version)})
                for case in cases for aspect in ASPECTS]
    imported = results.get("import", {})
    if imported.get("error"):  # installed because the row pins it: not measuring it is an error, never a skip
        where = f" at {imported['where']}" if imported.get("where") else ""
        return [Verdict(f"{PREFIX}{case}", Status.ERROR, f"{_named(case, version)} is installed (the row pins it) "
                        f"but `import megatron.bridge` failed: {imported['error']}{where}",
                        metrics={"bridge": _named(case, version), **imported})
                for case in (*CASES, "vl")] if first else []
    out = []
    for case in cases:
        data = results.get(case) or {"error": "no result"}
        if "error" in data:  # Megatron-Bridge (or megatron-core) raised: its own words
            out.append(Verdict(f"{PREFIX}{case}-{suffix}", Status.FAIL, f"{_named(case, version)}: {data['error']}",
                               metrics={"bridge": _named(case, version), **imported}))
        else:
            out.extend(_aspects(f"{case}-{suffix}", data, imported, atol, rtol))
    if first:
        vl = results.get("vl") or {}
        # On every device: the check drives only the text and MoE bridges (a GPU runner is not yet taught VL).
        out.append(Verdict(f"{PREFIX}vl", Status.SKIP, f"{_named('vl', version)} imports here but bridge-parity "
                           f"does not drive it: {vl.get('reason', 'no reason recorded')}",
                           metrics={"bridge": _named("vl", version), "where": vl.get("where", [])}))
        out.append(Verdict(f"{PREFIX}vl/{MTP}", Status.SKIP, f"{_named('vl', version)}'s MTP round trip (its "
                           "`language_model.mtp.*` mappings, where Megatron-Bridge #5252 reports a wrong prefix) is "
                           f"not run: its model is not built here: {vl.get('reason', 'no reason recorded')}",
                           metrics={"bridge": _named("vl", version), "mtp": True, "where": vl.get("where", [])}))
    return out


def summary(found: list[Verdict]) -> str:
    """'; Megatron-Bridge's own bridges: ...' for the check's message ('' where it is not installed)."""
    own = [v for v in found if v.name.startswith(PREFIX)]
    if not own:
        return ""
    def passing(kind: str, found: list[Verdict]) -> str:
        return f"{sum(v.status == Status.PASS for v in found)} of {len(found)} {kind} pass"

    conversion = [v for v in own if v.metrics.get("measures") == "conversion"]
    on_layers = [v for v in own if v.metrics.get("measures") == "run-on-layers"]
    kind = "emulated on this project's CPU layers" if any(v.emulated for v in on_layers) else "run on its layers"
    parts = [passing("conversion verdicts", conversion)] + ([passing(kind, on_layers)] if on_layers else [])
    skipped = sum(v.status == Status.SKIP for v in own)
    return f"; Megatron-Bridge's own Qwen3.5 bridges: {'; '.join(parts)}; {skipped} skipped"


def attributed(verdict: Verdict) -> Verdict:
    """The verdict itself, or a failure where one named for Megatron-Bridge came from another bridge."""
    bridge = str(verdict.metrics.get("bridge") or "")
    if verdict.name.startswith(PREFIX) and not bridge.startswith(DISTRIBUTION):
        return Verdict(verdict.name, Status.FAIL, f"named for Megatron-Bridge but produced by {bridge or 'no bridge'}"
                       f" (its result was: {verdict.message})", metrics=verdict.metrics, emulated=verdict.emulated)
    return verdict
