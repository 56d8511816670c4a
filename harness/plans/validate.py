"""Validate the memory estimate against a real training step measured here, on CPU.

`python -m harness.plans.validate [--hidden N --layers N --batch N --length N --kind text|moe]`
builds a Qwen3.5 model from the tiny zoo's config (widened), counts its parameters on the `meta`
device as the plan estimate does, then runs two real forward, backward and AdamW steps in fp32 in a
fresh process (the second is the steady state, with Adam's state allocated) and reports: the
peak resident memory added (the ground truth), the
estimate (parameters, gradients and Adam state from the meta count, plus the activation estimate),
and what autograd really saved. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

_CHILD = r"""
import json, resource, sys, torch
torch.set_num_threads(1)
from trainers.models import build_model
from harness.plans.activations import measure_saved
kind, override, batch, length = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()
ids = torch.randint(3, override["vocab_size"], (batch, length))
before = rss()
model = build_model(kind, override)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
measure_saved(model, ids)
optimizer.step()  # the first step allocates Adam's state; the second is the steady state measured
saved = measure_saved(model, ids)
optimizer.step()
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(json.dumps({"peak_added": max(peak - before, 0), "saved": saved,
                  "params": sum(p.numel() for p in model.parameters())}))
"""


def measure(kind: str, hidden: int, layers: int, batch: int, length: int) -> dict:
    from trainers.models import default_config

    from .activations import layer_widths
    from .memory import build_meta_model
    from .plan_format import ModelSpec

    override = default_config(kind)
    heads = hidden // 64
    override.update(hidden_size=hidden, num_hidden_layers=layers, vocab_size=8192, num_attention_heads=heads,
                    num_key_value_heads=max(heads // 4, 1), head_dim=64, linear_num_key_heads=heads,
                    linear_num_value_heads=heads, linear_key_head_dim=64, linear_value_head_dim=64,
                    layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(layers)])
    if kind == "text":
        override["intermediate_size"] = 3 * hidden
    else:
        override.update(moe_intermediate_size=hidden // 2, shared_expert_intermediate_size=hidden // 2)
    model_type = {"text": "qwen3_5_text", "moe": "qwen3_5_moe_text"}[kind]
    spec = ModelSpec("validation", {**override, "model_type": model_type}, "")
    counted = sum(p.numel() for p in build_meta_model(spec).parameters())
    tokens = batch * length
    act = tokens * (sum(layer_widths(spec, k) for k in spec.layer_types) + override["vocab_size"]) * 4
    done = subprocess.run([sys.executable, "-c", _CHILD, kind, json.dumps(override), str(batch), str(length)],
                          capture_output=True, text=True, timeout=900, check=True)
    real = json.loads(done.stdout.strip().splitlines()[-1])
    states = 16 * counted  # fp32 weights, gradients, Adam's two moments
    return {"kind": kind, "hidden": hidden, "layers": layers, "tokens": tokens,
            "params_meta": counted, "params_real": real["params"],
            "estimate_states_mib": round(states / 2**20, 1), "estimate_activations_mib": round(act / 2**20, 1),
            "estimate_total_mib": round((states + act) / 2**20, 1),
            "measured_saved_mib": round(real["saved"] / 2**20, 1),
            "measured_peak_added_mib": round(real["peak_added"] / 2**20, 1),
            "total_error": round((states + act) / real["peak_added"] - 1, 3) if real["peak_added"] else None,
            "activation_ratio_measured_to_estimate": round(real["saved"] / act, 3),
            "peak_rss_parent_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.plans.validate", description=__doc__.splitlines()[0])
    parser.add_argument("--kind", choices=("text", "moe"), default="text")
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--length", type=int, default=256)
    args = parser.parse_args(argv)
    for option in ("hidden", "layers", "batch", "length"):  # sizes: a whole number of at least 1, named
        if getattr(args, option) < 1:
            parser.error(f"--{option}: expected a whole number of at least 1, got {getattr(args, option)}")
    print(json.dumps(measure(args.kind, args.hidden, args.layers, args.batch, args.length)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
