"""The fork path (one check server per cell, a forked process per check) keeps what a fresh
interpreter per check gives: the same result, the same crash classes, the timeout with the check's
own children killed, and nothing left running when the runner dies. Real processes; the server
preloads only `json` (fast); that torch and transformers are imported once per cell is
tests/e2e/test_check_server.py's."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from harness.execution import runner
from harness.execution.forkclient import CheckProcesses
from harness.results.records import Status

ROOT = Path(__file__).resolve().parents[4]
pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the check server forks (Linux)")
LIGHT = ("json",)


def _env(project_env, mode: str, tmp_path, **extra) -> dict[str, str]:
    # One thread, as a cell's checks get it (CellEnv.run_env): else numpy's OpenBLAS starts a thread
    # pool at import, and the server refuses to fork.
    return {**project_env, "OMP_NUM_THREADS": "1", "MISBEHAVE": mode, "MISBEHAVE_PIDS": str(tmp_path / "pids"),
            "MISBEHAVE_MARKER": str(tmp_path / "marker"), **extra}


TIERS = pytest.mark.parametrize("tier", [(), ("tier_import",)], ids=["server", "tier"])  # forked from either


def _forked(tmp_path, env, timeout=60.0, memory=None, preload=LIGHT, tier=()):
    processes = CheckProcesses(sys.executable, env, tmp_path / "setup.log", preload=preload)
    try:
        processes.ready()
        assert processes.server is not None, (tmp_path / "setup.log").read_text()
        return processes.run("misbehave", [], tmp_path / "logs" / "misbehave.log", timeout, memory_limit_mb=memory,
                             preload=tier)
    finally:
        processes.close()


def _fresh(tmp_path, env, timeout=60.0, memory=None):
    return runner.run_isolated(sys.executable, "misbehave", [], tmp_path / "fresh" / "misbehave.log", timeout, env,
                               memory)


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except OSError:
        return False


def _gone(pids, seconds=10.0) -> list[int]:
    """The pids still alive after waiting up to `seconds` (a SIGKILLed process takes a moment)."""
    deadline = time.time() + seconds
    while any(_alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)
    alive = [p for p in pids if _alive(p)]
    for pid in alive:
        os.kill(pid, signal.SIGKILL)
    return alive


def test_a_forked_check_gives_the_fresh_interpreters_result(tmp_path, project_env):
    env = _env(project_env, "pass", tmp_path)
    forked, fresh = _forked(tmp_path, env).to_dict(), _fresh(tmp_path, env).to_dict()
    assert forked.pop("duration") > 0 and fresh.pop("duration") > 0
    assert forked == fresh  # the metrics name the runner: the same process on both paths
    assert forked["metrics"]["runner"] == fresh["metrics"]["runner"] != ""


def test_a_forked_checks_output_and_its_childrens_go_to_its_own_log(tmp_path, project_env):
    env = _env(project_env, "talk", tmp_path)
    assert _forked(tmp_path, env).status is Status.PASS
    assert _fresh(tmp_path, env).status is Status.PASS
    forked = (tmp_path / "logs" / "misbehave.log").read_text()
    fresh = (tmp_path / "fresh" / "misbehave.log").read_text()
    for line in ("said on stdout", "said on stderr", "said by a child process"):
        assert line in forked and line in fresh
    assert "check server" not in forked  # nothing of the server's own output


def test_a_forked_check_gets_its_own_environment_not_the_servers(tmp_path, project_env):
    # The server starts with MISBEHAVE=exit; each check's environment (as reuse's import record sets per
    # check) replaces it: one sets another value, one removes the variable (the check's default is pass).
    server_env = _env(project_env, "exit", tmp_path)
    processes = CheckProcesses(sys.executable, server_env, tmp_path / "setup.log", preload=LIGHT)
    try:
        processes.ready()
        changed = processes.run("misbehave", [], tmp_path / "logs" / "a.log", 60, {**server_env, "MISBEHAVE": "pass"})
        removed = processes.run("misbehave", [], tmp_path / "logs" / "b.log", 60,
                                {k: v for k, v in server_env.items() if k != "MISBEHAVE"})
        assert processes.server is not None  # both ran forked
        default = processes.run("misbehave", [], tmp_path / "logs" / "c.log", 60)
    finally:
        processes.close()
    assert changed.status is Status.PASS and removed.status is Status.PASS
    assert default.status is Status.CRASH and "exited with status 3" in default.message  # the server's own


@TIERS
@pytest.mark.parametrize("mode, memory, why", [
    ("segv", None, "killed by SIGSEGV"),
    ("memory", 1024, "out of memory"),
    ("exit", None, "exited with status 3 without a result"),
    ("abort", None, "killed by SIGABRT"),
])
def test_a_forked_check_that_dies_is_classified_as_in_a_fresh_interpreter(tmp_path, project_env, mode, memory, why,
                                                                          tier):
    env = _env(project_env, mode, tmp_path)
    forked, fresh = _forked(tmp_path, env, memory=memory, tier=tier), _fresh(tmp_path, env, memory=memory)
    assert forked.status is Status.CRASH and fresh.status is Status.CRASH
    assert why in forked.message and why in fresh.message
    assert forked.message.split(".")[0] == fresh.message.split(".")[0]


def test_the_memory_limit_holds_in_the_forked_check_only(tmp_path, project_env):
    # Without the limit the same check would take 64 GiB; with it, the server lives on for the next check.
    env = _env(project_env, "memory", tmp_path)
    processes = CheckProcesses(sys.executable, env, tmp_path / "setup.log", preload=LIGHT)
    try:
        processes.ready()
        first = processes.run("misbehave", [], tmp_path / "logs" / "a.log", 60, memory_limit_mb=1024)
        assert first.status is Status.CRASH and "out of memory" in first.message
        assert processes.server is not None and processes.server.proc.poll() is None
    finally:
        processes.close()


@TIERS
def test_a_hung_forked_check_times_out_and_its_children_die_with_it(tmp_path, project_env, tier):
    env = _env(project_env, "hang-with-child", tmp_path)
    result = _forked(tmp_path, env, timeout=3, tier=tier)
    assert result.status is Status.TIMEOUT and "no result after 3 s" in result.message
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    assert len(pids) == 2  # the check and the process it started
    assert _gone(pids) == []


@TIERS
def test_a_check_server_that_dies_mid_check_falls_back_to_a_fresh_interpreter(tmp_path, project_env, tier):
    env = _env(project_env, "kill-server-once", tmp_path)  # the check kills its parent: the server, or its tier
    processes = CheckProcesses(sys.executable, env, tmp_path / "setup.log", preload=LIGHT)
    try:
        processes.ready()
        server = processes.server.proc.pid
        result = processes.run("misbehave", [], tmp_path / "logs" / "misbehave.log", 60, preload=tier)
        assert (tmp_path / "marker").exists(), "the server was never killed: the test proves nothing"
        assert result.status is Status.PASS and result.message == "passed without the check server"
        assert processes.server is None and _gone([server]) == []
        again = processes.run("misbehave", [], tmp_path / "logs" / "again.log", 60)  # the rest run fresh too
        assert again.status is Status.PASS
    finally:
        processes.close()
    log = (tmp_path / "setup.log").read_text()
    assert "check server unavailable (the check server exited" in log and "during misbehave" in log


@pytest.mark.parametrize("module, why", [("threaded_import", "unsafe to fork after the imports: 2 Python threads"),
                                         ("broken_import", "import failed: RuntimeError: this package is broken")])
def test_a_server_that_cannot_fork_safely_falls_back_and_says_why(tmp_path, project_env, module, why):
    env = _env(project_env, "pass", tmp_path)
    processes = CheckProcesses(sys.executable, env, tmp_path / "setup.log", preload=("json", module))
    try:
        assert processes.ready() == 0.0 and processes.server is None
        result = processes.run("misbehave", [], tmp_path / "logs" / "misbehave.log", 60)
        assert result.status is Status.PASS and result.metrics["answer"] == 42
    finally:
        processes.close()
    assert why in (tmp_path / "setup.log").read_text()


RUNNER = textwrap.dedent("""\
    import sys
    from pathlib import Path
    from harness.execution.forkclient import CheckProcesses
    processes = CheckProcesses(sys.executable, None, Path(sys.argv[1]) / "setup.log", preload=("json",))
    processes.ready()
    processes.run("misbehave", [], Path(sys.argv[1]) / "logs" / "misbehave.log", 600,
                  preload=tuple(sys.argv[2:]))
    """)


def _parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


@TIERS
def test_killing_the_runner_leaves_no_server_and_no_check_behind(tmp_path, project_env, tier):
    env = _env(project_env, "hang-with-child", tmp_path)
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, str(tmp_path), *tier], cwd=ROOT, env=env)
    deadline = time.time() + 120
    while len((tmp_path / "pids").read_text().split() if (tmp_path / "pids").exists() else []) < 2:
        assert time.time() < deadline and proc.poll() is None, "the check never started"
        time.sleep(0.05)
    check, grandchild = (int(p) for p in (tmp_path / "pids").read_text().split())
    servers = [_parent(check)] + ([_parent(_parent(check))] if tier else [])  # the tier, then the server
    assert all("checkserver" in Path(f"/proc/{pid}/cmdline").read_text() for pid in servers)
    assert _parent(servers[-1]) == proc.pid
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert _gone([*servers, check]) == []  # runner -> server (-> tier) -> check, each by PDEATHSIG
    _gone([grandchild])  # the check's own child has no PDEATHSIG of its own, as under a fresh interpreter


def test_a_check_that_asks_for_modules_forks_from_a_tier_that_imported_them_once(tmp_path, project_env):
    # tier_import sets a variable at import, as vLLM does: the check that does not ask must see neither.
    env = _env(project_env, "tier", tmp_path)
    processes = CheckProcesses(sys.executable, env, tmp_path / "setup.log", preload=LIGHT)
    try:
        processes.ready()
        server = processes.server.proc.pid
        first, plain, again = (processes.run("misbehave", [], tmp_path / "logs" / f"{n}.log", 60, preload=tier)
                               for n, tier in (("a", ("tier_import",)), ("b", ()), ("c", ("tier_import",))))
        assert processes.server is not None and processes.server.proc.poll() is None
    finally:
        processes.close()
    assert {r.status for r in (first, plain, again)} == {Status.PASS}
    asked, other, second = first.metrics, plain.metrics, again.metrics
    assert asked["imported"] and asked["variable"] == "1"
    assert not other["imported"] and other["variable"] is None and other["parent"] == server
    assert asked["grandparent"] == server and asked["parent"] != server
    assert second["parent"] == asked["parent"]  # the same tier: imported once
    assert asked["runner"] == other["runner"] == os.getpid()
    assert "check server tier ready: imported tier_import once" in (tmp_path / "setup.log").read_text()
    assert _gone([asked["parent"]]) == []  # the tier stopped with the server


def test_requests_that_come_to_the_same_installed_modules_share_one_tier(tmp_path, project_env):
    """vLLM's modules, and vLLM's with verl's in a row without verl: one tier, imported once, and its imports counted
    once; the module that is not installed is never looked for below its top-level package."""
    env = _env(project_env, "tier", tmp_path)
    processes = CheckProcesses(sys.executable, env, tmp_path / "setup.log", preload=LIGHT)
    try:
        processes.ready()
        server, before = processes.server.proc.pid, processes.server.imports
        asks = (("tier_import",), ("tier_import", "no_such_module_here.sub"), ("tier_import",))
        first, wider, again = (processes.run("misbehave", [], tmp_path / "logs" / f"{n}.log", 60, preload=ask)
                               for n, ask in zip("abc", asks))
        imports = processes.server.imports - before
        told = processes.server.tiers
    finally:
        processes.close()
    assert {r.status for r in (first, wider, again)} == {Status.PASS}
    assert first.metrics["parent"] == wider.metrics["parent"] == again.metrics["parent"] != server
    assert wider.metrics["imported"] and wider.metrics["variable"] == "1"
    assert told[asks[1]].get("shared") and not told[asks[0]].get("shared")
    assert imports == pytest.approx(float(told[asks[0]]["imports"]))  # the shared tier's imports counted once
    log = (tmp_path / "setup.log").read_text()
    assert log.count("check server tier ready") == 1 and "check server tier shared" in log


@pytest.mark.parametrize("module, why", [
    ("threaded_import", "unsafe to fork after the imports: 2 Python threads"),
    ("broken_import", "import failed: RuntimeError: this package is broken"),
    ("no_such_module_here", "none of them is installed"),
])
def test_a_tier_that_cannot_serve_is_dropped_and_its_checks_fork_from_the_server(tmp_path, project_env, module, why):
    env = _env(project_env, "tier", tmp_path)
    processes = CheckProcesses(sys.executable, env, tmp_path / "setup.log", preload=LIGHT)
    try:
        processes.ready()
        server = processes.server.proc.pid
        results = [processes.run("misbehave", [], tmp_path / "logs" / f"{n}.log", 60, preload=(module,))
                   for n in "ab"]
        assert processes.server is not None  # the server lives on
    finally:
        processes.close()
    assert all(r.status is Status.PASS and r.metrics["parent"] == server for r in results)
    assert not any(r.metrics["imported"] for r in results)
    log = (tmp_path / "setup.log").read_text()
    assert f"no check server tier for {module} ({why}" in log and log.count("no check server tier") == 1


def test_a_server_ends_without_the_interpreters_shutdown_and_keeps_its_output(tmp_path, project_env):
    # The shutdown would tear down torch's and transformers' heap in every cell; the runner waits for it.
    env = _env(project_env, "pass", tmp_path, EXIT_MARKER=str(tmp_path / "exited"))
    processes = CheckProcesses(sys.executable, env, tmp_path / "setup.log", preload=("json", "exit_marker"))
    try:
        processes.ready()
        assert processes.server is not None, (tmp_path / "setup.log").read_text()
        server = processes.server.proc
        assert processes.run("misbehave", [], tmp_path / "logs" / "a.log", 60).status is Status.PASS
    finally:
        processes.close()
    assert server.returncode == 0
    assert not (tmp_path / "exited").exists()  # the test can fail: a plain return from main runs the handler
    assert "printed by exit_marker at import" in (tmp_path / "setup.log").read_text()


def test_a_deferred_server_starts_at_the_first_check_it_must_run(tmp_path, project_env):
    env = _env(project_env, "pass", tmp_path)
    processes = CheckProcesses(sys.executable, env, tmp_path / "setup.log", preload=LIGHT, start=False)
    try:
        assert processes.ready() == 0 and processes.server is None  # expected every check to be reused
        result = processes.run("misbehave", [], tmp_path / "logs" / "misbehave.log", 60)
        assert processes.server is not None and result.status is Status.PASS  # one was not, after all
    finally:
        processes.close()
    assert "check server ready: imported json" in (tmp_path / "setup.log").read_text()


def test_a_forked_check_finds_the_collector_running_and_the_preloaded_heap_frozen(tmp_path, project_env):
    """The server (and a tier) imports with the collector paused, then freezes what it holds: a forked check's
    collections walk only what the check allocates. The check itself sees the collector as a fresh interpreter
    does: enabled, with Python's thresholds."""
    env = _env(project_env, "collector", tmp_path)
    processes = CheckProcesses(sys.executable, env, tmp_path / "setup.log", preload=LIGHT)
    try:
        processes.ready()
        assert processes.server is not None, (tmp_path / "setup.log").read_text()
        plain, tiered = (processes.run("misbehave", [], tmp_path / "logs" / f"{n}.log", 60, preload=tier)
                         for n, tier in (("plain", ()), ("tiered", ("tier_import",))))
    finally:
        processes.close()
    fresh = _fresh(tmp_path, env)
    assert {r.status for r in (plain, tiered, fresh)} == {Status.PASS}
    assert fresh.metrics["frozen"] == 0 and fresh.metrics["enabled"]
    assert plain.metrics["enabled"] and tiered.metrics["enabled"]
    assert plain.metrics["thresholds"] == tiered.metrics["thresholds"] == fresh.metrics["thresholds"]
    assert plain.metrics["frozen"] > 1000  # the server's preload: json and the check entry point's modules
    assert tiered.metrics["frozen"] > plain.metrics["frozen"]  # and the tier's own imports on top
    assert tiered.metrics["tier_import_collecting"] is False
