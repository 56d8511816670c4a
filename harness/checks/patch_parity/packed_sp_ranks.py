"""The rank worker of patch-parity's packed-sp verdicts: every rank runs it, forked or under torchrun.

`python -m harness.checks.patch_parity.packed_sp_ranks --seed S --out FILE [--no-boundaries] [--verl]`: each
rank joins a gloo group, runs its shard of one packed row of the tiny text model through the trainer's
sequence-parallel forward (trainers.patches.sequence_parallel, with the packed-forward patch applied), and rank
0 writes the gathered logits to FILE (torch.save). `--no-boundaries` leaves the row's cu_seqlens out: the broken
input of verl #6660, which the verdict must catch. `--verl` (a verl row) also calls verl's own context-parallel
set-up for Qwen3.5's linear attention on the same group and records what it did.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import sys

from harness.checks.support.ranks import rank_entry

# 24 tokens over 2 ranks: the shard boundary (token 12) falls inside the third sequence, so a mixer that sees
# only its shard is wrong there, and one that sees the row without its boundaries from the second sequence on.
LENGTHS = (5, 9, 7, 3)
RANKS = 2
VERL_CONTEXT = "verl.models.transformers.qwen3_5._build_fla_cp_context"
VERL_IMPORTS = ("verl.models.transformers.qwen3_5", "verl.utils.ulysses")  # what verl_context imports on each rank


def sequences(vocab_size: int, seed: int) -> list:
    """The packed row's sequences: random token ids of LENGTHS, the same on every rank and in the check."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(0, vocab_size, (n,), generator=generator) for n in LENGTHS]


def verl_context(cu_seqlens, conv_kernel_size: int, group) -> dict:
    """Call verl's context-parallel set-up for Qwen3.5's linear attention (what verl's Ulysses forward of a packed
    row calls first) with `group` as verl's Ulysses group: what it returned or raised. {"called": None} where the
    installed verl has no such function; with "import_error" where verl's module does not import on this stack
    (verl's finding, recorded: the trainer's own verdict on these ranks stands)."""
    from harness.checks.support import verl

    try:
        from verl.models.transformers import qwen3_5
        from verl.utils import ulysses
    except Exception as exc:  # noqa: BLE001 - verl's import on the row's stack is the finding
        return {"called": None, "import_error": verl.describe(exc), "raised_in": verl.verl_frame(exc),
                "cannot_run_here": verl.unrunnable(exc)}

    build = getattr(qwen3_5, VERL_CONTEXT.rsplit(".", 1)[1], None)
    if build is None:
        return {"called": None}
    ulysses.set_ulysses_sequence_parallel_group(group)
    try:
        built = build(cu_seqlens, cu_seqlens.cpu(), conv_kernel_size)
        return {"called": VERL_CONTEXT, "error": None, "returned": type(built).__name__}
    except Exception as exc:  # noqa: BLE001 - verl's own error is the finding
        return {"called": VERL_CONTEXT, "error": f"{type(exc).__name__}: {exc}"}
    finally:
        ulysses.set_ulysses_sequence_parallel_group(None)


def run(seed: int, pass_boundaries: bool, with_verl: bool) -> dict:
    import torch
    import torch.distributed as dist

    from trainers.models import build_model
    from trainers.patches import packed_forward
    from trainers.patches.sequence_parallel import sequence_parallel, shard_inputs
    from trainers.runtime.device import set_cpu_threads

    set_cpu_threads()
    dist.init_process_group("gloo")
    try:
        model = build_model("text", {}, seed=seed).eval()
        packed = packed_forward.pack_sequences(sequences(model.config.vocab_size, seed))
        with torch.no_grad(), contextlib.ExitStack() as patches:
            for patch in packed_forward.PATCHES:
                patches.enter_context(patch.applied_context())
            with sequence_parallel(model, packed, pass_boundaries=pass_boundaries) as shard:
                logits = model(**shard_inputs(packed, shard)).logits
        parts = [torch.empty_like(logits) for _ in range(dist.get_world_size())]
        dist.all_gather(parts, logits.contiguous())
        result = {"logits": torch.cat(parts, dim=1), "boundaries_passed": pass_boundaries}
        if with_verl:
            kernel = next(layer.linear_attn.conv_kernel_size for layer in model.get_decoder().layers
                          if hasattr(layer, "linear_attn"))
            result["verl"] = verl_context(packed.cu_seqlens, kernel, dist.group.WORLD)
        return result
    finally:
        dist.destroy_process_group()


def main(argv: list[str]) -> int:
    import torch

    parser = argparse.ArgumentParser(prog="python -m harness.checks.patch_parity.packed_sp_ranks")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-boundaries", dest="boundaries", action="store_false")
    parser.add_argument("--verl", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    result = run(args.seed, args.boundaries, args.verl)
    if int(os.environ.get("RANK", 0)) == 0:
        partial = f"{args.out}.partial"
        torch.save(result, partial)
        os.replace(partial, args.out)  # the check reads a whole file or none
    return 0


if __name__ == "__main__":
    rank_entry(main, sys.argv[1:])
