"""An offline evidence run's GRPO-against-TRL record as a group of bench/figures.json, and the figures file read
before anything is merged into it (`python -m harness.benchmarks --from-evidence RESULTS`).

Nothing a machine did not measure goes into the figures file: the record must name the accelerator it ran on
(a CPU dry run is refused however `device` is spelled, and so is a record that names none), its figures must
say the same device, and every figure must be a finite number of the right type, the ones the measured page
shows above 0. A figures file that does not parse is refused and left as it is: a merge would replace it with
the one group. Every refusal is an InputError (exit 2) naming the file and the field.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from harness.errors import InputError

EVIDENCE_KEY = "grpo_vs_trl_evidence"  # figures.json's group for an offline evidence run's GRPO against TRL
RECORD = Path("benchmarks") / "grpo-vs-trl.json"  # where the box writes it (harness.offline.benchmarks)
ACCELERATORS = ("cuda", "npu")  # the devices whose figures the GPU row may show
STATUSES = ("measured", "not run", "failed")
# The figures the measured page shows of the group (harness/docsgen/figures.py): each a number above 0 or null.
SHOWN = ("summary.seconds_to_threshold.ours", "summary.seconds_to_threshold.trl", "summary.speedup_to_threshold",
         "summary.steps_per_second.ours", "summary.steps_per_second.trl")


def read_json(path: Path, what: str) -> Any:
    """The JSON in `path`; InputError naming it when it cannot be read, is not UTF-8 or is not JSON (with NaN
    and Infinity, which Python writes but JSON does not have, refused as not JSON)."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
        return json.loads(text, parse_constant=_no_constant)
    except OSError as exc:
        raise InputError(f"{path}: cannot read {what} ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: {what} is not UTF-8 text (byte {exc.start})") from None
    except ValueError as exc:  # json.JSONDecodeError, and _no_constant's
        raise InputError(f"{path}: {what} is not JSON ({str(exc).splitlines()[0][:200]})") from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a JSON number")


def figures_file(path: Path) -> dict:
    """The figures already in the file, to merge into: {} when there is none yet; InputError (the file left as it
    is) when it is not a JSON object."""
    if not Path(path).exists():
        return {}
    figures = read_json(path, "the figures file")
    if not isinstance(figures, dict):
        raise InputError(f"{path}: the figures file is a JSON {type(figures).__name__}, not an object of groups; "
                         "fix or move it (it was left as it is)")
    return figures


def _get(data: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        if not isinstance(data, dict):
            return None
        data = data.get(part)
    return data


def _non_finite(data: Any, where: str) -> str | None:
    """The first place in `data` holding a number that is not finite, else None."""
    if isinstance(data, float) and not math.isfinite(data):
        return where
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    return next((found for key, value in items if (found := _non_finite(value, f"{where}.{key}"))), None)


def _device(record: dict, figures: dict, where: str) -> str:
    """The accelerator the record names, agreeing with its figures' device."""
    device = record.get("device")
    if not isinstance(device, str) or device.strip().lower() not in ACCELERATORS:
        said = "names no device" if device is None else f"was measured on {device!r}"
        raise InputError(f"{where}: the record {said}, not on an accelerator ({', '.join(ACCELERATORS)}); a CPU "
                         "dry run of the evidence run does not go into the GPU row")
    device = device.strip().lower()
    own = figures.get("device")
    if own is None:
        return device
    if not isinstance(own, dict):
        raise InputError(f"{where}: figures.device: expected an object naming the device, got {own!r:.80}")
    kind = own.get("type")
    if not isinstance(kind, str) or kind.strip().lower() != device:
        raise InputError(f"{where}: figures.device.type is {kind!r:.40}, the record says {device}: figures from "
                         "another device than the record names")
    names = own.get("devices")
    if names is not None and (not isinstance(names, list) or not all(isinstance(n, str) for n in names)):
        raise InputError(f"{where}: figures.device.devices: expected a list of device names, got {names!r:.80}")
    for key in ("driver", "torch", "cpu"):
        if own.get(key) is not None and not isinstance(own[key], str):
            raise InputError(f"{where}: figures.device.{key}: expected text, got {own[key]!r:.80}")
    return device


def _checked(record: Any, where: str) -> tuple[dict, dict]:
    """(record, figures) of a record of the right shape; InputError naming the field otherwise."""
    if not isinstance(record, dict):
        raise InputError(f"{where}: expected a JSON object (a benchmark record), got a {type(record).__name__}")
    status = record.get("status")
    if status not in STATUSES:
        raise InputError(f"{where}: status: expected one of {', '.join(STATUSES)}, got {status!r:.40}")
    figures = record.get("figures", {} if status != "measured" else None)
    if not isinstance(figures, dict):
        raise InputError(f"{where}: figures: expected an object of figures, got {figures!r:.80}")
    for key in ("reason", "date"):
        if record.get(key) is not None and not isinstance(record[key], str):
            raise InputError(f"{where}: {key}: expected text, got {record[key]!r:.80}")
    for key, what in (("date", "a date"), ("harness_revision", "a git revision")):
        if figures.get(key) is not None and not isinstance(figures[key], str):
            raise InputError(f"{where}: figures.{key}: expected {what} as text, got {figures[key]!r:.40}")
    bad = _non_finite(record, "record")
    if bad:
        raise InputError(f"{where}: {bad.removeprefix('record.')}: not a finite number")
    for dotted in SHOWN:
        value = _get(figures, dotted)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise InputError(f"{where}: figures.{dotted}: expected a number above 0 (or null), got {value!r:.40}")
    return record, figures


def evidence_figures(results: Path) -> dict:
    """An offline evidence run's GRPO-against-TRL record (RESULTS/benchmarks/grpo-vs-trl.json, written on the box)
    as a figures.json group: its figures with the date, the machine (GPU, driver, torch) and the revision (the
    box's; null when the box could not say, never this checkout's) it was measured with, or the reason it did not
    run. InputError (exit 2) naming the file and the field for anything else."""
    path = Path(results) / RECORD
    where = f"--from-evidence {results}: {RECORD}"
    if not path.is_file():
        raise InputError(f"{where}: no benchmark record (the evidence run writes it on the box)")
    record, figures = _checked(read_json(path, "the benchmark record"), where)
    _device(record, figures, where)
    device = figures.get("device") or {}
    machine = ", ".join(part for part in (", ".join(device.get("devices") or []) or device.get("cpu"),
                                          device.get("driver") and f"driver {device['driver']}",
                                          device.get("torch") and f"torch {device['torch']}") if part)
    return {**figures, "status": record["status"], "reason": record.get("reason"),
            "date": figures.get("date", record.get("date")), "machine": machine or "unknown",
            "harness_revision": figures.get("harness_revision"),
            "source": f"{path.parent.parent.name}/{RECORD}"}
