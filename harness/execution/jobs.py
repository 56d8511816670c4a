"""`--jobs auto`: how many cells run at once, from the cores this process may use and the memory the
kernel says is available, and what the selected cells cost.

A cell's cost is its heaviest moment, measured on the development machine (2 cores, one thread per
process; README, "How a cell runs its checks"): an FSDP cell is one check process at a time plus a short
2-rank torchrun; a Megatron cell's bridge-parity runs five processes at once (TP1, and TP2 and EP2 with
two ranks each); a vLLM or fully-async cell runs an engine or a producer beside the trainer. The run
takes the heaviest selected cell's cost, so no mix of cells can oversubscribe the cores or the memory.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from harness.matrix.axes import VLLM_AXES

MEMINFO = Path("/proc/meminfo")


@dataclass(frozen=True)
class CellCost:
    cores: int
    memory_mb: int
    kind: str


FSDP = CellCost(1, 3072, "FSDP")
HEAVY = {"megatron": CellCost(2, 4096, "Megatron"), "vllm": CellCost(2, 6144, "vLLM"),
         "fully-async": CellCost(2, 4096, "fully-async")}


def cell_cost(cell) -> CellCost:
    axes = cell.axes
    if any(axes.get(axis) for axis in VLLM_AXES):
        return HEAVY["vllm"]
    if axes.get("mode", "sync") != "sync":
        return HEAVY["fully-async"]
    return HEAVY["megatron"] if axes.get("backend") == "megatron" else FSDP


def usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def available_memory_mb(meminfo: Path = MEMINFO) -> int | None:
    """MemAvailable from /proc/meminfo in MiB; None where there is no such file or line."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def auto_jobs(cells, cores: int | None = None, memory_mb: int | None = None,
              meminfo: Path = MEMINFO) -> tuple[int, str]:
    """(cells at once, why in one line); at least 1, at most the number of cells."""
    cores = usable_cores() if cores is None else cores
    memory_mb = available_memory_mb(meminfo) if memory_mb is None else memory_mb
    costs = [cell_cost(c) for c in cells] or [FSDP]
    heaviest = max(costs, key=lambda c: (c.cores, c.memory_mb))
    by_cores = cores // heaviest.cores
    by_memory = by_cores if memory_mb is None else memory_mb // max(c.memory_mb for c in costs)
    jobs = max(1, min(len(cells) or 1, by_cores, by_memory))
    memory = "memory unknown" if memory_mb is None else f"{memory_mb / 1024:.1f} GiB available"
    why = (f"{cores} usable cores, {memory}; the heaviest cell ({heaviest.kind}) needs {heaviest.cores} "
           f"core{'s' if heaviest.cores > 1 else ''} and {max(c.memory_mb for c in costs) / 1024:.1f} GiB")
    return jobs, why
