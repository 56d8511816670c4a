"""stack-smoke: build a tiny Qwen3.5 model from a config (no download), run forward and backward on the cell's
device (trainers.runtime.device: HARNESS_DEVICE, else the accelerator present, else cpu).

Fails, naming the transformers version, where Qwen3.5 does not exist (before 5.2.0). A cell whose device is not
there errors rather than running on the CPU in its place.
"""
from __future__ import annotations

import math
import time

from harness.results.records import CheckResult, Status

from . import CheckOptions

NAME = "stack-smoke"


def run(options: CheckOptions) -> CheckResult:
    import torch

    from trainers.models import Qwen35Unavailable, build_model
    from trainers.runtime.device import plan, set_cpu_threads

    set_cpu_threads()
    device = plan().device(0)
    try:
        model = build_model(options.model if options.model != "vl" else "text", options.model_config,
                            seed=options.seed)
    except Qwen35Unavailable as exc:
        return CheckResult(NAME, Status.FAIL, str(exc).split(":")[0], metrics={"qwen35_available": False})

    layers = getattr(getattr(model, "model", None), "layers", None)
    count = len(layers) if layers is not None else model.config.num_hidden_layers
    if count < 1:  # embeddings alone pass forward and backward: nothing of Qwen3.5 would be tested
        return CheckResult(NAME, Status.FAIL, f"the model has no decoder layers ({count})",
                           metrics={"qwen35_available": True})

    model.to(device)
    generator = torch.Generator().manual_seed(options.seed)  # drawn on the host: the same ids on every device
    vocab = model.config.vocab_size
    input_ids = torch.randint(3, vocab, (4, 32), generator=generator).to(device)
    start = time.perf_counter()
    output = model(input_ids=input_ids, labels=input_ids)
    output.loss.backward()
    elapsed = time.perf_counter() - start
    grad_norm = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in model.parameters() if p.grad is not None))
    missing = [n for n, p in model.named_parameters() if p.requires_grad and p.grad is None]
    metrics = {
        "qwen35_available": True,
        "device": str(device),
        "parameters": sum(p.numel() for p in model.parameters()),
        "loss": float(output.loss.detach()),
        "grad_norm": grad_norm,
        "forward_backward_seconds": round(elapsed, 4),
        "layer_types": list(getattr(model.config, "layer_types", []) or []),
    }
    # A fresh model predicts roughly uniformly: loss near ln(vocab). Far off means broken numerics.
    if not math.isfinite(metrics["loss"]) or abs(metrics["loss"] - math.log(vocab)) > 1.0:
        return CheckResult(NAME, Status.FAIL, f"loss {metrics['loss']:.3f} is not near ln(vocab)={math.log(vocab):.3f}",
                           metrics=metrics)
    if missing or not math.isfinite(grad_norm) or grad_norm == 0.0:
        return CheckResult(NAME, Status.FAIL, f"no usable gradient (norm {grad_norm}, {len(missing)} parameters "
                           "without grad)", metrics=metrics)
    return CheckResult(NAME, Status.PASS, f"forward and backward ok ({metrics['parameters']} parameters)",
                       metrics=metrics)
