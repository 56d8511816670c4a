"""A wheelhouse's manifest (DIR/wheelhouse.json, written by `harness wheelhouse`), read on the box: every field
checked before anything is installed, and the files a row installs named by the manifest alone.

    {"matrix", "target": {"platform", "python"}, "limit_bytes", "total_bytes",
     "cells": {id: {"add": ["name==version"], "from_interpreter": {dist: version}}},
     "benchmarks": {name: {"add", "left_out", "requirements"}},
     "files": [{"name", "version", "file", "size", "sha256"}]}

The box installs exactly the manifest's files, by path, each checked against its sha256 and the box's platform
and Python (`verify`); a wheel in the folder that the manifest does not name is refused (`foreign_wheels`), so no
installer can pick another build of a release than the one that was hashed. A manifest of the wrong shape is an
InputError (exit 2) naming the field, never a traceback.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Any

from packaging.tags import Tag, compatible_tags, cpython_tags
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from harness.errors import InputError
from harness.matrix.axes import PYTHON_RE

MANIFEST = "wheelhouse.json"
PLATFORM_RE = re.compile(r"^(x86_64|aarch64)-manylinux_2_\d{1,2}$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
_PIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9.+!_-]+$")


class _Shape(ValueError):
    """A field of the manifest is not what `wheelhouse` writes: its dotted name and what was expected."""


def _need(ok: bool, field: str, expected: str, value: Any) -> None:
    if not ok:
        raise _Shape(f"{field}: expected {expected}, got {json.dumps(value)[:60]}")


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _file_entry(index: int, entry: Any) -> None:
    """One `files` entry, every field checked."""
    field = f"files[{index}]"
    _need(isinstance(entry, dict), field, "an object", entry)
    for key in ("name", "version", "file", "sha256"):
        _need(isinstance(entry.get(key), str), f"{field}.{key}", "text", entry.get(key))
    name, file = entry["name"], entry["file"]
    # A bare wheel name in the folder: no folder part, nothing hidden, nothing that leaves it.
    _need(file == Path(file).name and "\\" not in file and not file.startswith(".") and file.endswith(".whl"),
          f"{field}.file", "the name of a wheel in the folder", file)
    try:
        wheel_name, wheel_version, _, _ = parse_wheel_filename(file)
        version = Version(entry["version"])
    except (InvalidWheelFilename, InvalidVersion):
        raise _Shape(f"{field}: {file!r} and version {entry['version']!r} are not a wheel and its version") from None
    _need(canonicalize_name(wheel_name) == canonicalize_name(name) and wheel_version == version,
          f"{field}.file", f"a wheel of {name} {entry['version']}", file)
    _need(bool(_SHA256.match(entry["sha256"])), f"{field}.sha256", "64 hexadecimal digits", entry["sha256"])
    _need(entry.get("size") is None or _whole(entry["size"]) and entry["size"] >= 0, f"{field}.size",
          "a number of bytes", entry.get("size"))


def _pins(field: str, pins: Any) -> None:
    """`add` lists: name==version pins (that each is a file of the manifest, whole in the folder, is asked of the
    rows and benchmarks a run takes, by `verify`)."""
    _need(isinstance(pins, list), field, "a list of name==version pins", pins)
    for pin in pins:
        _need(isinstance(pin, str) and bool(_PIN.match(pin)), field, "name==version pins", pin)


def check_shape(manifest: Any) -> None:
    """_Shape naming the first field that is not what `wheelhouse` writes."""
    _need(isinstance(manifest, dict), "the manifest", "a JSON object", manifest)
    target = manifest.get("target")
    _need(isinstance(target, dict), "target", "an object with platform and python", target)
    _need(isinstance(target.get("platform"), str) and bool(PLATFORM_RE.match(target["platform"])), "target.platform",
          "x86_64-manylinux_2_NN or aarch64-manylinux_2_NN", target.get("platform"))
    _need(isinstance(target.get("python"), str) and bool(PYTHON_RE.match(target["python"])), "target.python",
          "a Python version like 3.12", target.get("python"))
    limit, total = manifest.get("limit_bytes"), manifest.get("total_bytes")
    _need(_whole(limit) and limit > 0, "limit_bytes", "a number of bytes above 0", limit)
    _need(_whole(total) and total >= 0, "total_bytes", "a number of bytes", total)
    files = manifest.get("files")
    _need(isinstance(files, list), "files", "a list of wheel entries", files)
    for i, entry in enumerate(files):
        _file_entry(i, entry)
    cells = manifest.get("cells")
    _need(isinstance(cells, dict), "cells", "an object of rows", cells)
    for cell_id, entry in cells.items():
        _need(isinstance(entry, dict), f"cells.{cell_id}", "an object with add and from_interpreter", entry)
        _pins(f"cells.{cell_id}.add", entry.get("add", []))
        kept = entry.get("from_interpreter", {})
        _need(isinstance(kept, dict) and all(isinstance(v, str) for v in kept.values()),
              f"cells.{cell_id}.from_interpreter", "an object of distribution: version", kept)
    bench = manifest.get("benchmarks", {})
    _need(isinstance(bench, dict), "benchmarks", "an object of benchmarks", bench)
    for name, entry in bench.items():
        _need(isinstance(entry, dict), f"benchmarks.{name}", "an object with add and left_out", entry)
        _pins(f"benchmarks.{name}.add", entry.get("add", []))
        left_out = entry.get("left_out")
        _need(left_out is None or isinstance(left_out, str), f"benchmarks.{name}.left_out", "null or a reason",
              left_out)


def read(directory: Path) -> dict:
    """The folder's manifest, its shape checked; InputError (exit 2) naming the field that is wrong."""
    path = Path(directory) / MANIFEST
    try:
        manifest = json.loads(path.read_bytes().decode("utf-8"))
        check_shape(manifest)
        return manifest
    except _Shape as exc:
        raise InputError(f"--wheelhouse {directory}: {MANIFEST}: {exc}; rebuild it with "
                         "`python -m harness wheelhouse`") from None
    except (OSError, ValueError) as exc:
        raise InputError(f"--wheelhouse {directory}: not a wheelhouse ({path.name}: {str(exc).splitlines()[0]}); "
                         "build one with `python -m harness wheelhouse`") from None


def _entries(manifest: dict) -> dict[tuple[str, str], dict]:
    return {(canonicalize_name(f["name"]), f["version"]): f for f in manifest["files"]}


def wheel_paths(directory: Path, manifest: dict, pins: list[str]) -> list[Path]:
    """The files the manifest names for `pins` (checked by `read`): what the box installs, by path."""
    entries = _entries(manifest)
    return [Path(directory) / entries[(canonicalize_name(p.partition("==")[0]), p.partition("==")[2])]["file"]
            for p in pins]


def foreign_wheels(directory: Path, manifest: dict) -> list[str]:
    """The wheels in the folder that the manifest does not name (none is ever installed: they are refused)."""
    named = {f["file"] for f in manifest["files"]}
    return sorted(p.name for p in Path(directory).glob("*.whl") if p.name not in named)


def target_tags(platform: str, python: str) -> set[Tag]:
    """The wheel tags a CPython `python` (3.12) on `platform` (x86_64-manylinux_2_28) installs: every manylinux
    level up to the box's glibc, with the legacy names of 2_17, 2_12 and 2_5."""
    arch, _, level = platform.partition("-manylinux_2_")
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    platforms = []
    for minor in range(int(level), 4, -1):
        platforms.append(f"manylinux_2_{minor}_{arch}")
        if minor in legacy:
            platforms.append(f"{legacy[minor]}_{arch}")
    version = tuple(int(part) for part in python.split(".")[:2])
    return {*cpython_tags(version, platforms=platforms), *compatible_tags(version, f"cp{version[0]}{version[1]}",
                                                                          platforms=platforms)}


def verify(directory: Path, manifest: dict, pins: list[str], label: str) -> None:
    """Each of `pins` has its wheel in `directory`, with the manifest's sha256, installable on the manifest's
    target: checked by reading the folder alone (no installer, no index), so it holds on the box before anything
    is installed. InputError naming `label` ("row ID", "benchmark NAME") and the first pin that fails."""
    target = manifest["target"]
    tags = target_tags(str(target["platform"]), str(target["python"]))
    entries = {(canonicalize_name(str(f.get("name", ""))), str(f.get("version", ""))): f
               for f in manifest.get("files", []) if isinstance(f, dict)}
    for pin in pins:
        name, _, version = pin.partition("==")
        entry = entries.get((canonicalize_name(name), version))
        where = f"--wheelhouse {directory}: {label} cannot install from it offline: {pin}"
        if entry is None:
            raise InputError(f"{where} is not in its {MANIFEST}; rebuild it with `python -m harness wheelhouse`")
        path = Path(directory) / str(entry.get("file", ""))
        if not path.is_file():
            raise InputError(f"{where}: {path.name} is missing from the folder")
        if not parse_wheel_filename(path.name)[3] & tags:
            raise InputError(f"{where}: {path.name} is not for {target['platform']}, Python {target['python']}")
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
        if digest != entry.get("sha256"):
            raise InputError(f"{where}: {path.name} has sha256 {digest}, its {MANIFEST} says {entry.get('sha256')}")
