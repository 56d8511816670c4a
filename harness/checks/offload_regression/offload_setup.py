"""FSDP2 CPU offload with buffers left on the host, emulated on one process for the strict device mode.

The set-up (`HOST_BUFFERS`): the model is built with its parameters on the `meta` device, its states
materialized on the host with the weights loaded, then sharded with `fully_shard` and `CPUOffloadPolicy`:
between calls every parameter lives on the host, and FSDP2 gathers a unit's parameters onto the
accelerator in that unit's forward pre-hook and frees them in its post-hook. The units are the
trainer's (`trainers.fsdp.parallelize`): each `nn.Embedding` when word embeddings are untied,
each transformer block, and the root. Buffers stay on the host with the offloaded parameters. That is not
verl's set-up: verl's `fsdp2_load_full_state_dict` moves every buffer to the device after loading (and
`fully_shard` itself moves buffers to the device), so a site that reads a host buffer (the rotary
`inv_freq` ones) is met only in a set-up that leaves buffers on the host, as this one does.

`offloaded_model` builds the model that way (parameters on meta, then materialized on the host
with the weights of a model built normally from the same seed). `OffloadedRun` then puts, for
the length of a run under `StrictDeviceMode`:
- each unit's own parameters on the device (`DeviceTensor` aliases, still attached to autograd)
  only inside that unit's forward, as FSDP2 does; on the host everywhere else;
- buffers on the host, offloaded with the parameters: a module that reads one in its forward
  without moving it meets device compute from the host;
- plain tensor attributes of modules on the host, where they were created;
and names every one of them, so that a mix names the tensor, and keeps the module stack.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch import nn

from .strict_device import ORIGIN, StrictDeviceMode, name_host, on_device

# What each way of computing the verdicts does with buffers, said on their verdicts.
HOST_BUFFERS = ("FSDP2 CPU offload with buffers left on the host with the offloaded parameters (not verl's "
                "set-up: verl's fsdp2_load_full_state_dict moves buffers to the device)")
DEVICE_BUFFERS = ("FSDP2 CPUOffloadPolicy on a model built on the host, buffers moved to the device by "
                  "fully_shard (where verl's fsdp2_load_full_state_dict also puts them)")


@contextlib.contextmanager
def _parameters_on_meta() -> Iterator[None]:
    """Every parameter registered inside is put on the meta device (an empty-weights init, as verl's)."""
    register = nn.Module.register_parameter

    def on_meta(module: nn.Module, name: str, param) -> None:
        register(module, name, param)
        if param is not None:
            module._parameters[name] = nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)

    nn.Module.register_parameter = on_meta
    try:
        yield
    finally:
        nn.Module.register_parameter = register


def model_override(kind: str, model_config):
    """What the check builds `kind` from: the given model config, else the zoo's at one layer of each kind (the sites
    are named by module class, and one layer of each kind holds every class a site can be in)."""
    from trainers.models import one_of_each

    return model_config if model_config is not None else one_of_each(kind)


def offloaded_model(kind: str, model_config, seed: int) -> nn.Module:
    """The tiny `kind` model built on meta, its parameters materialized on the host with the
    weights a normal build with `seed` gets (buffers and attributes are real from the build)."""
    from trainers.models import build_model

    override = model_override(kind, model_config)
    weights = build_model(kind, override, seed=seed).state_dict()
    with _parameters_on_meta():
        model = build_model(kind, override, seed=seed)
    for module in model.modules():
        for name, param in list(module._parameters.items()):
            if param is not None and param.is_meta:
                module._parameters[name] = nn.Parameter(torch.empty_like(param, device="cpu"),
                                                        requires_grad=param.requires_grad)
    model.load_state_dict(weights, strict=True)
    return model


def fsdp_units(model: nn.Module) -> list[nn.Module]:
    """The modules the trainer wraps with `fully_shard`, innermost first, root last."""
    from trainers.fsdp.parallelize import block_classes, embedding_units

    blocks = block_classes(model)
    units = list(embedding_units(model)) + [m for m in model.modules() if type(m).__name__ in blocks]
    return units + [model]


def _managed(units: list[nn.Module]) -> dict[nn.Module, list[tuple[nn.Module, str]]]:
    """Each unit's own parameters as (owner module, name): those not inside an inner unit."""
    owner: dict[int, nn.Module] = {}
    for unit in units:  # innermost first: the first unit to claim a module keeps it
        for module in unit.modules():
            owner.setdefault(id(module), unit)
    managed: dict[nn.Module, list[tuple[nn.Module, str]]] = {unit: [] for unit in units}
    for unit in units:
        for module in unit.modules():
            if owner[id(module)] is unit:
                managed[unit] += [(module, n) for n, p in module._parameters.items() if p is not None]
    return managed


class OffloadedRun:
    """Context: `model` as FSDP2 CPU offload places it, under a `StrictDeviceMode` (see the docstring)."""

    def __init__(self, model: nn.Module, mode: StrictDeviceMode):
        self.model, self.mode = model, mode
        self._handles: list = []
        self._named: list[torch.Tensor] = []

    def _name_host_tensors(self) -> None:
        named = [("parameter", n, t) for n, t in self.model.named_parameters()]
        named += [("buffer", n, t) for n, t in self.model.named_buffers()]
        for prefix, module in self.model.named_modules():
            named += [("attribute", f"{prefix}.{attr}".lstrip("."), value) for attr, value in vars(module).items()
                      if isinstance(value, torch.Tensor) and not isinstance(value, nn.Parameter)]
        for kind, name, tensor in named:
            name_host(tensor, kind, name)
            self._named.append(tensor)

    def _hook_units(self) -> None:
        for unit, params in _managed(fsdp_units(self.model)).items():
            def gather(module, args, params=params) -> None:
                for owner, name in params:
                    owner._parameters[name] = on_device(owner._parameters[name])

            def free(module, args, output, params=params) -> None:
                for owner, name in params:
                    owner._parameters[name] = self._host[(id(owner), name)]

            self._handles.append(unit.register_forward_pre_hook(gather, prepend=True))
            self._handles.append(unit.register_forward_hook(free, always_call=True))

    def _hook_stack(self) -> None:
        stack = self.mode.module_stack

        def leave(module, args, output) -> None:  # a forward hook that returns a value replaces the output
            stack.pop()

        for name, module in self.model.named_modules():
            label = (name, type(module).__name__)
            self._handles.append(module.register_forward_pre_hook(lambda m, a, label=label: stack.append(label)))
            self._handles.append(module.register_forward_hook(leave, always_call=True))

    def __enter__(self) -> OffloadedRun:
        self._host = {(id(m), n): p for m in self.model.modules() for n, p in m._parameters.items()}
        self._name_host_tensors()
        self._hook_units()
        self._hook_stack()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.mode.__exit__(*exc)
        for handle in self._handles:
            handle.remove()
        for module in self.model.modules():  # every parameter back as the host Parameter it was
            for name in list(module._parameters):
                module._parameters[name] = self._host[(id(module), name)]
        for tensor in self._named:
            with contextlib.suppress(AttributeError):
                delattr(tensor, ORIGIN)
