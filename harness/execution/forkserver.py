"""The check server: one interpreter per cell imports the heavy packages once, then forks one process
per check (`python -m harness checkserver`, started by forkclient in the cell's environment).

Each forked check is set up as a fresh check process (`python -m harness.execution.check_process`) would be:
its own session (a timeout kills its whole process group, torchrun ranks included), SIGKILL when the server
dies (the server itself dies with the runner: runner -> server -> check), the matrix's memory limit, stdout
and stderr into its own log, and the same entry point, check_process.main, which runs `runner.execute` and
writes the result file. The server runs one check at a time and only reports pids and exit statuses; the
runner keeps the clock and the verdicts (runner.outcome).

Forking is safe only from a process with one thread: the server refuses (and the cell falls back to
fresh interpreters) when an import started a thread, native ones included, or initialised CUDA.

A check may ask for more modules than every check needs (CheckSpec.preload: vLLM for the vLLM checks). A
second server, a tier, is forked from this one the first time a check asks for them, imports them once and forks
those checks; the other checks still fork from this server, which never imports them (importing vLLM sets
environment variables and torch settings that a check which never touches vLLM must not inherit). A tier that
cannot import its modules, imports none of them (not installed), or would be unsafe to fork is dropped, and
its checks fork from this server, as before. A tier is keyed by the modules of a request whose top-level package the
cell installs (installed_part): the checks asking for vLLM's modules and those asking for vLLM's and verl's share
one tier in a row without verl, and a request that comes to nothing installed starts none.

Protocol: JSON lines. Server -> runner: {"ready": true, "imports": s, "modules": [...], "graph": bool} or
{"ready": false, "reason": ...}; then per request {"started": pid} and {"exited": pid, "code": c}, preceded,
for the first request that asks for a tier, by {"tier": [...], "ready": bool, "imports": s, "modules": [...]}
(with "shared": true where an earlier request's tier serves it) or with "reason" where it was dropped.
Runner -> server: {"check", "args", "log", "result", "memory_limit_mb", "preload"}; end of input stops it.
"""
from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from pathlib import Path

from harness.envs.cellenv import die_with_parent
from harness.envs.importrecord import GRAPH_VARIABLE, INSTALLED_AS

from . import runner

# What (nearly) every check imports, heaviest first; each only where installed, one preload step each. With
# the environment's import recorder keeping this server's import graph, a forked check counts for reuse only
# the preloaded packages it touches and what they pulled in (envs/importrecord.py), so the list costs no reuse;
# without it (a recorder that keeps no graph) every check counts all of them. A module may
# be listed only if importing it changes no other package's behaviour that a check which does not touch it
# could see (that would not be counted). vLLM is not: its checks ask for it, and fork from a tier (below).
# megatron-core, where installed (a Megatron cell), is imported by three checks there (bridge-parity, grpo-convergence,
# launch-plans): 1.5 s each on one core, 4 s where Megatron-Bridge brought wandb, which megatron.core.timers imports;
# measured, it changes no environment variable, warning filter, logging level, default dtype or torch setting.
PRELOAD = ("torch", "numpy", "torch.distributed", "torch.distributed.fsdp", "transformers",
           "transformers.models.qwen3_5.modeling_qwen3_5", "transformers.models.qwen3_5_moe.modeling_qwen3_5_moe",
           "megatron.core", runner.ENTRY)
EXIT_ORPHANED = 70  # the server died between fork and PDEATHSIG: nobody waits for this check


def installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a parent package is missing (transformers without qwen3_5)
        return False


def import_graph():
    """The cell environment's import recorder when it keeps this server's import graph (a check then counts
    only the preloaded packages it touches), else None (each check counts everything the server holds)."""
    recorder = sys.modules.get(INSTALLED_AS)
    return recorder.RECORDER if recorder is not None and recorder.RECORDER.graphing else None


def preload(modules=PRELOAD) -> list[str]:
    """Import every installed module of `modules`, one preload step each; raises what an import raises:
    a half-imported package would make a forked check behave unlike a fresh interpreter, so the cell falls back."""
    graph = import_graph()
    if graph is not None:  # the step itself asks whether the module is installed: charged to it, not to this module
        return [module for module in modules if graph.preload(module)]
    loaded = []
    for module in modules:
        if installed(module):
            importlib.import_module(module)
            loaded.append(module)
    return loaded


@contextmanager
def heap_frozen_after():
    """The collector paused while the block runs, and everything alive after it frozen (gc.freeze) before the
    collector resumes. The preload's imports allocate some 350,000 tracked objects, and the collections that
    allocation triggers walked the growing heap again and again: about a third of the preload's CPU time on one
    core (measured: 8.3-12.8 s with the collector, 5.8-6.9 s without). Frozen, the preloaded heap is also never
    walked by a forked check's collections, which then touch only what the check allocates. Outcomes do not
    change: a frozen object is only never collected. The reference cycles the imports left behind (some 200,000
    objects after torch and transformers) stay, as memory that every fork shares, unless a check unfreezes the
    heap: vLLM's engine does at its shutdown, and its next collection frees them (about 1 s more in vllm-rollout,
    measured; less than collecting them here, in every cell, would cost)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if enabled:
            gc.enable()


def fork_hazards() -> list[str]:
    """Why forking this process now would be unsafe (threads do not survive a fork); empty if none."""
    hazards = []
    if threading.active_count() > 1:
        hazards.append(f"{threading.active_count()} Python threads")
    tasks = Path("/proc/self/task")
    if tasks.is_dir() and len(os.listdir(tasks)) > 1:  # native threads too: an OpenMP or intra-op pool
        hazards.append(f"{len(os.listdir(tasks))} native threads")
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        hazards.append("CUDA is initialised")
    return hazards


def _send(channel: int, message: dict) -> None:
    os.write(channel, (json.dumps(message) + "\n").encode())  # one write per line: never half a message


def _exit(code: int) -> None:
    """End this process (a check, a tier, the server) without the interpreter's shutdown, its output flushed
    first (what cannot be flushed is lost)."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _run_check(request: dict, server_pid: int, channels: tuple[int, ...]) -> None:
    """In the forked child: set up as a fresh check process would be, run the check, never return."""
    code = 1
    try:
        os.setsid()  # its own process group: a timeout kills it and what it started
        die_with_parent()
        if os.getppid() != server_pid:  # the server died before PDEATHSIG was set
            os._exit(EXIT_ORPHANED)
        # Opened before anything is closed, so neither can land on 0, 1 or 2 and be overwritten below.
        log = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)  # also drops the request pipe, the server's stdin
        os.dup2(log, 1)
        os.dup2(log, 2)
        for fd in {log, null, *channels} - {0, 1, 2}:
            os.close(fd)
        os.environ.pop(GRAPH_VARIABLE, None)  # the check's own children record themselves, as a check's do
        os.environ.update(request.get("env", {}))  # the check's own variables (reuse's import record)
        for key in request.get("unset", []):
            os.environ.pop(key, None)
        runner.limit_memory(request.get("memory_limit_mb"))
        # Imported here, in the check's process, as a fresh one imports it: the import recorder then counts what
        # the entry point pulled in at preload for this check.
        from . import check_process

        argv = [request["check"], "--result-file", request["result"], *request["args"]]
        sys.argv = [check_process.__file__, *argv]
        code = check_process.main(argv)
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:  # noqa: BLE001 - whatever escapes is the check's crash, told in its log
        traceback.print_exc()
    finally:
        _exit(code)  # never back into the server's loop (nor its atexit handlers)


class _Tier:
    """The pipes to a tier (a server forked from this one that imports more modules) and its pid."""

    def __init__(self, pid: int, requests: int, replies: int):
        self.pid, self.requests, self.replies, self.buffer = pid, requests, replies, b""

    def fds(self) -> tuple[int, int]:
        return self.requests, self.replies

    def receive(self) -> dict | None:
        """Its next message; None once it is gone."""
        while b"\n" not in self.buffer:
            chunk = os.read(self.replies, 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def relay(self, request: dict, replies: int) -> bool:
        """Have it fork `request`'s check and pass its replies on; False if it died (the check dies with it)."""
        try:
            _send(self.requests, request)
        except OSError:
            return False
        for _ in ("started", "exited"):
            reply = self.receive()
            if reply is None:
                return False
            _send(replies, reply)
        return True

    def close(self) -> None:
        """End of its input stops it, as the runner's stops this server."""
        for fd in self.fds():
            os.close(fd)
        os.waitpid(self.pid, 0)


def _start_tier(modules: tuple[str, ...], inherited: tuple[int, ...]) -> tuple[_Tier | None, dict]:
    """Fork a tier that imports `modules` on top of this server's; (the tier or None if dropped, what to tell the
    runner). `inherited`: this server's own channels, which the tier closes."""
    requests_in, requests_out = os.pipe()
    replies_in, replies_out = os.pipe()
    graphing = import_graph() is not None
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the tier: serves its own checks from the pipes, and dies with this server
        code = 1
        try:
            die_with_parent()
            null = os.open(os.devnull, os.O_RDONLY)
            os.dup2(null, 0)  # this server's requests are not the tier's
            for fd in {null, requests_out, replies_in, *inherited} - {0, 1, 2}:
                os.close(fd)
            if graphing:  # the fork made the recorder a check's; the tier goes on graphing what it imports
                sys.modules[INSTALLED_AS].RECORDER.keep_graphing()
            code = serve(os.fdopen(requests_in), replies_out, modules)
        except BaseException:  # noqa: BLE001 - told in the setup log; the server drops the tier
            traceback.print_exc()
        finally:
            _exit(code)
    os.close(requests_in)
    os.close(replies_out)
    tier = _Tier(pid, requests_out, replies_in)
    reply = tier.receive() or {"ready": False, "reason": "the tier exited during its imports"}
    told = {key: reply[key] for key in ("ready", "imports", "modules", "reason") if key in reply}
    if reply.get("ready") and not reply.get("modules"):
        told.update(ready=False, reason="none of them is installed")
    if not told.get("ready"):
        tier.close()
        return None, told
    return tier, told


def serve(requests, replies: int, modules=PRELOAD) -> int:
    start = time.perf_counter()
    try:
        with heap_frozen_after():
            loaded = preload(modules)
    except BaseException as exc:  # noqa: BLE001 - any failed import: the cell runs fresh interpreters
        _send(replies, {"ready": False, "reason": f"import failed: {type(exc).__name__}: {exc}"[:1000]})
        return 1
    hazards = fork_hazards()
    if hazards:
        _send(replies, {"ready": False, "reason": "unsafe to fork after the imports: " + ", ".join(hazards)})
        return 1
    _send(replies, {"ready": True, "imports": round(time.perf_counter() - start, 3), "modules": loaded,
                    "graph": import_graph() is not None})
    server_pid = os.getpid()
    tiers: dict[tuple[str, ...], _Tier | None] = {}  # by the modules a check asked for
    started: dict[tuple[str, ...], tuple[_Tier | None, dict]] = {}  # each tier once, by those of them installed
    try:
        for line in requests:
            request = json.loads(line)
            wanted = tuple(request.pop("preload", None) or ())
            live = (tier for tier, _ in started.values() if tier is not None)
            channels = (requests.fileno(), replies, *(fd for tier in live for fd in tier.fds()))
            if wanted and wanted not in tiers:
                key = installed_part(wanted)
                shared = key in started
                if not shared:
                    started[key] = _start_tier(key, channels) if key else (
                        None, {"ready": False, "reason": "none of them is installed"})
                    channels += started[key][0].fds() if started[key][0] is not None else ()
                tiers[wanted], told = started[key]
                _send(replies, {"tier": list(wanted), **told, **({"shared": True} if shared and key else {})})
            if tiers.get(wanted) is not None:
                if not tiers[wanted].relay(request, replies):
                    return 1  # the runner finds this server gone and runs the check again in a fresh interpreter
                continue
            sys.stdout.flush()
            sys.stderr.flush()  # or the child would write the server's buffered output again
            pid = os.fork()
            if pid == 0:
                _run_check(request, server_pid, channels)
            _send(replies, {"started": pid})
            _, status = os.waitpid(pid, 0)
            _send(replies, {"exited": pid, "code": os.waitstatus_to_exitcode(status)})
    finally:
        for tier, _ in started.values():
            if tier is not None:
                tier.close()
    return 0


def installed_part(modules: tuple[str, ...]) -> tuple[str, ...]:
    """The modules of a tier request whose top-level package this cell installs: the tier's key, so that two checks
    asking for different lists that come to the same installed modules (vLLM's, and vLLM's with verl's in a row
    without verl) fork from one tier. Only top-level packages are looked up: finding a submodule imports its package,
    which this server must not."""
    return tuple(module for module in modules if installed(module.split(".")[0]))


def main(modules=None) -> int:
    """Entry of `python -m harness checkserver`: replies go to a private copy of stdout, and stdout
    itself to stderr (the cell's setup log), so nothing an import prints can garble the protocol. It ends with
    os._exit: the interpreter's own shutdown would tear down the heap of torch and transformers, about 1 s on a
    core in every cell while the runner waits, and the server needs none of it (its checks are reaped, its
    tiers stopped, its output flushed here)."""
    replies = os.dup(1)
    os.dup2(2, 1)
    _exit(serve(sys.stdin, replies, PRELOAD if modules is None else modules))
