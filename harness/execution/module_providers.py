"""What a check loaded: the import records its processes left (harness/envs/importrecord.py), and what
provided each top-level module in a cell's environment.

A module's provider is what decides its code: `stdlib` (the Python version decides it), the
distributions that install it (`name==version` from the cell's lock), the content hash of a file or
package found on the search path outside the environment, or `absent` (the check asked for it and it
was not there; a cell where it is present is a different stack). The project's own packages are not
listed: the harness revision covers them. A distribution whose metadata a process read (`dist:NAME`) is
provided by its version, or `absent`; `dist:*` (every distribution listed, as packages_distributions
and pkg_resources do) by the whole lock; `entry-points:GROUP` (a listing read only for the entry points of one
group, as torch's import reads its device backends) by the distributions that declare that group, or `absent`.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import itertools
import os
import re
import sys
import uuid
from pathlib import Path

from harness.envs.importrecord import (
    ALL_DISTRIBUTIONS,
    DIST_PREFIX,
    ENTRY_POINTS_PREFIX,
    HEADER,
    INCOMPLETE,
    INSTALLED_AS,
    PROJECT,
    VARIABLE,
)

PROJECT_PACKAGES = PROJECT
NOT_MODULES = frozenset({"__main__", "__mp_main__", INSTALLED_AS})
MAX_HASHED_FILES = 5000  # a bigger tree on the search path is not hashed, and so never matches


def record_this_process() -> None:
    """Record this process's imports into the directory HARNESS_IMPORT_RECORD names, if it is not doing so
    already: a process forked from a cell's fork server was not started through the .pth line. Where the
    recorder is missing, nothing is recorded, and so the result is not reused."""
    directory = os.environ.get(VARIABLE)
    if not directory:
        return
    try:
        recorder = sys.modules.get(INSTALLED_AS) or importlib.import_module(INSTALLED_AS)
        recorder.start(directory)
    except (ImportError, OSError):
        pass


def read_record(directory: Path) -> set[str] | None:
    """Every top-level name the processes recorded in `directory`; None when the record cannot be
    trusted whole (no file, a file without its header, a cut line, a process that could not record)."""
    names: set[str] = set()
    files = sorted(Path(directory).glob("*.imports"))
    if not files:
        return None
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            return None
        lines = text.split("\n")
        if lines[0] != HEADER or lines[-1] != "" or any(line.startswith(INCOMPLETE) for line in lines):
            return None
        names.update(line for line in lines[1:] if line)
    if "pkg_resources" in names:  # it reads every distribution's metadata without asking importlib.metadata
        names.add(ALL_DISTRIBUTIONS)
    return names - NOT_MODULES - PROJECT_PACKAGES


def normalize(name: str) -> str:
    """A distribution name as the package index compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_lock(text: str) -> dict[str, str]:
    """`uv pip freeze` output: distribution -> version (or the direct reference of a source build)."""
    pins = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, _, version = line.partition("==")
        elif " @ " in line:
            name, _, version = line.partition(" @ ")
        else:
            continue
        pins[normalize(name.strip())] = version.strip()
    return pins


def _top_level(dist: importlib.metadata.Distribution) -> set[str]:
    """The top-level names a distribution installs: top_level.txt and its file list together (either
    alone can miss some). RECORD is read as text: torch lists some 15,000 files."""
    names = set((dist.read_text("top_level.txt") or "").split())
    for line in (dist.read_text("RECORD") or "").splitlines():
        first = line.partition(",")[0].strip('"').partition("/")
        if first[1]:
            names.add(first[0])
        elif first[0].endswith((".py", ".so", ".pyd")):
            names.add(first[0].split(".")[0])
    return {name for name in names if name and name not in ("..", "__pycache__")
            and not name.endswith((".dist-info", ".data", ".egg-info"))}


def _hash_tree(path: Path) -> str:
    digest = hashlib.sha256()
    found = (p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    files = [path] if path.is_file() else sorted(itertools.islice(found, MAX_HASHED_FILES + 1))
    if len(files) > MAX_HASHED_FILES:
        return f"unhashed-{uuid.uuid4().hex}"  # too big to hash: never equal to anything
    for file in files:
        digest.update(str(file.relative_to(path.parent)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def _importable(directory: Path) -> dict[str, list[Path]]:
    """What `import name` could find in one directory of the search path, by name: a package (or namespace
    directory), a module or an extension module. Listed once: a check asks for hundreds of names."""
    found: dict[str, list[Path]] = {}
    try:
        entries = sorted(os.listdir(directory))
    except OSError:
        return found
    for entry in entries:
        path = directory / entry
        if entry.endswith(".py") or entry.endswith((".so", ".pyd")) or (path.is_dir() and "." not in entry):
            found.setdefault(entry.split(".")[0], []).append(path)
    return found


class EnvironmentModules:
    """Which distribution, file or nothing provides each top-level module in one cell environment."""

    def __init__(self, site_packages: list[Path], lock_text: str, search_path: list[Path]) -> None:
        self.site_packages = site_packages
        self.search_path = [_importable(p) for p in search_path]  # cwd and PYTHONPATH: before site-packages
        self.site_files = [_importable(p) for p in site_packages]
        pins = parse_lock(lock_text)
        self.owners: dict[str, list[str]] = {}
        self.installed: dict[str, str] = {}  # distribution -> "name==version"
        self.entry_groups: dict[str, set[str]] = {}  # entry-point group -> the distributions declaring it
        for dist in importlib.metadata.distributions(path=[str(p) for p in site_packages]):
            name = normalize(dist.metadata["Name"] or "")
            self.installed[name] = f"{name}=={pins.get(name, f'{dist.version} (not in the lock)')}"
            for top in _top_level(dist):
                self.owners.setdefault(top, []).append(self.installed[name])
            for group in {entry.group for entry in dist.entry_points}:
                self.entry_groups.setdefault(" ".join(group.split()), set()).add(self.installed[name])
        self._cache: dict[str, str] = {}

    def provider(self, name: str) -> str:
        if name not in self._cache:
            self._cache[name] = self._provider(name)
        return self._cache[name]

    def _provider(self, name: str) -> str:
        if name == ALL_DISTRIBUTIONS:
            listing = "\n".join(sorted(self.installed.values())).encode()
            return f"lock:{hashlib.sha256(listing).hexdigest()[:16]}"
        if name.startswith(DIST_PREFIX):
            return self.installed.get(normalize(name[len(DIST_PREFIX):]), "absent")
        if name.startswith(ENTRY_POINTS_PREFIX):
            return "+".join(sorted(self.entry_groups.get(name[len(ENTRY_POINTS_PREFIX):], ()))) or "absent"
        parts = ["stdlib"] if name in sys.stdlib_module_names else []
        for directory in self.search_path:
            parts += [f"file:{_hash_tree(found)}" for found in directory.get(name, ())]
        owners = sorted(set(self.owners.get(name, ())))
        parts += owners
        if not owners:  # a file in site-packages that no distribution owns (uv's _virtualenv.py)
            for directory in self.site_files:
                parts += [f"file:{_hash_tree(found)}" for found in directory.get(name, ())]
        return "+".join(parts) or "absent"

    def providers(self, names) -> dict[str, str]:
        return {name: self.provider(name) for name in sorted(names)}


def by_provider(providers: dict[str, str]) -> dict[str, str]:
    """module -> provider, stored as provider -> space-separated modules (CheckResult.modules): a check
    imports some 150 stdlib modules, and a line for each would triple the size of a cell file."""
    grouped: dict[str, list[str]] = {}
    for name, provider in sorted(providers.items()):
        grouped.setdefault(provider, []).append(name)
    return {provider: " ".join(names) for provider, names in sorted(grouped.items())}


def module_names(grouped: dict[str, str]) -> frozenset[str]:
    """The modules of a stored CheckResult.modules."""
    return frozenset(name for names in grouped.values() for name in names.split())


def distributions(providers: dict[str, str]) -> dict[str, str]:
    """distribution -> version of every distribution among the providers (CheckResult.loaded)."""
    loaded = {}
    for provider in providers.values():
        for part in provider.split("+"):
            name, sep, version = part.partition("==")
            if sep:
                loaded[name] = version
    return dict(sorted(loaded.items()))


def search_path(pythonpath: str, cwd: Path | None = None) -> list[Path]:
    """The directories a check's process searches before site-packages: its working directory and PYTHONPATH."""
    entries = [cwd or Path.cwd(), *(Path(p) for p in pythonpath.split(os.pathsep) if p)]
    return list(dict.fromkeys(p.resolve() for p in entries if p.is_dir()))
