"""The runner classifies what happens to a check's process: real subprocesses that pass, raise,
crash, hang and exhaust memory."""
import sys

import pytest

from harness.checks import CheckOptions
from harness.execution import runner
from harness.results.records import Status


def _run(tmp_path, project_env, mode, timeout=60.0, memory=None):
    env = {**project_env, "MISBEHAVE": mode}
    return runner.run_isolated(sys.executable, "misbehave", [], tmp_path / "logs" / "misbehave.log", timeout, env,
                               memory_limit_mb=memory)


def test_a_passing_check_returns_its_own_result(tmp_path, project_env):
    result = _run(tmp_path, project_env, "pass")
    assert result.status is Status.PASS
    assert result.metrics["answer"] == 42 and set(result.metrics) == {"answer", "runner"}  # its own numbers
    assert result.duration > 0


def test_an_exception_in_the_check_is_an_error_with_the_traceback(tmp_path, project_env):
    result = _run(tmp_path, project_env, "raise")
    assert result.status is Status.ERROR
    assert "the check itself is broken" in result.message
    assert "RuntimeError" in result.metrics["traceback"]


def test_a_check_returning_the_wrong_type_is_an_error(tmp_path, project_env):
    assert _run(tmp_path, project_env, "wrong-type").status is Status.ERROR


@pytest.mark.parametrize("mode, why", [("abort", "SIGABRT"), ("exit", "status 3")])
def test_a_process_that_dies_is_a_crash_with_its_log_tail(tmp_path, project_env, mode, why):
    result = _run(tmp_path, project_env, mode)
    assert result.status is Status.CRASH
    assert why in result.message
    assert "Log tail" in result.message


def test_a_hanging_check_is_killed_and_recorded_as_timeout(tmp_path, project_env):
    result = _run(tmp_path, project_env, "hang", timeout=3)
    assert result.status is Status.TIMEOUT
    assert 2.5 < result.duration < 30


@pytest.mark.skipif(sys.platform != "linux", reason="RLIMIT_AS is enforced on Linux")
def test_memory_exhaustion_is_a_crash_saying_out_of_memory(tmp_path, project_env):
    result = _run(tmp_path, project_env, "memory", memory=1024)
    assert result.status is Status.CRASH
    assert "out of memory" in result.message


def test_execute_turns_memory_error_into_crash(monkeypatch):
    def boom(name, options):
        raise MemoryError

    monkeypatch.setattr(runner.checks, "run_in_process", boom)
    assert runner.execute("stack-smoke", CheckOptions()).status is Status.CRASH


def test_execute_turns_qwen35_unavailable_into_skip(monkeypatch):
    from trainers.models import Qwen35Unavailable

    def unavailable(name, options):
        raise Qwen35Unavailable("Qwen3.5 (text) is unavailable in transformers 5.1.0: no module")

    monkeypatch.setattr(runner.checks, "run_in_process", unavailable)
    result = runner.execute("patch-parity", CheckOptions())
    assert result.status is Status.SKIP
    assert "5.1.0" in result.message


def test_an_exception_only_named_like_qwen35_unavailable_is_an_error(monkeypatch):
    class Qwen35Unavailable(RuntimeError):  # not trainers.models': matched by type, not by name
        pass

    def unavailable(name, options):
        raise Qwen35Unavailable("no Qwen3.5 here")

    monkeypatch.setattr(runner.checks, "run_in_process", unavailable)
    assert runner.execute("patch-parity", CheckOptions()).status is Status.ERROR


def test_extra_checks_reject_names_that_are_not_module_paths():
    from harness.checks import _extra_checks

    assert "x" in _extra_checks("x=pkg.mod")
    with pytest.raises(ValueError, match="HARNESS_EXTRA_CHECKS"):
        _extra_checks("x=pkg.mod; rm -rf /")
