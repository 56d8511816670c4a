"""The order of what the report shows: versions, columns (backend, model, check), and which stack is newer.

Three kinds of "newer", each for its own question:

    version_key      a row's values: valid versions numerically (5.9.0 < 5.10.0), then other strings, then
                     absent values
    newness_key      the pins box's choice among passing stacks: the engine packages first (vLLM, then
                     megatron-core, Megatron-Bridge and mbridge), then transformers, torch and tensordict, then
                     Python; an absent package is older than any version
    known_good_key   last known good: transformers first, then torch, vLLM, tensordict, ...; a value that is
                     no version counts as 0
"""
from __future__ import annotations

from packaging.version import InvalidVersion, Version

from harness.checks import CHECKS
from harness.matrix.axes import PACKAGE_AXES, PYTHON_AXIS, VLLM_AXES

BACKEND_ORDER = ("fsdp", "megatron")
MODEL_ORDER = ("text", "vl", "moe")
NEWEST_FIRST = (*VLLM_AXES, "megatron_core", "megatron_bridge", "mbridge", "transformers", "torch", "torch_npu",
                "tensordict", PYTHON_AXIS)
KNOWN_GOOD_ORDER = ("transformers", "torch", "vllm",
                    *(a for a in PACKAGE_AXES if a not in ("transformers", "torch", "vllm")))

_VERSION_KEYS: dict[str, tuple] = {}


def version_key(value: str) -> tuple:
    """Sort key: valid versions numerically (5.9.0 < 5.10.0), then other strings, then absent values."""
    key = _VERSION_KEYS.get(value)
    if key is None:
        if len(_VERSION_KEYS) > 100_000:  # hostile inputs must not grow the cache without bound
            _VERSION_KEYS.clear()
        if not value:
            key = (2, "")
        else:
            try:
                key = (0, Version(value), value)
            except InvalidVersion:
                key = (1, value)
        _VERSION_KEYS[value] = key
    return key


def _order(value: str, known: tuple[str, ...]) -> tuple[int, str]:
    return (known.index(value), "") if value in known else (len(known), value)


def column_order(keys) -> list[tuple[str, str, str]]:
    """(backend, model, check) keys sorted: fsdp before megatron, text before vl before moe, checks in the
    registry's order; unknown names after the known ones, by name."""
    check_order = tuple(CHECKS)
    return sorted(keys, key=lambda k: (_order(k[0], BACKEND_ORDER), _order(k[1], MODEL_ORDER),
                                       _order(k[2], check_order)))


def check_order(names) -> list[str]:
    """Check names in the registry's order (unknown names last, by name)."""
    order = list(CHECKS)
    return sorted(names, key=lambda n: (order.index(n), "") if n in order else (len(order), n))


def backend_model_key(backend: str, model: str) -> tuple:
    return (BACKEND_ORDER.index(backend) if backend in BACKEND_ORDER else len(BACKEND_ORDER), backend,
            MODEL_ORDER.index(model) if model in MODEL_ORDER else len(MODEL_ORDER), model)


def _version(value: str) -> tuple:
    if not value:
        return (0,)
    try:
        return (2, Version(value))
    except InvalidVersion:
        return (1, value)


def newness_key(axes: dict[str, str]) -> tuple:
    """A stack's versions, newest first by NEWEST_FIRST (the pins box's order)."""
    return tuple(_version(axes.get(axis, "")) for axis in NEWEST_FIRST)


def known_good_key(axes: dict[str, str]) -> tuple:
    """A stack's versions by KNOWN_GOOD_ORDER (last known good's order)."""
    parts = []
    for axis in KNOWN_GOOD_ORDER:
        try:
            parts.append(Version(axes[axis]) if axis in axes else Version("0"))
        except InvalidVersion:
            parts.append(Version("0"))
    return tuple(parts)
