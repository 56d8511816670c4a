"""The measured page's table, from bench/figures.json (written by `nox -s bench`): the current figure of each
benchmark with the machine and the date it was measured on."""
from __future__ import annotations

import json
import math
from pathlib import Path

from harness.docsgen.tables import ROOT, _table

FIGURES_FILE = ROOT / "bench" / "figures.json"

# (group in figures.json, what it measures, [(label, path inside the group, unit)]). A figure that a group lacks
# is shown as "not measured", so a renamed key in the bench shows here instead of vanishing.
FIGURES = [
    ("matrix", "the whole CPU matrix, cells in parallel and reused (`-- --matrix`)", [
        ("serial: one cell after the other, no reuse", "old_way.wall_s", "s"),
        ("defaults: `--jobs auto`, forked checks, reuse", "new_way.wall_s", "s"),
        ("serial over defaults", "old_to_new_ratio", "x"),
        ("a warm rerun (every cell kept)", "warm_rerun.wall_s", "s")]),
    ("four_families_in_a_cell", "the four check families in one FSDP cell, as a cell runs them", [
        ("wall time", "seconds", "s"), ("CPU time", "cpu_seconds", "s")]),
    ("checks_per_cell", "every check of one cell, each in a fresh interpreter", [
        ("all checks", "total_s", "s"), ("the four families", "four_families_s", "s"),
        ("importing torch and transformers", "imports_s", "s")]),
    ("grpo_vs_trl", "GRPO to the reward threshold against TRL's GRPOTrainer, one thread (`-- --grpo`)", [
        ("ours", "summary.seconds_to_threshold.ours", "s"), ("TRL", "summary.seconds_to_threshold.trl", "s"),
        ("speed-up", "summary.speedup_to_threshold", "x"),
        ("peak memory, ours", "summary.peak_rss_mib.ours", "MiB"),
        ("peak memory, TRL", "summary.peak_rss_mib.trl", "MiB")]),
    ("grpo_vs_trl_evidence", "GRPO against TRL's GRPOTrainer on the offline evidence run's GPU, one seed "
     "(`python -m harness.benchmarks --from-evidence reports/cuda/evidence`)", [
        ("ours", "summary.seconds_to_threshold.ours", "s"), ("TRL", "summary.seconds_to_threshold.trl", "s"),
        ("speed-up", "summary.speedup_to_threshold", "x"),
        ("steps per second, ours", "summary.steps_per_second.ours", "steps/s"),
        ("steps per second, TRL", "summary.steps_per_second.trl", "steps/s")]),
    ("report", "rendering the report of 10,000 synthetic cells", [
        ("CPU time, every format", "render_cpu_s", "s"), ("report.html", "html_bytes", "bytes")]),
]


def load(path: Path = FIGURES_FILE) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def _get(group: dict, path: str):
    value = group
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value


def _number(value, unit: str) -> str:
    if value is None:
        return "not measured"
    # A figure that is no finite number, or below 0 (every figure here is a time, size, rate or ratio), came from
    # a file edited by hand or merged without the evidence checks: said to be unusable, not shown as measured.
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        return "unusable (not a finite number of at least 0)"
    if unit == "bytes":
        return f"{value / 2**20:.1f} MiB"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:,.2f} {unit}" if isinstance(value, float) else f"{value:,} {unit}"


def _machine(group: dict, figures: dict) -> str:
    machine = group.get("machine", figures.get("machine", "unknown"))
    if isinstance(machine, dict):
        parts = [machine.get("cpu"), f"{machine['cores']} cores" if machine.get("cores") else None,
                 f"{machine['memory_gib']} GiB" if machine.get("memory_gib") else None]
        return ", ".join(p for p in parts if p)
    return str(machine)


def measured_table(figures: dict | None = None) -> str:
    figures = load() if figures is None else figures
    rows = []
    for key, what, fields in FIGURES:
        group = figures.get(key)
        if not isinstance(group, dict):
            rows.append([what, "not measured", "", ""])
            continue
        if group.get("status") in ("not run", "failed"):  # an evidence run's benchmark that did not measure
            rows.append([what, f"{group['status']}: {group.get('reason') or 'no reason recorded'}",
                         _machine(group, figures), str(group.get("date", "unknown"))])
            continue
        values = "; ".join(f"{label}: {_number(_get(group, path), unit)}" for label, path, unit in fields)
        rows.append([what, values, _machine(group, figures), str(group.get("date", figures.get("date", "unknown")))])
    return _table(["benchmark", "figures", "machine", "date"], rows)
