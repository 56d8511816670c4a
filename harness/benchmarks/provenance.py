"""What every group `nox -s bench` writes to bench/figures.json carries beside its figures: the date, the machine
and the project's git revision that produced them (`harness_revision`; '+dirty' when the tree had uncommitted
changes other than the figures file itself, null where no git could say). The measured page shows the three
with each figure (harness/docsgen/figures.py), and a group that lacks one is shown as not recorded there, never
given another's.
"""
from __future__ import annotations

import datetime as dt
import os
import timeit
from pathlib import Path

from harness.envs import envinfo
from harness.envs.cellenv import PROJECT_ROOT

FIGURES = "bench/figures.json"  # what the bench itself writes: changed by the run before, it makes no tree dirty

STAMP_KEYS = ("date", "machine", "harness_revision")


def machine() -> dict:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    # The capture's own CPU reading, without its package and device probes (seconds of torch import).
    return {"cpu": envinfo._cpu_model(), "cores": os.cpu_count(), "memory_gib": round(memory / 2**30, 1)}


CALIBRATION_TRIES = 3


def _python_work() -> None:
    total = 0
    for i in range(6_000_000):
        total += i * i % 7


def _torch_work() -> None:
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread, as the checks run on a CPU
    try:
        a = torch.randn(256, 256, generator=torch.Generator().manual_seed(0))
        for _ in range(800):
            a = torch.tanh(a @ a.T / 256)
    finally:
        torch.set_num_threads(threads)


def calibration() -> dict:
    """The seconds this machine takes now for a fixed one-thread workload, best of CALIBRATION_TRIES: a Python loop
    (what imports and the harness run) and float32 matmuls on one torch thread (what the checks run). A shared
    virtual machine of one name, core count and memory ran the same unchanged checks a third slower on one day than
    on the day before: two figures of one machine compare only next to this. torch's part is left out (null) where
    torch is not installed."""
    parts: dict = {}
    for name, work in (("python_s", _python_work), ("torch_s", _torch_work)):
        try:
            parts[name] = round(min(timeit.repeat(work, number=1, repeat=CALIBRATION_TRIES)), 3)
        except ImportError:
            parts[name] = None
    return parts


def revision(root: Path = PROJECT_ROOT) -> str | None:
    """The project's revision as cells record it (envinfo.project_revision), FIGURES aside: two runs of the bench
    on one commit are runs of the same revision, although the first rewrote the figures file."""
    return envinfo.project_revision(root, ignoring=(FIGURES,))


def stamp() -> dict:
    """This run's date, machine and revision."""
    return {"date": dt.date.today().isoformat(), "machine": machine(), "harness_revision": revision()}


def stamped(group, run: dict):
    """`group` with the run's stamp; what the group says itself (a benchmark that names its own device, date or
    revision) wins. A group that is not an object (a list of runs) is stamped item by item."""
    if isinstance(group, list):
        return [stamped(item, run) for item in group]
    if not isinstance(group, dict):
        return group
    out = {**run, **{key: value for key, value in group.items() if key not in STAMP_KEYS or value is not None}}
    own, here = group.get("machine"), run.get("machine")
    if isinstance(own, dict) and isinstance(here, dict) and "calibration" in here and "calibration" not in own:
        # a group that names its machine itself (the matrix's, GRPO's) ran in this run on this machine: the run's
        # calibration is that machine's too
        out["machine"] = {**own, "calibration": here["calibration"]}
    return out
