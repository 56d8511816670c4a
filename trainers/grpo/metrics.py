"""Per-step metrics as JSON lines: one object per line, flushed as it is written, so a run that
dies still leaves every finished step on disk."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

STEP_KEYS = ("step", "reward_mean", "reward_std", "kl", "entropy", "clip_fraction", "grad_norm",
             "rollout_seconds", "update_seconds", "loss")


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN/inf; keep them visible as strings
    return value


class MetricsWriter:
    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text("", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            return
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps({k: _plain(v) for k, v in record.items()}) + "\n")
            handle.flush()


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """Every complete line of a metrics file (a torn last line is dropped)."""
    records = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records
