"""Tiny wheels and source releases made in a test's folder: a local package index that uv reads as find-links,
so resolution and offline installs are tested without a network."""
from __future__ import annotations

import io
import tarfile
import zipfile
from pathlib import Path


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
