"""The one loader of a report directory's results (sources.py): every source's folder read, each result stamped
with its source, a runner's result first, and a file that cannot be used one problem line."""
from __future__ import annotations

import json
from pathlib import Path

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


def test_the_committed_results_load_with_their_folders_source():
    reports = Path(__file__).resolve().parents[4] / "reports" / "cuda"
    cells, problems = load_results(reports)
    # the CPU-side run on exact wheels, and the install pre-flight of the verl rows (docs/verl.md)
    assert cells and problems == [] and {c.source for c in cells} == {Source.CPU_SIDE, Source.PREFLIGHT}


def test_an_unreadable_file_of_any_source_is_one_problem_line_named_by_its_folder(tmp_path):
    write(tmp_path, Source.RUNNER, "good")
    for source in Source:
        folder = tmp_path / FOLDERS[source]
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "bad.json").write_text("{not json\n")
        (folder / ".bad.json.tmp.json").write_text("{")  # an atomic write in progress: not read
    cells, problems = load_results(tmp_path)
    assert [c.cell_id for c in cells] == ["good"]
    assert problems == [f"{FOLDERS[source]}/bad.json: not a readable cell result (JSONDecodeError: Expecting "
                        "property name enclosed in double quotes: line 1 column 2 (char 1))"
                        for source in (Source.RUNNER, Source.OFFLINE_BOX, Source.CPU_SIDE, Source.PREFLIGHT)]
