"""A check's own process (harness/execution/check_process.py): started from its own entry point, fresh or forked
from the cell's check server, never through the top-level CLI; its options checked in one line; `harness check`
the same function, which keeps the current directory clean of work files."""
import subprocess
import sys
from pathlib import Path

import pytest

from harness.execution import forkserver, runner
from harness.execution.forkclient import CheckProcesses
from harness.results.records import Status

ROOT = Path(__file__).resolve().parents[4]


def test_a_fresh_check_process_starts_from_its_own_entry_without_the_top_level_cli(tmp_path, project_env):
    result = runner.run_isolated(sys.executable, "misbehave", [], tmp_path / "misbehave.log", 60,
                                 {**project_env, "MISBEHAVE": "entry"})
    assert result.status is Status.PASS, result.message
    assert Path(result.metrics["argv0"]) == ROOT / "harness" / "execution" / "check_process.py"
    assert result.metrics["cli"] is False


@pytest.mark.skipif(sys.platform != "linux", reason="the check server forks (Linux)")
def test_a_forked_check_runs_the_same_entry_which_the_server_preloads(tmp_path, project_env):
    assert runner.ENTRY in forkserver.PRELOAD and "harness.cli" not in forkserver.PRELOAD
    env = {**project_env, "OMP_NUM_THREADS": "1", "MISBEHAVE": "entry"}
    processes = CheckProcesses(sys.executable, env, tmp_path / "setup.log", preload=("json", runner.ENTRY))
    try:
        processes.ready()
        assert processes.server is not None and processes.server.modules == ["json", runner.ENTRY]
        result = processes.run("misbehave", [], tmp_path / "logs" / "misbehave.log", 60)
    finally:
        processes.close()
    assert result.status is Status.PASS, result.message
    assert Path(result.metrics["argv0"]) == ROOT / "harness" / "execution" / "check_process.py"


@pytest.mark.parametrize(("args", "expected"), [
    (("vibes",), "unknown check 'vibes'"),
    (("stack-smoke", "--seed", "-1"), "--seed: expected a whole number from 0"),
    (("stack-smoke", "--model", "huge"), "argument --model: invalid choice"),
])
def test_bad_options_of_a_check_process_are_one_line_with_exit_2(args, expected):
    done = subprocess.run([sys.executable, "-m", runner.ENTRY, *args], capture_output=True, text=True, cwd=ROOT,
                          timeout=120)
    assert done.returncode == 2 and expected in done.stderr
    assert done.stderr.strip().count("\n") == 0


@pytest.mark.parametrize("config, expected", [
    ('{"num_hiden_layers": 2}', "unknown key 'num_hiden_layers'"),
    ('{"foo": 1}', "unknown key 'foo'"),  # not a near miss of any key: refused all the same
    ('{"text_config": {"hiden_size": 8}}', "unknown key 'text_config.hiden_size'"),
    ('[1, 2]', "expected a JSON object"),
    ('{"num_hidden_layers": "two"}', "num_hidden_layers: expected a whole number >= 1, got 'two'"),
    ('{"layer_types": "all"}', "not a usable text config"),
])
def test_a_model_config_that_is_not_a_config_exits_2(tmp_path, capsys, config, expected):
    """The process's own entry, in this process: transformers is imported once per test worker, not per case."""
    pytest.importorskip("transformers")
    from harness.execution import check_process

    path = tmp_path / "c.json"
    path.write_text(config)
    model = "vl" if "text_config" in config else "text"
    code = check_process.main(["stack-smoke", "--model", model, "--model-config", str(path)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert expected in err and err.strip().count("\n") == 0


@pytest.mark.parametrize(("status", "kept"), [("pass", False), ("fail", True)])
def test_check_writes_its_work_files_to_a_temporary_directory_not_the_current_one(
        tmp_path, monkeypatch, capsys, status, kept):
    from harness import cli
    from harness.execution import check_process
    from harness.results.records import CheckResult, Status

    seen = []

    def execute(name, options):
        (options.work_dir / "rank0.log").write_text("work")
        seen.append(options.work_dir)
        return CheckResult(check=name, status=Status(status))

    monkeypatch.setattr(check_process.runner, "execute", execute)
    monkeypatch.chdir(tmp_path)
    cli.main(["check", "nested-chunking"])
    assert list(tmp_path.iterdir()) == []
    assert seen[0].exists() is kept
    assert (str(seen[0]) in capsys.readouterr().err) is kept
    if kept:
        import shutil
        shutil.rmtree(seen[0])
