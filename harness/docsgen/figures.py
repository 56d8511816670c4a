"""The measured page's table, from bench/figures.json (written by `nox -s bench`): the current figure of each
benchmark with the machine, the date and the project revision that produced it. Each is read from the group
itself: a group that lacks one shows it as not recorded, never another group's (or the file's) stamp."""
from __future__ import annotations

import json
import math
import statistics
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
        ("a warm rerun (every cell kept)", "warm_rerun.wall_s", "s"),
        ("a second `nox` (nox and the session's set-up included)", "second_nox.wall_s", "s"),
        ("cells whose environment this machine could not install (no check ran)", "new_way.cells_not_installed",
         ""),
        ("of which another runner would install and run (this runner's limits, such as no network to a git source)",
         "new_way.cells_not_installed_here", ""),
        ("defaults, summed over cells: waiting for their environments", "new_way.phases_s.environment", "s"),
        ("installing environments ahead of their cells", "new_way.phases_s.environment_ahead", "s"),
        ("importing in the check servers", "new_way.phases_s.imports", "s")]),
    ("newcomer", "a newcomer's `python -m pip install 'nox[uv]' && nox`: a fresh clone, every cache empty, packages "
     "downloaded (`-- --only newcomer`)", [
        ("the whole command", "wall_s", "s"), ("of which `nox`", "nox_s", "s"), ("a second `nox`", "second_nox_s", "s"),
        ("CPU time", "cpu_seconds", "s"), ("CPU busy", "cpu_busy_percent", "%"), ("cells run", "cells_run", ""),
        ("cells not installed", "cells_not_installed", ""),
        ("environments installed ahead of their cells, summed", "phases_s.environment_ahead", "s"),
        ("cells waiting for their environments, summed", "phases_s.environment", "s")]),
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
    ("grpo_vs_trl_repeats", "GRPO against TRL's GRPOTrainer, every `-- --grpo` run on the latest revision", [
        ("runs", "runs", ""), ("lowest speed-up", "lowest", "x"), ("median", "median", "x"),
        ("highest", "highest", "x")]),
    ("grpo_fully_async", "GRPO to the reward threshold, sync against fully-async at staleness 1 (`-- --async`)", [
        ("sync", "summary.sync.seconds_to_threshold", "s"),
        ("fully-async", "summary.fully-async-1.seconds_to_threshold", "s"),
        ("fully-async over sync", "summary.fully-async-1.speedup_over_sync", "x"),
        ("overlap (both busy)", "summary.fully-async-1.overlap_fraction", "")]),
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


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)  # JSON's true is an int to Python


def _number(value, unit: str) -> str:
    if value is None:
        return "not measured"
    # A figure that is no finite number, or below 0 (every figure here is a time, size, rate or ratio), came from
    # a file edited by hand or merged without the evidence checks: said to be unusable, not shown as measured.
    if not _is_number(value) or not math.isfinite(value) or value < 0:
        return "unusable (not a finite number of at least 0)"
    if unit == "bytes":
        return f"{value / 2**20:.1f} MiB"
    if unit == "x":
        return f"{value:.2f}x"
    text = f"{value:,.2f}" if isinstance(value, float) else f"{value:,}"
    return f"{text} {unit}" if unit else text


NOT_RECORDED = "not recorded"


def machine_line(group: dict) -> str:
    """A figure group's machine in one line: CPU, cores, memory and its calibration; not recorded where absent."""
    machine = group.get("machine")
    if isinstance(machine, dict):
        parts = [machine.get("cpu"), f"{machine['cores']} cores" if machine.get("cores") else None,
                 f"{machine['memory_gib']} GiB" if machine.get("memory_gib") else None, _calibration(machine)]
        return ", ".join(str(p) for p in parts if p) or NOT_RECORDED
    return str(machine) if machine else NOT_RECORDED


def _calibration(machine: dict) -> str | None:
    """The machine's one-thread calibration as the run measured it (benchmarks/provenance.py), where it did."""
    parts = machine.get("calibration")
    if not isinstance(parts, dict) or not any(isinstance(v, (int, float)) for v in parts.values()):
        return None
    shown = [f"{label} {parts[key]:.2f} s" for key, label in (("python_s", "Python"), ("torch_s", "torch"))
             if isinstance(parts.get(key), (int, float))]
    return "calibration: " + " / ".join(shown)


def stamp(group: dict, key: str) -> str:
    """A figure group's `key` (date, harness_revision), or not recorded."""
    value = group.get(key)
    return str(value) if value else NOT_RECORDED


def _runs(runs: list) -> dict:
    """A list of runs (grpo_vs_trl_repeats) as one group: how many, their speed-ups, and each stamp that the runs
    share, every different one listed, and not recorded where a run lacks it."""
    speedups = sorted(s for run in runs if isinstance(run, dict)
                      and isinstance(s := _get(run, "summary.speedup_to_threshold"), (int, float)))
    group: dict = {"runs": len(runs)}
    if speedups:
        group.update(lowest=speedups[0], median=statistics.median(speedups), highest=speedups[-1])
    items = [run if isinstance(run, dict) else {} for run in runs]
    for key, show in (("machine", machine_line), ("date", lambda run: stamp(run, "date")),
                      ("harness_revision", lambda run: stamp(run, "harness_revision"))):
        group[key] = ", ".join(dict.fromkeys(show(run) for run in items)) if items else None
    return group


def measured_table(figures: dict | None = None) -> str:
    figures = load() if figures is None else figures
    rows = []
    for key, what, fields in FIGURES:
        group = figures.get(key)
        if isinstance(group, list):
            group = _runs(group)
        if not isinstance(group, dict):
            rows.append([what, "not measured", "", "", ""])
            continue
        stamps = [machine_line(group), stamp(group, "date"), stamp(group, "harness_revision")]
        if group.get("status") in ("not run", "failed"):  # an evidence run's benchmark that did not measure
            rows.append([what, f"{group['status']}: {group.get('reason') or 'no reason recorded'}", *stamps])
            continue
        values = "; ".join(f"{label}: {_number(_get(group, path), unit)}" for label, path, unit in fields)
        rows.append([what, values, *stamps])
    return _table(["benchmark", "figures", "machine", "date", "revision"], rows)


LONGEST_CELLS = 10


def matrix_time_tables(figures: dict | None = None) -> str:
    """Where the cold CPU matrix run's time went (bench group `matrix`, its defaults run): each phase and each check
    summed over the cells run, with how many ran and how many were reused, then the longest cells; stamped as the
    measured table is."""
    figures = load() if figures is None else figures
    group = figures.get("matrix")
    run = group.get("new_way") if isinstance(group, dict) else None
    if not isinstance(run, dict):
        return "Not measured: `bench/figures.json` has no `matrix` group with a defaults run (`new_way`).\n"
    stamped = (f"From the `matrix` group: {machine_line(group)}, {stamp(group, 'date')}, revision "
               f"{stamp(group, 'harness_revision')}; the run took {_number(run.get('wall_s'), 's')} in all.")
    cells_run = run.get("cells_run")
    rows = [[f"phase: {name}", _number(seconds, "s"), _number(cells_run, ""), ""]
            for name, seconds in (run.get("phases_s") or {}).items()]
    checks = sorted((run.get("checks") or {}).items(), key=lambda item: -(_get(item[1], "seconds") or 0))
    rows += [[f"check: `{name}`", _number(_get(tally, "seconds"), "s"), _number(_get(tally, "ran"), ""),
              _number(_get(tally, "reused"), "")] for name, tally in checks]
    parts = _table(["part of a cell", "seconds, summed over the cells run", "cells that ran it (skips included)",
                    "cells that reused another cell's result"], rows)
    longest = list((run.get("cells_s") or {}).items())[:LONGEST_CELLS]
    cells = _table(["cell", "seconds"], [[f"`{cell}`", _number(seconds, "s")] for cell, seconds in longest])
    return f"{stamped}\n\n{parts}\n\nThe {len(longest)} longest cells:\n\n{cells}\n\n{megatron_cells_table(run)}"


# The parts of a Megatron cell shown in their own column, in this order; the rest are summed as "the rest".
MEGATRON_PARTS = ("imports", "bridge-parity", "grpo-convergence", "launch-plans")


def megatron_cells_table(run: dict) -> str:
    """A defaults run's Megatron cells side by side (`megatron_cells`), longest first: the cell's seconds, the parts
    that differ most between them and the rest of its seconds, then whether the Megatron-Bridge cell took no longer
    than any other Megatron cell (the speed target), as the bench compared them (`megatron_bridge_cell`)."""
    cells = {cell: entry for cell, entry in (run.get("megatron_cells") or {}).items() if isinstance(entry, dict)}
    if not cells:
        return "The Megatron cells side by side: not measured (the run has no `megatron_cells`).\n"
    rows = []
    for cell, entry in cells.items():
        phases, ran, reused = entry.get("phases") or {}, entry.get("checks") or {}, entry.get("reused") or ()
        # capture runs while the server imports: the two cover the longer one's seconds of the cell
        spent = {"imports": max((_seconds(phases.get(k)) for k in ("imports", "capture")), default=0.0),
                 **{name: _seconds(ran.get(name)) for name in MEGATRON_PARTS[1:]}}
        shown = [_number(spent[name], "s") if name == "imports" or name in ran else
                 "reused" if name in reused else "not run" for name in MEGATRON_PARTS]
        total = _seconds(entry.get("seconds"))
        label = f"`{cell}`" + (f" (Megatron-Bridge {entry['megatron_bridge']})" if entry.get("megatron_bridge") else "")
        rows.append([label, _number(entry.get("seconds"), "s"), *shown,
                     _number(round(max(total - sum(spent.values()), 0.0), 2), "s")])
    table = _table(["Megatron cell", "seconds", *MEGATRON_PARTS, "the rest"], rows)
    return (f"The Megatron cells side by side, longest first (capture overlaps imports):\n\n{table}\n\n"
            f"{_bridge_target(run)}")


def _seconds(value) -> float:
    return float(value) if _is_number(value) else 0.0


def _bridge_target(run: dict) -> str:
    compared = run.get("megatron_bridge_cell")  # the bench's comparison (benchmarks/phases.py)
    if not isinstance(compared, dict):
        return "No Megatron-Bridge cell beside another Megatron cell in this run: its speed target is not measured."
    seconds, longest = compared.get("seconds"), compared.get("longest_other_s")
    numbers = all(_is_number(v) for v in (seconds, longest))
    if compared.get("met") is True:
        verdict = "met"
    elif compared.get("met") is False and numbers:
        verdict = f"not met, by {_number(round(seconds - longest, 2), 's')}"
    else:  # a figure edited by hand: said, not guessed
        verdict = NOT_RECORDED
    cell, other = (f"`{compared[key]}`" if compared.get(key) else NOT_RECORDED for key in ("cell", "longest_other"))
    return (f"Target, the Megatron-Bridge cell no longer than any other Megatron cell: {verdict} in this run "
            f"({cell} {_number(seconds, 's')}; the longest other, {other}, {_number(longest, 's')}). Every kept run's "
            "pair is under \"Every cold matrix run kept\" below.")


def matrix_runs_table(figures: dict | None = None) -> str:
    """Every defaults run of the matrix bench that bench/figures.json keeps (`matrix_runs`), newest first, each with
    its own machine, calibration, date and revision: the spread a shared machine's speed gives one workload."""
    figures = load() if figures is None else figures
    runs = [run for run in figures.get("matrix_runs") or () if isinstance(run, dict)]
    if not runs:
        return "Not measured: `bench/figures.json` has no `matrix_runs`.\n"
    rows = []
    for run in reversed(runs):
        cells = _number(run.get("cells"), "")
        scope = {True: "the whole matrix", False: "a slice"}.get(run.get("whole_matrix"), "not recorded")
        bridge = run.get("megatron_bridge_cell")
        bridge_cell = (f"{_number(_get(bridge, 'seconds'), 's')} / {_number(_get(bridge, 'longest_other_s'), 's')}"
                       if isinstance(bridge, dict) else NOT_RECORDED)
        rows.append([_number(run.get("wall_s"), "s"), f"{run.get('matrix') or NOT_RECORDED}: {cells} cells ({scope})",
                     bridge_cell, _number(run.get("cpu_busy_percent"), "%"), machine_line(run), stamp(run, "date"),
                     stamp(run, "harness_revision")])
    table = _table(["defaults run, cold", "matrix", "Megatron-Bridge cell / longest other Megatron cell",
                    "CPU busy", "machine", "date", "revision"], rows)
    return f"{table}\n\n{_bridge_tally(runs)}"


def _bridge_tally(runs: list[dict]) -> str:
    """In how many kept runs the Megatron-Bridge cell took no longer than every other Megatron cell: one run where
    it did says little when another cell was slow that run."""
    verdicts = [_get(run.get("megatron_bridge_cell"), "met") for run in runs]
    compared = [v for v in verdicts if isinstance(v, bool)]
    if not compared:
        return "No kept run compared the Megatron-Bridge cell with the other Megatron cells."
    return (f"The Megatron-Bridge cell took no longer than every other Megatron cell in {sum(compared)} of the "
            f"{len(compared)} kept runs that compared them.")
