"""What a matrix's comments claim is the newest release, checked against recorded index data.

Two forms are read: a version followed in its clause by "newest" ("0.19.2 the newest", "megatron-core
0.16.1 (newest for Python 3.11)"), for the package named last before it in the same comment block, else
the axis of the line under that block; and
an axis line whose comment says "the newest" without a version (`tensordict = ["0.10.0", "0.15.3"]  # ...
and the newest`), which claims its last value.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from . import axes as ax

_CLAIM = re.compile(r"(?P<version>\d+\.\d+\.\d+)[^,;.\d]{0,12}?\bnewest\b(?: for Python (?P<python>3\.\d+))?")
_AXIS_LINE = re.compile(r"^(?P<axis>[a-z_]+)\s*=\s*\[(?P<values>[^\]]*)\]\s*#(?P<comment>.*\bnewest\b.*)$")
_NAMES = sorted({*ax.PACKAGE_AXES, *ax.PACKAGE_AXES.values()}, key=len, reverse=True)
_NAME = re.compile(r"(?<![\w-])(" + "|".join(re.escape(n) for n in _NAMES) + r")(?![\w-])")


@dataclass(frozen=True)
class Claim:
    line: int
    distribution: str
    version: str
    python: str | None = None

    def check(self, releases: dict[str, list[dict[str, str]]]) -> str | None:
        """Why the claim is wrong by `releases` (distribution -> [{version, requires_python}]); None if right."""
        known = releases.get(self.distribution, [])
        fitting = [Version(r["version"]) for r in known if self.python is None or _accepts(r, self.python)]
        if not fitting:
            return f"line {self.line}: no {self.distribution} release recorded" + (
                f" for Python {self.python}" if self.python else "")
        newest = max(fitting)
        if Version(self.version) != newest:
            return (f"line {self.line}: claims {self.distribution} {self.version} is the newest"
                    + (f" for Python {self.python}" if self.python else "") + f"; the index has {newest}")
        return None


def _accepts(release: dict[str, str], python: str) -> bool:
    try:
        return not release["requires_python"] or Version(python) in SpecifierSet(release["requires_python"])
    except InvalidSpecifier:
        return True


def _dist(name: str) -> str:
    return ax.PACKAGE_AXES.get(name, name)


def claims(text: str) -> list[Claim]:
    found, block, pending = [], "", []  # pending: (line, version, python) of a block naming no package
    for number, line in enumerate(text.splitlines(), 1):
        code, _, comment = line.partition("#")
        key = re.match(r"^([a-z_]+)\s*=", code.strip())
        if key and pending and key[1] in ax.PACKAGE_AXES:  # the axis under the comment block is its subject
            found += [Claim(n, _dist(key[1]), v, p) for n, v, p in pending]
        pending = pending if not code.strip() else []
        block = block + " " + comment if comment and not code.strip() else comment
        axis_line = _AXIS_LINE.match(line.strip())
        if axis_line and axis_line["axis"] in ax.PACKAGE_AXES and not _CLAIM.search(axis_line["comment"]):
            values = re.findall(r'"([^"]+)"', axis_line["values"])
            if values and "the newest" in axis_line["comment"]:
                found.append(Claim(number, _dist(axis_line["axis"]), values[-1]))
            continue
        for match in _CLAIM.finditer(comment):
            before = block[: len(block) - len(comment) + match.start()]
            names = _NAME.findall(before)
            if names:
                found.append(Claim(number, _dist(names[-1]), match["version"], match["python"]))
            elif not code.strip():
                pending.append((number, match["version"], match["python"]))
    return found
