"""The "use these pins" answer: per backend, without and with vLLM, the newest stack that passes every check.

A candidate is a grid line (row_verdicts.lines: one version combination on one backend and model) whose
verdict is `works` or `works with the trainer's patches`: no check failed, errored, crashed, timed out or is a
declared known failure, and at least one ran. "Newest" is order.newness_key: the engine packages first (vLLM,
then megatron-core, Megatron-Bridge and mbridge), then transformers, torch and tensordict, then Python; an
absent package is older than any version. The box carries the exact pins as a command to copy: a virtual
environment on the line's Python (when the matrix pinned one), then one install of every pinned package.
The first screen of report.html draws the boxes (html/first_screen.py), report.md lists them (markdown.py).
"""
from __future__ import annotations

import shlex
from collections import Counter
from dataclasses import dataclass, field

from harness.matrix.axes import PACKAGE_AXES, PYTHON_AXIS, VLLM_AXES

from .model import Report
from .order import newness_key
from .row_verdicts import KIND_LABELS, KINDS, Line, lines

PASSING_KINDS = ("works", "patched")
BACKEND_TITLES = {"fsdp": "FSDP", "megatron": "Megatron"}


@dataclass(slots=True)
class PinsBox:
    title: str
    line: Line | None  # None: no stack of this kind passes every check
    tested: int  # lines of this kind in the report
    pins: list[tuple[str, str]]  # (distribution, version), in the report's axis order
    python: str
    other: list[tuple[str, str]]  # the line's other axes (device, mode, image): not installed, but part of it
    verdicts: list[tuple[str, int]] = field(default_factory=list)  # (verdict label, lines), the report's order
    passing: int = 0  # lines of this kind that pass every check (works, or works with the trainer's patches)

    @property
    def chosen(self) -> str:
        """Which of the tested stacks the box holds, each count saying what it counts: 'the one of the 3 tested
        stacks that passes every check', 'the newest of the 2 stacks that pass every check (of 3 tested)'."""
        patches = " with the trainer's patches" if self.line is not None and self.line.verdict.kind != "works" \
            else ""
        if self.tested == 1:
            return f"the one tested stack, which passes every check{patches}"
        if self.passing == 1:
            return f"the one of the {self.tested} tested stacks that passes every check{patches}"
        if self.passing == self.tested:
            return f"the newest of the {self.tested} tested stacks, which all pass every check" + (
                f"; this one{patches}" if patches else "")
        return (f"the newest of the {self.passing} stacks that pass every check (of {self.tested} tested)"
                + (f"; this one{patches}" if patches else ""))

    @property
    def none_passes(self) -> str:
        """'None of the 50 stacks passes every check', or for one stack 'Its one stack does not pass every check'."""
        if self.tested == 1:
            return "Its one stack does not pass every check"
        return f"None of the {self.tested} stacks passes every check"

    @property
    def by_verdict(self) -> str:
        """'awaits a runner (CPU pre-flight only): 40; cannot be installed together: 10': why none passes."""
        return "; ".join(f"{label}: {count}" for label, count in self.verdicts)

    @property
    def command(self) -> str:
        install = "uv pip install " + " ".join(shlex.quote(f"{name}=={version}") for name, version in self.pins)
        if self.python:
            return f"uv venv --python {shlex.quote(self.python)}\n{install}"
        return install


def _newness(report: Report, line: Line) -> tuple:
    axes = dict(zip(report.axes, report.rows[line.row].axes))
    return (newness_key(axes),
            axes.get("mode", "") in ("", "sync"),  # among equal versions, the plain loop
            -line.row)


def _title(backend: str, with_vllm: bool, device: str) -> str:
    name = BACKEND_TITLES.get(backend, backend or "no backend")
    return name + (" with vLLM" if with_vllm else "") + (f" on {device}" if device else "")


def pins_boxes(report: Report) -> list[PinsBox]:
    """One box per (backend, with or without vLLM[, device when devices differ]) present in the report."""
    vllm_positions = [p for p, axis in enumerate(report.axes) if axis in VLLM_AXES]
    device_at = report.axes.index("device") if "device" in report.axes else None
    devices = {row.axes[device_at] for row in report.rows} if device_at is not None else set()
    kinds: dict[tuple, list[Line]] = {}
    for line in lines(report):
        axes = report.rows[line.row].axes
        device = axes[device_at] if device_at is not None and len(devices) > 1 else ""
        with_vllm = any(axes[p] for p in vllm_positions)
        kinds.setdefault((line.backend, with_vllm, device), []).append(line)
    boxes = []
    for (backend, with_vllm, device), members in sorted(kinds.items(), key=lambda kv: (
            kv[0][0] != "fsdp", kv[0][0], kv[0][1], kv[0][2])):
        passing = [ln for ln in members if ln.verdict.kind in PASSING_KINDS]
        best = max(passing, key=lambda ln: _newness(report, ln)) if passing else None
        pins, python, other = [], "", []
        if best is not None:
            for axis, value in zip(report.axes, report.rows[best.row].axes):
                if not value:
                    continue
                if axis in PACKAGE_AXES:
                    pins.append((PACKAGE_AXES[axis], value))
                elif axis == PYTHON_AXIS:
                    python = value
                else:
                    other.append((axis, value))
        counts = Counter(ln.verdict.kind for ln in members)
        verdicts = [(KIND_LABELS[kind], counts[kind]) for kind in KINDS if counts[kind]]
        boxes.append(PinsBox(_title(backend, with_vllm, device), best, len(members), pins, python, other, verdicts,
                             len(passing)))
    return boxes


def known_good_stacks(lines: list[str]) -> list[tuple[str, list[str]]]:
    """Report.last_known_good ("backend/model/check: versions (cell, date, ...)") as one entry per stack with
    the columns it holds for: most columns of a run share the same pins."""
    stacks: dict[str, list[str]] = {}
    for line in lines:
        key, _, rest = line.partition(": ")
        stacks.setdefault(rest or key, []).extend([key] if rest else [])
    return list(stacks.items())
