"""A wheelhouse: the wheels an air-gapped box's interpreter lacks for some cells, and a manifest of what each
cell takes from it and from the interpreter.

uv resolves each cell for the box's platform and Python with the box's packages as constraints (so what the box
has is kept, and only what it lacks or has at another version is added), in PEP 751 form, which names each
wheel's URL, size and hash. The size limit is checked before anything is downloaded; each file's hash after.

    DIR/*.whl             the wheels
    DIR/wheelhouse.json   {"matrix", "target", "limit_bytes", "total_bytes", "cells": {id: {"add", "from_interpreter"}},
                           "files": [{"name", "version", "file", "size", "sha256"}]}
"""
from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tempfile
import tomllib
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.requirements import Requirement
from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

from harness.envs import cellenv
from harness.envs.lifetime import die_with_parent
from harness.errors import EnvironmentMissing, InputError
from harness.matrix import Cell
from harness.results.records import write_json_atomic

from .have import same_release

MANIFEST = "wheelhouse.json"
DEFAULT_LIMIT_MB = 64
MIB = 1024 * 1024


@dataclass(frozen=True)
class Wheel:
    name: str  # canonical
    version: str
    url: str
    size: int | None
    sha256: str

    @property
    def file(self) -> str:
        return unquote(urlparse(self.url).path).rsplit("/", 1)[-1]

    @property
    def pin(self) -> str:
        return f"{self.name}=={self.version}"


class Unsatisfiable(InputError):
    """uv found no resolution; `reason` is its cause on one line."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


def _lock(requirements: list[str], constraints: list[str], platform: str, python: str,
          overrides: list[str] = ()) -> dict:
    """uv's PEP 751 lock of `requirements` for the target, wheels only, under `constraints`; `overrides`: the
    lines of the cell recipe's override file (its `exclude`, left out as the cell's install leaves it out)."""
    with tempfile.TemporaryDirectory(prefix="harness-wheelhouse-") as scratch:
        constraint_file = Path(scratch) / "constraints.txt"
        constraint_file.write_text("\n".join(constraints) + "\n", encoding="utf-8")
        argv = [cellenv.uv_binary(), "pip", "compile", "-", "--format", "pylock.toml", "--python-platform", platform,
                "--python-version", python, "--only-binary", ":all:", "--constraints", str(constraint_file),
                *cellenv.uv_override_args(overrides, Path(scratch) / "overrides.txt"),
                "--quiet", "--no-header", "--color", "never"]
        done = subprocess.run(argv, input="\n".join(requirements) + "\n", capture_output=True, text=True,
                              env=cellenv.uv_process_env(), timeout=600, check=False, preexec_fn=die_with_parent)
    if done.returncode != 0:
        reason = " ".join(done.stderr.split("cause:", 1)[-1].split())[:600]
        raise Unsatisfiable(f"the pins cannot be installed beside the box's packages for {platform}, Python "
                            f"{python}: {reason}", reason)
    return tomllib.loads(done.stdout)


def missing(cell: Cell, have: dict[str, str], platform: str, python: str) -> list[Wheel]:
    """The wheels of the cell's resolution that the box lacks (or has at another release)."""
    pinned = {canonicalize_name(Requirement(r).name) for r in cell.requirements}
    kept = {name: version.split("+", 1)[0] for name, version in sorted(have.items()) if name not in pinned}
    while True:  # the box's packages are kept where they fit; one the pins rule out is replaced from the wheelhouse
        try:
            lock = _lock(cell.requirements, [f"{n}=={v}" for n, v in kept.items()], platform, python,
                         cell.install.overrides())
            break
        except Unsatisfiable as exc:
            blamed = [n for n, v in kept.items() if re.search(rf"(?<![\w.-]){re.escape(n)}=={re.escape(v)}(?![\w.])",
                                                               exc.reason)]
            if not blamed:
                raise
            for name in blamed:
                del kept[name]
    wanted = []
    for package in lock.get("packages", []):
        name, version = canonicalize_name(package["name"]), str(package["version"])
        if same_release(have.get(name), version):
            continue
        wheels = package.get("wheels") or []
        if not wheels:
            raise InputError(f"{name}=={version} has no wheel for {platform}, Python {python}: a wheelhouse holds "
                             "wheels only")
        first = wheels[0]
        url = first.get("url") or Path(first["path"]).resolve().as_uri()
        wanted.append(Wheel(name, version, url, first.get("size"), str(first.get("hashes", {}).get("sha256", ""))))
    return wanted


def size_of(wheel: Wheel) -> int:
    if wheel.size is not None:
        return int(wheel.size)
    parsed = urlparse(wheel.url)
    if parsed.scheme == "file":
        return Path(unquote(parsed.path)).stat().st_size
    raise EnvironmentMissing(f"{wheel.file}: the index gives no size, so the limit cannot be checked before download")


def check_limit(wheels: list[Wheel], limit_bytes: int) -> int:
    """The total size; InputError naming the largest wheels when it is over the limit (nothing downloaded)."""
    total = sum(size_of(w) for w in wheels)
    if total > limit_bytes:
        largest = ", ".join(f"{w.file} {size_of(w) / MIB:.1f} MiB" for w in sorted(wheels, key=size_of)[::-1][:3])
        raise InputError(f"--limit-mb: the wheelhouse would hold {total / MIB:.1f} MiB, over its {limit_bytes / MIB:g} "
                         f"MiB limit (largest: {largest}); choose fewer cells or a box that has more of them")
    return total


def _fetch(wheel: Wheel, directory: Path) -> None:
    """Copy or download one wheel into `directory`, checking its hash before it gets its name."""
    try:
        parse_wheel_filename(wheel.file)
    except InvalidWheelFilename:
        raise InputError(f"{wheel.url}: not a wheel file name") from None
    target = directory / wheel.file
    partial = directory / f".{wheel.file}.part"
    digest = hashlib.sha256()
    try:
        with urllib.request.urlopen(wheel.url, timeout=120) as source, open(partial, "wb") as sink:
            while chunk := source.read(1 << 20):
                digest.update(chunk)
                sink.write(chunk)
    except OSError as exc:
        partial.unlink(missing_ok=True)
        raise EnvironmentMissing(f"{wheel.url}: download failed ({exc})") from None
    if wheel.sha256 and digest.hexdigest() != wheel.sha256:
        partial.unlink(missing_ok=True)
        raise EnvironmentMissing(f"{wheel.file}: sha256 {digest.hexdigest()} is not the index's {wheel.sha256}")
    partial.replace(target)


def build(cells: list[Cell], matrix_name: str, have: dict[str, str], out: Path, platform: str, python: str,
          limit_bytes: int, fetch: bool = True) -> dict:
    """Resolve, check the limit, fetch, and write the manifest; returns the manifest. Without `fetch`, only the
    manifest it would write is returned (nothing is downloaded or written)."""
    out = Path(out)
    if out.exists() and any(out.iterdir()) and not (out / MANIFEST).is_file():
        raise InputError(f"--out {out}: not empty and not a wheelhouse; give an empty or new folder")
    per_cell, wheels = {}, {}
    for cell in cells:
        found = missing(cell, have, platform, python)
        wheels.update({w.pin: w for w in found})
        added = {w.name for w in found}
        per_cell[cell.id] = {"add": sorted(w.pin for w in found),
                             "from_interpreter": {dist: version for dist, version in cell.pinned_releases().items()
                                                  if canonicalize_name(dist) not in added}}
    chosen = sorted(wheels.values(), key=lambda w: w.pin)
    total = check_limit(chosen, limit_bytes)
    manifest = {"matrix": matrix_name, "target": {"platform": platform, "python": python},
                "limit_bytes": limit_bytes, "total_bytes": total, "cells": per_cell,
                "files": [{"name": w.name, "version": w.version, "file": w.file, "size": size_of(w),
                           "sha256": w.sha256} for w in chosen]}
    if not fetch:
        return manifest
    out.mkdir(parents=True, exist_ok=True)
    for wheel in chosen:
        if not (out / wheel.file).is_file():
            _fetch(wheel, out)
    kept = {w.file for w in chosen} | {MANIFEST}
    for stale in out.glob("*.whl"):  # a rebuilt wheelhouse holds only what its manifest names
        if stale.name not in kept:
            stale.unlink()
    write_json_atomic(out / MANIFEST, manifest)
    return manifest


def read_manifest(directory: Path) -> dict:
    path = Path(directory) / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(manifest.get("cells"), dict) or not isinstance(manifest.get("target"), dict):
            raise ValueError("no cells or target")
        return manifest
    except (OSError, ValueError, AttributeError) as exc:
        raise InputError(f"--wheelhouse {directory}: not a wheelhouse ({path.name}: {exc}); build one with "
                         "`python -m harness wheelhouse`") from None


