"""verl's own Qwen3.5 example scripts of one release, read from where they are: verl's git repository.

verl ships no `examples/` in its sdist or wheel (read in 0.8.0, 0.9.0 and 0.9.1), so the scripts of a release are
fetched for its tag (`v<release>`; a release installed from a git revision names its commit in its
direct_url.json) as GitHub's tarball of that revision, read in memory: only regular files under `examples/` whose
name says Qwen3.5 (SCRIPT) are kept, each size-capped, nothing is extracted to disk by the archive's own names.
HARNESS_VERL_EXAMPLES names a folder that holds a checkout's `examples/` instead (a runner with a mirror, or no
network). A release, a commit or a folder is checked before it reaches a URL or a path; a runner that cannot reach
github.com gets `Unavailable` saying exactly that.
"""
from __future__ import annotations

import json
import os
import re
import tarfile
import tempfile
import urllib.error
import urllib.request
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from ..errors import InputError

REPOSITORY = "verl-project/verl"
TARBALL = "https://codeload.github.com/{repository}/tar.gz/{ref}"
FOLDER_VARIABLE = "HARNESS_VERL_EXAMPLES"
SCRIPT = re.compile(r"examples/(?:[\w.-]+/)*[\w.-]*qwen3[._-]?5[\w.-]*\.sh", re.IGNORECASE)
RELEASE = re.compile(r"\d+\.\d+\.\d+(?:\.post\d+)?")
COMMIT = re.compile(r"[0-9a-f]{40}")
ARCHIVE_LIMIT = 64 * 2**20  # bytes of the tarball read at most (verl's repository is about 10 MB compressed)
SCRIPT_LIMIT = 256 * 2**10  # bytes of one script kept at most
TIMEOUT = 60.0


class Unavailable(Exception):
    """The release's scripts cannot be had on this runner; the message says why."""


def revision(release: str) -> str:
    """The git revision of the installed verl `release`: the commit a git install records, else the tag."""
    try:
        recorded = distribution("verl").read_text("direct_url.json")
    except PackageNotFoundError:
        recorded = None
    commit = ((json.loads(recorded) if recorded else {}).get("vcs_info") or {}).get("commit_id", "")
    if COMMIT.fullmatch(commit or ""):
        return commit
    if not RELEASE.fullmatch(release or ""):
        raise Unavailable(f"verl {release!r} is neither a release with a tag (X.Y.Z) nor a recorded git commit: "
                          "no revision to read its example scripts from")
    return f"v{release}"


def from_folder(folder: str) -> dict[str, str]:
    """The Qwen3.5 scripts under `folder`/examples (HARNESS_VERL_EXAMPLES), by their path in the repository."""
    root = Path(folder).expanduser()
    if not root.is_dir() or not (root / "examples").is_dir():
        raise InputError(f"{FOLDER_VARIABLE}={folder!r}: expected a folder holding verl's examples/ (a checkout of "
                         "the release's tag)")
    root = root.resolve()
    found = {}
    for path in sorted((root / "examples").rglob("*.sh")):
        name = path.relative_to(root).as_posix()
        resolved = path.resolve()
        if SCRIPT.fullmatch(name) and resolved.is_file() and root in resolved.parents:
            found[name] = resolved.read_bytes()[:SCRIPT_LIMIT].decode("utf-8", "replace")
    return found


def read_tarball(archive: Path) -> dict[str, str]:
    """The Qwen3.5 scripts of a GitHub tarball (its members under one top folder), read in memory."""
    found = {}
    with tarfile.open(archive, "r:gz") as tar:
        for member in tar:
            _, _, name = member.name.partition("/")
            if member.isfile() and SCRIPT.fullmatch(name) and ".." not in name.split("/"):
                handle = tar.extractfile(member)
                if handle is not None:
                    found[name] = handle.read(SCRIPT_LIMIT).decode("utf-8", "replace")
    return found


def from_github(ref: str, timeout: float = TIMEOUT) -> dict[str, str]:
    """The Qwen3.5 scripts of revision `ref` (a tag vX.Y.Z or a commit), from GitHub's tarball."""
    if not (COMMIT.fullmatch(ref) or (ref.startswith("v") and RELEASE.fullmatch(ref[1:]))):
        raise Unavailable(f"{ref!r} is not a verl tag or commit")
    url = TARBALL.format(repository=REPOSITORY, ref=ref if COMMIT.fullmatch(ref) else f"refs/tags/{ref}")
    with tempfile.TemporaryDirectory(prefix="verl-examples-") as folder:
        archive = Path(folder) / "verl.tar.gz"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response, archive.open("wb") as out:  # noqa: S310
                while chunk := response.read(2**20):
                    if out.tell() + len(chunk) > ARCHIVE_LIMIT:
                        raise Unavailable(f"{url}: larger than {ARCHIVE_LIMIT // 2**20} MiB")
                    out.write(chunk)
        except urllib.error.HTTPError as exc:
            raise Unavailable(f"{url}: HTTP {exc.code} (no such revision on github.com?)") from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise Unavailable("verl's example scripts are not shipped in its sdist or wheel; this runner cannot "
                              f"reach github.com ({getattr(exc, 'reason', exc)})") from None
        try:
            return read_tarball(archive)
        except (tarfile.TarError, EOFError, OSError) as exc:
            raise Unavailable(f"{url}: not a readable tarball ({exc})") from None


def scripts(release: str) -> tuple[dict[str, str], str]:
    """({repository path: script text}, where they came from) for the installed verl `release`."""
    folder = os.environ.get(FOLDER_VARIABLE)
    if folder:
        return from_folder(folder), f"the folder {FOLDER_VARIABLE} names (taken as verl {release}'s examples)"
    ref = revision(release)
    return from_github(ref), f"github.com/{REPOSITORY} at {ref}"
