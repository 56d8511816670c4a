"""Ask the package index which releases exist, so a matrix naming a release that does not
exist fails before anything is installed. Reads the simple API (PEP 691 JSON, or the HTML
page) over https or from a file:// mirror, plus local find-links directories."""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

from packaging.specifiers import SpecifierSet
from packaging.utils import (
    InvalidSdistFilename,
    InvalidWheelFilename,
    canonicalize_name,
    parse_sdist_filename,
    parse_wheel_filename,
)
from packaging.version import Version

from harness.envs import pipconfig
from harness.errors import EnvironmentMissing, InputError


@dataclass(frozen=True)
class ReleaseFile:
    """One file of a release as the index lists it (a wheel or an sdist)."""

    filename: str
    url: str  # absolute: https://..., file://... or a local path (find-links)
    version: Version
    requires_python: str = ""
    yanked: bool = False
    core_metadata: bool = False  # the index serves the wheel's METADATA beside it (PEP 658)


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[dict[str, str | None]] = []

    def handle_starttag(self, tag, attrs):
        if tag == "a":
            self.links.append(dict(attrs))


def _version_of(filename: str, name: str) -> Version | None:
    try:
        if filename.endswith(".whl"):
            dist, version, *_ = parse_wheel_filename(filename)
        else:
            dist, version = parse_sdist_filename(filename)
    except (InvalidWheelFilename, InvalidSdistFilename, ValueError):
        return None
    return version if canonicalize_name(dist) == name else None


def _read(url: str) -> tuple[str, str]:
    parsed = urlparse(url)
    if parsed.scheme == "file":
        base = Path(unquote(parsed.path))
        page = base / "index.html"
        return (page.read_text(encoding="utf-8"), "text/html") if page.exists() else ("", "missing")
    request = urllib.request.Request(url, headers={
        "Accept": "application/vnd.pypi.simple.v1+json, text/html;q=0.1", "User-Agent": "qwen35-harness"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.read().decode("utf-8"), response.headers.get("Content-Type", "")
    except urllib.error.HTTPError as exc:
        if exc.code == 404:
            return "", "missing"
        raise EnvironmentMissing(f"package index {url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise EnvironmentMissing(f"package index {url} unreachable ({exc}); pass --no-index-check to skip "
                                 "the release check") from None


class PackageIndex:
    """Releases per distribution, from one simple index and any find-links directories."""

    def __init__(self, url: str | None = None, find_links: list[str] | None = None):
        # Where the index is, and pip's settings that say so, are looked up when first needed: a matrix whose
        # releases' requirements are all cached never asks (harness.envs.pipconfig starts pip).
        self._url = url.rstrip("/") if url else None
        self._find_links = find_links
        self._cache: dict[str, set[Version]] = {}
        self._files: dict[str, list[ReleaseFile]] = {}
        self._listed: dict[str, set[Version]] = {}  # versions a JSON page lists (with or without files)

    @property
    def url(self) -> str:
        if self._url is None:
            self._url = pipconfig.index_url().rstrip("/")
        return self._url

    @property
    def find_links(self) -> list[str]:
        if self._find_links is None:
            self._find_links = pipconfig.find_links()
        return self._find_links

    def versions(self, distribution: str) -> set[Version]:
        name = canonicalize_name(distribution)
        if name not in self._cache:
            files = self.files(name)
            self._cache[name] = {f.version for f in files} | self._listed.get(name, set())
        return self._cache[name]

    def files(self, distribution: str) -> list[ReleaseFile]:
        """Every file of `distribution`: the find-links directories' first, then the index's."""
        name = canonicalize_name(distribution)
        if name not in self._files:
            self._files[name] = self._from_find_links(name) + self._from_index(name)
        return self._files[name]

    def _from_index(self, name: str) -> list[ReleaseFile]:
        page = f"{self.url}/{name}/"
        body, kind = _read(page)
        if kind == "missing" or not body:
            return []
        if "json" in kind:
            data = json.loads(body)
            self._listed[name] = {Version(v) for v in data.get("versions") or [] if re.match(r"^[0-9]", v)}
            links = [{"href": f.get("url", ""), "filename": f.get("filename", ""),
                      "data-requires-python": f.get("requires-python") or "", "data-yanked": f.get("yanked"),
                      "data-core-metadata": f.get("core-metadata") or f.get("dist-info-metadata")}
                     for f in data.get("files", [])]
        else:
            parser = _Links()
            parser.feed(body)
            links = parser.links
        found = []
        for link in links:
            href = str(link.get("href") or "")
            filename = str(link.get("filename") or unquote(href.split("#", 1)[0].rsplit("/", 1)[-1]))
            version = _version_of(filename, name)
            if version is not None:
                found.append(ReleaseFile(filename, urljoin(page, href.split("#", 1)[0]), version,
                                         str(link.get("data-requires-python") or ""),
                                         link.get("data-yanked") not in (None, False),
                                         link.get("data-core-metadata") not in (None, False, "false")
                                         or link.get("data-dist-info-metadata") not in (None, False, "false")))
        return found

    def _from_find_links(self, name: str) -> list[ReleaseFile]:
        found: list[ReleaseFile] = []
        for location in self.find_links:
            path = Path(unquote(urlparse(location).path)) if location.startswith("file:") else Path(location)
            if path.is_dir():
                found += [ReleaseFile(f.name, str(f), v) for f in sorted(path.iterdir())
                          if (v := _version_of(f.name, name)) is not None]
        return found

    def has(self, distribution: str, version: str) -> bool:
        spec = SpecifierSet(f"=={version}")  # == ignores local labels: 2.13.0 matches 2.13.0+cpu
        return any(spec.contains(v, prereleases=True) for v in self.versions(distribution))


def check_releases(requirements: dict[str, set[str]], where: str | Callable[[str, str], str],
                   index: PackageIndex | None = None) -> None:
    """Raise InputError naming the first (distribution, version) that the index does not have.

    `where` names the source: a string, or a function of (distribution, version) that finds the
    line pinning it."""
    index = index or PackageIndex()
    locate = where if callable(where) else (lambda _dist, _version: where)
    for distribution in sorted(requirements):
        available = index.versions(distribution)
        if not available:
            some = next(iter(requirements[distribution]))
            raise InputError(f"{locate(distribution, some)}: package {distribution!r} not found on {index.url}")
        for version in sorted(requirements[distribution], key=Version):
            if not index.has(distribution, version):
                newest = ", ".join(str(v) for v in sorted(available)[-3:])
                raise InputError(f"{locate(distribution, version)}: {distribution} {version} does not exist on "
                                 f"{index.url} (newest: {newest})")


def check_cells(cells, where: str | Callable[[str, str], str], index: PackageIndex | None = None) -> None:
    """check_releases for every release `cells` pin as the matrix writes it (axes, extra pins and recipe pins; a
    git source is none). A pin read from another release's declarations (as-pinned-by-AXIS: verl 0.9.1's
    [megatron] extra pins megatron-bridge 0.5.2, which the index lacks) is that release's finding, which the
    cell's install verdict reports, never bad input."""
    wanted: dict[str, set[str]] = {}
    for cell in cells:
        for dist, version in cell.pinned_releases(written_only=True).items():
            wanted.setdefault(dist, set()).add(version)
    check_releases(wanted, where, index)
