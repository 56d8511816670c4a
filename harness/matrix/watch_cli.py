"""The `matrix watch` command: load, select, watch, print (text or JSON), write the cells file."""
from __future__ import annotations

import json
from pathlib import Path

from harness.errors import InputError

from . import watch_toml
from .expand import load
from .newest import Resolver
from .watch import text, watch


def main(file: Path, as_json: bool, write: Path | None, tags: list[str] | None) -> int:
    m = load(file)
    if write is not None and (write.is_dir() or not write.parent.is_dir()):
        raise InputError(f"--write {write}: expected a file in an existing directory")
    if write is not None and write.resolve() == m.path.resolve():
        raise InputError(f"--write {write}: that is the matrix itself; write the new cells to another file")
    resolver = Resolver()
    releases = watch(m, resolver, m.select(tags=tags) if tags else None)
    if as_json:
        print(json.dumps({"matrix": str(m.path), "index": resolver.index.url, "date": resolver.today.isoformat(),
                          "releases": [r.to_dict() for r in releases]}, indent=1))
    else:
        print(text(m, releases, resolver))
    if write is not None:
        watch_toml.write(write, m, releases, resolver.index.url, resolver.today.isoformat())
    return 0
