"""Record the top-level modules a process imports, and the distributions whose metadata it reads, one name a
line, into a file per process.

Copied into every cell environment as `_harness_import_record` with a `.pth` line that imports it only
when HARNESS_IMPORT_RECORD names a directory, so every Python process of a check (its torchrun ranks,
vLLM's engine, forked workers) records itself without the check's help. Names are appended and
flushed as they come, so a process killed by a signal still leaves what it had imported.

A fork server (HARNESS_IMPORT_GRAPH set) records instead, from its first line, who asks for what while it
preloads: each import statement, `importlib.import_module`, `find_spec` and metadata read, as an edge from
the package whose code asked (the innermost frame outside the standard library) to what it asked for. A
check forked from it then records what its own code asks for (every import statement, even of a module
already loaded) and, for each preloaded package it touches, everything that package asked for in the
server, transitively: not everything the server happens to hold. External packages are keyed by their
top-level name, so an object a package set up lazily at preload counts with the whole package; the
project's own packages by module, since a check loads some of their modules, not all.

Standalone on purpose: it runs before anything else is importable, so it imports only the stdlib.
"""
from __future__ import annotations

import builtins
import importlib
import importlib.util
import os
import sys

VARIABLE = "HARNESS_IMPORT_RECORD"
GRAPH_VARIABLE = "HARNESS_IMPORT_GRAPH"  # set for a fork server: note who asks for what while it preloads
HEADER = "# harness import record 1"
INCOMPLETE = "!incomplete"  # a line that makes the whole record untrusted
DIST_PREFIX = "dist:"  # a metadata lookup, not an import
ALL_DISTRIBUTIONS = DIST_PREFIX + "*"  # a listing of every distribution
ENTRY_POINTS_PREFIX = "entry-points:"  # a listing read only for the entry points of one group
_NOT_MODULES = (DIST_PREFIX, ENTRY_POINTS_PREFIX)  # keys that are not module names (a group's name has dots)
_METADATA_MODULES = frozenset({"importlib.metadata", "importlib_metadata"})  # the stdlib's and its backport
INSTALLED_AS = "_harness_import_record"  # its name in a cell environment
PROJECT = frozenset({"harness", "trainers"})  # keyed by module, not by package
STARTUP = "<startup>"  # what interpreter start-up asked for (.pth lines, runpy): every check has it
_MACHINERY = frozenset({"importlib._bootstrap", "importlib._bootstrap_external"})  # in every import's stack


def _top(name: str) -> str:
    return name.partition(".")[0]


def _keys(name: str) -> list[str]:
    """The graph's keys for module `name`: its top-level package, or for the project the module and its parents."""
    if _top(name) not in PROJECT:
        return [_top(name)]
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _absolute(name: str, globals_: dict | None, level: int) -> str:
    """The module an import statement names, `from . import x` resolved against the importing module."""
    if level == 0 or not globals_:
        return name
    package = globals_.get("__package__") or ""
    if not package:
        module = globals_.get("__name__") or ""
        package = module if "__path__" in globals_ else module.rpartition(".")[0]
    base = package.rsplit(".", level - 1)[0] if level > 1 else package
    return f"{base}.{name}" if name else base


class _Recorder:
    """A meta path finder that finds nothing: it notes each new top-level name and lets the real finders work.

    Three modes: a plain process writes every module it holds, then each new one (`find_spec`); a fork
    server keeps an import graph (`edges`); a process forked from one writes what it asks for and the graph's
    closure of it (`forked`)."""

    def __init__(self) -> None:
        self.directory = ""
        self.pid = 0
        self.fd = -1
        self.seen: set[str] = set()  # names written to this process's file
        self.graphing = False  # a fork server before its first fork
        self.forked = False  # forked from a fork server: record requests, not sys.modules
        self.edges: dict[str, set[str]] = {}
        self.startup: set[str] = set()  # top-level modules held when the graph began
        self.step = ""  # the preload step running (its key), while one runs
        self.asked: dict[str, None] = {}  # keys asked for since the fork, in order (written at start)
        self.expanded: set[str] = set()  # keys whose closure this process's file holds

    # -- files

    def start(self, directory: str) -> None:
        """(Re)start recording into `directory`: this process's file gets what it holds or has asked for."""
        if (directory, os.getpid()) == (self.directory, self.pid) and self.fd >= 0:
            return  # already recording there
        if self.fd >= 0:
            os.close(self.fd)
        self.directory, self.pid = directory, os.getpid()
        path = os.path.join(directory, f"{self.pid}.imports")
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.seen, self.expanded = set(), set()
        if self.forked:
            names = set(self.startup)
            for key in [STARTUP, *self.asked]:
                names |= self._closure(key)
        else:
            names = {_top(name) for name in list(sys.modules)}
        self.seen |= names
        self._write([HEADER, *sorted(names)])

    def _write(self, lines: list[str]) -> None:
        try:
            os.write(self.fd, ("\n".join(lines) + "\n").encode())  # one write: a line is never half there
        except OSError:
            pass  # the reader finds the record incomplete and does not reuse the result

    def _note(self, key: str) -> None:
        if key not in self.seen:
            self.seen.add(key)
            if self.fd >= 0:
                self._write([key])

    # -- the graph (fork server) and requests (its children)

    def asked_for(self, name: str, fromlist=()) -> None:
        """Module `name` (absolute) was asked for; `fromlist` may name project submodules."""
        keys = [name] if name.startswith(_NOT_MODULES) else _keys(name)
        if fromlist and keys[0] in PROJECT:
            keys += [f"{name}.{item}" for item in fromlist if isinstance(item, str) and item != "*"]
        if self.graphing:
            owner, near = self._owners()
            self.edges.setdefault(owner, set()).update(keys)
            if near and keys[0] in sys.stdlib_module_names:  # the stdlib module that asked: its closure is whole
                self.edges.setdefault(near, set()).update(keys)
        elif self.forked:
            for key in keys:
                if key not in self.asked:
                    self.asked[key] = None
                    if self.fd >= 0:
                        new = self._closure(key) - self.seen
                        self.seen |= new
                        if new:
                            self._write(sorted(new))

    def _owners(self) -> tuple[str, str]:
        """(owner, near): the owner is the key of the code asking, the innermost frame outside this recorder
        and the standard library; a preload step's own request is the step's; none: start-up. `near` is the
        innermost standard-library module asking, if any (not importlib's machinery), whose own closure
        counts the standard-library modules it asks for."""
        frame, near = sys._getframe(2), ""
        while frame is not None:
            if frame.f_code is _PRELOAD_CODE:
                return self.step, near
            module = frame.f_globals.get("__name__")
            if frame.f_globals is not _GLOBALS and module:
                if _top(module) not in sys.stdlib_module_names:
                    return _keys(module)[-1], near
                if not near and module not in _MACHINERY:
                    near = _top(module)
            frame = frame.f_back
        return STARTUP, near

    def _closure(self, key: str) -> set[str]:
        """What `key` asked for in the server, transitively, as record lines (top-level names, dist:NAME,
        entry-points:GROUP); keys already expanded into this process's file are not walked again."""
        found, stack = set(), [key]
        while stack:
            current = stack.pop()
            if current not in found and current not in self.expanded:
                found.add(current)
                stack.extend(self.edges.get(current, ()))
        self.expanded |= found
        return {k if k.startswith(_NOT_MODULES) else _top(k) for k in found if k != STARTUP}

    def preload(self, module: str) -> bool:
        """Import `module`, if installed, as one preload step (False if not installed): what the step asks
        for is charged to it, as is what it pulls in that no edge explains (a module put in sys.modules)."""
        self.step = _keys(module)[-1]
        before = {_top(name) for name in list(sys.modules)}
        try:
            try:
                if importlib.util.find_spec(module) is None:
                    return False
            except ModuleNotFoundError:  # a parent package is missing (transformers without qwen3_5)
                return False
            importlib.import_module(module)
            return True
        finally:
            added = {_top(name) for name in list(sys.modules)} - before
            self.edges.setdefault(self.step, set()).update(added)
            self.step = ""

    # -- the finder's side

    def find_spec(self, fullname, path=None, target=None):
        if self.graphing or self.forked:
            self.asked_for(fullname)
        else:
            self._note(_top(fullname))
        return None

    def find_distributions(self, context=None):
        """importlib.metadata asks every finder: a check that reads a distribution's metadata (its version,
        say) depends on it even without importing it. `dist:*` stands for a listing of them all, `entry-points:G`
        for one that only selects the entry points of group G."""
        name = getattr(context, "name", None)
        key = DIST_PREFIX + " ".join(str(name).split()) if name else _listing_key()
        if self.graphing:
            self.edges.setdefault(self._owners()[0], set()).add(key)
        elif self.forked:
            self.asked_for(key)
        else:
            self._note(key)
        return iter(())

    def keep_graphing(self) -> None:
        """In a fork server's child that forks checks itself (forkserver's tier): the graph goes on, with what the
        child imports added, as in the server; after_fork had made it a check's."""
        self.graphing, self.forked, self.asked = True, False, {}

    def after_fork(self) -> None:
        if self.graphing:  # a check forked from the server: from now on, its own requests
            self.graphing, self.forked, self.asked = False, True, {}
            self.directory, self.fd, self.seen = "", -1, set()  # the server records into no file
        if self.directory:
            inherited = self.fd
            try:
                self.start(self.directory)  # the child gets its own file, holding everything it inherited
            except OSError:
                self.fd = inherited
                self._write([f"{INCOMPLETE} {os.getpid()}"])  # said in the parent's file: the record is not whole
                self.fd = -1


def _listing_key() -> str:
    """What a listing of every distribution depends on: `dist:*`, unless importlib.metadata lists them for
    `entry_points(group=G)` alone (torch's device-backend autoload and torchrun's handlers, at import): what that
    returns is decided by the distributions declaring entry points in group G, `entry-points:G`. Read off the
    caller's frame, since the finder is asked from inside entry_points' own listing."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_name == "entry_points" and frame.f_globals.get("__name__") in _METADATA_MODULES:
            params = frame.f_locals.get("params")
            group = params.get("group") if isinstance(params, dict) and set(params) <= {"group", "name"} else None
            return ENTRY_POINTS_PREFIX + " ".join(group.split()) if isinstance(group, str) else ALL_DISTRIBUTIONS
        frame = frame.f_back
    return ALL_DISTRIBUTIONS


RECORDER = _Recorder()
_GLOBALS = globals()
_PRELOAD_CODE = _Recorder.preload.__code__


def _install() -> None:
    if RECORDER not in sys.meta_path:
        sys.meta_path.insert(0, RECORDER)
        os.register_at_fork(after_in_child=RECORDER.after_fork)


def start(directory: str) -> None:
    """Record this process from now on into `directory` (a fork server's child calls it for its check)."""
    _install()
    RECORDER.start(directory)


def _hooked_import(name, globals=None, locals=None, fromlist=(), level=0):  # noqa: A002 - __import__'s own names
    if level or fromlist or name not in _DONE:  # a forked check's repeated `import x` (a hot function's) costs a lookup
        RECORDER.asked_for(_absolute(name, globals, level), fromlist or ())
        if RECORDER.forked and RECORDER.fd >= 0 and not level and not fromlist:
            _DONE.add(name)
    return _IMPORT(name, globals, locals, fromlist, level)


def _hooked_import_module(name, package=None):
    try:
        RECORDER.asked_for(importlib.util.resolve_name(name, package) if name.startswith(".") else name)
    except (ImportError, ValueError, TypeError, AttributeError):
        pass  # a bad name: import_module raises its own error
    return _IMPORT_MODULE(name, package)


def _hooked_find_spec(name, package=None):
    try:
        RECORDER.asked_for(importlib.util.resolve_name(name, package) if name.startswith(".") else name)
    except (ImportError, ValueError, TypeError, AttributeError):
        pass
    return _FIND_SPEC(name, package)


_IMPORT, _IMPORT_MODULE, _FIND_SPEC = builtins.__import__, importlib.import_module, importlib.util.find_spec
_DONE: set[str] = set()  # plain imports a forked check has recorded into its file (its forks inherit the file's lines)


def graph() -> None:
    """Keep the import graph of this process (a fork server), from now: hooks see every request, also
    for modules already imported, which the finder alone never sees."""
    _install()
    RECORDER.graphing = True
    RECORDER.startup = {_top(name) for name in list(sys.modules)}
    builtins.__import__ = _hooked_import
    importlib.import_module = _hooked_import_module
    importlib.util.find_spec = _hooked_find_spec


if __name__ == INSTALLED_AS and os.environ.get(VARIABLE):  # a check's process: never a graph of its own
    try:
        start(os.environ[VARIABLE])
    except OSError:
        pass  # no file, no record: the result is not reused
elif __name__ == INSTALLED_AS and os.environ.get(GRAPH_VARIABLE):
    graph()
