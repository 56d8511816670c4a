"""Environments installed ahead of their cells (harness/execution/ahead.py): in start order, at most `ahead` of them
built and not yet started; a cell that starts before its install began installs its own and is never installed
here; an install that raises raises in the cell that takes it; nothing begins once closed."""
import threading
import time
from types import SimpleNamespace

import pytest

from harness.execution.ahead import InstallsAhead


def _cells(*names):
    return [SimpleNamespace(id=name) for name in names]


class Recorder:
    def __init__(self, hold=()):
        self.done, self.lock = [], threading.Lock()
        self.release = {name: threading.Event() for name in hold}
        self.began = {name: threading.Event() for name in hold}

    def __call__(self, cell):
        if cell.id in self.release:
            self.began[cell.id].set()
            assert self.release[cell.id].wait(10)
        with self.lock:
            self.done.append(cell.id)
        return f"env of {cell.id}"

    def until(self, count, seconds=10.0):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                if len(self.done) >= count:
                    return list(self.done)
            time.sleep(0.01)
        raise AssertionError(f"only {self.done} installed")


def test_installs_follow_the_start_order_and_stay_at_most_ahead_of_the_cells():
    install = Recorder()
    with InstallsAhead(_cells("a", "b", "c"), install, ahead=1) as installs:
        assert install.until(1) == ["a"]
        time.sleep(0.2)  # time for a wrong install of b to show
        assert install.done == ["a"]
        assert installs.take(SimpleNamespace(id="a")).result(10) == "env of a"
        assert install.until(2) == ["a", "b"]
        assert installs.take(SimpleNamespace(id="b")).result(10) == "env of b"
        assert install.until(3) == ["a", "b", "c"]
        assert installs.take(SimpleNamespace(id="c")).result(10) == "env of c"


def test_a_cell_that_starts_before_its_install_began_installs_its_own_and_is_never_installed_here():
    install = Recorder(hold=("a",))
    with InstallsAhead(_cells("a", "b"), install, ahead=1) as installs:
        assert install.began["a"].wait(10)
        assert installs.take(SimpleNamespace(id="b")) is None  # b starts first: it installs its own
        install.release["a"].set()
        assert installs.take(SimpleNamespace(id="a")).result(10) == "env of a"
    assert install.done == ["a"]
    assert installs.take(SimpleNamespace(id="a")) is None  # handed out once: started again, it installs its own


def test_a_cell_taken_while_its_install_runs_waits_for_that_install():
    install = Recorder(hold=("a",))
    with InstallsAhead(_cells("a"), install, ahead=1) as installs:
        assert install.began["a"].wait(10)
        future = installs.take(SimpleNamespace(id="a"))
        assert future is not None and not future.done()
        install.release["a"].set()
        assert future.result(10) == "env of a"
    assert install.done == ["a"]


def test_an_install_that_raises_raises_in_the_cell_that_takes_it_and_the_next_installs_go_on():
    recorder = Recorder()

    def install(cell):
        if cell.id == "a":
            raise OSError("disk full")
        return recorder(cell)

    with InstallsAhead(_cells("a", "b"), install, ahead=1) as installs:
        with pytest.raises(OSError, match="disk full"):
            installs.take(SimpleNamespace(id="a")).result(10)
        assert recorder.until(1) == ["b"]
        assert installs.take(SimpleNamespace(id="b")).result(10) == "env of b"


def test_once_closed_no_install_begins_and_every_later_cell_installs_its_own():
    install = Recorder(hold=("a",))
    installs = InstallsAhead(_cells("a", "b", "c"), install, ahead=3)
    installs.__enter__()
    assert install.began["a"].wait(10)
    closing = threading.Thread(target=installs.close)  # waits for the install under way
    closing.start()
    time.sleep(0.1)
    assert closing.is_alive()
    install.release["a"].set()
    closing.join(10)
    assert not closing.is_alive() and install.done == ["a"]
    assert installs.take(SimpleNamespace(id="b")) is None and installs.take(SimpleNamespace(id="c")) is None


def test_what_an_install_leaves_running_is_settled_here_after_its_cell_has_it_and_before_the_next_install():
    """`settle` runs in this thread once the install's Future is done: the cell that takes it goes on at once, and
    the next install begins only when it returns."""
    install, release, settling = Recorder(), threading.Event(), threading.Event()
    settled = []

    def settle(installed):
        settling.set()
        assert release.wait(10)
        settled.append((installed, threading.current_thread().name))

    with InstallsAhead(_cells("a", "b"), install, ahead=2, settle=settle) as installs:
        assert settling.wait(10)
        assert installs.take(SimpleNamespace(id="a")).result(10) == "env of a"  # not held by the settling
        time.sleep(0.2)  # time for a wrong install of b to show
        assert install.done == ["a"]
        release.set()
        assert install.until(2) == ["a", "b"]
        assert installs.take(SimpleNamespace(id="b")).result(10) == "env of b"
    assert settled == [("env of a", "installs-ahead"), ("env of b", "installs-ahead")]
