"""Tiny wheels and source releases made in a test's folder: a local package index that uv reads as find-links,
so resolution and offline installs are tested without a network; and the wheelhouse an offline run (`run --here`)
installs from."""
from __future__ import annotations

import hashlib
import importlib.metadata
import io
import json
import sys
import tarfile
import zipfile
from pathlib import Path

from packaging.utils import parse_wheel_filename
from packaging.version import Version


def wheel(folder: Path, name: str, version: str, requires: tuple[str, ...] = (), tag: str = "py3-none-any",
          payload: int = 0) -> Path:
    """A wheel of `name` `version` declaring `requires`, with a module of the same name and `payload` bytes of
    incompressible data (to make a wheel of a known size)."""
    stem = name.replace("-", "_")
    path = Path(folder) / f"{stem}-{version}-{tag}.whl"
    info = f"{stem}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{stem}/__init__.py", f"__version__ = {version!r}\n")
        if payload:
            archive.writestr(f"{stem}/payload.bin", bytes((i * 7919 + i // 251) % 256 for i in range(payload)),
                             compress_type=zipfile.ZIP_STORED)
        archive.writestr(f"{info}/METADATA", metadata)
        archive.writestr(f"{info}/WHEEL", f"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: {tag}\n")
        archive.writestr(f"{info}/RECORD", "")
    return path


def sdist(folder: Path, name: str, version: str) -> Path:
    """A source release only (no wheel): a pin on it needs a build."""
    base = f"{name.replace('-', '_')}-{version}"
    path = Path(folder) / f"{base}.tar.gz"
    data = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    with tarfile.open(path, "w:gz") as archive:
        entry = tarfile.TarInfo(f"{base}/PKG-INFO")
        entry.size = len(data)
        archive.addfile(entry, io.BytesIO(data))
    return path


def offline_index(monkeypatch, folder: Path) -> None:
    """uv reads only `folder` (its index is an empty file:// one), and any attempt at the network goes to a
    closed port."""
    empty = Path(folder) / "empty-index"
    empty.mkdir(exist_ok=True)
    monkeypatch.setenv("UV_DEFAULT_INDEX", empty.as_uri())
    monkeypatch.delenv("UV_INDEX_URL", raising=False)
    monkeypatch.setenv("UV_FIND_LINKS", str(folder))
    for variable in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
        monkeypatch.setenv(variable, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)


def wheelhouse_manifest(folder: Path, cells: dict[str, list[str]], python: str, from_interpreter=None,
              benchmarks=None) -> None:
    """The manifest `wheelhouse` writes for the wheels in `folder` (named, sized and hashed as it does)."""
    files = []
    for path in sorted(folder.glob("*.whl")):
        name, version, _, _ = parse_wheel_filename(path.name)
        files.append({"name": name, "version": str(version), "file": path.name, "size": path.stat().st_size,
                      "sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
    (folder / "wheelhouse.json").write_text(json.dumps({
        "matrix": "t", "target": {"platform": "x86_64-manylinux_2_28", "python": python}, "limit_bytes": 64 << 20,
        "total_bytes": sum(f["size"] for f in files),
        "cells": {cid: {"add": add, "from_interpreter": (from_interpreter or {}).get(cid, {})}
                  for cid, add in cells.items()},
        "benchmarks": benchmarks or {}, "files": files}))


def here_toml(torch: str, transformers: str) -> str:
    """A matrix of this interpreter's torch and transformers: a text row, a VL row that needs tinypkg 1.0 from the
    wheelhouse, and a row whose torch no interpreter has."""
    return f"""
[matrix]
name = "here"
checks = ["stack-smoke"]

[axes]
torch = ["{torch}"]
transformers = ["{transformers}"]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]

[[include]]
model = "vl"
requirements = ["tinypkg==1.0"]

[[include]]
torch = "9.9.9"
"""


def _public(dist: str) -> str:
    return Version(importlib.metadata.version(dist)).public


def here_setup(tmp_path: Path, monkeypatch) -> tuple[Path, dict[str, str], str]:
    """A wheelhouse holding tinypkg 1.0 and the `here_toml` matrix of this interpreter's torch and transformers:
    (the folder, model + torch -> cell id, torch)."""
    from harness import matrix

    links = tmp_path / "wheels"
    links.mkdir()
    wheel(links, "tinypkg", "1.0")
    offline_index(monkeypatch, links)
    monkeypatch.setenv("UV_DEFAULT_INDEX", "http://127.0.0.1:9/simple")  # an index that cannot answer
    torch, transformers = _public("torch"), _public("transformers")
    (tmp_path / "here.toml").write_text(here_toml(torch, transformers))
    cells = {c.axes["model"] + c.axes["torch"]: c.id for c in matrix.load(tmp_path / "here.toml").cells}
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    wheelhouse_manifest(links, {cells["vl" + torch]: ["tinypkg==1.0"], cells["text" + torch]: [],
                                cells["text9.9.9"]: []}, python)
    return tmp_path, cells, torch
