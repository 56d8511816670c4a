"""Real FSDP2 with `CPUOffloadPolicy` for offload-regression: 2 ranks of `fsdp_worker`, forked from the
check's process on CPU (harness.checks.support.ranks: no torchrun start, no second import of
torch and transformers), under torchrun on accelerators. Started before the strict-device emulation
runs, collected after it, so the two overlap.
"""
from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
from pathlib import Path
from typing import Any

from harness.checks import CheckOptions
from harness.checks.support.ranks import start_torchrun, stop_torchrun, torchrun_command, wait_torchrun
from harness.results.records import Status, Verdict

WORKER = "harness.checks.offload_regression.fsdp_worker"
FSDP_TIMEOUT = 300.0  # seconds for the real-FSDP2 ranks; a torchrun start alone costs 5-8 s
FSDP_RANKS = 2


_NUMBERS = ("loss", "grad_norm", "pos_embed_grad_norm")  # pos_embed's for VL only
_SEVERITY = (Status.ERROR, Status.FAIL, Status.AFFECTED, Status.PASS)  # the worst model decides a side


def _close(a: float | None, b: float | None, rtol: float) -> bool:
    return a is not None and b is not None and math.isclose(a, b, rel_tol=rtol, abs_tol=rtol * 1e-3)


def _pass_record(p: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """What a verdict keeps of one pass: its outcome, numbers and calls, beside its reference's numbers."""
    keys = ("raised", "error_class", "error_site", "error", *_NUMBERS, "calls", "outside", "patches", "seconds",
            "buffer_devices")
    out = {k: p[k] for k in keys if k in p}
    out.update({f"reference_{k}": ref.get(k) for k in _NUMBERS if k in ref})
    return out


def judge(name: str, p: dict[str, Any], ref: dict[str, Any], rtol: float) -> tuple[Status, str]:
    """Status and message of one side on one model from what its real-FSDP2 pass saw (the worker's schema):
    an offload-only failure or a pos_embed index off its weight's device is the finding."""
    if ref.get("raised"):
        return Status.ERROR, (f"the reference run without offload failed: {ref.get('error_class')} at "
                              f"{ref.get('error_site')}")
    bad = Status.AFFECTED if name == "upstream" else Status.FAIL
    mismatched = [c for c in p.get("calls", []) if c["mismatch"]]
    if mismatched:
        c = mismatched[0]
        what = (f"pos_embed index on {c['input_devices']}, weight on {c['weight_device']}"
                + (f"; {p['error_class']} at {p['error_site']}" if p.get("raised") else ""))
        if name == "upstream":
            return bad, f"position-embedding offload bug reproduced: {what}"
        return bad, f"trainer code still builds the index on the offloaded weight's device: {what}"
    if p.get("raised"):
        return bad, f"forward or backward under offload failed: {p['error_class']} at {p['error_site']}"
    differ = [f"{k} {p.get(k)} vs {ref.get(k)}" for k in _NUMBERS if k in ref and not _close(p.get(k), ref[k], rtol)]
    if differ:
        status = Status.FAIL if name == "trainer" else Status.ERROR
        return status, f"numbers under offload differ from the run without offload: {', '.join(differ)} (rtol {rtol})"
    return Status.PASS, f"forward and backward under offload give the numbers of the run without offload (rtol {rtol})"


def setup(models: dict) -> str:
    """The set-up the worker's offloaded passes ran, with the buffers' devices as it recorded them."""
    from harness.checks.offload_regression.offload_setup import DEVICE_BUFFERS

    devices = sorted({d for passes in models.values() for side in ("upstream", "trainer")
                      for d in passes.get(side, {}).get("buffer_devices", [])})
    return f"real {DEVICE_BUFFERS}; buffers on {', '.join(devices) or 'devices not recorded'}"


def verdicts(models: dict, source: str, deciding: bool, emulated: bool, rtol: float, note: str) -> list[Verdict]:
    """One verdict per side over the models the worker ran, each naming its set-up; VL's pass record (pos_embed)
    at the top level."""
    out = []
    prefix = "; ".join(part for part in (note, setup(models)) if part)
    for name in ("upstream", "trainer"):
        judged, records = {}, {}
        for kind, passes in models.items():
            ref = passes["reference" if name == "upstream" else "reference_trainer"]
            judged[kind] = judge(name, passes[name], ref, rtol)
            records[kind] = _pass_record(passes[name], ref)
        status = min((s for s, _ in judged.values()), key=_SEVERITY.index, default=Status.ERROR)
        message = "; ".join(f"{kind}: {msg}" for kind, (_, msg) in judged.items()) or "the worker ran no model"
        metrics = {**records.get("vl", {}), "models": records}
        label = name if deciding else f"{name}/{source}"
        out.append(Verdict(label, status, f"[{prefix}] {message}", metrics, emulated))
    return out


def _fsdp_files(out_dir: Path) -> tuple[Path, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    result, log = out_dir / "fsdp_offload.json", out_dir / "fsdp_offload.log"
    result.unlink(missing_ok=True)
    log.unlink(missing_ok=True)
    return result, log


def fork(options: CheckOptions, trainer_method: str, out_dir: Path, worker_module: str = WORKER):
    """CPU: fork the 2 ranks now; the emulation runs in this process meanwhile."""
    from harness.checks.support.ranks import ForkedRanks

    result, log = _fsdp_files(out_dir)
    config = None if options.model_config is None else str(options.model_config)

    def rank() -> None:  # the worker is looked up in the rank, so a broken one crashes there, as under torchrun
        importlib.import_module(worker_module).worker(result, trainer_method, options.seed, config, "cpu")

    return ForkedRanks(rank, FSDP_RANKS, log, {"OMP_NUM_THREADS": "1"}), result, log


def collect_forked(ranks, result: Path, log: Path) -> tuple[dict | None, Status, str]:
    with ranks:
        outcome = ranks.wait(FSDP_TIMEOUT)
    if outcome.timed_out:
        return None, Status.TIMEOUT, f"the FSDP2 ranks did not finish within {FSDP_TIMEOUT:.0f} s (log {log.name})"
    if not outcome.ok or not result.exists():
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:] if log.exists() else []
        return None, Status.CRASH, f"FSDP2 ranks exited with {outcome.exit_codes}: {' | '.join(tail)}"
    return json.loads(result.read_text(encoding="utf-8")), Status.PASS, ""


def launch(options: CheckOptions, plan, trainer_method: str, out_dir: Path,
           worker_module: str = WORKER) -> tuple[subprocess.Popen, Path, Path]:
    """Accelerators: start the torchrun job now; the emulation runs while it starts."""
    ranks = max(1, min(FSDP_RANKS, plan.device_count()))  # launch runs on accelerators only: a count
    result, log = _fsdp_files(out_dir)
    args = ["--out", str(result), "--trainer-method", trainer_method, "--seed", str(options.seed),
            "--device", plan.type]
    if options.model_config is not None:
        args += ["--model-config", str(options.model_config)]
    return start_torchrun(torchrun_command(ranks, worker_module, args), log, {**os.environ, "OMP_NUM_THREADS": "1"}), \
        result, log


def collect(proc: subprocess.Popen, result: Path, log: Path) -> tuple[dict | None, Status, str]:
    returncode = wait_torchrun(proc, FSDP_TIMEOUT)
    if returncode is None:
        return None, Status.TIMEOUT, f"torchrun did not finish within {FSDP_TIMEOUT:.0f} s (log {log.name})"
    if returncode != 0 or not result.exists():
        tail = log.read_text(encoding="utf-8", errors="replace").strip().splitlines()[-5:]
        return None, Status.CRASH, f"torchrun exited with {returncode}: {' | '.join(tail)}"
    return json.loads(result.read_text(encoding="utf-8")), Status.PASS, ""


def stop(launched) -> None:
    if isinstance(launched, subprocess.Popen):
        stop_torchrun(launched)  # our own torchrun and its ranks only
    else:
        launched.kill()
