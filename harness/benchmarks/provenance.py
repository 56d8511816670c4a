"""What every group `nox -s bench` writes to bench/figures.json carries beside its figures: the date, the machine
and the project's git revision that produced them (`harness_revision`; '+dirty' when the tree had uncommitted
changes other than the figures file itself, null where no git could say). The measured page shows the three
with each figure (harness/docsgen/figures.py), and a group that lacks one is shown as not recorded there, never
given another's.
"""
from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

from harness.envs import envinfo
from harness.envs.cellenv import PROJECT_ROOT

FIGURES = "bench/figures.json"  # what the bench itself writes: changed by the run before, it makes no tree dirty

STAMP_KEYS = ("date", "machine", "harness_revision")


def machine() -> dict:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    # The capture's own CPU reading, without its package and device probes (seconds of torch import).
    return {"cpu": envinfo._cpu_model(), "cores": os.cpu_count(), "memory_gib": round(memory / 2**30, 1)}


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
    return {**run, **{key: value for key, value in group.items() if key not in STAMP_KEYS or value is not None}}
