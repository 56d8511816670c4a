"""Benchmarks an offline evidence run takes along (`[matrix] benchmarks`): what each needs beyond the box's own
packages, and its command on the box's interpreter, those packages on a path of their own (nothing is built
or fetched there). The benchmarks' own code is harness.benchmarks; the matrix checks only the names' form."""
from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import time
from pathlib import Path

from packaging.utils import canonicalize_name

from harness.envs import cellenv
from harness.envs.cellenv import die_with_parent
from harness.errors import InputError
from harness.results.records import write_json_atomic

from . import box_interpreter
from .manifest import wheel_paths

# The TRL release the benchmark is pinned to; its metadata asks only transformers>=4.56.2, so it installs
# with the transformers 5.x releases that have Qwen3.5.
TRL_VERSION = "1.16.0"

# name -> (what it measures, what it needs beyond the box, its module). A name without a version takes the
# version the matrix's rows pin (our trainer's tensordict is the rows' tensordict).
BENCHMARKS = {
    "grpo-vs-trl": ("GRPO steps, ours against TRL's GRPOTrainer, on the run's device (one seed)",
                    (f"trl=={TRL_VERSION}", "tensordict"), "harness.benchmarks.grpo"),
}


def requirements(name: str, pinned: dict[str, str] | None = None) -> list[str]:
    """The benchmark's requirements, a bare name pinned to `pinned`'s version of it (the rows' pins) where given."""
    pinned = {canonicalize_name(k): v for k, v in (pinned or {}).items()}
    return [f"{r}=={pinned[canonicalize_name(r)]}" if "=" not in r and canonicalize_name(r) in pinned else r
            for r in BENCHMARKS[name][1]]


def command(name: str, python: str, device: str, packages: Path | None, out: Path) -> list[str]:
    """The benchmark on `python` and `device`, with `packages` (its wheelhouse overlay) first on its path."""
    argv = [python, "-m", BENCHMARKS[name][2], "--here", "--device", device, "--seeds", "0", "--out", str(out)]
    return argv + (["--packages", str(packages)] if packages is not None else [])


def check_names(names: tuple[str, ...], source: Path) -> None:
    """InputError (exit 2) for a name that is no offline benchmark."""
    for name in names:
        if name not in BENCHMARKS:
            raise InputError(f"{source}: matrix.benchmarks: unknown benchmark {name!r}; expected one of "
                             f"{', '.join(BENCHMARKS)}")


def plan_line(name: str, manifest: dict) -> str:
    entry = manifest.get("benchmarks", {}).get(name)
    if entry is None:
        return f"benchmark {name}: not in the wheelhouse; rebuild it with `python -m harness wheelhouse`"
    if entry.get("left_out"):
        return f"benchmark {name}: left out of the wheelhouse ({entry['left_out']}); it will record why and not run"
    return f"benchmark {name}: from the wheelhouse {', '.join(entry['add']) or 'nothing'}"


def run(name: str, manifest: dict, wheelhouse: Path, overlays: Path, out_dir: Path, device: str) -> dict:
    """One benchmark on this interpreter, after the rows: its wheels from the wheelhouse into an overlay of its
    own, then its command. Writes and returns OUT/benchmarks/NAME.json: the benchmark's figures, or why it did not
    run (left out of the wheelhouse, or failed, with the end of its log)."""
    folder = Path(out_dir) / "benchmarks"
    folder.mkdir(parents=True, exist_ok=True)
    target, log = folder / f"{name}.json", folder / f"{name}.log"
    entry = manifest.get("benchmarks", {}).get(name)
    record = {"benchmark": name, "what": BENCHMARKS[name][0], "device": device, "date": dt.date.today().isoformat()}
    if entry is None or entry.get("left_out"):
        reason = entry["left_out"] if entry else "the wheelhouse was built without it"
        write_json_atomic(target, {**record, "status": "not run", "reason": reason})
        return {**record, "status": "not run", "reason": reason}
    pins = list(entry.get("add", []))
    overlay = (Path(overlays) / f"bench-{name}").resolve() if pins else None
    started = time.perf_counter()
    with open(log, "wb") as handle:
        try:
            if overlay is not None:
                box_interpreter.install_overlay(wheel_paths(wheelhouse, manifest, pins), overlay, handle)
        except cellenv.SetupFailed as exc:
            result = {**record, "status": "failed", "reason": str(exc), "log_tail": cellenv.tail(log, lines=15)}
            write_json_atomic(target, result)
            return result
        handle.flush()
        figures = folder / f".{name}.figures.json"
        done = subprocess.run(command(name, sys.executable, device, overlay, figures), stdout=handle,
                              stderr=subprocess.STDOUT, check=False, preexec_fn=die_with_parent)
    seconds = round(time.perf_counter() - started, 1)
    if done.returncode != 0 or not figures.is_file():
        result = {**record, "status": "failed", "reason": f"exit status {done.returncode}", "seconds": seconds,
                  "log_tail": cellenv.tail(log, lines=15)}
    else:
        result = {**record, "status": "measured", "seconds": seconds, "from_wheelhouse": pins,
                  "figures": json.loads(figures.read_text(encoding="utf-8"))}
        figures.unlink()
    write_json_atomic(target, result)
    return result
