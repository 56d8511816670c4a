"""Where a check result of an accelerator cell came from when no runner has run it: the CPU pre-flight on the
cell's exact wheels (harness/preflight/cpuside.py) marks each check it wrote, and the report shows the mark.

    metrics["cpu_side"] = RAN       the check ran on CPU in the cell's own environment (device forced to cpu)
                          PART      only its part that needs no accelerator ran (patch-parity's target audit)
                          AWAITS    it needs an accelerator: not run, it awaits a runner

Results live in DIR/cpu-side/cells/<cell-id>.json, beside the runner's DIR/cells/, which replace them.
"""
from __future__ import annotations

FOLDER = "cpu-side"
KEY = "cpu_side"
RAN, PART, AWAITS = "ran", "part", "awaits"
# The words every report format shows after such an entry.
LABELS = {RAN: "from CPU pre-flight", PART: "part from CPU pre-flight, the rest awaits a runner",
          AWAITS: "awaits a runner"}


def origin(metrics: dict) -> str | None:
    """The report's words for a check result's CPU-side mark; None for a result a runner (or nobody) made."""
    mark = metrics.get(KEY) if isinstance(metrics, dict) else None
    return LABELS.get(mark) if isinstance(mark, str) else None
