"""The measured page's table: figures with their machine, date and revision, and what is missing said as such."""
from __future__ import annotations

from harness.docsgen import figures, pages


def test_measured_figures_carry_machine_and_date_and_say_what_is_missing():
    data = {"date": "2026-01-02", "machine": {"cpu": "Some CPU", "cores": 2},
            "report": {"render_cpu_s": 1.5, "html_bytes": 2**20, "date": "2026-01-01",
                       "machine": {"cpu": "Some CPU", "cores": 2}, "harness_revision": "0123abcd"}}
    table = figures.measured_table(data)
    row = next(line for line in table.splitlines() if "10,000" in line)
    assert "1.50 s" in row and "1.0 MiB" in row and "2026-01-01" in row and "Some CPU, 2 cores" in row
    assert "0123abcd" in row and table.splitlines()[0].split("|")[-2].strip() == "revision"
    assert "not measured" in table  # the groups this data lacks
    partial = figures.measured_table({**data, "report": {"date": "2026-01-01"}})
    assert "CPU time, every format: not measured" in partial


def test_the_measured_page_shows_the_file_figures():
    current = figures.load()
    assert f"{current['grpo_vs_trl']['summary']['speedup_to_threshold']:.2f}x" in (
        pages.ROOT / "docs" / "measured.md").read_text()


def test_a_group_without_its_own_stamp_shows_it_not_recorded_never_the_file_s_or_another_group_s():
    data = {"date": "2026-01-02", "machine": {"cpu": "Some CPU", "cores": 2}, "harness_revision": "filewide",
            "report": {"render_cpu_s": 1.5, "date": "2026-01-01", "harness_revision": "0123abcd"},
            "checks_per_cell": {"total_s": 40.0}}
    row = next(line for line in figures.measured_table(data).splitlines() if "every check of one cell" in line)
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells[1].startswith("all checks: 40.00 s")
    assert cells[2:] == ["not recorded"] * 3


def test_every_grpo_run_on_one_revision_is_one_row_with_its_lowest_speedup():
    runs = [{"harness_revision": "abc", "summary": {"speedup_to_threshold": speedup}} for speedup in (3.3, 2.9, 3.1)]
    runs[0].update(date="2026-01-01", machine={"cpu": "Some CPU", "cores": 2})
    row = next(line for line in figures.measured_table({"grpo_vs_trl_repeats": runs}).splitlines()
               if "every `-- --grpo` run" in line)
    cells = [cell.strip() for cell in row.split("|")[1:-1]]
    assert cells[1] == "runs: 3; lowest speed-up: 2.90x; median: 3.10x; highest: 3.30x"
    # Two runs lack a date and a machine: said as such beside the one that has them.
    assert cells[2:] == ["Some CPU, 2 cores, not recorded", "2026-01-01, not recorded", "abc"]


def test_where_the_matrix_time_goes_is_generated_from_the_matrix_group_with_its_stamp():
    data = {"matrix": {"date": "2026-01-01", "machine": {"cpu": "Some CPU", "cores": 2}, "harness_revision": "abc123",
                       "new_way": {"wall_s": 700.5, "cells_run": 3, "phases_s": {"imports": 12.5, "other": 1.0},
                                   "checks": {"small": {"seconds": 2.0, "ran": 3, "reused": 0},
                                              "big": {"seconds": 30.25, "ran": 2, "reused": 1}},
                                   "cells_s": {f"cell-{i}": 20.0 - i for i in range(12)}}}}
    text = figures.matrix_time_tables(data)
    assert "Some CPU, 2 cores, 2026-01-01, revision abc123; the run took 700.50 s" in text
    rows = [line for line in text.splitlines() if line.startswith("| check:")]
    assert "`big`" in rows[0] and "30.25 s" in rows[0] and rows[0].rstrip(" |").endswith("1")  # longest first
    assert "| phase: imports" in text and "12.50 s" in text
    assert "`cell-9`" in text and "`cell-10`" not in text  # the 10 longest cells only
    assert figures.matrix_time_tables({}).startswith("Not measured")


def test_the_machine_column_shows_the_run_s_calibration_where_it_was_measured():
    machine = {"cpu": "Some CPU", "cores": 2, "calibration": {"python_s": 0.312, "torch_s": 0.25}}
    data = {"report": {"render_cpu_s": 1.5, "date": "2026-01-01", "machine": machine}}
    row = next(line for line in figures.measured_table(data).splitlines() if "10,000" in line)
    assert "Some CPU, 2 cores, calibration: Python 0.31 s / torch 0.25 s" in row
    data["report"]["machine"] = {**machine, "calibration": {"python_s": 0.3, "torch_s": None}}
    row = next(line for line in figures.measured_table(data).splitlines() if "10,000" in line)
    shown = row.split("calibration: ")[1].split("|")[0].strip()
    assert shown == "Python 0.30 s"  # torch's part, not measured, is not shown
    data["report"]["machine"] = {"cpu": "Some CPU", "cores": 2}  # an older run: no calibration, nothing said
    assert "calibration" not in figures.measured_table(data)


def test_every_kept_matrix_run_is_a_row_newest_first_with_its_own_machine_date_and_revision():
    machine = {"cpu": "Some CPU", "cores": 2, "calibration": {"python_s": 0.27, "torch_s": 0.22}}
    data = {"matrix_runs": [
        {"wall_s": 478.7, "date": "2026-01-01", "harness_revision": "aaa", "machine": {"cpu": "Some CPU", "cores": 2},
         "matrix": "cpu.toml", "cells": 39},
        {"wall_s": 769.0, "date": "2026-01-02", "harness_revision": "bbb", "machine": machine, "matrix": "cpu.toml",
         "cells": 39, "whole_matrix": True, "cpu_busy_percent": 97.2},
        "not a run"]}
    rows = [line for line in figures.matrix_runs_table(data).splitlines() if line.startswith("| ") and " s " in line]
    cells = [[cell.strip() for cell in row.split("|")[1:-1]] for row in rows]
    assert [row[0] for row in cells] == ["769.00 s", "478.70 s"]
    assert cells[0][1:] == ["cpu.toml: 39 cells (the whole matrix)", "not recorded", "97.20 %",
                            "Some CPU, 2 cores, calibration: Python 0.27 s / torch 0.22 s", "2026-01-02", "bbb"]
    assert cells[1][1:4] == ["cpu.toml: 39 cells (not recorded)", "not recorded", "not measured"]
    assert figures.matrix_runs_table({}).startswith("Not measured")


def test_the_megatron_cells_are_side_by_side_with_the_bridge_target_said_from_the_same_figures():
    megatron = {"bridge-cell": {"seconds": 40.0, "megatron_bridge": "0.6.2",
                                "phases": {"imports": 15.0, "capture": 16.0, "environment_ahead": 9.0, "other": 1.0},
                                "checks": {"bridge-parity": 20.0}, "reused": ["launch-plans"]},
                "core-cell": {"seconds": 30.0, "megatron_bridge": None, "phases": {"imports": 6.0},
                              "checks": {"bridge-parity": 4.0, "grpo-convergence": 8.0, "launch-plans": 2.0}}}
    pair = {"cell": "bridge-cell", "seconds": 40.0, "longest_other": "core-cell", "longest_other_s": 30.0, "met": False}
    run = {"wall_s": 100.0, "megatron_cells": megatron, "megatron_bridge_cell": pair}
    text = figures.matrix_time_tables({"matrix": {"new_way": run}})
    rows = [[c.strip() for c in line.split("|")[1:-1]] for line in text.splitlines() if line.startswith("| `")]
    bridge, core = (row for row in rows if "-cell`" in row[0])
    # capture overlaps the imports: the longer of the two; ahead of the cell is not in it; the rest is what is left
    assert bridge == ["`bridge-cell` (Megatron-Bridge 0.6.2)", "40.00 s", "16.00 s", "20.00 s", "not run", "reused",
                      "4.00 s"]
    assert core == ["`core-cell`", "30.00 s", "6.00 s", "4.00 s", "8.00 s", "2.00 s", "10.00 s"]
    assert "not met, by 10.00 s in this run (`bridge-cell` 40.00 s; the longest other, `core-cell`, 30.00 s)" in text
    run["megatron_bridge_cell"] = {**pair, "longest_other_s": 45.0, "met": True}
    assert "other Megatron cell: met in this run (`bridge-cell` 40.00 s; the longest other, `core-cell`, 45.00 s)" in \
        figures.matrix_time_tables({"matrix": {"new_way": run}})
    run["megatron_bridge_cell"] = {"cell": "bridge-cell", "seconds": 40.0}  # edited by hand: no verdict guessed
    said = ("other Megatron cell: not recorded in this run (`bridge-cell` 40.00 s; the longest other, not recorded, "
            "not measured)")
    assert said in figures.matrix_time_tables({"matrix": {"new_way": run}})
    run["megatron_bridge_cell"] = None  # no Megatron-Bridge cell beside another in the run
    assert "its speed target is not measured" in figures.matrix_time_tables({"matrix": {"new_way": run}})
    assert "side by side: not measured" in figures.matrix_time_tables({"matrix": {"new_way": {"wall_s": 1.0}}})


def test_each_kept_matrix_run_shows_its_bridge_cell_against_the_longest_other_or_says_not_recorded():
    pair = {"cell": "b", "seconds": 68.9, "longest_other": "o", "longest_other_s": 31.8, "met": False}
    runs = [{"wall_s": 600.0, "date": "2026-01-01"},
            {"wall_s": 520.0, "date": "2026-01-02", "megatron_bridge_cell": pair}]
    rows = [line for line in figures.matrix_runs_table({"matrix_runs": runs}).splitlines() if line.startswith("| 5")
            or line.startswith("| 6")]
    assert "68.90 s / 31.80 s" in rows[0] and "520.00 s" in rows[0]  # newest first
    assert "not recorded" in rows[1].split("|")[3]


def test_the_kept_runs_say_in_how_many_the_bridge_cell_was_no_longer_than_every_other_megatron_cell():
    def pair(met):
        return {"cell": "b", "seconds": 50.0, "longest_other": "o", "longest_other_s": 40.0, "met": met}

    runs = [{"wall_s": 600.0}, {"wall_s": 520.0, "megatron_bridge_cell": pair(False)},
            {"wall_s": 530.0, "megatron_bridge_cell": pair(True)},
            {"wall_s": 540.0, "megatron_bridge_cell": pair(False)},
            {"wall_s": 550.0, "megatron_bridge_cell": {"cell": "b", "met": "yes"}}]  # edited by hand: not counted
    assert figures.matrix_runs_table({"matrix_runs": runs}).endswith(
        "no longer than every other Megatron cell in 1 of the 3 kept runs that compared them.")
    assert figures.matrix_runs_table({"matrix_runs": runs[:1]}).endswith(
        "No kept run compared the Megatron-Bridge cell with the other Megatron cells.")
