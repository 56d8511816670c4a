"""Where the installed verl's own tests come from, and the folder they run in.

A release's tests ship in its sdist on the package index (`verl-X.Y.Z.tar.gz`, with a `tests/` tree); a row
that installs verl from a git revision has them at that revision; an install from a local folder has them
beside it. The sdist is looked for in the find-links folders, then on the index the cell installs from
(pipconfig: the settings the harness forwards), and kept per release under the cache folder; a revision's
`tests/` is kept per commit. What cannot be had on this runner raises `Unavailable`, whose message names what
was missing and is the check's skip reason.

The tests run from a fresh folder holding `tests/` and a `verl` link to the installed package: some tests read
verl's files by path next to `tests/` (a repository's layout), and through the link they read the installed
release's files, while `import verl` is the installed release as well. A `pytest.ini` there stops pytest's
search for a configuration at that folder.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path
from urllib.parse import unquote, urljoin, urlparse

from harness.envs import pipconfig

CACHE_VARIABLE = "HARNESS_VERL_TESTS_CACHE"  # set by the harness: beside the cell environments
DEFAULT_CACHE = Path(".harness") / "envs" / ".verl-tests"
_GIT_URL = re.compile(r"^(?:git\+)?https://(github\.com|gitlab\.com)/[A-Za-z0-9][\w.-]{0,38}/[A-Za-z0-9][\w.-]{0,99}$")
_COMMIT = re.compile(r"^[0-9a-f]{7,40}$")
_HREF = re.compile(r"""<a\s[^>]*href=["']([^"']+)["']""", re.I)
NETWORK_TIMEOUT = 120


class Unavailable(RuntimeError):
    """The tests of the installed verl cannot be had on this runner; the message says which and why."""


@dataclass(frozen=True)
class Origin:
    kind: str  # "sdist", "git" or "folder"
    where: str  # the sdist's file name and where it came from, the url@commit, or the folder
    tests: Path  # a folder holding tests/ (an unpacked revision or local checkout), or the sdist file


def cache_root(environ: dict[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get(CACHE_VARIABLE) or DEFAULT_CACHE)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on `path` (cells in parallel fill the same cache)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def installed_package() -> Path:
    """The installed verl package's folder (site-packages/verl)."""
    return Path(distribution("verl").locate_file("verl")).resolve()


def installed_origin() -> dict:
    """verl's direct_url.json (PEP 610), {} for an install from the index."""
    try:
        text = distribution("verl").read_text("direct_url.json")
    except PackageNotFoundError:
        return {}
    try:
        return json.loads(text) if text else {}
    except json.JSONDecodeError:
        return {}


def locate(version: str, cache: Path, environ: dict[str, str] | None = None) -> Origin:
    """The tests of verl `version` as installed: its git revision, its local folder, else its release's sdist."""
    origin = installed_origin()
    vcs = origin.get("vcs_info") or {}
    if vcs:
        return _git(str(origin.get("url", "")), str(vcs.get("commit_id", "")), str(vcs.get("vcs", "")), cache)
    folder = urlparse(str(origin.get("url", "")))
    if "dir_info" in origin and folder.scheme == "file" and (Path(unquote(folder.path)) / "tests").is_dir():
        return Origin("folder", unquote(folder.path), Path(unquote(folder.path)))
    return _sdist(version, cache, environ)


# -- a release's sdist

def sdist_name(version: str) -> str:
    return f"verl-{version}.tar.gz"


def _sdist(version: str, cache: Path, environ: dict[str, str] | None) -> Origin:
    environ = dict(os.environ if environ is None else environ)
    name = sdist_name(version)
    kept = cache / "sdist" / name
    with locked(cache / "sdist" / f"{name}.lock"):
        if kept.is_file():
            return Origin("sdist", f"{name} (cached)", kept)
        for link in pipconfig.find_links(environ):
            folder = Path(unquote(urlparse(link).path)) if link.startswith("file:") else Path(link)
            if (folder / name).is_file():
                _copy_into(folder / name, kept)
                return Origin("sdist", f"{name} from {folder}", kept)
        index = pipconfig.index_url(environ)
        url, sha256 = _index_file(index, name)
        _download(url, sha256, kept)
        return Origin("sdist", f"{name} from {index}", kept)


def _copy_into(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    shutil.copyfile(source, partial)
    partial.replace(target)


def _fetch(url: str, accept: str) -> tuple[bytes, str]:
    parsed = urlparse(url)
    if parsed.scheme == "file":  # a file:// mirror: a project's page is a folder with index.html
        local = Path(unquote(parsed.path))
        page = local / "index.html" if local.is_dir() else local
        if not page.is_file():
            raise Unavailable(f"nothing at {url}")
        return page.read_bytes(), "text/html"
    if parsed.scheme not in ("http", "https"):
        raise Unavailable(f"the package index {url!r} is neither http(s) nor file://")
    request = urllib.request.Request(url, headers={"Accept": accept, "User-Agent": "qwen35-harness"})
    try:
        with urllib.request.urlopen(request, timeout=NETWORK_TIMEOUT) as response:
            return response.read(), response.headers.get("Content-Type", "")
    except (urllib.error.URLError, TimeoutError, OSError) as exc:
        raise Unavailable(f"the package index cannot be reached from this runner ({url}: {exc})") from None


def _index_file(index: str, name: str) -> tuple[str, str]:
    """(url, sha256 or "") of file `name` on the simple-API page of verl (PEP 691 JSON, or the HTML page)."""
    page = f"{index.rstrip('/')}/verl/"
    body, kind = _fetch(page, "application/vnd.pypi.simple.v1+json, text/html;q=0.1")
    if "json" in kind:
        files = [(f.get("url", ""), (f.get("hashes") or {}).get("sha256", ""))
                 for f in json.loads(body).get("files", []) if f.get("filename") == name]
    else:
        files = []
        for href in _HREF.findall(body.decode("utf-8", "replace")):
            location, _, fragment = href.partition("#")
            if unquote(location.rsplit("/", 1)[-1]) == name:
                files.append((location, fragment[len("sha256="):] if fragment.startswith("sha256=") else ""))
    if not files:
        raise Unavailable(f"{name} is not on the package index {index} (the release ships no sdist there)")
    url, sha256 = files[0]
    return urljoin(page, url), sha256


def _download(url: str, sha256: str, target: Path) -> None:
    body, _ = _fetch(url, "*/*")
    if sha256 and hashlib.sha256(body).hexdigest() != sha256:
        raise Unavailable(f"{url}: its sha256 is not the one the index lists")
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".part")
    partial.write_bytes(body)
    partial.replace(target)


# -- a git revision

def _git(url: str, commit: str, vcs: str, cache: Path) -> Origin:
    where = f"{url}@{commit}"
    if vcs != "git" or not _GIT_URL.match(url) or not _COMMIT.match(commit):
        raise Unavailable(f"verl is installed from {where!r} ({vcs or 'no vcs'}), which this check does not fetch "
                          "(a git revision on github.com or gitlab.com)")
    kept = cache / "git" / commit
    with locked(cache / "git" / f"{commit}.lock"):
        if (kept / "tests").is_dir():
            return Origin("git", f"{where} (cached)", kept)
        git = shutil.which("git")
        if git is None:
            raise Unavailable(f"the row pins verl at {where}; this runner has no git to take its tests")
        with tempfile.TemporaryDirectory(prefix="verl-git-", dir=_made(cache / "git")) as tmp:
            steps = (["init", "-q", tmp], ["-C", tmp, "fetch", "-q", "--depth", "1", "--filter=blob:none",
                                           url.removeprefix("git+"), commit],
                     ["-C", tmp, "checkout", "-q", "FETCH_HEAD", "--", "tests"])
            for step in steps:
                done = subprocess.run([git, *step], capture_output=True, text=True, timeout=600, check=False)
                if done.returncode != 0:
                    said = (done.stderr.strip().splitlines() or ["no message"])[-1][:300]
                    raise Unavailable(f"the row pins verl at {where}; this runner cannot take its tests from "
                                      f"there (git: {said})")
            kept.mkdir(parents=True, exist_ok=True)
            shutil.move(str(Path(tmp) / "tests"), str(kept / "tests"))
    return Origin("git", where, kept)


def _made(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


# -- the folder the tests run in

def prepare(origin: Origin, verl_package: Path, dest: Path) -> Path:
    """`dest` holding tests/ (from the sdist, or copied from the revision or folder), the `verl` link to the
    installed package, and a pytest.ini; returns `dest`."""
    dest.mkdir(parents=True, exist_ok=True)
    if origin.kind == "sdist":
        _unpack_tests(origin.tests, dest)
    else:
        shutil.copytree(origin.tests / "tests", dest / "tests", symlinks=True)
    if not (dest / "tests").is_dir():
        raise Unavailable(f"{origin.where} holds no tests/ folder")
    (dest / "verl").symlink_to(verl_package.resolve(), target_is_directory=True)
    (dest / "pytest.ini").write_text("[pytest]\n", encoding="utf-8")
    return dest


def _unpack_tests(sdist: Path, dest: Path) -> None:
    """Only `<top>/tests/...` of the sdist, as dest/tests/... (never its copy of verl: the installed one runs)."""
    try:
        with tarfile.open(sdist) as tar:
            members = []
            for member in tar.getmembers():
                top, _, rest = member.name.partition("/")
                if rest.startswith("tests/") and (member.isfile() or member.isdir()):
                    member.name = rest
                    members.append(member)
            tar.extractall(dest, members=members, filter="data")
    except (tarfile.TarError, OSError) as exc:
        raise Unavailable(f"{sdist.name} cannot be unpacked ({exc})") from None


def suite_files(root: Path) -> list[str]:
    """Every test file under root/tests, as paths relative to root (tests/x/test_y.py)."""
    return sorted(p.relative_to(root).as_posix() for p in (root / "tests").rglob("test_*.py"))
