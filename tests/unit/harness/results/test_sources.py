"""The one loader of a report directory's results (sources.py): every source's folder read, each result stamped
with its source, a runner's result first, and a file that cannot be used one problem line."""
from __future__ import annotations

import json
from pathlib import Path

from harness.report.build import build_report
from harness.results.records import CellResult, CheckResult, Source, Status, write_json_atomic
from harness.results.sources import FOLDERS, load_results


def write(report_dir: Path, source: Source, cell_id: str, **environment) -> CellResult:
    cell = CellResult("cuda", cell_id, {"device": "cuda", "backend": "fsdp", "model": "text"},
                      checks=[CheckResult("stack-smoke", Status.PASS)], environment=environment)
    write_json_atomic(report_dir / FOLDERS[source] / f"{cell_id}.json", cell.to_dict())
    return cell


def test_every_source_is_read_and_stamped_and_a_runner_result_comes_first(tmp_path):
    write(tmp_path, Source.RUNNER, "a")
    write(tmp_path, Source.OFFLINE_BOX, "b")
    write(tmp_path, Source.CPU_SIDE, "c", preflight="installs", cpu_side=True)
    write(tmp_path, Source.PREFLIGHT, "d", preflight="installs")
    for source in (Source.OFFLINE_BOX, Source.CPU_SIDE, Source.PREFLIGHT):  # a runner has a: its result is a's
        write(tmp_path, source, "a", preflight="installs", cpu_side=True)
    write(tmp_path, Source.PREFLIGHT, "c", preflight="installs")  # the CPU-side run's result replaces it
    cells, problems = load_results(tmp_path)
    assert problems == []
    assert [(c.cell_id, c.source) for c in cells] == [("a", Source.RUNNER), ("b", Source.OFFLINE_BOX),
                                                      ("c", Source.CPU_SIDE), ("d", Source.PREFLIGHT)]
    assert cells[0].environment == {}


def test_a_folder_holds_only_what_its_source_writes(tmp_path):
    write(tmp_path, Source.OFFLINE_BOX, "pre-flighted", preflight="installs")  # not the box's own result
    write(tmp_path, Source.CPU_SIDE, "install-verdict", preflight="installs")  # no CPU-side mark
    cells, problems = load_results(tmp_path)
    assert cells == [] and problems == [f"cells/: no such directory in {tmp_path.name}"]


def test_a_source_named_in_the_file_is_kept_and_a_missing_one_is_the_folders(tmp_path):
    cell = write(tmp_path, Source.RUNNER, "named")
    cell.source = Source.OFFLINE_BOX
    write_json_atomic(tmp_path / "cells" / "named.json", cell.to_dict())
    write(tmp_path, Source.RUNNER, "unnamed")
    cells, _ = load_results(tmp_path)
    assert {c.cell_id: c.source for c in cells} == {"named": Source.OFFLINE_BOX, "unnamed": Source.RUNNER}
    assert "source" not in json.loads((tmp_path / "cells" / "unnamed.json").read_text())


def test_the_committed_results_load_with_their_folders_source_and_origin_line():
    reports = Path(__file__).resolve().parents[4] / "reports" / "cuda"
    cells, problems = load_results(reports)
    # the CPU-side run on exact wheels, the install pre-flight of the verl rows (docs/verl.md), and the offline
    # evidence run on a GPU (docs/preflight.md)
    assert cells and problems == [] and {c.source for c in cells} == {Source.CPU_SIDE, Source.PREFLIGHT,
                                                                      Source.OFFLINE_BOX}
    assert all(c.environment["origin"].startswith("offline run on the box's own Python") and
               c.environment["devices"] for c in cells if c.source is Source.OFFLINE_BOX)
    # Some files name the origin line `evidence`: read as `origin`, the one key the report shows.
    assert all("origin" in c.environment and "evidence" not in c.environment for c in cells)
    assert all(c.environment["origin"].startswith("CPU pre-flight") for c in cells if c.source is Source.CPU_SIDE)


def test_the_origin_line_is_read_under_either_key_and_shown_once(tmp_path):
    write(tmp_path, Source.RUNNER, "new", origin="offline run on the box's own Python")
    write(tmp_path, Source.RUNNER, "old", evidence="CPU pre-flight on 2026-11-27")
    write(tmp_path, Source.RUNNER, "none")
    cells, problems = load_results(tmp_path)
    assert problems == [] and {c.cell_id: c.environment for c in cells} == {
        "new": {"origin": "offline run on the box's own Python"}, "old": {"origin": "CPU pre-flight on 2026-11-27"},
        "none": {}}
    [row] = build_report([c for c in cells if c.cell_id == "old"]).rows
    assert row.environment["origin"] == "CPU pre-flight on 2026-11-27" and "evidence" not in row.environment


def test_an_unreadable_file_of_any_source_is_one_problem_line_named_by_its_folder(tmp_path):
    write(tmp_path, Source.RUNNER, "good")
    for source in Source:
        folder = tmp_path / FOLDERS[source]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"bad-{source.value}.json").write_text("{not json\n")
        (folder / ".bad.json.tmp.json").write_text("{")  # an atomic write in progress: not read
    cells, problems = load_results(tmp_path)
    assert [c.cell_id for c in cells] == ["good"]
    order = (Source.RUNNER, Source.OFFLINE_BOX, Source.CPU_SIDE, Source.PREFLIGHT)
    assert problems == [f"{FOLDERS[source]}/bad-{source.value}.json: not a readable cell result (JSONDecodeError: "
                        "Expecting property name enclosed in double quotes: line 1 column 2 (char 1))"
                        for source in order]
    assert list(problems.unreadable) == [f"bad-{source.value}" for source in order]


def test_a_file_is_read_only_as_the_cell_it_is_named_for_and_a_stray_copy_never_wins(tmp_path):
    kept = write(tmp_path, Source.RUNNER, "a")
    stray = CellResult("cuda", "a", kept.axes, checks=[CheckResult("stack-smoke", Status.FAIL)], finished="9999")
    write_json_atomic(tmp_path / "cells" / "a-copy.json", stray.to_dict())  # sorts before a.json
    write_json_atomic(tmp_path / "cells" / "b.json", stray.to_dict())  # named for b, holding a
    cells, problems = load_results(tmp_path)
    assert [(c.cell_id, c.checks[0].status) for c in cells] == [("a", Status.PASS)]
    assert problems == ["cells/a-copy.json: holds the result of cell 'a', not of 'a-copy' (its name); not used",
                        "cells/b.json: holds the result of cell 'a', not of 'b' (its name); not used"]
    assert set(problems.unreadable) == {"a-copy", "b"}


def test_a_runner_file_that_cannot_be_read_is_not_replaced_by_an_earlier_source(tmp_path):
    """A truncated runner result: the cell has no result, rather than the CPU pre-flight's standing in for it."""
    write(tmp_path, Source.RUNNER, "good")
    write(tmp_path, Source.CPU_SIDE, "a", preflight="installs", cpu_side=True)
    text = json.dumps(write(tmp_path, Source.RUNNER, "a").to_dict())
    (tmp_path / "cells" / "a.json").write_text(text[: len(text) // 2])
    cells, problems = load_results(tmp_path)
    assert [c.cell_id for c in cells] == ["good"] and list(problems.unreadable) == ["a"]
