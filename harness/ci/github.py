"""The `ci` verb: what the GitHub workflows ask of the harness. `ci matrix`: the nightly job matrix, generated
from `nox -l --json`; `ci summary`: a job summary that fits GitHub's 1 MiB limit; `ci carry`: the previous
results a partial nightly run carries forward.

`nox -l --json -t cell` lists one session per cell with its `call_spec`; each becomes one job,
with the runner label and container image the matrix file gives that cell.

Carrying: a nightly run of some cells (a manual run with `--tags`) publishes, and keeps for the next night, the
whole table rather than that subset. A cell this run did not run is copied from the previous results (its
result file and its directory of logs and lock), and run.json gets a note naming the carried cells, so the
report says which results are older. A cell this run did run is never touched. Only a file that loads as a cell
result is carried.
"""
from __future__ import annotations

import json
import re
import shutil
import sys
from pathlib import Path

from harness import matrix
from harness.errors import InputError
from harness.results.records import load_cell, write_json_atomic

SUMMARY_LIMIT = 1024 * 1024  # GitHub refuses a step summary above 1 MiB
_SESSION_RE = re.compile(r"^cell-(?P<matrix>[A-Za-z0-9_.\-]+)\((?P<cell>[A-Za-z0-9_.\-+]+)\)$")
NOTE = "Carried from the previous published results, not rerun by this partial run"


def add_parser(sub) -> None:
    actions = sub.add_parser("ci", help="GitHub Actions helpers").add_subparsers(dest="action", required=True)
    jm = actions.add_parser("matrix", help="job matrix JSON from a `nox -l --json -t cell` listing")
    jm.add_argument("listing", type=Path)
    jm.add_argument("--matrices", type=Path, default=Path("matrices"))
    jm.add_argument("--container", choices=("yes", "no", "any"), default="any",
                    help="only cells that run in a container image (yes), only those that do not (no)")
    jm.add_argument("--preflight", type=Path, default=None, metavar="RESULTS",
                    help="leave out the cells whose pre-flight under RESULTS/<matrix>/preflight/ cannot install")
    sm = actions.add_parser("summary", help="print a report's Markdown cut below GitHub's 1 MiB summary limit")
    sm.add_argument("markdown", type=Path)
    sm.add_argument("--link", required=True, help="where the full report is published")
    cy = actions.add_parser("carry",
                            help="copy into a partial run's results the previous results' cells it did not run")
    cy.add_argument("previous", type=Path)
    cy.add_argument("results", type=Path)


def cmd_ci(args) -> int:
    if args.action == "matrix":
        container = {"yes": True, "no": False, "any": None}[args.container]
        jobs = main_matrix(args.listing, args.matrices, container)
        if args.preflight is not None:
            from harness.preflight.store import installable_jobs

            kept, dropped = installable_jobs(json.loads(jobs), args.preflight)
            jobs = json.dumps(kept)
            for line in dropped:
                print(line, file=sys.stderr)
        print(jobs)
        return 0
    if args.action == "carry":
        carried = carry(args.previous, args.results)
        print(f"carried {len(carried)} cells from {args.previous} into {args.results}")
        return 0
    try:
        text = args.markdown.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{args.markdown}: cannot read ({exc.strerror})") from None
    sys.stdout.write(cut_summary(text, args.link))
    return 0



def job_matrix(listing: list[dict], matrices_dir: Path, container: bool | None = None) -> dict:
    """{"include": [...]} for `strategy.matrix`: one job per cell session in `listing`.

    `container`: only cells with an image (True), only cells without (False), or all (None).
    An empty selection yields one placeholder job that the workflow skips (GitHub rejects an
    empty matrix)."""
    loaded: dict[str, dict[str, matrix.Cell]] = {}
    jobs = []
    for entry in listing:
        match = _SESSION_RE.match(str(entry.get("session", "")))
        if not match:
            continue  # not a cell session (cpu-fsdp-qwen35, report, ...)
        name, cell_id = match["matrix"], match["cell"]
        if name not in loaded:
            path = matrices_dir / f"{name}.toml"
            loaded[name] = {c.id: c for c in matrix.load(path).cells}
        cell = loaded[name].get(cell_id)
        if cell is not None and container is not None and bool(cell.axes.get("image")) != container:
            continue
        if cell is None or entry.get("call_spec", {}).get("cell") != cell_id:
            raise InputError(f"nox listing: session {entry['session']!r} is not a cell of matrices/{name}.toml")
        jobs.append({"session": entry["session"], "matrix": name, "cell": cell_id, "device": cell.axes["device"],
                     "runner": cell.runner or "ubuntu-latest", "image": cell.axes.get("image", "")})
    if not any(_SESSION_RE.match(str(e.get("session", ""))) for e in listing):
        raise InputError("nox listing has no cell sessions; list them with `nox -l --json -t cell`")
    return {"include": jobs or [{"session": "", "matrix": "", "cell": "", "device": "", "runner": "ubuntu-latest",
                                 "image": ""}]}


def cut_summary(markdown: str, link: str, limit: int = SUMMARY_LIMIT) -> str:
    """`markdown` if it fits; else whole lines up to the limit and a note linking the full report."""
    data = markdown.encode("utf-8")
    if len(data) <= limit:
        return markdown
    note = f"\n\n**Summary cut to fit the 1 MiB job-summary limit. Full report: <{link}>**\n"
    close = "\n</details>\n"  # a cut inside a <details> block (report.md has one per row) must close it
    room = limit - len(note.encode("utf-8")) - len(close)
    kept = data[:room].decode("utf-8", errors="ignore")
    kept = kept[: kept.rfind("\n") + 1] if "\n" in kept else ""
    if kept.count("<details>") > kept.count("</details>"):
        kept += close
    return kept + note


def main_matrix(listing_file: Path, matrices_dir: Path, container: bool | None = None) -> str:
    try:
        listing = json.loads(Path(listing_file).read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise InputError(f"{listing_file}: not a `nox -l --json` listing ({exc})") from None
    return json.dumps(job_matrix(listing, matrices_dir, container))



def carry(previous: Path, results: Path) -> list[str]:
    """Copy into `results` the cells of `previous` it lacks; their ids, sorted."""
    source, target = Path(previous) / "cells", Path(results) / "cells"
    if not source.is_dir():
        raise InputError(f"{previous}: no cells/ directory to carry from")
    target.mkdir(parents=True, exist_ok=True)
    carried = []
    for path in sorted(source.glob("*.json")):
        if (target / path.name).exists() or path.is_symlink():
            continue
        try:
            cell = load_cell(path)
        except (ValueError, KeyError, TypeError, OSError):
            continue  # not a cell result: the report of the previous run already named it as a problem
        if f"{cell.cell_id}.json" != path.name:
            continue
        own = source / cell.cell_id
        if own.is_dir() and not own.is_symlink():
            shutil.copytree(own, target / cell.cell_id, symlinks=True, dirs_exist_ok=True)
        shutil.copy2(path, target / path.name)  # the result last: a copy cut short leaves no half cell
        carried.append(cell.cell_id)
    if carried:
        _note(Path(results) / "run.json", carried)
    return carried


def _note(run_json: Path, carried: list[str]) -> None:
    try:
        info = json.loads(run_json.read_text(encoding="utf-8")) if run_json.exists() else {}
    except (OSError, json.JSONDecodeError):
        info = {}
    if not isinstance(info, dict):
        info = {}
    notes = info.get("notes") if isinstance(info.get("notes"), list) else []
    info["notes"] = [*notes, {"text": f"{NOTE} ({len(carried)} cells)", "cells": carried}]
    write_json_atomic(run_json, info)
