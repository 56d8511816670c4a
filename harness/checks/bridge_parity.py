"""bridge-parity: Hugging Face and Megatron-core agree on the same Qwen3.5 weights.

Per variant, on the tiny text model:
- full-attention (every layer full attention: what megatron-core can run on CPU), with the
  Megatron side at TP=1 (one process) and TP=2 (2 CPU ranks under torchrun):
  * forward: log-probs of the same padded (BSHD, left-padded) batch from HF and from
    megatron-core, compared on real tokens: max abs error <= LOGPROB_ATOL (fp32);
  * round trip: HF -> Megatron (sharded) -> HF gives bitwise equal state dicts.
- hybrid (the zoo's Gated DeltaNet + full-attention layers): megatron-core is asked to build it
  the way it builds Qwen3-Next; where it cannot (it needs Transformer Engine and
  flash-linear-attention), the verdict is `skip` carrying megatron-core's own error.
Metrics name the bridge that converted the weights and the errors of the bridges that could
not (mbridge, Megatron-Bridge). SKIP where megatron-core is not installed or Qwen3.5 is not.
Run as a module (`python -m harness.checks.bridge_parity --worker ...`) it is the worker that
every rank runs; `--break-mapping` swaps the query and gate rows, so tests can watch it fail.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

from harness.results.records import CheckResult, Status, Verdict

from . import CheckOptions

NAME = "bridge-parity"
# fp32 on CPU: the two stacks do the same math in a different order (fused QKV matmul, mask
# value -1e4 vs -inf, RoPE from the row start vs each row's first token); measured ~1e-6.
LOGPROB_ATOL = 1e-4
WORKER_TIMEOUT = 240.0


# --- the worker (every rank) ---------------------------------------------------------------

def _worker(args) -> dict:
    import torch.distributed as dist

    from trainers.device import plan as device_plan
    from trainers.device import set_cpu_threads
    from trainers.megatron import bridge
    from trainers.megatron.config import ParallelSizes
    from trainers.megatron.cpu_shim import cpu_shim_for
    from trainers.megatron.train import init_distributed, init_model_parallel

    set_cpu_threads()
    plan = device_plan("cpu")
    init_distributed(plan)
    sizes = ParallelSizes(tp=args.tp)
    init_model_parallel(sizes)
    from megatron.core import parallel_state as ps

    shim = cpu_shim_for(plan).install(seed=args.seed, tp_rank=ps.get_tensor_model_parallel_rank())
    if args.break_mapping:
        _break_qkv_mapping(bridge)
    try:
        return {variant: _compare(variant, sizes, args) for variant in args.variants.split(",")}
    finally:
        shim.remove()
        ps.destroy_model_parallel()
        dist.destroy_process_group()


def _compare(variant: str, sizes, args) -> dict:
    """One variant: build both sides from the same weights, compare forwards, round-trip the weights."""
    import torch
    from megatron.core import parallel_state as ps

    from trainers.megatron import bridge
    from trainers.megatron.model import (
        VariantUnavailable,
        build_hf_variant,
        build_megatron_variant,
        gated_delta_net_probe,
        megatron_logits,
    )
    from trainers.rollout import positions_from_mask

    out = {"tp": sizes.tp, "variant": variant}
    hf = build_hf_variant(variant, args.model_config, seed=args.seed).eval()
    out["bridge_support"] = bridge.bridge_support(hf.config)
    out["bridge"] = bridge.chosen_bridge(out["bridge_support"])
    started = time.perf_counter()
    try:
        model = build_megatron_variant(hf.config, sizes).eval()
    except VariantUnavailable as exc:
        out["unavailable"] = str(exc)
        out["gated_delta_net_error"] = gated_delta_net_probe(hf.config, sizes)
        return out
    tp_rank, tp_group = ps.get_tensor_model_parallel_rank(), ps.get_tensor_model_parallel_group()
    reference = {k: v.detach().clone() for k, v in hf.state_dict().items()}
    bridge.load_hf_into_megatron(model, reference, hf.config, sizes.tp, tp_rank)
    back = bridge.gather_hf_state(model, hf.config, tp_group)
    out["roundtrip_keys_equal"] = sorted(back) == sorted(reference)
    out["roundtrip_mismatched"] = sorted(k for k in reference
                                         if k not in back or not torch.equal(back[k], reference[k]))
    ids, mask = _batch(hf.config.vocab_size, args.seed)
    positions = positions_from_mask(mask)
    with torch.no_grad():
        # use_cache=False: transformers 5.5-5.9 raise in _update_linear_attn_mask when a Qwen3.5
        # cache holds no linear-attention layer (every layer full attention); the forward is the same.
        hf_out = hf(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=False)
        hf_lp = torch.log_softmax(hf_out.logits.float(), -1)
        mc_lp = torch.log_softmax(megatron_logits(model, ids, mask).float(), -1)
    real = mask.bool()
    out["max_abs_logprob_error"] = float((hf_lp - mc_lp)[real].abs().max())
    out["finite"] = bool(torch.isfinite(mc_lp[real]).all())
    out["seconds"] = round(time.perf_counter() - started, 3)
    return out


def _batch(vocab: int, seed: int):
    """Left-padded rows of different lengths, as the rollout engine produces them."""
    import torch

    generator = torch.Generator().manual_seed(seed + 17)
    lengths = [24, 17, 9, 24]
    ids = torch.zeros((len(lengths), max(lengths)), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, length in enumerate(lengths):
        ids[row, -length:] = torch.randint(3, vocab, (length,), generator=generator)
        mask[row, -length:] = 1
    return ids, mask


def _break_qkv_mapping(bridge) -> None:
    """A deliberately wrong mapping: query and gate rows swapped in the fused QKV weight."""
    right = bridge.fuse_qkv

    def swapped(q_proj, k_proj, v_proj, hf_config):
        heads, dim = hf_config.num_attention_heads, hf_config.head_dim
        q = q_proj.reshape(heads, 2, dim, -1).flip(1).reshape(q_proj.shape)
        return right(q, k_proj, v_proj, hf_config)

    bridge.fuse_qkv = swapped


def _worker_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.checks.bridge_parity")
    parser.add_argument("--worker", action="store_true")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--variants", default="full-attention")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--model-config")
    parser.add_argument("--break-mapping", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = _worker(args)
    if int(os.environ.get("RANK", 0)) == 0:
        Path(args.out).write_text(json.dumps(result), encoding="utf-8")
    return 0


# --- the check (harness side) ----------------------------------------------------------------

def _launch(tp: int, variants: str, options: CheckOptions, out: Path, break_mapping: bool) -> subprocess.Popen:
    worker = ["-m", "harness.checks.bridge_parity", "--worker", "--tp", str(tp), "--variants", variants,
              "--seed", str(options.seed), "--out", str(out)]
    if options.model_config:
        worker += ["--model-config", str(options.model_config)]
    if break_mapping:
        worker.append("--break-mapping")
    prefix = [sys.executable] if tp == 1 else [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                               "--nproc-per-node", str(tp)]
    log = open(out.with_suffix(".log"), "w", encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(prefix + worker, stdout=log, stderr=subprocess.STDOUT, env=env)


def _verdict_full_attention(tp: int, data: dict | None, log: Path) -> Verdict:
    name = f"full-attention-tp{tp}"
    if data is None:
        tail = log.read_text(encoding="utf-8", errors="replace")[-1500:] if log.exists() else ""
        return Verdict(name, Status.FAIL, f"worker produced no result; log tail: {tail}")
    if "unavailable" in data:
        return Verdict(name, Status.FAIL, data["unavailable"], metrics={"tp": tp})
    error = data["max_abs_logprob_error"]
    metrics = {"tp": tp, "max_abs_logprob_error": error, "tolerance": LOGPROB_ATOL, "bridge": data["bridge"],
               "roundtrip_exact": data["roundtrip_keys_equal"] and not data["roundtrip_mismatched"],
               "roundtrip_mismatched": data["roundtrip_mismatched"][:10], "seconds": data.get("seconds")}
    problems = []
    if not data["finite"] or not error <= LOGPROB_ATOL:
        problems.append(f"log-prob error {error:.3g} > {LOGPROB_ATOL}")
    if not metrics["roundtrip_exact"]:
        problems.append(f"round trip not exact ({len(data['roundtrip_mismatched'])} tensors differ)")
    if problems:
        return Verdict(name, Status.FAIL, "; ".join(problems), metrics=metrics)
    return Verdict(name, Status.PASS, f"log-prob error {error:.2g} <= {LOGPROB_ATOL}; round trip bitwise exact",
                   metrics=metrics)


def _verdict_hybrid(data: dict | None, log: Path) -> Verdict:
    if data is None:
        tail = log.read_text(encoding="utf-8", errors="replace")[-1500:] if log.exists() else ""
        return Verdict("hybrid-tp1", Status.FAIL, f"worker produced no result; log tail: {tail}")
    if "unavailable" in data:  # megatron-core's own refusal: a limit of the installed stack
        message = data["unavailable"]
        if data.get("gated_delta_net_error"):
            message += f"; the GatedDeltaNet layer alone: {data['gated_delta_net_error']}"
        return Verdict("hybrid-tp1", Status.SKIP, message,
                       metrics={"error": data["unavailable"],
                                "gated_delta_net_error": data.get("gated_delta_net_error")})
    return _verdict_full_attention(1, data, log)  # it built: hold it to the same bar


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def run(options: CheckOptions, break_mapping: bool = False) -> CheckResult:
    if importlib.util.find_spec("megatron") is None or importlib.util.find_spec("megatron.core") is None:
        return CheckResult(NAME, Status.SKIP, "megatron-core is not installed in this cell")
    try:  # a spec lookup, not an import: the workers pay the import, not the harness
        qwen35 = importlib.util.find_spec("transformers.models.qwen3_5") is not None
    except ModuleNotFoundError:
        qwen35 = False
    if not qwen35:
        return CheckResult(NAME, Status.SKIP, f"Qwen3.5 is unavailable in transformers {_version('transformers')}")
    work = Path(options.work_dir) / "bridge-parity"
    work.mkdir(parents=True, exist_ok=True)
    # One process at TP=1 for both variants and 2 ranks at TP=2: each start imports megatron-core,
    # the largest share of this check's time on a CPU runner, so the fewer processes the better.
    jobs = {"tp1": (1, "full-attention,hybrid"), "tp2": (2, "full-attention")}
    started = time.perf_counter()
    processes = {key: _launch(tp, variants, options, work / f"{key}.json", break_mapping)
                 for key, (tp, variants) in jobs.items()}
    results: dict[str, dict] = {}
    for key, process in processes.items():
        try:
            process.wait(timeout=max(1.0, WORKER_TIMEOUT - (time.perf_counter() - started)))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        path = work / f"{key}.json"
        results[key] = json.loads(path.read_text()) if process.returncode == 0 and path.exists() else {}
    verdicts = [_verdict_full_attention(1, results["tp1"].get("full-attention"), work / "tp1.log"),
                _verdict_full_attention(2, results["tp2"].get("full-attention"), work / "tp2.log"),
                _verdict_hybrid(results["tp1"].get("hybrid"), work / "tp1.log")]
    results = {f"{key}-{variant}": data for key, per_variant in results.items()
               for variant, data in per_variant.items()}
    any_result = next((r for r in results.values() if r), {}) or {}
    support = any_result.get("bridge_support", {})
    metrics = {"bridge": any_result.get("bridge"), "mbridge": support.get("mbridge"),
               "mbridge_error": support.get("mbridge_error"), "megatron_bridge": support.get("megatron_bridge"),
               "megatron_bridge_error": support.get("megatron_bridge_error"), "tolerance": LOGPROB_ATOL,
               "max_abs_logprob_error": max((v.metrics.get("max_abs_logprob_error", 0.0) for v in verdicts),
                                            default=0.0),
               "seconds": round(time.perf_counter() - started, 2), "deliberately_broken": break_mapping}
    failed = [v.name for v in verdicts if v.status == Status.FAIL]
    if failed:
        return CheckResult(NAME, Status.FAIL, f"failed: {', '.join(failed)}", metrics=metrics, verdicts=verdicts)
    skipped = [v.name for v in verdicts if v.status == Status.SKIP]
    note = f"; skipped: {', '.join(skipped)} (megatron-core cannot build it here)" if skipped else ""
    return CheckResult(NAME, Status.PASS, f"HF and Megatron-core agree (full attention, TP=1 and TP=2){note}",
                       metrics=metrics, verdicts=verdicts)


if __name__ == "__main__":
    code = 1
    try:
        code = _worker_main(sys.argv[1:])
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)  # after the process group is gone: an abort at exit was seen otherwise
