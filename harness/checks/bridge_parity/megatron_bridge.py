"""bridge-parity's verdicts for Megatron-Bridge's own Qwen3.5 bridges, kept apart from the project mapping's.

Megatron-Bridge (0.6+) registers Qwen35Bridge and Qwen35MoEBridge (megatron/bridge/models/qwen/
qwen35_bridge.py) and Qwen35VLBridge (qwen_vl/qwen35_vl_bridge.py). The check imports each where
megatron-bridge is installed; one verdict per model names the bridge class and release that produced it
(`metrics["bridge"]`). Where a bridge cannot be imported, the verdict is a skip whose reason is read from
the failing import itself: the error and the line of Megatron-Bridge's code that raised it, found in the
traceback (e.g. 0.6.2's megatron/bridge/peft/lora_layers.py imports transformer_engine.pytorch at module
level, reached from `import megatron.bridge`; Transformer Engine is a CUDA library with no CPU build).

`attributed` is the guard every verdict passes before it is reported: a verdict named for Megatron-Bridge
whose result came from another bridge (the project mapping) fails, so the report never credits
Megatron-Bridge with the project mapping's numbers.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import linecache
import traceback

from harness.results.records import Status, Verdict

PREFIX = "megatron-bridge/"
DISTRIBUTION = "megatron-bridge"
# case -> (module, bridge class): Megatron-Bridge's own Qwen3.5 bridges
BRIDGES = {"text-hybrid": ("megatron.bridge.models.qwen.qwen35_bridge", "Qwen35Bridge"),
           "moe-hybrid": ("megatron.bridge.models.qwen.qwen35_bridge", "Qwen35MoEBridge"),
           "vl": ("megatron.bridge.models.qwen_vl.qwen35_vl_bridge", "Qwen35VLBridge")}


def installed_version() -> str | None:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


def _raising_line(exc: BaseException) -> str:
    """'megatron/bridge/...py line N: <source>' for the innermost frame of Megatron-Bridge's own code."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__)
              if "/megatron/bridge/" in f.filename.replace("\\", "/")]
    if not frames:
        return ""
    frame = frames[-1]
    path = "megatron/bridge/" + frame.filename.replace("\\", "/").split("/megatron/bridge/", 1)[1]
    source = (frame.line or linecache.getline(frame.filename, frame.lineno)).strip()
    return f"{path} line {frame.lineno}: `{source}`"


def probe() -> dict:
    """{case: {"bridge", "importable", "error", "where"}} for each of Megatron-Bridge's Qwen3.5 bridges;
    {} where megatron-bridge is not installed."""
    version = installed_version()
    if version is None:
        return {}
    found = {}
    for case, (module, cls) in BRIDGES.items():
        entry = {"bridge": f"megatron-bridge {version} ({cls})", "importable": False, "error": None, "where": ""}
        try:
            getattr(importlib.import_module(module), cls)
            entry["importable"] = True
        except Exception as exc:  # noqa: BLE001 - its own error (and line) is the finding
            entry["error"] = f"{type(exc).__name__}: {exc}"
            entry["where"] = _raising_line(exc)
        found[case] = entry
    return found


def verdicts(found: dict) -> list[Verdict]:
    """One verdict per Megatron-Bridge Qwen3.5 bridge, each naming that bridge."""
    out = []
    for case, entry in found.items():
        metrics = {"bridge": entry["bridge"], "error": entry["error"], "where": entry["where"]}
        if entry["importable"]:
            out.append(Verdict(f"{PREFIX}{case}", Status.SKIP, f"{entry['bridge']} imports here; bridge-parity "
                               "does not yet drive Megatron-Bridge's own model provider, so no comparison ran",
                               metrics=metrics))
        else:
            where = f" at {entry['where']}" if entry["where"] else ""
            out.append(Verdict(f"{PREFIX}{case}", Status.SKIP, f"{entry['bridge']} cannot be imported on this "
                               f"runner: {entry['error']}{where}", metrics=metrics))
    return out


def summary(found: dict) -> str:
    """'; Megatron-Bridge's own bridges: ...' for the check's message ('' where it is not installed)."""
    if not found:
        return ""
    failed = {e["error"] + (f" at {e['where']}" if e["where"] else "") for e in found.values() if not e["importable"]}
    if not failed:
        return f"; Megatron-Bridge's Qwen3.5 bridges import ({', '.join(e['bridge'] for e in found.values())})"
    return f"; Megatron-Bridge's Qwen3.5 bridges cannot be imported on this runner: {'; '.join(sorted(failed))}"


def attributed(verdict: Verdict) -> Verdict:
    """The verdict itself, or a failure where one named for Megatron-Bridge came from another bridge."""
    bridge = str(verdict.metrics.get("bridge") or "")
    if verdict.name.startswith(PREFIX) and not bridge.startswith(DISTRIBUTION):
        return Verdict(verdict.name, Status.FAIL, f"named for Megatron-Bridge but produced by {bridge or 'no bridge'}"
                       f" (its result was: {verdict.message})", metrics=verdict.metrics)
    return verdict
