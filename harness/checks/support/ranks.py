"""How a check starts its ranks: a torchrun job, or ranks forked from the check's own process.

Forked ranks (`ForkedRanks`, `run_ranks`) run a function on N local ranks with torchrun's environment.
torchrun's launcher and every rank are fresh interpreters that import torch and transformers again (5-8 s
each on a shared 2-core machine, more than the work of a short check); a forked rank starts with this
process's imports. As torchrun's agent does, this process hosts the rendezvous store
(`TORCHELASTIC_USE_AGENT_STORE`), so every rank joins as a client with the usual `env://` variables and no
port is guessed. Forked ranks die with this process (PR_SET_PDEATHSIG), write to one log, and are killed when
one of them fails (the others would wait for it in a collective) or at the deadline. CPU only: a CUDA or NPU
runtime started before the fork does not work in the child (`fork_safe`).

A torchrun job (`torchrun_command`, `start_torchrun`, `wait_torchrun`, `stop_torchrun`), for accelerators and
where forking is unsafe, runs in a session of its own, so stopping it (a timeout) kills its ranks too, not only
the launcher, which they would outlive; and it gets SIGTERM when the check's process dies, on which torchrun
stops its ranks. The harness's own helper (envs.cellenv.die_with_parent) sends SIGKILL instead, which torchrun
cannot pass on to its ranks.
"""
from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.envs import deathsig

POLL_SECONDS = 0.02


@dataclass
class RanksOutcome:
    """How the ranks ended: each one's exit code (None: killed by us), and whether time ran out."""

    exit_codes: list[int | None]
    timed_out: bool
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.timed_out and all(code == 0 for code in self.exit_codes)


def _rank_main(target: Callable[[], int | None], rank: int, nproc: int, port_pipe: int, log: Path,
               env: dict[str, str], parent: int) -> None:
    """In the forked child: never returns (os._exit), whatever the target does."""
    code = 1
    try:
        deathsig.on_parent_death(signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the request took effect
            os._exit(1)
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1)
        os.dup2(out, 2)
        # Python's streams may not be fds 1 and 2 here (a test's capture, a parent's redirection).
        sys.stdout = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)  # noqa: SIM115
        port = int(os.read(port_pipe, 32).decode() or 0)
        if not port:  # the parent could not start the store: nothing to join
            os._exit(1)
        os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "RANK": str(rank),
                           "LOCAL_RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_WORLD_SIZE": str(nproc),
                           "GROUP_RANK": "0", "TORCHELASTIC_USE_AGENT_STORE": "True", **env})
        result = target()
        code = 0 if result is None else int(result)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - the log gets the traceback, the parent the exit code
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # no interpreter teardown: an abort after destroy_process_group was seen otherwise


class ForkedRanks:
    """`nproc` ranks forked now, each calling `target()` (its return value is the exit code; None is 0),
    their output appended to `log`. `wait` collects them; leaving the `with` block kills any left."""

    def __init__(self, target: Callable[[], int | None], nproc: int, log: Path, env: dict[str, str] | None = None):
        import torch.distributed as dist

        if nproc < 1:
            raise ValueError(f"nproc must be >= 1, not {nproc}")
        log = Path(log)
        log.parent.mkdir(parents=True, exist_ok=True)
        parent, self.started = os.getpid(), time.perf_counter()
        sys.stdout.flush()
        sys.stderr.flush()  # or the children would write this process's buffered output again
        self.pids: dict[int, int] = {}  # rank -> pid
        self.store = None
        writers: list[int] = []
        try:
            for rank in range(nproc):
                read_end, write_end = os.pipe()
                pid = os.fork()
                if pid == 0:
                    os.close(write_end)
                    _rank_main(target, rank, nproc, read_end, log, dict(env or {}), parent)
                os.close(read_end)
                self.pids[rank] = pid
                writers.append(write_end)
            # After the fork: the store's server thread must live in this process only.
            self.store = dist.TCPStore("127.0.0.1", 0, nproc, is_master=True, wait_for_workers=False)
            for write_end in writers:
                os.write(write_end, str(self.store.port).encode())
        except BaseException:
            self.kill()
            raise
        finally:
            for write_end in writers:
                os.close(write_end)  # a rank still waiting for its port reads "" and exits

    def __enter__(self) -> ForkedRanks:
        return self

    def __exit__(self, *exc) -> None:
        self.kill()

    def wait(self, timeout: float) -> RanksOutcome:
        """Until every rank has exited, one has failed, or `timeout` seconds after the fork."""
        codes: dict[int, int | None] = {}
        running = dict(self.pids)
        while running:
            for rank, pid in list(running.items()):
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[rank] = os.waitstatus_to_exitcode(status)
                    del running[rank]
            failed = any(code != 0 for code in codes.values())
            if running and (failed or time.perf_counter() - self.started > timeout):
                _reap(running)
                codes.update(dict.fromkeys(running))
                return self._outcome(codes, timed_out=not failed)
            if running:
                time.sleep(POLL_SECONDS)
        return self._outcome(codes, timed_out=False)

    def _outcome(self, codes: dict[int, int | None], timed_out: bool) -> RanksOutcome:
        self.pids = {}
        self.store = None  # its server stops with the last reference
        return RanksOutcome([codes[rank] for rank in sorted(codes)], timed_out, time.perf_counter() - self.started)

    def kill(self) -> None:
        """Kill and reap every rank not yet collected."""
        _reap(self.pids)
        self.pids, self.store = {}, None


def native_threads() -> int:
    """Threads of this process that Python did not start (an OpenMP pool, autograd's or an in-process
    engine's workers): a fork keeps none of them, and the libraries that own them may abort in the child.
    Python's own threads (a test runner's) are harmless to a child that never touches their objects."""
    tasks = Path("/proc/self/task")
    return max(0, len(os.listdir(tasks)) - threading.active_count()) if tasks.is_dir() else 0


def preload(*modules: str) -> None:
    """Import what every rank needs once, in this process, so that the forked ranks share it. A module that
    fails to import is left out: the ranks import it again, and the failure shows in their own log."""
    for module in modules:
        try:
            importlib.import_module(module)
        except Exception:  # noqa: BLE001, S110
            pass


def fork_safe() -> bool:
    """Whether ranks may be forked from this process now (else: launch them with torchrun)."""
    return sys.platform == "linux" and native_threads() == 0


def preload_trainer(module: str) -> None:
    """A trainer package's imports, shared with every forked rank: its train module and what its ranks import only
    when they build their model (the train module's RANK_IMPORTS, where it has them)."""
    preload(f"{module}.train")
    preload(*getattr(sys.modules.get(f"{module}.train"), "RANK_IMPORTS", ()))


def run_ranks(target: Callable[[], int | None], nproc: int, log: Path, timeout: float,
              env: dict[str, str] | None = None) -> RanksOutcome:
    """Fork the ranks and wait for them (see ForkedRanks)."""
    with ForkedRanks(target, nproc, log, env) as ranks:
        return ranks.wait(timeout)


def _reap(running: dict[int, int]) -> None:
    """Kill these ranks (a failed peer, the deadline, an interruption) and wait for them."""
    for pid in running.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for pid in running.values():
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass


def torchrun_command(nproc: int, module: str, args: list[str]) -> list[str]:
    """`python -m torch.distributed.run` on one node with `nproc` ranks, each running `module` with `args`."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
            "-m", module, *args]


def rank_entry(main: Callable[[list[str]], int], argv: list[str]) -> None:
    """A rank worker's `python -m` entry under torchrun: `main(argv)`'s exit code (1 on an exception, its
    traceback to the log), without interpreter teardown (after the process group is gone an abort at exit was
    seen otherwise)."""
    code = 1
    try:
        code = main(argv)
    except BaseException:  # noqa: BLE001 - the log gets the traceback, torchrun the exit code
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_job(main: Callable[[list[str]], int], module: str, args: list[str], nproc: int, log: Path,
            timeout: float, env: dict[str, str]) -> tuple[bool, str]:
    """`nproc` ranks each running `main(args)`: forked from this process where `fork_safe`, else a torchrun job
    running `python -m module args`; (whether every rank exited 0 in time, "forked" or "torchrun")."""
    if fork_safe():
        return run_ranks(lambda: main(args), nproc, log, timeout, env).ok, "forked"
    process = start_torchrun(torchrun_command(nproc, module, args), log, {**os.environ, **env})
    try:
        return wait_torchrun(process, timeout) == 0, "torchrun"
    finally:  # the check itself stopped (timeout, signal): no rank may outlive it
        if process.poll() is None:
            stop_torchrun(process)


def _terminated_with_this_check() -> None:
    deathsig.on_parent_death(signal.SIGTERM)


def start_torchrun(argv: list[str], log: Path, env: dict[str, str] | None = None,
                   append: bool = False) -> subprocess.Popen:
    """Start `argv` (a torchrun command), its output to `log`, in its own session, terminated with this process."""
    with open(log, "a" if append else "w", encoding="utf-8") as handle:
        return subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                preexec_fn=_terminated_with_this_check)


def stop_torchrun(process: subprocess.Popen) -> None:
    """Kill the job: the launcher and its ranks (its session's group, which holds nothing else)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def wait_torchrun(process: subprocess.Popen, timeout: float) -> int | None:
    """The job's exit code, or None when it ran past `timeout` seconds (then it is stopped)."""
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_torchrun(process)
        return None
