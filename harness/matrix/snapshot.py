"""`python -m harness.matrix.snapshot`: record which releases the index holds of every package a matrix
varies (with each one's Requires-Python) in matrices/metadata/releases.json, with the index and the date.

The tests check what the matrices' comments claim ("0.19.2 the newest", "newest for Python 3.11")
against it without the network; `matrix watch` says when it is behind the index.
"""
from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

from packaging.version import Version

from harness.files import write_json_atomic

from . import axes as ax
from .index import PackageIndex

DEFAULT = Path(__file__).resolve().parents[2] / "matrices" / "metadata" / "releases.json"


def releases(index: PackageIndex) -> dict[str, list[dict[str, str]]]:
    found = {}
    for dist in sorted(set(ax.PACKAGE_AXES.values())):
        python: dict[str, str] = {}
        for file in index.files(dist):
            version = file.version
            if not version.is_prerelease and not version.is_devrelease and not file.yanked:
                python[version.public] = python.get(version.public) or file.requires_python
        found[dist] = [{"version": v, "requires_python": python[v]} for v in sorted(python, key=Version)]
    return found


def write(path: Path = DEFAULT, index: PackageIndex | None = None, today: dt.date | None = None) -> Path:
    index = index or PackageIndex(find_links=[])  # the index alone: a local build is not a release
    data = {"index": index.url, "date": (today or dt.date.today()).isoformat(), "releases": releases(index)}
    write_json_atomic(path, data)
    return path


if __name__ == "__main__":
    print(write(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT))
