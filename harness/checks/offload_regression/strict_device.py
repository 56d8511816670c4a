"""Strict device semantics on a CPU-only machine: a host tensor that meets device compute is caught.

On an accelerator, an operation whose inputs mix accelerator tensors with host tensors fails
("Expected all tensors to be on the same device"), except for 0-dim host scalars, host index
tensors, and explicit copies. On a CPU-only machine both are the CPU, so nothing fails. This
module brings the distinction back without changing any number:

- a tensor the accelerator would hold is a `DeviceTensor`: the same CPU memory, but Python code
  that reads its `.device` sees `FAKE_DEVICE` (cuda:0), so code that builds new tensors "where
  the inputs are" (`device=x.device`) asks for the accelerator, and code that builds them on
  some other tensor's device (an offloaded weight's, a buffer's) gets the host;
- `StrictDeviceMode`, a `__torch_function__` mode, runs every torch call on the CPU (the fake
  device is swapped for the CPU before the call), tags the outputs of calls with an accelerator
  input (or an explicit accelerator target) as `DeviceTensor`, and records a `Mix` whenever a
  call mixes a `DeviceTensor` with a host tensor that is not a 0-dim scalar.

Host tensors carry where they came from (`ORIGIN`: a parameter, buffer or attribute name given
by the caller, or the function that created them on the host), and a mix names the innermost
module being run (`module_stack`) and the calling frame, so each mix names its module and tensor.
Only Python-level torch calls are seen: C++ autograd formulas run unobserved, which loses nothing
because they can only combine what the forward already combined.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten, tree_unflatten

FAKE_DEVICE = torch.device("xpu", 0)
ORIGIN = "_strict_device_origin"  # attribute on host tensors: (kind, name)
_HERE = str(Path(__file__).resolve())
_TORCH = str(Path(torch.__file__).resolve().parent)

# Calls that may mix devices on an accelerator: explicit copies, and indexing with host indices.
_COPIES = {torch.Tensor.to, torch.Tensor.copy_, torch.Tensor.cuda, torch.Tensor.cpu, torch.Tensor.__setitem__}
_INDEXING = {torch.Tensor.__getitem__}


def _histc(input: torch.Tensor, *args, **kwargs) -> torch.Tensor:
    """CUDA's histc takes integer input, the CPU kernel does not: count in float, return the input's dtype."""
    if input.is_floating_point():
        return torch.histc(input, *args, **kwargs)
    return torch.histc(input.float(), *args, **kwargs).to(input.dtype)


# Accelerator kernels that the CPU lacks for some dtypes, taken by code that sees the fake device.
_CPU_KERNELS = {torch.histc: _histc, torch.Tensor.histc: _histc}


class DeviceTensor(torch.Tensor):
    """A CPU tensor that stands for one on the accelerator (see the module docstring)."""

    __torch_function__ = torch._C._disabled_torch_function_impl  # the mode does all the work

    @property
    def device(self) -> torch.device:  # noqa: D401  (what Python code sees; C++ sees the CPU)
        return FAKE_DEVICE


def on_device(tensor: torch.Tensor) -> torch.Tensor:
    """`tensor` as the accelerator would hold it; still attached to autograd (an alias)."""
    return tensor if isinstance(tensor, DeviceTensor) else tensor.as_subclass(DeviceTensor)


def name_host(tensor: torch.Tensor, kind: str, name: str) -> None:
    """Say what a host tensor is, so that a mix can name it (parameter, buffer, attribute)."""
    setattr(tensor, ORIGIN, (kind, name))


def _is_fake(value: Any) -> bool:
    if isinstance(value, torch.device):
        return value.type == FAKE_DEVICE.type
    return isinstance(value, str) and value.split(":")[0] == FAKE_DEVICE.type


def _caller() -> tuple[str, str, int]:
    """file, function and line of the innermost frame outside torch and this module."""
    frame = sys._getframe(2)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_TORCH) and name != _HERE:
            return Path(name).name, frame.f_code.co_name, frame.f_lineno
        frame = frame.f_back
    return "unknown", "unknown", 0


def _target(func, args: tuple, kwargs: dict, flat: list) -> str | None:
    """'device' or 'host' when the call names where its result goes, else None (follow the inputs)."""
    if func is torch.Tensor.cuda:
        return "device"
    if func is torch.Tensor.cpu:
        return "host"
    if func is torch.Tensor.to:
        other = [a for a in list(args[1:]) + list(kwargs.values()) if isinstance(a, torch.Tensor)]
        if other:
            return "device" if isinstance(other[0], DeviceTensor) else "host"
        places = [a for a in list(args[1:]) + [kwargs.get("device")] if isinstance(a, (torch.device, str))]
        return None if not places else ("device" if _is_fake(places[0]) else "host")
    device = kwargs.get("device")
    if device is not None:
        return "device" if _is_fake(device) else "host"
    return None


@dataclass
class Mix:
    """One call that mixed a host tensor into device compute."""

    module: str  # qualified name of the innermost module being run ("" outside any)
    module_class: str
    call: str  # the torch function
    tensor_kind: str  # parameter | buffer | attribute | created | unknown
    tensor: str  # its name, or the function that created it on the host
    shape: list[int]
    where: str  # file:function:line of the calling code

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class StrictDeviceMode(TorchFunctionMode):
    """Run torch calls with accelerator semantics on the CPU; record (or raise on) device mixes."""

    raise_on_mix: bool = False
    mixes: list[Mix] = field(default_factory=list)
    module_stack: list[tuple[str, str]] = field(default_factory=list)  # (qualified name, class)

    def __post_init__(self) -> None:
        super().__init__()

    def _record(self, func, hosts: list[torch.Tensor]) -> None:
        file, function, line = _caller()
        module, module_class = self.module_stack[-1] if self.module_stack else ("", "")
        for tensor in hosts:
            kind, name = getattr(tensor, ORIGIN, ("unknown", "a host tensor of unknown origin"))
            mix = Mix(module, module_class, getattr(func, "__name__", str(func)), kind, name, list(tensor.shape),
                      f"{file}:{function}:{line}")
            self.mixes.append(mix)
            if self.raise_on_mix:
                raise RuntimeError(
                    f"Expected all tensors to be on the same device (strict device emulation): {mix.call} in "
                    f"{mix.module or 'no module'} got {kind} {name} from the host, at {mix.where}")

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        flat, spec = tree_flatten((args, kwargs))
        tensors = [x for x in flat if isinstance(x, torch.Tensor)]
        target = _target(func, args, kwargs, flat)
        devices = [t for t in tensors if isinstance(t, DeviceTensor)]
        if devices and func not in _COPIES:
            checked = [args[0]] if func in _INDEXING else tensors  # host indices are allowed
            hosts = [t for t in checked if not isinstance(t, DeviceTensor) and t.dim() > 0]
            if hosts:
                self._record(func, hosts)
        call_args, call_kwargs = tree_unflatten([torch.device("cpu") if _is_fake(x) else x for x in flat], spec)
        out = _CPU_KERNELS.get(func, func)(*call_args, **call_kwargs)
        if not isinstance(out, torch.Tensor) and not (
                isinstance(out, (tuple, list)) and any(isinstance(x, torch.Tensor) for x in out)):
            return out  # property reads, sizes, Python numbers: nothing to place
        if target == "device" or (target is None and devices):
            return _map_tensors(out, on_device)
        if target == "host" and func in (torch.Tensor.to, torch.Tensor.cpu) and isinstance(out, DeviceTensor):
            out = out.as_subclass(torch.Tensor)  # `.to(host)` of a device tensor returned it unchanged
        origin = next((getattr(t, ORIGIN) for t in tensors if hasattr(t, ORIGIN) and t.dim() > 0), None)
        if origin is None:  # made on the host here: named by the function (and module) that made it
            file, function, line = _caller()
            owner = self.module_stack[-1][1] if self.module_stack else ""
            origin = ("created", f"{owner}.{function}" if function == "forward" and owner else function)
        _map_tensors(out, lambda t: _tag(t, origin))
        return out


def _tag(tensor: torch.Tensor, origin: tuple[str, str]) -> torch.Tensor:
    if not isinstance(tensor, DeviceTensor) and not hasattr(tensor, ORIGIN):
        try:
            setattr(tensor, ORIGIN, origin)
        except (AttributeError, RuntimeError):  # some tensors refuse attributes; they stay unnamed
            pass
    return tensor


def _map_tensors(out: Any, fn) -> Any:
    if isinstance(out, torch.Tensor):
        return fn(out)
    if isinstance(out, (tuple, list)) and any(isinstance(x, torch.Tensor) for x in out):
        mapped = [fn(x) if isinstance(x, torch.Tensor) else x for x in out]
        return type(out)(mapped) if not hasattr(out, "_fields") else type(out)(*mapped)
    return out
