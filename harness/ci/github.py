"""GitHub Actions glue: the nightly job matrix, generated from `nox -l --json`, and a job summary
that fits GitHub's 1 MiB limit.

`nox -l --json -t cell` lists one session per cell with its `call_spec`; each becomes one job,
with the runner label and container image the matrix file gives that cell.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from harness import matrix
from harness.errors import InputError

SUMMARY_LIMIT = 1024 * 1024  # GitHub refuses a step summary above 1 MiB
_SESSION_RE = re.compile(r"^cell-(?P<matrix>[A-Za-z0-9_.\-]+)\((?P<cell>[A-Za-z0-9_.\-+]+)\)$")


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
