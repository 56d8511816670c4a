"""What an interpreter already has: a `pip freeze` style list (name==version, one a line), read from a file, or
taken from the running interpreter."""
from __future__ import annotations

import importlib.metadata
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from harness.errors import InputError


def read(path: Path) -> dict[str, str]:
    """Canonical name -> version of each `name==version` line; comments, blank lines and options are skipped, a
    `name @ url` line (a local build) has no version to match and is refused with its line number."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: cannot read the package list ({exc})") from None
    found: dict[str, str] = {}
    for number, raw in enumerate(lines, 1):
        line = raw.split("#", 1)[0].strip()
        if not line or line.startswith("-"):
            continue
        try:
            req = Requirement(line)
            specs = list(req.specifier)
            if req.url or len(specs) != 1 or specs[0].operator not in ("==", "==="):
                raise InvalidRequirement("expected name==version")
            Version(specs[0].version)
        except (InvalidRequirement, InvalidVersion) as exc:
            raise InputError(f"{path}, line {number}: {line[:80]!r} is not a name==version line ({exc})") from None
        found[canonicalize_name(req.name)] = specs[0].version
    if not found:
        raise InputError(f"{path}: no name==version line; write the box's `pip freeze` into it")
    return found


def current() -> dict[str, str]:
    """Canonical name -> version of every distribution this interpreter imports from (first one found wins,
    as the import system's order does)."""
    found: dict[str, str] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"]
        if name:
            found.setdefault(canonicalize_name(name), dist.version)
    return found


def same_release(have: str | None, wanted: str) -> bool:
    """2.11.0+cu130 is the 2.11.0 a row declares: the local build label names the box's build, not another release."""
    if have is None:
        return False
    try:
        return Version(have).public == Version(wanted).public
    except InvalidVersion:
        return have == wanted
