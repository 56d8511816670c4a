"""harness.envs.readahead: every shared library, source and bytecode file of an environment, and nothing else, is
handed to the kernel to read ahead; what cannot be opened or advised is skipped, never an error."""
import os
import threading

import pytest

from harness.envs import readahead


@pytest.fixture
def site(tmp_path):
    for name in ("torch/__init__.py", "torch/lib/libtorch_cpu.so", "nvidia/cublas/lib/libcublas.so.13",
                 "torch/__pycache__/__init__.cpython-311.pyc", "torch/README.md", "torch-2.13.0.dist-info/RECORD",
                 "data/weights.safetensors"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    return tmp_path


def test_every_library_source_and_bytecode_file_is_advised_and_nothing_else(site, monkeypatch):
    advised = []
    real = os.posix_fadvise

    def record(descriptor, offset, length, advice):
        advised.append((os.readlink(f"/proc/self/fd/{descriptor}"), offset, length, advice))
        return real(descriptor, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    done = readahead.read_ahead([site])
    names = sorted(os.path.relpath(path, site) for path, *_ in advised)
    assert names == ["nvidia/cublas/lib/libcublas.so.13", "torch/__init__.py",
                     "torch/__pycache__/__init__.cpython-311.pyc", "torch/lib/libtorch_cpu.so"]
    assert {(offset, length, advice) for _, offset, length, advice in advised} == {(0, 0, os.POSIX_FADV_WILLNEED)}
    assert done.files == 4 and done.seconds >= 0
    assert "read ahead 4 files of the environment" in done.line()


CUDA_ONLY = ("nvidia/cu13/lib/libcublasLt.so.13", "nvidia/cudnn/lib/libcudnn.so.9", "nvidia/__init__.py",
             "torch/lib/libtorch_cuda.so", "torch/lib/libtorch_cuda_linalg.so", "torch/lib/libc10_cuda.so")
EVERY_DEVICE = ("torch/lib/libtorch_cpu.so", "torch/lib/libc10.so", "torch/cuda/__init__.py", "cuda/bindings/_lib.so",
                "triton/_C/libtriton.so", "vllm/_C.abi3.so", "nvidia_thing/lib/x.so", "mypkg/nvidia/lib/y.so",
                "torch/_inductor/libtorch_cuda_helper.py")


@pytest.mark.parametrize("device", ["cpu", "npu", "cuda"])
def test_cuda_s_own_libraries_are_read_ahead_only_for_a_cuda_cell(tmp_path, monkeypatch, device):
    """NVIDIA's wheels (all under site-packages/nvidia) and torch's CUDA halves are mapped but never run on a CPU
    or an NPU: left to the import there. torch's CUDA Python, cuda-bindings and triton are imported everywhere."""
    for name in CUDA_ONLY + EVERY_DEVICE:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")
    advised = []
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, *args: advised.append(os.readlink(f"/proc/self/fd/{fd}")))
    done = readahead.read_ahead([tmp_path], device=device)
    names = sorted(os.path.relpath(path, tmp_path) for path in advised)
    assert names == sorted(EVERY_DEVICE + (CUDA_ONLY if device == "cuda" else ()))
    assert done.files == len(names)
    assert [readahead.cuda_only(n) for n in CUDA_ONLY + EVERY_DEVICE] == [True] * 6 + [False] * 9


def test_a_background_read_ahead_passes_the_cells_device_on(site, monkeypatch):
    advised = []
    monkeypatch.setattr(os, "posix_fadvise", lambda fd, *args: advised.append(os.readlink(f"/proc/self/fd/{fd}")))
    reading = readahead.Background([site], "cpu")
    reading.wait()
    assert reading.stop().files == 3 and not any("nvidia" in path for path in advised)


def test_what_cannot_be_opened_or_advised_is_skipped(site, monkeypatch):
    (site / "torch" / "lib" / "gone.so").symlink_to(site / "nowhere.so")  # cannot be opened
    refused = []

    def refuse(descriptor, offset, length, advice):
        refused.append(descriptor)
        raise OSError("not supported on this file system")

    monkeypatch.setattr(os, "posix_fadvise", refuse)
    done = readahead.read_ahead([site, site / "absent"])
    assert done.files == 0 and len(refused) == 4  # every file it could open was asked about, none counted
    monkeypatch.delattr(os, "posix_fadvise")  # not Linux: nothing read ahead
    assert readahead.read_ahead([site]).files == 0


def test_a_background_read_ahead_runs_in_its_own_thread_and_stops_when_asked(site, monkeypatch):
    """The thread that starts it goes on at once; `stop` ends it after the file at hand and says so."""
    started, release, advised = threading.Event(), threading.Event(), []

    def slow(descriptor, offset, length, advice):  # the first file blocks until the caller has gone on
        advised.append(threading.current_thread().name)
        started.set()
        release.wait(5)

    monkeypatch.setattr(os, "posix_fadvise", slow)
    reading = readahead.Background([site])
    assert started.wait(5)  # reading, while this thread goes on
    release.set()
    done = reading.stop()
    assert advised[0] == "read-ahead" and threading.current_thread().name not in advised
    assert done.stopped and done.files < 4 and done.line().endswith(", stopped at the cell's end")
    finished = readahead.Background([site])
    finished._thread.join(5)  # left to end on its own: every file, not stopped
    assert finished.stop() == readahead.ReadAhead(4, finished.stop().seconds)


def test_a_background_read_ahead_whose_folders_vanish_ends_quietly(tmp_path):
    reading = readahead.Background([tmp_path / "gone"])
    assert reading.stop().files == 0
