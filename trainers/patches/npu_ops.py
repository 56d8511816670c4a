"""NPU patches for Qwen3.5: RMSNorm, gated RMSNorm, rotary embedding and the SiLU-gated MLP
through torch_npu fused ops, and their parity check against the stock transformers code.

The replacements call the ops of `npu_op_table` (torch_npu on Ascend, CPU emulations of the
fused ops elsewhere), so the same patched code is checked on a laptop and used on an NPU.
`apply_rotary_pos_emb` is a module-level function: patching it works because the attention
forward looks the name up in its module at call time (transformers 5.3 also stores the
original as `self.rotary_fn` at init, used only by hub kernelization). The parity check counts
op dispatches, so a future version that stops calling the patched name fails instead of
passing on the untouched stock code.
"""
from __future__ import annotations

import importlib
from collections.abc import Callable

import torch
from packaging.specifiers import SpecifierSet

from harness.results.records import Status, Verdict
from trainers.worst import worst

from .base import NotApplicable, Patch, TargetMissing
from .npu_op_table import CALLS, OP_TABLE, TOLERANCES, Tolerance, fused, npu_symbol_targets, on_npu

VERSIONS = SpecifierSet(">=5.2")  # Qwen3.5 first appears in transformers 5.2.0
# transformers module -> (class-name prefix, model kind in trainers.models)
FAMILIES = {"qwen3_5": ("Qwen3_5", "text"), "qwen3_5_moe": ("Qwen3_5Moe", "moe")}


def rms_norm_forward(self, x: torch.Tensor) -> torch.Tensor:
    # Qwen3.5 scales by (1 + weight), zero-centred; the fused op takes gamma in x's dtype.
    gamma = (1.0 + self.weight.float()).to(x.dtype)
    return fused("rms_norm")(x, gamma, self.eps)


def rms_norm_gated_forward(self, hidden_states: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    activation = getattr(self, "activation", "silu")  # 5.3 hard-codes SiLU; later releases name it
    if activation != "silu":
        raise ValueError(f"NPU gated RMSNorm fuses SiLU only, this module uses {activation!r}")
    return fused("rms_norm_gated")(hidden_states, gate, self.weight, self.variance_epsilon)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    rotary_dim = cos.shape[-1]  # Qwen3.5 rotates only a part of each head (partial_rotary_factor)
    rotary = fused("rotary_mul")

    def rotate(x: torch.Tensor) -> torch.Tensor:
        if rotary_dim == x.shape[-1]:
            return rotary(x, cos, sin)
        return torch.cat([rotary(x[..., :rotary_dim], cos, sin), x[..., rotary_dim:]], dim=-1)

    return rotate(q), rotate(k)


def mlp_forward(self, x: torch.Tensor) -> torch.Tensor:
    gate, up = self.gate_proj(x), self.up_proj(x)
    if self.config.hidden_act not in ("silu", "swish"):
        return self.down_proj(self.act_fn(gate) * up)  # no fused op for other activations
    return self.down_proj(fused("swiglu")(torch.cat([gate, up], dim=-1), dim=-1))


# (patch name stem, attribute path with {p} for the class prefix, replacement, op table entry)
_SPECS = (
    ("rms-norm", "{p}RMSNorm.forward", rms_norm_forward, "rms_norm"),
    ("rms-norm-gated", "{p}RMSNormGated.forward", rms_norm_gated_forward, "rms_norm_gated"),
    ("rotary", "apply_rotary_pos_emb", apply_rotary_pos_emb, "rotary_mul"),
    ("mlp-swiglu", "{p}MLP.forward", mlp_forward, "swiglu"),
)


def _patch_name(stem: str, module: str) -> str:
    return f"npu-{stem}[{module}]"


PATCHES: list[Patch] = [
    Patch(name=_patch_name(stem, module),
          target=f"transformers.models.{module}.modeling_{module}:{attr.format(p=prefix)}",
          replacement=replacement, distribution="transformers", versions=VERSIONS,
          description=f"{op} through torch_npu ({', '.join(OP_TABLE[op].npu_symbols)})")
    for module, (prefix, _) in FAMILIES.items()
    for stem, attr, replacement, op in _SPECS
]
# patch name -> (spec stem, transformers module, op table entry)
_CASE_OF_PATCH = {_patch_name(stem, module): (stem, module, op) for module in FAMILIES for stem, _, _, op in _SPECS}


# --- the parity check ----------------------------------------------------------------------------
def _errors(got: torch.Tensor, want: torch.Tensor) -> tuple[float, float, float]:
    """(max abs error, that error relative to the reference's largest magnitude, that magnitude)."""
    scale = float(want.detach().float().abs().max()) if want.numel() else 0.0
    err = float((got.detach().float() - want.detach().float()).abs().max()) if want.numel() else 0.0
    return err, err / max(scale, 1e-30), scale


def _within(err: float, scale: float, tol: Tolerance) -> bool:
    return err <= tol.atol + tol.rtol * scale


def _case(stem: str, module, prefix: str, kind: str, gen: torch.Generator):
    """A stock module that the patch affects, and its inputs: (call, inputs, parameters)."""
    from trainers.models import build_config

    config = build_config(kind)
    config._attn_implementation = "eager"  # standalone modules: no dispatch warning
    if stem == "rms-norm":
        layer = getattr(module, f"{prefix}RMSNorm")(config.hidden_size, eps=config.rms_norm_eps)
        with torch.no_grad():
            layer.weight.normal_(0.0, 0.1, generator=gen)  # non-zero, so a lost "1 +" shows
        return layer, (lambda x: layer(x)), [torch.randn(2, 5, config.hidden_size, generator=gen)]
    if stem == "rms-norm-gated":
        dim = config.linear_value_head_dim
        layer = getattr(module, f"{prefix}RMSNormGated")(dim, eps=config.rms_norm_eps)
        with torch.no_grad():
            layer.weight.copy_(1.0 + 0.1 * torch.randn(dim, generator=gen))
        inputs = [torch.randn(2, 5, 4, dim, generator=gen), torch.randn(2, 5, 4, dim, generator=gen)]
        return layer, (lambda x, gate: layer(x, gate)), inputs
    if stem == "rotary":
        # Through the attention layer, so the check sees how the modeling code finds the function.
        layer = getattr(module, f"{prefix}Attention")(config, config.layer_types.index("full_attention"))
        rotary = getattr(module, f"{prefix}TextRotaryEmbedding")(config)
        hidden = torch.randn(2, 7, config.hidden_size, generator=gen)

        def call(h):
            positions = torch.arange(h.shape[1], device=h.device).expand(h.shape[0], -1)
            cos, sin = rotary.to(h.device)(h, positions)
            return layer(h, position_embeddings=(cos, sin), attention_mask=None)[0]

        return layer, call, [hidden]
    if stem == "mlp-swiglu":
        layer = getattr(module, f"{prefix}MLP")(config, intermediate_size=48)
        return layer, (lambda x: layer(x)), [torch.randn(2, 5, config.hidden_size, generator=gen)]
    raise KeyError(stem)


def _run(call: Callable, layer: torch.nn.Module, inputs: list[torch.Tensor], cotangent_seed: int):
    """Output and gradients (inputs then parameters) of `call`, for a fixed random cotangent."""
    inputs = [x.detach().clone().requires_grad_(True) for x in inputs]
    layer.zero_grad(set_to_none=True)
    out = call(*inputs)
    cotangent = torch.randn(out.shape, generator=torch.Generator().manual_seed(cotangent_seed)).to(out.device)
    (out.float() * cotangent).sum().backward()
    grads = [x.grad for x in inputs] + [p.grad for p in layer.parameters() if p.grad is not None]
    return out.detach(), [g.detach() for g in grads]


def _op_inputs(op: str, dtype: torch.dtype, device: torch.device, gen: torch.Generator) -> list:
    def rand(*shape):
        return torch.randn(*shape, generator=gen).to(device=device, dtype=dtype)

    if op == "rms_norm":
        return [rand(2, 5, 32), (1.0 + 0.1 * torch.randn(32, generator=gen)).to(device, dtype), 1e-6]
    if op == "rms_norm_gated":
        return [rand(2, 5, 4, 16), rand(2, 5, 4, 16), (1.0 + 0.1 * torch.randn(16, generator=gen)).to(device, dtype),
                1e-6]
    if op == "rotary_mul":
        angle = torch.randn(2, 1, 7, 8, generator=gen)
        return [rand(2, 4, 7, 8), angle.cos().to(device, dtype), angle.sin().to(device, dtype)]
    if op == "swiglu":
        return [rand(2, 5, 32)]
    raise KeyError(op)


def _op_level(op: str, dtype: torch.dtype, device: torch.device, seed: int) -> dict:
    """The table's implementation for this process against the table's torch reference."""
    args = _op_inputs(op, dtype, device, torch.Generator().manual_seed(seed))
    want = OP_TABLE[op].reference(*args)
    got = fused(op)(*args)
    err, rel, scale = _errors(got, want)
    return {"op_max_abs_err": err, "op_max_rel_err": rel, "op_ok": _within(err, scale, TOLERANCES[dtype])}


def _parity_verdict(patch: Patch, dtype: torch.dtype, seed: int) -> Verdict:
    name = f"npu-parity:{patch.name}:{str(dtype).removeprefix('torch.')}"  # unique across dtypes
    stem, family, op = _CASE_OF_PATCH[patch.name]
    emulated = not on_npu()
    try:
        patch.check_applicable()
    except TargetMissing as exc:
        return Verdict(name, Status.FAIL, f"target missing: {exc}", emulated=emulated)
    except NotApplicable as exc:
        return Verdict(name, Status.SKIP, str(exc), emulated=emulated)
    prefix, kind = FAMILIES[family]
    device = torch.device("cpu")
    if on_npu():
        from trainers.runtime.device import plan

        device = plan().device()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # parameter init of the stock modules
        gen = torch.Generator().manual_seed(seed)
        layer, call, inputs = _case(stem, importlib.import_module(patch.target.split(":", 1)[0]), prefix, kind, gen)
    layer.to(device=device, dtype=dtype)
    inputs = [x.to(device=device, dtype=dtype) for x in inputs]
    stock_out, stock_grads = _run(call, layer, inputs, seed)
    calls_before = CALLS[op]
    try:
        with patch.applied_context():
            out, grads = _run(call, layer, inputs, seed)
    except Exception as exc:  # a patch that breaks the forward is this patch's failure, not the run's
        return Verdict(name, Status.FAIL, f"patched forward raised {type(exc).__name__}: {exc}",
                       {"op": op}, emulated)
    dispatched = CALLS[op] - calls_before
    tol = TOLERANCES[dtype]
    out_err, out_rel, out_scale = _errors(out, stock_out)
    grad_errors = [_errors(g, s) for g, s in zip(grads, stock_grads)]
    metrics = {
        "op": op, "dtype": str(dtype).removeprefix("torch."), "backend": "torch_npu" if on_npu() else "cpu-emulation",
        "atol": tol.atol, "rtol": tol.rtol, "max_abs_err": out_err, "max_rel_err": out_rel,
        "grad_max_abs_err": worst((e for e, _, _ in grad_errors), default=0.0),
        "grad_max_rel_err": worst((r for _, r, _ in grad_errors), default=0.0),
        "op_dispatches": dispatched, **_op_level(op, dtype, device, seed),
    }
    problems = []
    if dispatched == 0:
        problems.append("the patched path never ran (the modeling code does not call the patched symbol)")
    if len(grads) != len(stock_grads):
        problems.append(f"{len(grads)} gradients against {len(stock_grads)} in stock")
    if not _within(out_err, out_scale, tol):
        problems.append(f"output differs: max abs err {out_err:.3g} (rel {out_rel:.3g})")
    if not all(_within(e, s, tol) for e, _, s in grad_errors):
        problems.append(f"gradients differ: max abs err {metrics['grad_max_abs_err']:.3g}")
    if not metrics["op_ok"]:
        problems.append(f"op {op} differs from its torch reference: max abs err {metrics['op_max_abs_err']:.3g}")
    if problems:
        return Verdict(name, Status.FAIL, "; ".join(problems), metrics, emulated)
    return Verdict(name, Status.PASS, f"{op}: patched matches stock within atol {tol.atol}, rtol {tol.rtol}",
                   metrics, emulated)


def op_parity_verdicts(dtype: torch.dtype = torch.float32, seed: int = 0) -> list[Verdict]:
    """One verdict per NPU patch: patched against stock (output and gradients) and the op
    against its torch reference, on random inputs, within TOLERANCES[dtype]."""
    if dtype not in TOLERANCES:
        raise ValueError(f"no tolerance stated for {dtype}; known: {sorted(map(str, TOLERANCES))}")
    return [_parity_verdict(patch, dtype, seed) for patch in PATCHES]


__all__ = ["FAMILIES", "PATCHES", "apply_rotary_pos_emb", "mlp_forward", "npu_symbol_targets", "op_parity_verdicts",
           "rms_norm_forward", "rms_norm_gated_forward"]
