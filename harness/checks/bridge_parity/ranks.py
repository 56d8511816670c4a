"""The rank worker of `bridge-parity`: every rank of a job runs it, forked or under torchrun.

`python -m harness.checks.bridge_parity.ranks --tp T --ep E --cases text-hybrid,moe-hybrid --out FILE`
(rank 0 writes FILE). It joins the process group, installs the CPU and kernel shims, and runs each case:
the project's own bridge (project_bridge.py), or, for the `megatron-bridge/<model>` cases, Megatron-Bridge's
own bridge (library.py). `--break` makes one piece wrong on purpose, so tests can watch the verdicts fail:
gdn-head-order (value heads reversed in the fused in_proj), expert-swap (experts 0 and 1
exchanged), qkv (query and gate rows exchanged), shim-l2norm (the kernel shim leaves out l2norm),
grad-skip (GDN parameters' gradients not reduced), padding-row (the pad token's embedding row
trained, unlike HF's padding_idx), packed (packed input without its boundaries), mtp-drop and mtp-rename
(mtp.py: an MTP tensor lost or renamed by the export); library.py's own (mb-...).
"""
from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path

from harness.checks.bridge_parity import library
from harness.checks.bridge_parity.project_bridge import PROJECT_BREAKS, break_mapping, compare
from harness.checks.support.ranks import rank_entry
from harness.files import write_json_atomic

BREAKS = PROJECT_BREAKS + library.BREAKS
LIBRARY_PREFIX = "megatron-bridge/"  # cases run through Megatron-Bridge's own bridge (library.py)


def run_cases(args) -> dict:
    import torch.distributed as dist

    from trainers.megatron.config import ParallelSizes
    from trainers.megatron.cpu_shim import cpu_shim_for
    from trainers.megatron.kernel_shim import KernelShim
    from trainers.megatron.train import init_distributed, init_model_parallel
    from trainers.runtime.device import plan as device_plan
    from trainers.runtime.device import set_cpu_threads

    set_cpu_threads()
    plan = device_plan("cpu")
    init_distributed(plan)
    sizes = ParallelSizes(tp=args.tp, ep=args.ep)
    init_model_parallel(sizes)
    from megatron.core import parallel_state as ps

    shim = cpu_shim_for(plan).install(seed=args.seed, tp_rank=ps.get_tensor_model_parallel_rank(),
                                      ep_rank=ps.get_expert_model_parallel_rank())
    kernels = KernelShim(omit=("l2norm",) if args.broken == "shim-l2norm" else ()).install()
    if args.broken in PROJECT_BREAKS:
        break_mapping(args.broken)
    results = {"kernels": kernels.record()}
    cases = args.cases.split(",")
    try:
        library_cases = [c[len(LIBRARY_PREFIX):] for c in cases if c.startswith(LIBRARY_PREFIX)]
        work = Path(args.out).with_suffix("")  # the job's own folder beside its result file
        if library_cases:
            results.update(library.run(library_cases, args.seed, args.broken, work, on_cpu=plan.type == "cpu"))
        for case in (c for c in cases if not c.startswith(LIBRARY_PREFIX)):
            kind, variant = case.split("-", 1)
            try:
                results[case] = compare(kind, variant, sizes, args.seed, args.broken, work)
            except Exception as exc:  # megatron-core's own error is the finding
                traceback.print_exc()
                results[case] = {"model": kind, "variant": variant, "tp": sizes.tp, "ep": sizes.ep,
                                 "error": f"{type(exc).__name__}: {exc}"}
        return results
    finally:
        kernels.remove()
        shim.remove()
        ps.destroy_model_parallel()
        dist.destroy_process_group()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.checks.bridge_parity.ranks")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--ep", type=int, default=1)
    parser.add_argument("--cases", default="text-hybrid")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--break", dest="broken", choices=BREAKS)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = run_cases(args)
    if int(os.environ.get("RANK", 0)) == 0:
        write_json_atomic(args.out, result)
    return 0


if __name__ == "__main__":
    rank_entry(main, sys.argv[1:])
