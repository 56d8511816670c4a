"""Cells at once: how many (`--jobs auto`, from the cores this process may use and the memory the kernel
says is available, and what the selected cells cost), what each holds while it runs, in which order they
start, and the progress line that shows them.

A cell's cost is what it keeps busy, measured on the development machine (2 cores, one thread per process;
docs/running.md, "How a cell runs its checks"). Every kind counts 1 core: a cell's multi-rank moments (an FSDP cell's
2-rank trainer, a Megatron cell's TP2 and EP2 jobs and trainer, a fully-async cell's producer beside the
trainer) are short or spend part of their time waiting on each other, so a cell alone leaves most of a second
core idle. Measured: a Megatron cell alone 36 s wall, 51 s of CPU; two side by side 58 s, against 72 s one
after the other; a fully-async cell beside an FSDP cell 25 s, against 43 s one after the other. The heavier
kinds count more memory (4 GiB: megatron-core's ranks, a vLLM engine's model and its 1 GiB KV cache; vLLM
cells run their engines inside their own check processes: trainers.rollout, checks.vllm_engine). Up to as
many cells as the lightest cost allows run at once, and each holds its own cost of a shared budget while it
runs (`Budget`), first come first served, so no mix of cells oversubscribes the cores or the memory. On an
accelerator, where none of this was measured, Megatron and fully-async cells count an estimate of 2 cores
(`ON_ACCELERATOR`). Cells start in `start_order`: those that need the most cores first, then the longest, except
that a cell waits behind one of its compile group (`StartQueue`) while another cell can start instead.

On an accelerator a cell also holds devices: `DEVICES_PER_CELL`, the most ranks one of its checks starts at
once. The budget hands it that many of the runner's visible devices (envs/devices.visible_devices), and the
cell's checks see only those (CUDA_VISIBLE_DEVICES / ASCEND_RT_VISIBLE_DEVICES), so two cells never share a
device, and an 8-device runner runs four cells at once where its cores and memory allow. An explicit
`--jobs N` shares the devices the same way (`plan`): N decides the cores and memory, not the devices.

Progress: a bar on a terminal, plain lines in CI and in logs. Cells may run in several threads at once: every
event is written as one whole string under one lock, so lines never interleave; a plain line says one thing
about one cell. On a terminal the bar (redrawn in place) names every cell running now, and each finished cell
gets a line of its own above it.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter, deque
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

from harness.matrix.axes import VLLM_AXES

MEMINFO = Path("/proc/meminfo")
BAR_WIDTH = 24


@dataclass(frozen=True)
class CellCost:
    cores: int
    memory_mb: int
    kind: str
    seconds: int  # a cold cell of the default CPU matrix on the development machine (the matrix bench), for the order
    devices: int = 0  # accelerator devices held while it runs (none on cpu)
    device_type: str = "cpu"


# The most ranks a check starts at once on an accelerator: grpo-convergence's and offload-regression's two
# FSDP ranks, Megatron's TP2 / EP2 jobs, a fully-async trainer beside its rollout producer.
DEVICES_PER_CELL = 2


FSDP = CellCost(1, 3072, "FSDP", 40)
# A verl row runs the FSDP checks with verl's own code beside them, and verl's test suite: 64 to 102 s cold in
# the matrix bench of 2026-11-29, so it starts before the Megatron and FSDP cells instead of ending the run alone.
HEAVY = {"megatron": CellCost(1, 4096, "Megatron", 60), "vllm": CellCost(1, 4096, "vLLM", 130),
         "fully-async": CellCost(1, 4096, "fully-async", 35), "verl": CellCost(1, 3072, "verl", 75)}


# Only the CPU figures were measured: on an accelerator a Megatron or fully-async cell counts an estimate of 2 cores
# (two ranks at once, or a producer beside the trainer, each driving its own device).
ON_ACCELERATOR = {"megatron": CellCost(2, 4096, "Megatron", 60), "fully-async": CellCost(2, 4096, "fully-async", 35)}


def cell_cost(cell) -> CellCost:
    axes = cell.axes
    if any(axes.get(axis) for axis in VLLM_AXES):
        kind = "vllm"
    elif axes.get("mode", "sync") != "sync":
        kind = "fully-async"
    elif axes.get("verl"):
        kind = "verl"
    else:
        kind = "megatron" if axes.get("backend") == "megatron" else "fsdp"
    device = axes.get("device", "cpu")
    cost = ON_ACCELERATOR[kind] if device != "cpu" and kind in ON_ACCELERATOR else HEAVY.get(kind, FSDP)
    return cost if device == "cpu" else replace(cost, devices=DEVICES_PER_CELL, device_type=device)


def start_order(cells: list) -> list:
    """The order to start cells in when several run at once: those that need every core first (each runs alone;
    started while nothing runs, no core waits idle for them), then the longest first, so that the run does not end
    on one long cell while the other cores idle (longest processing time first). Ties keep the matrix's order."""
    return sorted(cells, key=lambda cell: (-cell_cost(cell).cores, -cell_cost(cell).seconds))


def compile_group(cell) -> tuple[str | None, str | None]:
    """The cells whose check servers compile the same bytecode at their first imports: one Python and one torch
    (torch and what the server imports with it; envs/bytecode.py shares it between environments once kept)."""
    return cell.axes.get("python"), cell.axes.get("torch")


class StartQueue:
    """Which cell a free worker starts next: the first in `start_order`, unless a cell of its compile group is
    still importing for the group's first time. Two such cells side by side each compiled torch's and
    transformers' bytecode, one core doing again what the other was doing (10 to 14 s of a cold CPU matrix run,
    twice), because the shared bytecode is kept only once a server has imported (envs/bytecode.py). So that
    cell waits, and the first cell of a group that is free starts instead; where every cell left waits on a
    group, the first starts anyway: no core idles for this. A group is free once one of its cells has imported
    (`imported`), or when the cells importing it end without (`ended`: all reused, not installed)."""

    def __init__(self, cells: list):
        self._waiting = start_order(cells)
        self._lock = threading.Lock()
        self._importing: Counter = Counter()  # group -> its cells started before any of the group imported
        self._warm: set = set()
        self._closed = False

    def _free(self, group) -> bool:
        return group in self._warm or not self._importing[group]

    def take(self):
        """The cell to start now; None when none is left or the run stops (`close`)."""
        with self._lock:
            if self._closed or not self._waiting:
                return None
            cell = next((c for c in self._waiting if self._free(compile_group(c))), self._waiting[0])
            self._waiting.remove(cell)
            if compile_group(cell) not in self._warm:
                self._importing[compile_group(cell)] += 1
            return cell

    def imported(self, cell) -> None:
        """`cell`'s server has imported and its bytecode is kept: its group's cells start freely from now."""
        with self._lock:
            self._warm.add(compile_group(cell))
            self._importing.pop(compile_group(cell), None)

    def ended(self, cell) -> None:
        with self._lock:
            group = compile_group(cell)
            if group not in self._warm and self._importing[group]:
                self._importing[group] -= 1

    def close(self) -> None:
        """No cell starts from now (the run was interrupted or a cell raised)."""
        with self._lock:
            self._closed = True


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


def auto_jobs(cells, cores: int | None = None, memory_mb: int | None = None, meminfo: Path = MEMINFO,
              devices: dict[str, list[str] | None] | None = None) -> tuple[int, str]:
    """(cells at once, why in one line); at least 1, at most the number of cells. Run them under a
    `Budget` of the same cores, memory and devices, so the heavier cells wait for their share. `devices`: the
    visible devices per accelerator type (None: not asked; a type's None: unknown, shared without a device budget)."""
    cores = usable_cores() if cores is None else cores
    memory_mb = available_memory_mb(meminfo) if memory_mb is None else memory_mb
    costs = [cell_cost(c) for c in cells] or [FSDP]
    lightest = min(costs, key=lambda c: (c.cores, c.memory_mb))
    by_cores = cores // lightest.cores
    by_memory = by_cores if memory_mb is None else memory_mb // lightest.memory_mb
    jobs = max(1, min(len(cells) or 1, by_cores, by_memory))
    memory = "memory unknown" if memory_mb is None else f"{memory_mb / 1024:.1f} GiB available"
    held = {}
    for device in sorted({c.device_type for c in costs if c.devices}):
        ids = (devices or {}).get(device)
        held[device] = f"{device} devices unknown (shared)" if ids is None else f"{len(ids)} {device} devices visible"
        if ids:
            jobs = max(1, min(jobs, len(ids) // DEVICES_PER_CELL))
    kinds = {c.kind: c for c in costs}
    needs = ", ".join(f"{k} {c.cores} core{'s' if c.cores > 1 else ''} {c.memory_mb / 1024:.1f} GiB"
                      + (f" {c.devices} {c.device_type} devices" if c.devices else "")
                      for k, c in sorted(kinds.items()))
    visible = "".join(f", {text}" for text in held.values())
    why = f"{cores} usable cores, {memory}{visible}; each cell holds what it needs while it runs: {needs}"
    return jobs, why


class Budget:
    """Cores, memory and accelerator devices shared by the cells of a run. A cell holds its cost while it
    runs; cells are served in the order they ask, so a 2-core cell is not starved by 1-core cells behind it.
    A cost above the whole budget is cut to it: that cell runs alone rather than never. `hold` yields the ids
    of the devices the cell holds ([] on cpu, or when the runner's devices are unknown)."""

    def __init__(self, cores: int, memory_mb: int | None, stopping: threading.Event | None = None,
                 devices: dict[str, list[str] | None] | None = None):
        self.cores, self.memory_mb = max(1, cores), memory_mb
        self._free_cores, self._free_mb = self.cores, memory_mb
        self._free_devices = {device: list(ids) for device, ids in (devices or {}).items() if ids}
        self._queue: deque[object] = deque()
        self._changed = threading.Condition()
        self._stopping = stopping or threading.Event()
        self._all_devices = {device: len(ids) for device, ids in self._free_devices.items()}

    def _fits(self, cores: int, memory: int, device: str, count: int) -> bool:
        return (self._free_cores >= cores and (self._free_mb is None or self._free_mb >= memory)
                and len(self._free_devices.get(device, ())) >= count)

    def cores_for(self, cost: CellCost) -> int:
        """The cores a cell of this cost holds while it runs (its checks start no more workers than that)."""
        return min(cost.cores, self.cores)

    @contextmanager
    def hold(self, cost: CellCost):
        cores = self.cores_for(cost)
        memory = 0 if self.memory_mb is None else min(cost.memory_mb, self.memory_mb)
        count = min(cost.devices, self._all_devices.get(cost.device_type, 0))
        ticket = object()
        with self._changed:
            self._queue.append(ticket)
            try:
                while not (self._queue[0] is ticket and self._fits(cores, memory, cost.device_type, count)):
                    if self._stopping.is_set():  # the run is being stopped: never start another cell
                        raise InterruptedError("the run is stopping")
                    self._changed.wait(timeout=0.5)
            finally:
                self._queue.remove(ticket)
                self._changed.notify_all()
            self._free_cores -= cores
            if self._free_mb is not None:
                self._free_mb -= memory
            held = self._free_devices[cost.device_type][:count] if count else []
            if count:
                del self._free_devices[cost.device_type][:count]
        try:
            yield held
        finally:
            with self._changed:
                self._free_cores += cores
                if self._free_mb is not None:
                    self._free_mb += memory
                if count:
                    self._free_devices[cost.device_type].extend(held)
                self._changed.notify_all()


def plan(cells, jobs: int | None, devices: dict[str, list[str] | None],
         stopping: threading.Event | None = None) -> tuple[int, Budget | None, str | None]:
    """(cells at once, the budget they share or None, the line that says why or None) for `--jobs`.

    auto (None): from cores, memory and devices (`auto_jobs`). A number is the user's call on cores and memory,
    but on an accelerator the cells still share the visible devices through a budget of devices alone, so two
    cells never share a device whatever the number: with fewer devices than the number asks, cells wait for
    theirs. Where a type's devices are unknown they are shared, without a device budget."""
    if jobs is None:
        jobs, why = auto_jobs(cells, devices=devices)
        budget = Budget(usable_cores(), available_memory_mb(), stopping, devices=devices)
        return jobs, budget, f"jobs: up to {jobs} cells at once ({why})"
    known = {device: ids for device, ids in devices.items() if ids}
    if not known:
        return jobs, None, None
    heaviest = max((cell_cost(cell).cores for cell in cells), default=1)  # cores never the limit here
    visible = ", ".join(f"{len(ids)} {device}" for device, ids in sorted(known.items()))
    why = f"jobs: up to {jobs} cells at once, each holding {DEVICES_PER_CELL} of the visible devices ({visible})"
    return jobs, Budget(jobs * heaviest, None, stopping, devices=known), why


class Progress:
    """What a run shows of its cells: started (running or reused) and finished, with their statuses."""

    def __init__(self, total: int, stream=None, interactive: bool | None = None):
        self.total, self.done = total, 0
        self.stream = stream or sys.stderr
        if interactive is None:
            interactive = self.stream.isatty() and not os.environ.get("CI")
        self.interactive = interactive
        self.start = time.monotonic()
        self.lock = threading.Lock()
        self.running: dict[str, float] = {}  # cell id -> when it started

    def _bar(self, verb: str = "running") -> str:
        filled = int(BAR_WIDTH * self.done / max(self.total, 1))
        cells = ", ".join(self.running) or "-"
        return f"[{'#' * filled}{'.' * (BAR_WIDTH - filled)}] {self.done}/{self.total} {verb} {cells}"

    def _write(self, text: str) -> None:
        self.stream.write(text)  # one write per event: a thread never sees half of another's line
        self.stream.flush()

    def started(self, cell_id: str, reused: bool = False) -> None:
        with self.lock:
            self.running[cell_id] = time.monotonic()
            if self.interactive:
                self._write(f"\r\033[K{self._bar('reusing' if reused else 'running')}")
            elif not reused:
                self._write(f"[{self.done}/{self.total} done] {cell_id}: running\n")

    def finished(self, cell_id: str, statuses, seconds: float | None = None) -> None:
        """`seconds`: how long the cell itself took, where it ran elsewhere (a Ray task that waited for a node
        before it started); else the time since `started`."""
        with self.lock:
            self.done += 1
            began = self.running.pop(cell_id, None)
            counts = Counter(s.value for s in statuses)
            summary = ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no checks"
            now = time.monotonic()
            if seconds is None and began is not None:
                seconds = now - began
            took = f"cell {seconds:.0f} s, " if seconds is not None else ""
            line = f"[{self.done}/{self.total}] {cell_id}: {summary} ({took}{now - self.start:.0f} s elapsed)"
            if self.interactive:
                self._write(f"\r\033[K{line}\n" + (self._bar() if self.running else ""))
            else:
                self._write(f"{line}\n")
