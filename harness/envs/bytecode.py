"""Compiled bytecode shared between cell environments.

Each new environment compiled torch and transformers again at its first import: about 7 of the 12 s a cell's
check server spent importing on one core. A module's bytecode depends only on its source and the Python version,
and a wheel's RECORD names each installed source by its sha256. So the bytecode an environment compiled is kept in
a store under that sha256 and the Python's cache tag, and linked into every later environment whose RECORD names a
source with the same sha256: one compile per release of a package, not one per cell.

The stored files are checked hash-based .pyc (PEP 552): at import Python hashes the source and uses the file only
if the hash matches, so a source edited after install, or a RECORD that does not match its files, costs a compile,
never other code. The store is filled by the environment's own interpreter (the hash is its Python version's), from
the .pyc it compiled itself for sources that still match their RECORD; Python replaces a stale .pyc by rename, never
in place, so a linked file is never rewritten. Runs as `python -m harness.envs.bytecode {seed,keep} STORE SITE...`
in the environment (cellenv.share_bytecode).
"""
from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from harness.files import write_bytes_atomic

FOLDER = ".bytecode"  # the store, in the env root: on the environments' file system, so links work
_CHECKED_HASH = (0b11).to_bytes(4, "little")  # PEP 552 flags: hash-based, checked against the source
_HEADER = 16  # magic, flags, then mtime and size (timestamp .pyc) or the source hash


def store_for(env_root: Path) -> Path:
    return Path(env_root) / FOLDER


def recorded_sources(site: Path) -> Iterator[tuple[str, str]]:
    """(source path, its sha256 as RECORD writes it) for every Python source the distributions in `site` installed
    there (their RECORD files)."""
    for record in sorted(Path(site).glob("*.dist-info/RECORD")):
        try:
            rows = list(csv.reader(record.read_text(encoding="utf-8").splitlines()))
        except (OSError, UnicodeDecodeError, csv.Error):
            continue
        for row in rows:
            if len(row) < 2 or not row[0].endswith(".py") or not row[1].startswith("sha256="):
                continue
            if row[0].startswith(("/", "..")) or "\\" in row[0]:  # outside site-packages (scripts) is not ours
                continue
            yield os.path.join(site, row[0]), row[1][len("sha256="):]


def _sha256(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _compiled_from(pyc: bytes, source: os.stat_result) -> bool:
    """A timestamp .pyc of this interpreter whose header names the source's current mtime and size."""
    if len(pyc) < _HEADER or pyc[:4] != importlib.util.MAGIC_NUMBER or pyc[4:8] != bytes(4):
        return False
    mtime, size = int.from_bytes(pyc[8:12], "little"), int.from_bytes(pyc[12:16], "little")
    return mtime == int(source.st_mtime) & 0xFFFFFFFF and size == source.st_size & 0xFFFFFFFF


def _place(source: str, target: str) -> bool:
    """Link `source` at `target` (a copy across file systems); False if `target` exists or neither works."""
    try:
        os.link(source, target)
        return True
    except FileExistsError:
        return False
    except OSError:
        pass
    try:
        write_bytes_atomic(target, Path(source).read_bytes())
        return True
    except OSError:
        return False


def _write_new(path: Path, data: bytes) -> bool:
    """`data` at `path` unless another environment stored it meanwhile; no fsync: a store file lost in a crash is
    compiled again, and the first `keep` of a release writes thousands."""
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    try:
        partial.write_bytes(data)
        os.link(partial, path)  # never replaces what another environment stored meanwhile
        return True
    except OSError:
        return False
    finally:
        partial.unlink(missing_ok=True)


class _Caches:
    """Where this interpreter keeps a source's bytecode (importlib.util.cache_from_source), and what each such folder
    holds, listed once: `keep` and `seed` walk every recorded source of an environment (tens of thousands), and one
    open or mkdir per source cost more than the rest of the walk."""

    def __init__(self):
        self._folders: dict[str, tuple[str, str]] = {}  # source folder -> (its cache folder, the file name suffix)
        self._listed: dict[str, set[str]] = {}

    def path(self, source: str) -> tuple[str, str]:
        """(cache folder, file name) of `source`'s bytecode."""
        folder, name = os.path.split(source)
        if folder not in self._folders:
            probe = importlib.util.cache_from_source(os.path.join(folder, "x.py"))
            self._folders[folder] = os.path.dirname(probe), os.path.basename(probe)[1:]
        cache, suffix = self._folders[folder]
        return cache, name[:-3] + suffix

    def holds(self, cache: str, name: str) -> bool:
        if cache not in self._listed:
            try:
                self._listed[cache] = set(os.listdir(cache))
            except OSError:
                self._listed[cache] = set()
        return name in self._listed[cache]

    def add(self, cache: str, name: str) -> None:
        """`name` is being placed in `cache`, which is made first if it may not exist yet."""
        self.holds(cache, name)  # lists the folder once
        if not self._listed[cache]:
            os.makedirs(cache, exist_ok=True)
        self._listed[cache].add(name)


def keep(site_dirs: list[Path], store: Path) -> int:
    """Store the bytecode this interpreter compiled for the recorded sources of `site_dirs` that the store lacks,
    as checked hash-based .pyc; returns how many it added. Must run in the environment's own interpreter."""
    store.mkdir(parents=True, exist_ok=True)
    tag, present, added, caches = sys.implementation.cache_tag, set(os.listdir(store)), 0, _Caches()
    for site in site_dirs:
        for source, sha in recorded_sources(site):
            key = f"{sha}.{tag}.pyc"
            if key in present:
                continue
            cache, name = caches.path(source)
            if not caches.holds(cache, name):  # never imported here: nothing compiled
                continue
            try:
                with open(os.path.join(cache, name), "rb") as file:
                    compiled = file.read()
                stat = os.stat(source)
                if not _compiled_from(compiled, stat):
                    continue
                with open(source, "rb") as file:
                    text = file.read()
            except OSError:
                continue
            if _sha256(text) != sha:  # the file is not the one RECORD names
                continue
            data = importlib.util.MAGIC_NUMBER + _CHECKED_HASH + importlib.util.source_hash(text) + compiled[_HEADER:]
            added += _write_new(store / key, data)
            present.add(key)
    return added


def seed(site_dirs: list[Path], store: Path) -> int:
    """Link the store's bytecode for this interpreter beside every recorded source of `site_dirs` that has none;
    returns how many files it linked."""
    suffix = f".{sys.implementation.cache_tag}.pyc"
    try:
        stored = {name[:-len(suffix)] for name in os.listdir(store) if name.endswith(suffix)}
    except OSError:  # no store yet
        return 0
    placed, caches = 0, _Caches()
    for site in site_dirs:
        for source, sha in recorded_sources(site):
            if sha not in stored:
                continue
            cache, name = caches.path(source)
            if caches.holds(cache, name):
                continue
            caches.add(cache, name)
            placed += _place(os.path.join(store, sha + suffix), os.path.join(cache, name))
    return placed


def main(argv: list[str] | None = None) -> int:
    action, store, *sites = sys.argv[1:] if argv is None else argv
    done = (keep if action == "keep" else seed)([Path(site) for site in sites], Path(store))
    print(done)
    return 0


if __name__ == "__main__":
    sys.exit(main())
