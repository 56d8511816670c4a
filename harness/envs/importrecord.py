"""Record the top-level modules a process imports, and the distributions whose metadata it reads, one name a
line, into a file per process.

Copied into every cell environment as `_harness_import_record` with a `.pth` line that imports it only
when HARNESS_IMPORT_RECORD names a directory, so every Python process of a check (its torchrun ranks,
vLLM's engine, forked workers) records itself without the check's help. Names are appended and
flushed as they come, so a process killed by a signal still leaves what it had imported.

Standalone on purpose: it runs before anything else is importable, so it imports only the stdlib.
"""
from __future__ import annotations

import os
import sys

VARIABLE = "HARNESS_IMPORT_RECORD"
HEADER = "# harness import record 1"
INCOMPLETE = "!incomplete"  # a line that makes the whole record untrusted
DIST_PREFIX = "dist:"  # a metadata lookup, not an import
INSTALLED_AS = "_harness_import_record"  # its name in a cell environment


class _Recorder:
    """A meta path finder that finds nothing: it notes each new top-level name and lets the real finders work."""

    def __init__(self) -> None:
        self.directory = ""
        self.pid = 0
        self.fd = -1
        self.seen: set[str] = set()

    def start(self, directory: str) -> None:
        """(Re)start recording into `directory`: this process's file gets every module already imported."""
        if (directory, os.getpid()) == (self.directory, self.pid) and self.fd >= 0:
            return  # already recording there
        if self.fd >= 0:
            os.close(self.fd)
        self.directory, self.pid = directory, os.getpid()
        path = os.path.join(directory, f"{self.pid}.imports")
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.seen = {name.partition(".")[0] for name in list(sys.modules)}
        self._write([HEADER, *sorted(self.seen)])

    def _write(self, lines: list[str]) -> None:
        try:
            os.write(self.fd, ("\n".join(lines) + "\n").encode())  # one write: a line is never half there
        except OSError:
            pass  # the reader finds the record incomplete and does not reuse the result

    def find_spec(self, fullname, path=None, target=None):
        top = fullname.partition(".")[0]
        if top not in self.seen:
            self.seen.add(top)
            self._write([top])
        return None

    def find_distributions(self, context=None):
        """importlib.metadata asks every finder: a check that reads a distribution's metadata (its version,
        say) depends on it even without importing it. `dist:*` stands for a listing of them all."""
        name = getattr(context, "name", None)
        key = DIST_PREFIX + (" ".join(str(name).split()) if name else "*")
        if key not in self.seen:
            self.seen.add(key)
            self._write([key])
        return iter(())

    def after_fork(self) -> None:
        if self.directory:
            inherited = self.fd
            try:
                self.start(self.directory)  # the child gets its own file, holding everything it inherited
            except OSError:
                self.fd = inherited
                self._write([f"{INCOMPLETE} {os.getpid()}"])  # said in the parent's file: the record is not whole
                self.fd = -1


RECORDER = _Recorder()


def start(directory: str) -> None:
    """Record this process from now on into `directory` (a fork server's child calls it for its check)."""
    if RECORDER not in sys.meta_path:
        sys.meta_path.insert(0, RECORDER)
        os.register_at_fork(after_in_child=RECORDER.after_fork)
    RECORDER.start(directory)


if __name__ == INSTALLED_AS and os.environ.get(VARIABLE):
    try:
        start(os.environ[VARIABLE])
    except OSError:
        pass  # no file, no record: the result is not reused
