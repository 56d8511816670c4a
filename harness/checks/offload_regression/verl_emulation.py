"""offload-regression's strict device emulation fed with verl's placement: what verl's compute meets on an
accelerator, seen on a CPU.

`VerlOffloadedRun` is the check's `OffloadedRun` (offload_setup) with the placement verl's own code made, as the
rank worker measured it (verl_fsdp): the FSDP units verl's apply_fsdp2 made get their parameters on the device only
inside their own forward (innermost first, the root last, as FSDP2 nests them), and the buffers verl's
fsdp2_load_full_state_dict left on the device are device tensors; every other tensor stays on the host, named.

`emulated_step` runs one step of verl's engine on an unwrapped copy of the model with verl's apply_monkey_patch:
the micro-batch verl's helpers make, `prepare_model_inputs`, then, under the strict device mode, the model on
device inputs (FSDP2's root pre-forward moves every input to the device, cu_seqlens_cpu included), a loss on
its next-token log-probs and backward. It returns the sites (host tensors that met device
compute, by module and tensor: model_passes.sites), what pos_embed and verl's fast_pos_embed_interpolate saw, and
whether the loss equals the same step without the mode.
"""
from __future__ import annotations

import functools
from typing import Any

import torch

from harness.checks.offload_regression.offload_setup import OffloadedRun, _managed
from harness.checks.offload_regression.strict_device import DeviceTensor, StrictDeviceMode, on_device
from harness.checks.support import verl_engine

ROOT = "<root>"


class VerlOffloadedRun(OffloadedRun):
    """OffloadedRun with verl's units (module names, ROOT for the model) and the buffers verl put on the device."""

    def __init__(self, model: torch.nn.Module, mode: StrictDeviceMode, units: list[str], device_buffers: set[str]):
        super().__init__(model, mode)
        inner_first = sorted(units, key=lambda name: (name == ROOT, -name.count(".")))
        self.units = [model if name == ROOT else model.get_submodule(name) for name in inner_first]
        self.device_buffers = set(device_buffers)
        self._moved: list[tuple[torch.nn.Module, str, torch.Tensor]] = []

    @staticmethod
    def _gather(params, module, args) -> None:
        for owner, name in params:
            owner._parameters[name] = on_device(owner._parameters[name])

    def _free(self, params, module, args, output) -> None:
        for owner, name in params:
            owner._parameters[name] = self._host[(id(owner), name)]

    def _hook_units(self) -> None:
        for unit, params in _managed(self.units).items():
            self._handles.append(unit.register_forward_pre_hook(functools.partial(self._gather, params), prepend=True))
            self._handles.append(unit.register_forward_hook(functools.partial(self._free, params), always_call=True))

    def __enter__(self) -> VerlOffloadedRun:
        for prefix, module in self.model.named_modules():
            for name, buffer in list(module._buffers.items()):
                if buffer is not None and f"{prefix}.{name}".lstrip(".") in self.device_buffers:
                    self._moved.append((module, name, buffer))
                    module._buffers[name] = on_device(buffer)
        super().__enter__()
        return self

    def __exit__(self, *exc) -> None:
        super().__exit__(*exc)
        for module, name, buffer in self._moved:
            module._buffers[name] = buffer
        self._moved.clear()


def _loss(model, inputs: dict, output_args: dict) -> torch.Tensor:
    """Minus the sum of the next-token log-probs of the packed row, from the logits. (verl's prepare_model_outputs
    reads the micro-batch, which verl's forward_step has moved to the device before: outside the model, and not
    what the emulation looks at; the log-probs here are its own, for a loss with a gradient everywhere.)"""
    logits = model(**inputs, use_cache=False).logits.squeeze(0).float()
    targets = output_args["input_ids_rmpad_rolled"]
    targets = on_device(targets) if isinstance(logits, DeviceTensor) else targets
    return -torch.log_softmax(logits, -1).gather(-1, targets.reshape(-1, 1)).sum()


def emulated_step(model_type: str, units: list[str], device_buffers: set[str], seed: int = 0) -> dict[str, Any]:
    """One step of verl's engine under verl's placement and the strict device mode (see the module docstring).
    verl's apply_monkey_patch raising propagates: the caller makes it the finding."""
    from harness.checks.offload_regression.model_passes import error_site, sites
    from harness.checks.offload_regression.verl_fsdp import pos_embed_watched

    model = verl_engine.build_model(model_type, seed).train()
    result: dict[str, Any] = {"units": units, "device_buffers": sorted(device_buffers)}
    with verl_engine.patches_restored():
        verl_engine.apply_patch(model)
        td = verl_engine.micro_batch(model, verl_engine.make_rows(model), use_remove_padding=True)
        eng = verl_engine.engine(model)
        inputs, output_args = eng.prepare_model_inputs(td)
        with torch.no_grad():
            reference = float(_loss(model, inputs, output_args))
        mode = StrictDeviceMode()
        try:
            with pos_embed_watched(model) as seen, VerlOffloadedRun(model, mode, units, device_buffers):
                device_inputs = {k: on_device(v) if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
                loss = _loss(model, device_inputs, output_args)
                loss.backward()
            result.update(raised=False, loss=float(loss.detach()), reference_loss=reference,
                          same_loss=abs(float(loss.detach()) - reference) <= 1e-5 * max(1.0, abs(reference)))
        except Exception as exc:  # noqa: BLE001 - a failure under the emulation is a finding: which class, where
            result.update(raised=True, error_class=type(exc).__name__, error_site=error_site(exc),
                          error=str(exc).splitlines()[0][:300] if str(exc) else "")
        result["pos_embed"] = seen
    result["sites"] = sites([mix.to_dict() for mix in mode.mixes])
    return result
