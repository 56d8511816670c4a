"""One cell's path, in the order it takes: its interpreter, its environment (built by uv, its lock written),
the environment capture while the check server imports, each check (reused from another cell, or run in its
own process and tried again after a crash), the matrix's known failures, and the cell's result file.

A cell with an image runs inside it instead (container_cell.py); `RunOptions` are what the run asks of
each cell.
"""
from __future__ import annotations

import contextlib
import copy
import datetime as dt
import hashlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from harness import checks
from harness.checks.verl_tests.source import CACHE_VARIABLE as VERL_TESTS_CACHE
from harness.checks.verl_tests.tools import UV_VARIABLE
from harness.envs import cellenv, container, interpreters, pipconfig, readahead
from harness.envs.cellenv import die_with_parent
from harness.errors import EnvironmentMissing
from harness.matrix import Cell, Matrix
from harness.matrix.axes import VLLM_AXES
from harness.matrix.sources import UNREACHABLE_REMEDY, unreachable_reason
from harness.results import install_verdict
from harness.results.records import (
    CellResult,
    CheckResult,
    Status,
    cell_path,
    classify,
    clear_known_failure,
    combine_checks,
    did_not_run,
    expired_note,
    kept_results,
    now,
    write_json_atomic,
    write_text_atomic,
)
from trainers.runtime import determinism

from . import container_cell, module_providers, runner
from .ahead import AHEAD_PHASE, InstallsAhead
from .forkclient import CheckProcesses
from .jobs import Budget, Progress, cell_cost
from .reuse import CellReuse, ReuseIndex, context, harness_revision


@dataclass
class RunOptions:
    out_dir: Path
    env_root: Path = Path(".harness/envs")
    jobs: int = 1
    redo: bool = False
    checks: tuple[str, ...] = ()  # empty: the matrix's checks
    seed: int = 0
    steps: int | None = None
    timeout: float | None = None  # overrides the matrix's per-check timeout
    retries: int = 2  # extra tries for infra failures (setup) and crashes; each try's reason is kept
    progress: Progress | None = None
    extra_env: dict[str, str] = field(default_factory=dict)
    reuse: bool = True  # reuse a result of another cell that loaded exactly this cell's versions (reuse.py)
    reuse_index: ReuseIndex | None = field(default=None, repr=False, compare=False)  # shared by a run's cells
    fork: bool = True  # checks forked from one interpreter per cell that imports once; False: fresh ones
    budget: Budget | None = field(default=None, repr=False, compare=False)  # --jobs auto: cores each cell holds
    # Called once the cell's check server has imported and its bytecode is kept (jobs.StartQueue.imported).
    imported: Callable[[], None] | None = field(default=None, repr=False, compare=False)
    # (environment, lock) of a cell instead of building one: an offline run on the interpreter at hand
    # (harness/offline/here.py); None: cellenv.build and its freeze.
    prepare: Callable[[Cell, Path], tuple[cellenv.CellEnv, str]] | None = field(default=None, repr=False,
                                                                               compare=False)
    # Environments installed ahead of their cells (ahead.InstallsAhead, by install_environment); None: each cell
    # installs its own when it starts.
    installs: InstallsAhead | None = field(default=None, repr=False, compare=False)


@dataclass
class Installed:
    """A cell's environment install: the environment, or why there is none (`missing`: this runner lacks the
    cell's interpreter; else the install verdict, None for an infra failure), with the failed tries, and the
    seconds it took."""
    env: cellenv.CellEnv | None
    verdict: install_verdict.InstallVerdict | None = None
    attempts: list[dict] = field(default_factory=list)
    missing: str | None = None
    seconds: float = 0.0
    read_ahead: readahead.Background | None = None  # its files read into memory meanwhile, until the cell ends


def run_cell(cell: Cell, matrix: Matrix, opts: RunOptions, earlier: CellResult | None = None) -> CellResult:
    """Run the cell's checks; those `earlier` already holds are kept, not run again."""
    if container.wanted(cell):  # a cell with an image runs inside it
        return container_cell.run_cell(cell, matrix, opts, earlier)
    wanted = opts.checks or cell.checks
    key = install_key(cell)
    kept = kept_results(earlier, wanted, opts.redo, key)  # the cell's other results stay
    rel = Path("cells") / cell.id
    started, start = now(), time.perf_counter()
    result = CellResult(matrix.name, cell.id, dict(cell.axes), list(cell.tags), started=started,
                        setup_log=str(rel / "logs" / "setup.log"))
    phase = time.perf_counter()
    ahead = opts.installs.take(cell) if opts.installs is not None else None
    installed = ahead.result() if ahead is not None else install_environment(cell, opts)
    if installed.missing is not None:  # this runner lacks its interpreter; one that has it runs the cell next time
        result.checks = combine_checks(wanted, kept, lambda name: CheckResult(
            name, Status.SKIP, installed.missing, failure_class="infra"))
        return _finish(result, cell, opts, start)
    env, verdict, attempts = installed.env, installed.verdict, installed.attempts
    if env is not None and opts.prepare is None:  # at its start: it links what the cells before it compiled
        cellenv.share_bytecode(env, "seed", opts.env_root)
    result.phases["environment"] = round(time.perf_counter() - phase, 3)
    if ahead is not None:  # the install's own time, spent before the cell started (not in its duration)
        result.phases[AHEAD_PHASE] = installed.seconds
    if env is None:
        result.checks = combine_checks(wanted, kept, lambda name: _not_installed(name, verdict, attempts, result, key))
    else:
        result.lock = str(rel / "lock.txt")
        try:
            with _temporary_folder() as temporary:  # a TMPDIR the user set for the run wins
                _run_checks(cell, matrix, env, replace(opts, extra_env={"TMPDIR": temporary, **opts.extra_env}),
                            result, wanted, kept)
        finally:
            _end_read_ahead(installed, opts.out_dir / result.setup_log)
    return _finish(result, cell, opts, start)


def settle_install(installed: Installed) -> None:
    """What the install left running, waited for by the thread that installs ahead before its next install: the
    environment's read-ahead (the cell that takes the install does not wait for it)."""
    if installed.read_ahead is not None:
        installed.read_ahead.wait()


def _end_read_ahead(installed: Installed, setup_log: Path) -> None:
    """Stop the environment's read-ahead, if it still runs, and say in the setup log what it read."""
    if installed.read_ahead is not None:
        line = installed.read_ahead.stop().line()
        with contextlib.suppress(OSError), open(setup_log, "a", encoding="utf-8") as log:
            log.write(line + "\n")


def install_environment(cell: Cell, opts: RunOptions) -> Installed:
    """`cell`'s environment installed (its setup log begun afresh, its lock written), or why not; the bytecode is
    seeded by the caller, at the cell's start. Its files are read into memory from here on, in the background
    (envs/readahead.py): waited for by the thread that installs ahead (`settle_install`), stopped by run_cell at the
    cell's end. Run by run_cell, or ahead of it (ahead.InstallsAhead)."""
    rel = Path("cells") / cell.id
    setup_log = opts.out_dir / rel / "logs" / "setup.log"
    setup_log.unlink(missing_ok=True)
    start = time.perf_counter()
    try:
        python = interpreters.find(cell.python).path if cell.python and opts.prepare is None else None
    except interpreters.InterpreterMissing as exc:
        return Installed(None, missing=str(exc))
    env, verdict, attempts = _install(cell, opts, python, setup_log, opts.out_dir / rel / "lock.txt")
    reading = None
    if env is not None and opts.prepare is None:  # its files into memory, the cell not waiting for them
        reading = readahead.Background(cellenv.site_packages(env), cell.axes["device"])
    return Installed(env, verdict, attempts, seconds=round(time.perf_counter() - start, 3), read_ahead=reading)


def _install(cell: Cell, opts: RunOptions, python: str | None, setup_log: Path, lock_path: Path):
    """(environment, None, tries) with the lock written at `lock_path`; or (None, install verdict or None, tries)
    when it cannot be installed. A failure that is nobody's (a network blip) is tried again."""
    env, attempts, verdict = None, [], None
    for _ in range(opts.retries + 1):
        try:
            if opts.prepare is not None:
                env, lock = opts.prepare(cell, setup_log)
            else:
                env = cellenv.build(cell.id, cell.requirements, opts.env_root, setup_log, python,
                                    cell.install.from_index, cell.install.remove, cell.install.from_source,
                                    cell.install.build_env, cell.install.overrides(), seed_bytecode=False)
                lock = cellenv.freeze(env)
            write_text_atomic(lock_path, lock)
            break
        except cellenv.SetupFailed as exc:
            # The resolver's words say whose the failure is: the pins' (conflict), the runner's (wheel tags,
            # a source build, a source it cannot reach), or neither (a network blip: infra, tried again).
            verdict = (_git_source_unreachable(cell.requirements, str(exc))
                       or install_verdict.runner_constraint(str(exc), cellenv.runner_constraint_files())
                       or install_verdict.classify(str(exc)))
            failure = verdict.failure_class if verdict else "infra"
            attempts.append({"status": Status.ERROR.value, "failure_class": failure, "reason": str(exc)[-1500:]})
            env = None
            if verdict is not None:
                break  # trying again on this runner cannot help
    return env, verdict, attempts


def _git_source_unreachable(requirements: list[str], output: str) -> install_verdict.InstallVerdict | None:
    """A row's git source (mbridge @ git+https://...) that this runner cannot reach: named as such, before the
    generic reading of uv's output would call it a failed build."""
    reason = unreachable_reason(requirements, output)
    if reason is None:
        return None
    return install_verdict.InstallVerdict(install_verdict.RUNNER, reason, UNREACHABLE_REMEDY,
                                          output[-install_verdict.RESOLVER_LIMIT:])


def install_key(cell: Cell) -> str:
    """What an install of `cell` depends on, hashed: its pins and install order, its Python, and what this runner
    brings (cellenv.runner_install_facts). Recorded with an install verdict; an earlier "not installable on this
    runner" is kept while the key is the same."""
    inputs = {"requirements": cell.requirements, "install": cell.install_record(), "python": cell.python,
              "runner": cellenv.runner_install_facts()}
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _not_installed(name: str, verdict: install_verdict.InstallVerdict | None, attempts: list[dict],
                   result: CellResult, key: str) -> CheckResult:
    """A check that did not run because the cell's environment could not be installed: its install verdict
    (in the message, the failure class and metrics["install"] with the install key), or an infra failure with
    the log's tail."""
    if verdict is None:
        return CheckResult(name, Status.ERROR, f"environment setup failed: {attempts[-1]['reason']}",
                           log=result.setup_log, failure_class="infra", attempts=attempts[:-1])
    return CheckResult(name, Status.ERROR, verdict.text(), log=result.setup_log, failure_class=verdict.failure_class,
                       metrics={"install": {**verdict.to_dict(), "key": key}}, attempts=attempts[:-1])


def _run_checks(cell: Cell, matrix: Matrix, env: cellenv.CellEnv, opts: RunOptions, result: CellResult,
                wanted, kept: dict[str, CheckResult]) -> None:
    """The checks of a cell whose environment is installed, into `result`: its capture, then each check."""
    rel = Path("cells") / cell.id
    setup_log = opts.out_dir / result.setup_log
    # The check server imports while the environment is captured: the two overlap.
    to_run = [n for n in wanted if n not in kept and cell.axes["backend"] in checks.CHECKS[n].backends]
    capture = {}
    cell_reuse = _cell_reuse(cell, env, opts, capture)
    # A cell that expects to reuse every check starts its server only if one is not reused after all.
    expect_reuse = cell_reuse is not None and all(cell_reuse.may_reuse(name) for name in to_run)
    processes = CheckProcesses(env.python, env.run_env(check_environment(cell, opts)), setup_log,
                               fork=opts.fork and bool(to_run), start=not expect_reuse)
    try:
        phase = time.perf_counter()
        result.environment = _capture(env, opts)
        if getattr(env, "origin", ""):  # where the results come from, when not a cell environment of its own
            result.environment["origin"] = env.origin
        capture.update(result.environment)  # the checks' contexts read it from now on
        result.phases["capture"] = round(time.perf_counter() - phase, 3)
        processes.ready()
        cellenv.share_bytecode(env, "keep", opts.env_root)  # what the server compiled, for cells starting meanwhile
        if opts.imported is not None and processes.imports:  # a server imported (none: all reused, or fresh ones)
            opts.imported()

        def one(name: str) -> CheckResult:
            return _reused_or_run(name, cell, cell_reuse, lambda run_opts: _one_check(
                name, cell, matrix, env, processes, run_opts, rel), opts)

        if cell_reuse is None:
            result.checks = combine_checks(wanted, kept, one)
        else:  # in the order that lets cells running at the same time reuse each other's results
            done = cell_reuse.in_turn([name for name in wanted if name not in kept], one)
            result.checks = combine_checks(wanted, kept, done.__getitem__)
        result.phases["imports"] = processes.imports
    finally:
        processes.close()
        cellenv.share_bytecode(env, "keep", opts.env_root)


def _temporary_folder():
    """The temporary folder of a cell's checks (their TMPDIR), removed at the cell's end: what the stack leaves in
    one (verl's `ckpt_*.lock` files, torchrun's `torchelastic_*` folders, wandb's, pytest's) leaves with the cell,
    not in the machine's, and no cell sees another's. Short, under the runner's own: vLLM and Ray put Unix
    sockets in it, whose paths may not pass 107 bytes."""
    return tempfile.TemporaryDirectory(prefix="qh-cell-", ignore_cleanup_errors=True)


def _cell_reuse(cell: Cell, env: cellenv.CellEnv, opts: RunOptions, capture: dict) -> CellReuse | None:
    """Reuse across cells for this cell (None with --no-reuse): its lock, modules and check contexts (read
    from `capture`, the environment capture, when a check asks)."""
    if not opts.reuse:
        return None
    index = opts.reuse_index or ReuseIndex(opts.out_dir, from_disk=not opts.redo)
    environ = env.run_env(check_environment(cell, opts))
    try:
        lock = (opts.out_dir / "cells" / cell.id / "lock.txt").read_text(encoding="utf-8")
        modules = module_providers.EnvironmentModules(cellenv.site_packages(env), lock,
                                                      module_providers.search_path(environ["PYTHONPATH"]))
        revision = harness_revision()
    except (OSError, ValueError):  # unreadable metadata or project files: this cell neither reuses nor is reused
        return None
    return CellReuse(index, cell.id, modules,
                     lambda name: context(name, _check_args(cell, opts, name), environ, capture, revision))


def _capture(env: cellenv.CellEnv, opts: RunOptions) -> dict:
    try:
        done = subprocess.run([str(env.python), "-m", "harness", "envinfo"], capture_output=True, text=True,
                              env=env.run_env(opts.extra_env), timeout=300, check=False,
                              preexec_fn=die_with_parent)
    except subprocess.TimeoutExpired:  # a hung device tool must not stop the matrix
        return {"error": "environment capture did not finish within 300 s"}
    try:
        return json.loads(done.stdout)
    except json.JSONDecodeError:
        return {"error": f"environment capture failed (status {done.returncode}): {done.stderr[-1000:]}"}


def _reused_or_run(name: str, cell: Cell, cell_reuse: CellReuse | None, run, opts: RunOptions) -> CheckResult:
    """A result reused from another cell, with this cell's known failures; else `run(opts)` with its
    imports recorded, so that later cells may reuse it."""
    if cell_reuse is None:
        return run(opts)
    found = cell_reuse.find(name)
    if found is not None:
        found = apply_known_failures(found, cell)
        found.failure_class = classify(found.original_status or found.status)
        return found
    with cell_reuse.recording() as (directory, variables):
        result = run(replace(opts, extra_env={**opts.extra_env, **variables}))
        return cell_reuse.stamp(name, result, directory)


def _one_check(name: str, cell: Cell, matrix: Matrix, env: cellenv.CellEnv, processes: CheckProcesses,
               opts: RunOptions, rel: Path) -> CheckResult:
    spec = checks.CHECKS[name]
    if cell.axes["backend"] not in spec.backends:
        return CheckResult(name, Status.SKIP, f"not applicable to backend {cell.axes['backend']}")
    log = rel / "logs" / f"{name}.log"
    timeout = opts.timeout or matrix.timeout or spec.timeout
    attempts: list[dict] = []
    for attempt in range(opts.retries + 1):
        outcome = processes.run(name, _check_args(cell, opts, name), opts.out_dir / log, timeout,
                                env.run_env(check_environment(cell, opts)), matrix.memory_limit_mb, spec.preload)
        if outcome.status is not Status.CRASH or attempt == opts.retries:
            break
        # A crash may be the runner's (a neighbour took the memory): try again, keep why.
        attempts.append({"status": outcome.status.value, "failure_class": "crash", "reason": outcome.message[-1500:]})
    outcome.log = str(log)
    outcome.attempts = attempts
    outcome.flaky = bool(attempts) and not outcome.status.is_failure
    outcome = apply_known_failures(outcome, cell)
    outcome.failure_class = classify(outcome.original_status or outcome.status)
    return outcome


def _check_args(cell: Cell, opts: RunOptions, check: str) -> list[str]:
    """Check `check`'s process options for this cell (check_process.add_arguments); `--mode` only to a check that
    reads it (CheckSpec.reads_mode; a check the table does not know gets it)."""
    args = ["--model", cell.axes["model"], "--backend", cell.axes["backend"], "--seed", str(opts.seed)]
    spec = checks.CHECKS.get(check)
    if cell.axes.get("mode", "sync") != "sync" and (spec is None or spec.reads_mode):
        args += ["--mode", cell.axes["mode"]]
    if opts.steps is not None:
        args += ["--steps", str(opts.steps)]
    if cell.max_ranks is not None:
        args += ["--max-ranks", str(cell.max_ranks)]
    return args


# Settings that keep a check process free of threads nobody asked for, so that the check server and the checks'
# rank launchers can fork (a thread does not survive a fork, so they fall back to fresh interpreters, each
# importing the stack again). pyarrow (pulled in by pandas where verl or Megatron-Bridge installed it) starts
# its jemalloc's background purging thread at import; without it jemalloc purges on the allocating thread.
FORK_SAFETY = {"JE_ARROW_MALLOC_CONF": "background_thread:false"}


def check_environment(cell: Cell, opts: RunOptions) -> dict[str, str]:
    """Variables for a check process: the device, its determinism settings (set before the device runtime
    starts), FORK_SAFETY's and the caches kept beside the environments; a value the user exported wins."""
    settings = {k: v for k, v in {**determinism.environment(cell.axes["device"]), **FORK_SAFETY,
                                  **_compile_settings(opts.env_root)}.items()
                if k not in os.environ}
    return {**settings, **_vllm_cache(cell, opts.env_root), **_bridge_support_cache(cell, opts.env_root),
            **_test_tools(cell, opts.env_root), **_held_cores(cell, opts.budget), **opts.extra_env,
            "HARNESS_DEVICE": cell.axes["device"]}


def _held_cores(cell: Cell, budget: Budget | None) -> dict[str, str]:
    """The cores the cell holds beside other cells (`--jobs auto`): a check that can spread over workers (verl-tests'
    pytest-xdist) starts no more than that, since more would only take the cores the other cells hold."""
    return {} if budget is None else {checks.CORES_VARIABLE: str(budget.cores_for(cell_cost(cell)))}


# trainers/megatron/bridge.py CACHE_VARIABLE (named here too: that module imports torch, which the host never does)
BRIDGE_SUPPORT_CACHE = "HARNESS_BRIDGE_SUPPORT_CACHE"


def _bridge_support_cache(cell: Cell, env_root: Path) -> dict[str, str]:
    """A Megatron cell's folder for the bridges' answers (trainers/megatron/bridge.py keys each by its
    environment): asked once per environment, not once per rank of every launch of every check (each asking
    imports Megatron-Bridge, where installed, about 12 s)."""
    if cell.axes.get("backend") != "megatron":
        return {}
    return {BRIDGE_SUPPORT_CACHE: str((env_root / ".bridge-support").resolve())}


def _test_tools(cell: Cell, env_root: Path) -> dict[str, str]:
    """In a row that installs verl, what verl-tests needs to install its test tools for its own run: the harness's
    uv, pip's settings forwarded to it as they are to the cells' installs, and a cache folder beside the cell
    environments."""
    if "verl" not in cell.axes:
        return {}
    try:
        uv = {UV_VARIABLE: cellenv.uv_binary()}
    except EnvironmentMissing:
        uv = {}
    return {**pipconfig.uv_environment(), **uv, VERL_TESTS_CACHE: str((env_root / ".verl-tests").resolve())}


INDUCTOR_CACHE = "TORCHINDUCTOR_CACHE_DIR"
# No precompiled header for torch.compile's C++ kernels on CPU. Inductor builds one (155 MB, about 5 s on a core)
# in the temporary folder for each environment, as its key holds the environment's include paths, before it looks
# a kernel up, for the one or two kernels a check compiles (vLLM 0.32's sampler compiles its log-prob gather even
# with enforce_eager): measured on a vLLM 0.32 cell, grpo-convergence 20.1 -> 12.8 s and vllm-rollout 24.5 -> 20.1
# s. The header only saves parsing; the kernels' code and flags are the same.
PRECOMPILED_HEADERS = "TORCHINDUCTOR_CPP_CACHE_PRECOMPILE_HEADERS"


def _compile_settings(env_root: Path) -> dict[str, str]:
    """torch.compile's settings: its cache (vLLM 0.32's sampler compiles with it; verl's engines can), one for every
    cell, beside the environments, as warm as they are (its default lies in the temporary folder, which is each cell's
    own: _temporary_folder), and no precompiled headers (PRECOMPILED_HEADERS)."""
    return {INDUCTOR_CACHE: str((env_root / ".torchinductor").resolve()), PRECOMPILED_HEADERS: "0"}


def _vllm_cache(cell: Cell, env_root: Path) -> dict[str, str]:
    """One vLLM cache folder per vLLM release, beside the cell environments (unless the user set one): vLLM
    names its cached model-class facts without its version, so cells of two releases running side by side
    would evict each other's entries, and each costs a subprocess importing vLLM (about 23 s on CPU) to make
    again. Kept with the environments, it is as warm as they are."""
    release = next((f"{axis}-{cell.axes[axis]}" for axis in VLLM_AXES if cell.axes.get(axis)), None)
    if release is None or "VLLM_CACHE_ROOT" in os.environ:
        return {}
    return {"VLLM_CACHE_ROOT": str((env_root / ".vllm-cache" / release).resolve())}


def _finish(result: CellResult, cell: Cell, opts: RunOptions, start: float) -> CellResult:
    if runner.STOPPING.is_set():
        # Stopped from another thread while this cell ran: its last check was killed by the stop, which is
        # not a finding. Write nothing, so the next run runs the cell again.
        raise KeyboardInterrupt
    result.finished, result.duration = now(), round(time.perf_counter() - start, 3)
    # How to install the row by hand, whatever happened: a row whose pins conflict needs it most.
    result.environment.update(cell.install_record())  # a verl row's: its pins and those outside verl's range too
    if cell.resolved:  # which releases `newest` and the like named on the day of the run
        result.environment["resolved"] = [r.to_dict() for r in cell.resolved]
    reapply_known_failures(result, cell)  # the kept results, too
    write_json_atomic(cell_path(opts.out_dir, result.cell_id), result.to_dict())
    return result


def apply_known_failures(result: CheckResult, cell: Cell, today: dt.date | None = None) -> CheckResult:
    """Turn a failure that the matrix declares as known into `xfail`, keeping the original status: a whole-check
    entry, or verdict entries covering every failing verdict (another verdict failing keeps the check failed).

    Starts from the check's own result, so that applied again to a reused result it follows the
    matrix as it is now (an entry deleted or expired since no longer counts)."""
    result = clear_known_failure(result)
    if did_not_run(result):  # nothing to apply, and no "stale": a check that did not run cannot have stopped failing
        return result
    entries = [known for known in cell.known_failures if known.check == result.check]
    failing = {v.name for v in result.verdicts if v.status.is_failure}

    def fails(known) -> bool:
        return result.status.is_failure if known.verdict is None else known.verdict in failing

    live = [known for known in entries if fails(known) and not known.expired(today)]
    covered = any(k.verdict is None for k in live) or bool(failing) and failing <= {k.verdict for k in live}
    if result.status.is_failure and live and covered:
        result.original_status, result.status = result.status, Status.XFAIL
        result.known_failure = live[0].to_dict()
        return result
    for known in entries:
        if known in live:
            result.known_failure = {**known.to_dict(), "state": "other verdicts fail too: "
                                    + ", ".join(sorted(failing - {k.verdict for k in live}))}
        elif fails(known):
            result.message += expired_note(known.expires.isoformat(), known.link)
            result.known_failure = {**known.to_dict(), "state": "expired"}
        else:
            result.known_failure = {**known.to_dict(), "state": "stale: the check no longer fails"}
    return result


def reapply_known_failures(result: CellResult, cell: Cell) -> bool:
    """Apply the matrix's known failures to every check of a (reused) cell result; True if any changed."""
    before = [_known_failure_fields(c) for c in result.checks]
    result.checks = [apply_known_failures(c, cell) for c in result.checks]
    return [_known_failure_fields(c) for c in result.checks] != before


def _known_failure_fields(check: CheckResult) -> tuple:
    """What apply_known_failures may change (not the whole record: a warm rerun would copy every check's metrics,
    GRPO curves included, twice per cell)."""
    return check.status, check.original_status, copy.deepcopy(check.known_failure), check.message
