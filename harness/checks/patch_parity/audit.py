"""Patch-target audit: every symbol a patch targets exists in the installed package.

A renamed or removed target of an installed package is a FAIL that names it, so a patch is
never silently skipped. Packages that must not be imported here (torch_npu without CANN,
CUDA-only vLLM) are read statically. A target of a package that is not installed is a SKIP,
and a patch whose version range excludes the installed release is reported as not applicable.
"""
from __future__ import annotations

import importlib.util
import sys

from harness.results.records import Status, Verdict
from trainers.patches.base import Patch, TargetMissing, exists_statically, installed_version, resolve, split_target

# Importing these has side effects or fails without the accelerator stack: read their sources.
STATIC_ONLY = ("torch_npu", "vllm", "vllm_ascend")


def _read_statically(module_name: str) -> bool:
    top = module_name.split(".")[0]
    return top in STATIC_ONLY and top not in sys.modules


def _package_present(module_name: str) -> bool:
    try:
        return importlib.util.find_spec(module_name.split(".")[0]) is not None
    except (ImportError, ValueError):
        return False


def audit_patch(patch: Patch) -> Verdict:
    name = f"target-audit:{patch.name}"
    metrics = {"target": patch.target, "distribution": patch.distribution, "versions": str(patch.versions)}
    version = installed_version(patch.distribution)
    metrics["installed"] = str(version) if version else None
    module_name, _ = split_target(patch.target)
    if version is None or not _package_present(module_name):
        return Verdict(name, Status.SKIP, f"{patch.distribution} is not installed: {patch.target} not audited", metrics)
    if not patch.versions.contains(version, prereleases=True):
        return Verdict(name, Status.SKIP, f"not applicable to {patch.distribution} {version} "
                       f"(applies to {patch.versions})", metrics)
    if _read_statically(module_name):
        metrics["how"] = "static"
        found, reason = exists_statically(patch.target)
    else:
        metrics["how"] = "import"
        try:
            resolve(patch.target)
            found, reason = True, f"{patch.target}: found"
        except TargetMissing as exc:
            found, reason = False, str(exc)
    if not found:
        return Verdict(name, Status.FAIL, f"target {patch.target} missing in {patch.distribution} {version}: {reason}",
                       metrics)
    return Verdict(name, Status.PASS, f"{patch.target} exists in {patch.distribution} {version}", metrics)


def npu_symbol_verdict() -> list[Verdict]:
    """The torch_npu fused ops the NPU op table calls (C++ exports, listed in torch_npu's sources)."""
    from trainers.patches import npu_op_table as table  # a project module: missing is an error, never a skip

    targets = table.npu_symbol_targets()
    metrics = {"targets": targets, "installed": str(installed_version("torch_npu") or "") or None}
    try:
        missing = table.missing_npu_symbols()
    except FileNotFoundError as exc:
        return [Verdict("target-audit:torch_npu-ops", Status.SKIP, f"torch_npu is not installed: {exc}", metrics)]
    metrics["missing"] = missing
    if missing:
        return [Verdict("target-audit:torch_npu-ops", Status.FAIL,
                        f"torch_npu {metrics['installed']} does not export {', '.join(missing)}", metrics)]
    return [Verdict("target-audit:torch_npu-ops", Status.PASS, f"all {len(targets)} torch_npu ops exported", metrics)]


def audit_verdicts(patches: list[Patch]) -> list[Verdict]:
    return [audit_patch(p) for p in patches] + npu_symbol_verdict()
