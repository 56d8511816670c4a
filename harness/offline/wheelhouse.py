"""A wheelhouse: the wheels an air-gapped box's interpreter lacks for some cells, and a manifest of what each
cell takes from it and from the interpreter.

uv resolves each cell for the box's platform and Python with the box's packages as constraints (so what the box
has is kept, and only what it lacks or has at another version is added), in PEP 751 form, which names each
wheel's URL, size and hash. The size limit is checked before anything is downloaded; each file's hash after.

    DIR/*.whl             the wheels
    DIR/wheelhouse.json   the manifest (manifest.py): the target, each cell's and benchmark's wheels, each file's
                          name, version, size and sha256
"""
from __future__ import annotations

import hashlib
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
from harness.envs.cellenv import die_with_parent
from harness.errors import EnvironmentMissing, InputError
from harness.files import atomic_writer
from harness.matrix import Cell
from harness.results.records import write_json_atomic

from . import benchmarks
from .box_interpreter import same_release
from .manifest import MANIFEST

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
    return missing_for(list(cell.requirements), cell.install.overrides(), have, platform, python)


def missing_for(requirements: list[str], overrides: list[str], have: dict[str, str], platform: str,
                python: str) -> list[Wheel]:
    """The wheels of the resolution of `requirements` beside the box's packages that the box lacks."""
    pinned = {canonicalize_name(Requirement(r).name) for r in requirements}
    kept = {name: version.split("+", 1)[0] for name, version in sorted(have.items()) if name not in pinned}
    while True:  # the box's packages are kept where they fit; one the pins rule out is replaced from the wheelhouse
        try:
            lock = _lock(requirements, [f"{n}=={v}" for n, v in kept.items()], platform, python, overrides)
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


def _fetch(wheel: Wheel, directory: Path) -> str:
    """Copy or download one wheel into `directory`, checking its hash before it gets its name; its sha256."""
    try:
        parse_wheel_filename(wheel.file)
    except InvalidWheelFilename:
        raise InputError(f"{wheel.url}: not a wheel file name") from None
    target = directory / wheel.file
    digest = hashlib.sha256()
    try:
        with atomic_writer(target) as sink:  # the wheel gets its name only whole and with the index's hash
            with urllib.request.urlopen(wheel.url, timeout=120) as source:
                while chunk := source.read(1 << 20):
                    digest.update(chunk)
                    sink.write(chunk)
            if wheel.sha256 and digest.hexdigest() != wheel.sha256:
                raise EnvironmentMissing(f"{wheel.file}: sha256 {digest.hexdigest()} is not the index's "
                                         f"{wheel.sha256}")
    except OSError as exc:
        raise EnvironmentMissing(f"{wheel.url}: download failed ({exc})") from None
    return digest.hexdigest()


def _benchmark(name: str, pinned: dict[str, str], have: dict[str, str], platform: str, python: str,
               taken: dict[str, Wheel], room: int) -> tuple[list[Wheel], str | None]:
    """(every wheel a benchmark needs beyond the box, None) when those the rows' do not already hold fit in `room`
    bytes; ([], why it is left out) when they do not, or cannot be had as wheels for the box."""
    try:
        found = missing_for(benchmarks.requirements(name, pinned), [], have, platform, python)
    except InputError as exc:
        return [], str(exc)
    extra = [w for w in found if w.pin not in taken]
    size = sum(size_of(w) for w in extra)
    if size > room:
        largest = ", ".join(f"{w.file} {size_of(w) / MIB:.1f} MiB" for w in sorted(extra, key=size_of)[::-1][:3])
        return [], (f"its {len(extra)} wheels beyond the box and the rows ({size / MIB:.1f} MiB; largest: {largest}) "
                    f"do not fit in the {room / MIB:.1f} MiB the rows leave of the limit")
    return found, None


def build(cells: list[Cell], matrix_name: str, have: dict[str, str], out: Path, platform: str, python: str,
          limit_bytes: int, fetch: bool = True, bench: tuple[str, ...] = ()) -> dict:
    """Resolve, check the limit, fetch, and write the manifest; returns the manifest. Without `fetch`, only the
    manifest it would write is returned (nothing is downloaded or written). The rows come first: each benchmark
    of `bench` (harness.offline.benchmarks) goes in only where its wheels fit in what the rows leave of the limit,
    and the manifest says why one is left out."""
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
    total = check_limit(sorted(wheels.values(), key=lambda w: w.pin), limit_bytes)
    per_bench = {}
    pinned = {dist: version for cell in cells for dist, version in cell.pinned_releases().items()}
    for name in bench:
        found, left_out = _benchmark(name, pinned, have, platform, python, wheels, limit_bytes - total)
        total += sum(size_of(w) for w in found if w.pin not in wheels)
        wheels.update({w.pin: w for w in found})
        per_bench[name] = {"add": sorted(w.pin for w in found), "left_out": left_out,
                           "requirements": benchmarks.requirements(name, pinned)}
    chosen = sorted(wheels.values(), key=lambda w: w.pin)
    manifest = {"matrix": matrix_name, "target": {"platform": platform, "python": python},
                "limit_bytes": limit_bytes, "total_bytes": total, "cells": per_cell, "benchmarks": per_bench,
                "files": [{"name": w.name, "version": w.version, "file": w.file, "size": size_of(w),
                           "sha256": w.sha256} for w in chosen]}
    if not fetch:
        return manifest
    out.mkdir(parents=True, exist_ok=True)
    for wheel, entry in zip(chosen, manifest["files"]):
        if not (out / wheel.file).is_file():
            entry["sha256"] = _fetch(wheel, out)  # the index's, checked; or, where it gave none, the file's
        elif not wheel.sha256:
            entry["sha256"] = hashlib.sha256((out / wheel.file).read_bytes()).hexdigest()
    kept = {w.file for w in chosen} | {MANIFEST}
    for stale in out.glob("*.whl"):  # a rebuilt wheelhouse holds only what its manifest names
        if stale.name not in kept:
            stale.unlink()
    write_json_atomic(out / MANIFEST, manifest)
    return manifest
