"""Reuse a check's result in another cell when nothing the check depends on differs.

A result's fingerprint hashes its context (the check, its arguments, the environment variables that
steer the stack, the Python version and platform, the image, and the harness revision: a content
hash of the code and data the checks run) with the provider of every top-level module its processes
imported (module_providers.py). A later cell computes the fingerprint the same result would have there, from its
own environment, and reuses the result only on an exact match. Only outcomes the check decided itself
are reusable; a crash, timeout, infra failure, error or flaky pass runs again.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

from harness.envs.cellenv import PROJECT_ROOT
from harness.envs.importrecord import VARIABLE
from harness.results.records import CheckResult, Status, cell_path, load_cell

from .module_providers import EnvironmentModules, by_provider, distributions, module_names, read_record

REVISION_DIRS = ("harness", "trainers", "plans")  # the checks' code and the data files they read
# What a check that has no result yet is taken to load, for the one decision made before any record exists:
# whether a cell waits for another cell running it, to reuse its result. The check server's preload, which nearly
# every check loads: two cells with different torch or transformers would make each other wait for nothing, one
# core idle for the length of the other's check (up to 20 s for the first vLLM cells of a cold run). A check that
# loads neither (nested-chunking) may then run in both at once, the first time only; reuse itself is decided by
# the records.
UNKNOWN_SHAPE = frozenset({"torch", "transformers"})
# Variables that steer the stack or the harness; others (PWD, SHLVL, a CI run id) would only stop reuse.
SETTING_PREFIXES = ("HARNESS_", "TORCH", "PYTORCH_", "CUDA", "CUBLAS", "NCCL", "GLOO", "NVIDIA_", "OMP_", "MKL",
                    "OPENBLAS", "KMP_", "VLLM_", "HF_", "TRANSFORMERS_", "TOKENIZERS_", "TRITON", "PYTHON", "LD_",
                    "ASCEND", "HCCL", "NPU_", "MASTER_", "WORLD_SIZE", "RANK", "LOCAL_RANK")
# Where records and caches are kept decides no outcome (the harness picks the vLLM, bridge-support and torch.compile
# cache folders by env root), nor whether torch.compile parses its C++ headers once ahead, nor which uv binary
# installs a check's test tools (what it installed is among the modules the check loaded).
NOT_SETTINGS = frozenset({VARIABLE, "VLLM_CACHE_ROOT", "HARNESS_VERL_TESTS_CACHE", "HARNESS_UV",
                          "HARNESS_BRIDGE_SUPPORT_CACHE", "TORCHINDUCTOR_CACHE_DIR",
                          "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"})
SECRET = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE", re.I)
REUSABLE = frozenset({Status.PASS, Status.FAIL, Status.AFFECTED, Status.SKIP})
# From the cell's environment capture: the first four must be there; the machine's processor and devices
# count too (kernels, and so numbers, differ between them), as does the image.
CAPTURE_KEYS = ("python", "implementation", "platform", "machine", "os", "cpu", "cpu_count", "devices", "driver",
                "cann", "image", "image_digest")


@functools.cache
def harness_revision(root: Path = PROJECT_ROOT) -> str:
    """A content hash of the project code and data the checks run: works in a clean clone, a dirty tree
    and a copy without git. Compiled files and hidden files (editor swap files) do not count."""
    digest = hashlib.sha256()
    for top in REVISION_DIRS:
        for folder, dirs, files in os.walk(root / top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(f for f in files if not f.startswith(".") and not f.endswith((".pyc", ".pyo"))):
                path = Path(folder, name)
                digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:20]


def settings(environ: dict[str, str]) -> dict[str, str]:
    """The variables of a check's environment that go into its fingerprint."""
    return {key: value for key, value in sorted(environ.items())
            if key.startswith(SETTING_PREFIXES) and key not in NOT_SETTINGS and not SECRET.search(key)}


def named_files(values) -> dict[str, str]:
    """Content hashes of the files that settings name by absolute path (HARNESS_PLANS lists plan files):
    such a file is read by the check, wherever it lives."""
    hashes = {}
    for value in values:
        for part in value.split(os.pathsep):
            if os.path.isabs(part) and os.path.isfile(part):
                hashes[part] = hashlib.sha256(Path(part).read_bytes()).hexdigest()
    return hashes


def context(check: str, argv: list[str], environ: dict[str, str], capture: dict, revision: str) -> str | None:
    """The hash of everything but the modules; None when the environment capture lacks the Python or platform."""
    if any(not capture.get(key) for key in CAPTURE_KEYS[:4]):
        return None
    chosen = settings(environ)
    data = {"check": check, "argv": argv, "settings": chosen, "files": named_files(chosen.values()),
            "revision": revision, **{key: capture.get(key) for key in CAPTURE_KEYS}}
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def fingerprint(context_hash: str, providers: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps([context_hash, sorted(providers.items())]).encode()).hexdigest()[:32]


def providers_digest(providers: dict[str, str]) -> str:
    """What a check loaded, without its context: enough to tell, before the environment capture, that a
    result may be reused (the context can still differ)."""
    return hashlib.sha256(json.dumps(sorted(providers.items())).encode()).hexdigest()[:32]


def reusable(result: CheckResult) -> bool:
    """Decided by the check itself (judged by its own status, before known failures), and recorded whole."""
    own = result.original_status or result.status
    return (own in REUSABLE and bool(result.fingerprint) and not result.flaky and not result.attempts
            and result.failure_class != "infra")


class ReuseIndex:
    """Reusable results by check, then by the set of modules they loaded, then by fingerprint.

    Seeded once, lazily, from the result files already in the run's directory (earlier runs), and fed
    by this run's checks as they finish; safe to share between threads running cells in parallel.
    """

    def __init__(self, out_dir: Path, from_disk: bool = True) -> None:
        self.out_dir, self.from_disk = Path(out_dir), from_disk
        self._lock = threading.Lock()
        self._seeded = not from_disk
        self._entries: dict[str, dict[frozenset[str], dict[str, tuple[str, CheckResult | None]]]] = {}
        self._loaded: dict[str, dict[frozenset[str], set[str]]] = {}  # check -> modules -> providers_digest
        self._running: dict[str, list] = {}  # check -> the environments of the cells running it now (None: unknown)
        self._finished = threading.Condition(self._lock)

    def __reduce__(self):  # sent to another process (a Ray worker): it builds its own
        return ReuseIndex, (self.out_dir, self.from_disk)

    def claim(self, checks: list[str], modules: EnvironmentModules | None = None) -> str:
        """The first of `checks` that no other cell is running now, marked as running; when every one is
        running elsewhere, wait until one finishes, so that its result can be reused rather than computed
        twice at once (cells in parallel), unless what a check loaded before says that the cells running it
        cannot make a result this cell (`modules`, its environment) could reuse: that one runs now. `release`
        it when done. Waits only on checks that are running, each bounded by its timeout, and a cell claims
        one check at a time: no cycle."""
        with self._finished:
            if not self._seeded:
                self._seed()
            while True:
                free = next((name for name in checks if not self._running.get(name)), None)
                if free is None and modules is not None:
                    free = next((name for name in checks if not self._may_share(name, modules)), None)
                if free is not None:
                    self._running.setdefault(free, []).append(modules)
                    return free
                self._finished.wait(timeout=5)  # woken by release; the timeout only guards against a lost wake-up

    def _may_share(self, check: str, modules: EnvironmentModules) -> bool:
        """Whether a cell running `check` now may make a result reusable here: for some set of modules the check
        loaded in an earlier result, both environments provide the same. Before any result of the check (the
        first cells of a cold run), UNKNOWN_SHAPE stands for what it loaded. A running cell's environment not
        given: True, so the cell waits as it always did."""
        shapes = list(self._loaded.get(check, {})) or [UNKNOWN_SHAPE]
        for other in self._running.get(check, []):
            if other is None or any(providers_digest(modules.providers(names)) ==
                                    providers_digest(other.providers(names)) for names in shapes):
                return True
        return False

    def release(self, check: str, modules: EnvironmentModules | None = None) -> None:
        """After the check ran and its result was added (or was reused): wake the cells waiting for it."""
        with self._finished:
            self._running[check].remove(modules)
            self._finished.notify_all()

    def add(self, cell_id: str, result: CheckResult, keep: bool = True) -> None:
        if reusable(result):
            with self._lock:
                self._add(cell_id, result, keep)

    def _add(self, cell_id: str, result: CheckResult, keep: bool) -> None:
        shapes = self._entries.setdefault(result.check, {})
        source = result.reused_from or cell_id
        kept = CheckResult.from_dict(result.to_dict()) if keep else None  # its cell may still change the original
        names = module_names(result.modules)
        shapes.setdefault(names, {})[result.fingerprint] = (source, kept)
        providers = {name: provider for provider, grouped in result.modules.items() for name in grouped.split()}
        self._loaded.setdefault(result.check, {}).setdefault(names, set()).add(providers_digest(providers))

    def _seed(self) -> None:
        for path in sorted((self.out_dir / "cells").glob("*.json")):
            try:
                cell = load_cell(path)
            except ValueError:
                continue  # unreadable: the report lists it; it is simply not a source
            for result in cell.checks:
                if reusable(result):
                    self._add(cell.cell_id, result, keep=False)
        self._seeded = True

    def may_reuse(self, check: str, modules: EnvironmentModules) -> bool:
        """Whether some result of `check` loaded exactly what this environment provides: known before the
        environment capture, so that a cell expecting to reuse every check need not start its check server."""
        with self._lock:
            if not self._seeded:
                self._seed()
            shapes = list(self._loaded.get(check, {}).items())
        return any(providers_digest(modules.providers(names)) in digests for names, digests in shapes)

    def find(self, check: str, context_hash: str, modules: EnvironmentModules) -> CheckResult | None:
        """A result this cell may reuse for `check`, marked with the cell that produced it."""
        with self._lock:
            if not self._seeded:
                self._seed()
            shapes = list(self._entries.get(check, {}).items())
        for names, by_fingerprint in shapes:
            wanted = fingerprint(context_hash, modules.providers(names))
            if wanted in by_fingerprint:
                found = self._load(check, wanted, *by_fingerprint[wanted])
                if found is not None:
                    return found
        return None

    def _load(self, check: str, wanted: str, source: str, kept: CheckResult | None) -> CheckResult | None:
        """A fresh copy of the source result, checked again (its file may have changed since it was indexed)."""
        if kept is None:
            try:
                kept = load_cell(cell_path(self.out_dir, source)).check(check)
            except ValueError:
                return None
        if kept is None or kept.fingerprint != wanted or not reusable(kept):
            return None
        copy = CheckResult.from_dict(kept.to_dict())
        copy.reused_from = copy.reused_from or source
        return copy


class CellReuse:
    """Reuse for one cell whose environment is built: look results up, and stamp the ones it runs."""

    def __init__(self, index: ReuseIndex, cell_id: str, modules: EnvironmentModules, contexts) -> None:
        self.index, self.cell_id, self.modules = index, cell_id, modules
        self.contexts = contexts  # check name -> context hash, or None where it cannot be known

    def may_reuse(self, check: str) -> bool:
        return self.index.may_reuse(check, self.modules)

    def in_turn(self, checks: list[str], run_one) -> dict:
        """`run_one(name)` for each of `checks`, each when no other cell is running it, else another first:
        cells in parallel then take each other's results instead of computing them at the same time."""
        results, pending = {}, list(checks)
        while pending:
            name = self.index.claim(pending, self.modules)
            pending.remove(name)
            try:
                results[name] = run_one(name)
            finally:
                self.index.release(name, self.modules)
        return results

    def find(self, check: str) -> CheckResult | None:
        context_hash = self.contexts(check)
        return None if context_hash is None else self.index.find(check, context_hash, self.modules)

    @contextmanager
    def recording(self):
        """A directory for the check's import records, and the variable that points its processes at it."""
        directory = tempfile.mkdtemp(prefix="harness-imports-")
        try:
            yield Path(directory), {VARIABLE: directory}
        finally:
            shutil.rmtree(directory, ignore_errors=True)

    def stamp(self, check: str, result: CheckResult, directory: Path) -> CheckResult:
        """Record what the check loaded and its fingerprint; an unreadable record leaves it unreusable."""
        names = read_record(directory)
        context_hash = self.contexts(check)
        if names is None or context_hash is None:
            return result
        providers = self.modules.providers(names)
        result.modules, result.loaded = by_provider(providers), distributions(providers)
        result.fingerprint = fingerprint(context_hash, providers)
        self.index.add(self.cell_id, result)
        return result
