"""Last known good: for each trainer (backend, model) and check, the newest version combination
that passed, with its date and lock, carried across runs in `history.json` (written atomically).

"Newest" compares the package versions axis by axis (transformers first, then torch, vLLM,
tensordict, ...), so a pass on newer pins replaces an older one, and a later failure of the newer
pins does not erase what is known to have worked.
"""
from __future__ import annotations

import json
from pathlib import Path

from packaging.version import InvalidVersion, Version

from harness.matrix.axes import PACKAGE_AXES
from harness.results.records import CellResult, Status, write_json_atomic

HISTORY_VERSION = 1
ORDER = ("transformers", "torch", "vllm", *(a for a in PACKAGE_AXES if a not in ("transformers", "torch", "vllm")))
GOOD = (Status.PASS, Status.AFFECTED)  # affected: the trainer works; an upstream bug is recorded beside it


def _key(axes: dict[str, str]) -> tuple:
    parts = []
    for axis in ORDER:
        try:
            parts.append(Version(axes[axis]) if axis in axes else Version("0"))
        except InvalidVersion:
            parts.append(Version("0"))
    return tuple(parts)


def load(path: Path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {"history_version": HISTORY_VERSION, "last_known_good": {}}
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: unreadable history ({exc}); move it away to start a new one") from None
    if not isinstance(data, dict) or data.get("history_version") != HISTORY_VERSION:
        found = data.get("history_version") if isinstance(data, dict) else None
        raise ValueError(f"{path}: history_version {found!r}, expected {HISTORY_VERSION}")
    return data


def update(report_dir: Path, cells: list[CellResult]) -> dict:
    """Merge this run's passes into report_dir/history.json and return the history."""
    path = Path(report_dir) / "history.json"
    data = load(path)
    known: dict = data["last_known_good"]
    for cell in cells:
        lock_text = ""
        if cell.lock and (Path(report_dir) / cell.lock).is_file():
            lock_text = (Path(report_dir) / cell.lock).read_text(encoding="utf-8")
        for check in cell.checks:
            if check.status not in GOOD or check.flaky:
                continue
            entry_key = f"{cell.axes.get('backend', '?')}/{cell.axes.get('model', '?')}/{check.check}"
            versions = {a: cell.axes[a] for a in ORDER if a in cell.axes}
            if "image" in cell.axes:
                versions["image"] = cell.axes["image"]
            old = known.get(entry_key)
            newer = old is None or _key(versions) > _key(old["versions"]) or (
                _key(versions) == _key(old["versions"]) and cell.finished >= old.get("date", ""))
            if newer:
                known[entry_key] = {"versions": versions, "cell": cell.cell_id, "matrix": cell.matrix,
                                    "date": cell.finished, "status": check.status.value, "lock": lock_text}
    write_json_atomic(path, data)
    return data
