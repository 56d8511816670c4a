"""Writing a file whole: the one way the harness writes a file a reader may see, a result or a file a person named;
and whether a file option names a file that can be written (`file_problem`, asked before anything runs).

The text goes to a temporary file of a unique name in the target's own folder, is flushed to disk, and then
replaces the target in one rename, so a reader sees the old file or the new one, never half of one. The new file
keeps the mode of the file it replaces (a read-only file stays read-only); a new file gets the mode any new file
gets under the umask. A symbolic link at the target is replaced, never followed: a link planted where a file is
written cannot send the write elsewhere, and no fixed temporary name exists for one to be planted on.
"""
from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

TEMPORARY_SUFFIX = ".tmp"  # a temporary file is .NAME.<random>.tmp beside NAME (results.records sweeps them)


def umask() -> int:
    """This process's umask, read without changing it where Linux allows (os.umask sets it, which would race with
    other threads creating files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    """The mode the written file gets: that of the regular file it replaces, else a new file's."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return 0o666 & ~umask()
    return stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else 0o666 & ~umask()


@contextlib.contextmanager
def atomic_writer(path: Path | str) -> Iterator[BinaryIO]:
    """A binary handle whose bytes become `path` whole when the block ends, or nothing when it raises (see the
    module's docstring): for what is written in pieces, such as a download. Raises OSError as the system does:
    IsADirectoryError where `path` is a folder, NotADirectoryError where a part of it is a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    mode = _mode_for(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=TEMPORARY_SUFFIX, dir=path.parent)
    try:
        os.fchmod(fd, mode)  # mkstemp makes the file 0600
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)  # a link at `path` is itself replaced: rename never follows it
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_bytes_atomic(path: Path | str, data: bytes) -> None:
    """Write `data` to `path` whole or not at all, through atomic_writer."""
    with atomic_writer(path) as handle:
        handle.write(data)


def write_text_atomic(path: Path | str, text: str) -> None:
    """UTF-8 text through write_bytes_atomic."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path | str, data: Any) -> None:
    """JSON through write_text_atomic."""
    write_text_atomic(path, json.dumps(data, indent=1) + "\n")


def creation_problem(option: str, path: Path) -> str | None:
    """What keeps `path` from being made: the nearest part of it that exists is a file, or not writable; None when
    nothing does."""
    parent = path.parent
    while not parent.exists() and parent != parent.parent:  # the nearest part of the path that exists
        parent = parent.parent
    if not parent.is_dir():
        return f"{option} {path}: {parent} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"{option} {path}: cannot create it under {parent} (not writable)"
    return None


def file_problem(option: str, path: Path | str) -> str | None:
    """None when `path` names a file this process can write whole: not a folder, in a folder that exists or can be
    made and that this process can write (the file is replaced in its folder, keeping its mode); else what is
    wrong, one line naming the option."""
    path = Path(path)
    if path.is_dir():
        return f"{option} {path}: is a directory; expected a file"
    return creation_problem(option, path)
