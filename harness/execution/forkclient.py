"""The runner's side of a cell's check server (forkserver): start it, wait for its imports, ask it
for one check at a time, and keep each check's clock.

`CheckProcesses` is what a cell runs its checks through: forked from the server while it lives,
else fresh interpreters (`runner.run_isolated`, also what `--no-fork` always uses). A server that
cannot start, or dies, is said in the cell's setup log, and the cell goes on without it; a check
that was running when it died runs again in a fresh interpreter. Verdicts come from
`runner.outcome`, the same as on the fresh path.
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import time
from pathlib import Path

from harness.envs.cellenv import die_with_parent
from harness.envs.importrecord import GRAPH_VARIABLE
from harness.results.records import CheckResult

from . import runner

READY_TIMEOUT = 900.0  # seconds for the server's imports; a loaded 2-core machine took about 60
REPLY_TIMEOUT = 60.0  # seconds for a fork, or for the server to reap a killed check


class ServerUnavailable(RuntimeError):
    """The check server could not start, refused to fork, or died; the message says which."""


class CheckServer:
    def __init__(self, python: Path | str, env: dict[str, str], log_path: Path, preload: tuple[str, ...] | None = None):
        log_path.parent.mkdir(parents=True, exist_ok=True)
        argv = [str(python), "-m", "harness", "checkserver"]
        argv += ["--preload", ",".join(preload)] if preload is not None else []  # None: forkserver.PRELOAD
        # The environment's import recorder keeps the server's import graph, so that each check counts
        # the preloaded packages it touches, not all of them (envs/importrecord.py).
        server_env = {**(os.environ if env is None else env), GRAPH_VARIABLE: "1"}
        with open(log_path, "ab") as log:
            # Its own session: Ctrl-C reaches the runner only, which then stops the server itself.
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=log, env=server_env, start_new_session=True,
                                         preexec_fn=die_with_parent)
        self.env = dict(os.environ if env is None else env)  # what the server and so each fork start from
        self.buffer = b""
        self.imports = 0.0
        self.modules: list[str] = []
        self.graph = False  # whether its checks count only the preloaded packages they touch
        self.is_ready = False
        self.tiers: dict[tuple[str, ...], dict] = {}  # what the server said of each tier (forkserver), once

    def wait_ready(self, timeout: float = READY_TIMEOUT) -> None:
        """Block until the imports are done; ServerUnavailable with the server's reason if it refused."""
        try:
            reply = self._receive(timeout)
        except TimeoutError:
            raise ServerUnavailable(f"the check server's imports took more than {timeout:.0f} s") from None
        if not reply.get("ready"):
            raise ServerUnavailable(reply.get("reason", "the check server refused"))
        self.imports, self.modules = float(reply["imports"]), list(reply["modules"])
        self.graph, self.is_ready = bool(reply.get("graph")), True

    def run(self, name: str, args: list[str], log_path: Path, timeout: float, env: dict[str, str] | None = None,
            memory_limit_mb: int | None = None, preload: tuple[str, ...] = ()) -> CheckResult:
        """One check in a process forked from the server, classified as runner.run_isolated does; `env`
        (None: the server's) is the check's whole environment, as a fresh interpreter would get it; `preload`:
        the modules it asks for on top of the server's (CheckSpec.preload), imported once by the server's tier."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_bytes(b"")
        result_path = log_path.with_suffix(".result.json")
        result_path.unlink(missing_ok=True)
        env = self.env if env is None else env
        self._send({"check": name, "args": args, "log": str(log_path.resolve()),
                    "result": str(result_path.resolve()), "memory_limit_mb": memory_limit_mb,
                    "env": {k: v for k, v in env.items() if self.env.get(k) != v},
                    "unset": [k for k in self.env if k not in env], "preload": list(preload)})
        if preload and tuple(preload) not in self.tiers:  # the server starts the tier now: its imports first
            self._tier_ready(tuple(preload))
        pid = int(self._answer()["started"])
        start, exited = time.perf_counter(), None
        try:
            try:
                with runner.live_group(pid):
                    exited = self._receive(timeout)
            except TimeoutError:
                runner.kill_group(pid)
                try:
                    exited = self._answer()  # reaped by the server
                except ServerUnavailable:  # the verdict stands; the next check finds the server gone
                    exited = {}
                    self.proc.kill()
                return runner.timed_out(name, timeout, log_path, round(time.perf_counter() - start, 3))
        finally:
            if exited is None:  # interrupted, or the server died: leave no part of the check running
                runner.kill_group(pid)
        return runner.outcome(name, int(exited["code"]), log_path, result_path, round(time.perf_counter() - start, 3))

    def _tier_ready(self, modules: tuple[str, ...]) -> None:
        try:
            reply = self._receive(READY_TIMEOUT)
        except TimeoutError:
            raise ServerUnavailable(f"the check server's imports of {', '.join(modules)} took more than "
                                    f"{READY_TIMEOUT:.0f} s") from None
        if reply.get("tier") != list(modules):
            raise ServerUnavailable(f"the check server answered {str(reply)[:200]} for the tier of "
                                    f"{', '.join(modules)}")
        self.tiers[modules] = reply
        # a shared tier's imports were counted with the request that started it
        self.imports += float(reply.get("imports") or 0.0) if reply.get("ready") and not reply.get("shared") else 0.0

    def close(self) -> None:
        """Stop the server (end of input), killing it if it does not go at once."""
        if self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
        if self.proc.stdout:
            self.proc.stdout.close()

    def _send(self, message: dict) -> None:
        try:
            self.proc.stdin.write((json.dumps(message) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError):
            raise ServerUnavailable(self._gone()) from None

    def _answer(self) -> dict:
        """A reply the server owes at once (a fork, a reap): silence means it hangs."""
        try:
            return self._receive(REPLY_TIMEOUT)
        except TimeoutError:
            raise ServerUnavailable(f"the check server did not answer within {REPLY_TIMEOUT:.0f} s") from None

    def _receive(self, timeout: float) -> dict:
        """The server's next message; TimeoutError after `timeout` s, ServerUnavailable at its end."""
        deadline = time.monotonic() + timeout
        fd = self.proc.stdout.fileno()
        while b"\n" not in self.buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
                raise TimeoutError
            chunk = os.read(fd, 65536)
            if not chunk:
                raise ServerUnavailable(self._gone())
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def _gone(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "the check server closed its output"
        return f"the check server exited (status {code})"


class CheckProcesses:
    """Where a cell's checks run: forked from its check server while one lives, else fresh interpreters."""

    def __init__(self, python: Path | str, env: dict[str, str], setup_log: Path, fork: bool = True,
                 preload: tuple[str, ...] | None = None, start: bool = True):
        """`start=False` defers the server to the first check run: a cell that expects to reuse every
        check from other cells pays for no imports unless one is not reused after all."""
        self.python, self.env, self.setup_log, self.preload = python, env, setup_log, preload
        self.fork, self.started = fork, False
        self.server: CheckServer | None = None
        self.imports = 0.0
        if start:
            self.start()

    def start(self) -> None:
        """Start the check server (once: one that failed is not tried again), if the cell forks its checks."""
        if self.fork and not self.started:
            self.started = True
            self.server = CheckServer(self.python, self.env, self.setup_log, self.preload)

    def ready(self) -> float:
        """Wait for the server's imports (they overlap whatever ran since the start); their seconds, 0 without one."""
        if self.server is not None and not self.server.is_ready:
            try:
                self.server.wait_ready()
                self.imports = self.server.imports
                counted = ("each check counts the preloaded packages it touches" if self.server.graph else
                           "no import recorder: each check counts all of them")
                self._note(f"check server ready: imported {', '.join(self.server.modules) or 'nothing'} "
                           f"once in {self.imports:.1f} s ({counted})")
            except ServerUnavailable as exc:
                self._fall_back(str(exc))
        return self.imports

    def run(self, name: str, args: list[str], log_path: Path, timeout: float, env: dict[str, str] | None = None,
            memory_limit_mb: int | None = None, preload: tuple[str, ...] = ()) -> CheckResult:
        """One check; `env` (None: the cell's) as a fresh interpreter would get it, whichever path runs it;
        `preload` (CheckSpec.preload) its modules to import once per cell, forked from the server's tier."""
        env = self.env if env is None else env
        if runner.STOPPING.is_set():  # the run was interrupted in another thread
            raise KeyboardInterrupt
        if self.fork and not self.started:  # deferred: the first check not reused after all
            self.start()
            self.ready()
        if self.server is not None:
            known = set(self.server.tiers)
            try:
                return self.server.run(name, args, log_path, timeout, env, memory_limit_mb, preload)
            except ServerUnavailable as exc:
                self._fall_back(f"{exc} during {name}; it runs again")
            finally:
                if self.server is not None:
                    self.imports = self.server.imports
                    for modules in set(self.server.tiers) - known:
                        self._note_tier(modules, self.server.tiers[modules])
        return runner.run_isolated(self.python, name, args, log_path, timeout, env, memory_limit_mb)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
            self.server = None

    def _fall_back(self, why: str) -> None:
        self._note(f"check server unavailable ({why}): the cell's checks run in fresh interpreters")
        self.close()

    def _note_tier(self, modules: tuple[str, ...], told: dict) -> None:
        if told.get("ready") and told.get("shared"):
            self._note(f"check server tier shared: the checks that ask for {', '.join(modules)} fork from the tier "
                       f"that imported {', '.join(told.get('modules', []))}, the same modules this cell installs")
        elif told.get("ready"):
            self._note(f"check server tier ready: imported {', '.join(told.get('modules', []))} once in "
                       f"{float(told.get('imports', 0)):.1f} s, for the checks that ask for {', '.join(modules)}")
        else:
            self._note(f"no check server tier for {', '.join(modules)} ({told.get('reason', 'refused')}): the "
                       f"checks that ask for it fork from the check server")

    def _note(self, line: str) -> None:
        with open(self.setup_log, "a", encoding="utf-8") as log:
            log.write(f"[harness] {line}\n")
