"""An import-only stand-in for Transformer Engine, served to the Megatron-Bridge modules that import it unguarded.

Megatron-Bridge 0.6.2 reaches megatron/bridge/peft/lora_layers.py from `import megatron.bridge`
(conversion/model_bridge.py -> peft_bridge.py -> peft/canonical_lora.py), and that module does
`import transformer_engine.pytorch as te` at line 20, for LoRA layers the bridge check never builds;
Transformer Engine has no CPU build. So `import megatron.bridge` fails on a CPU runner.

The stand-in is scoped, not global: only the modules named in SCOPED get it, through their own
`__import__` (their module globals' `__builtins__`), so nothing enters sys.modules and megatron-core's
`try: import transformer_engine` guards still see it absent (a global stand-in flips them, measured: its
MoE spec then asks TE's version and fails). Every name the stand-in hands out is a class that raises
when called, so no Transformer Engine code can run; `isinstance(x, te.Linear)` is simply False.
`served` records each (module, name) that got it, for the verdicts' metrics.
"""
from __future__ import annotations

import builtins
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

PACKAGE = "transformer_engine"
SCOPED = frozenset({"megatron.bridge.peft.lora_layers"})


class _Absent(type):
    """A stand-in name: attribute access gives further stand-ins; calling one raises."""

    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Absent(attr, (_Unavailable,), {"__module__": cls.__module__})


class _Unavailable(metaclass=_Absent):
    def __init__(self, *args, **kwargs):
        raise RuntimeError(f"{type(self).__module__}.{type(self).__name__} is an import-only stand-in: "
                           "Transformer Engine is not installed")


def _module(name: str) -> types.ModuleType:
    module = types.ModuleType(name, "import-only stand-in for Transformer Engine (no code of it runs)")
    module.__path__ = []

    def attribute(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Absent(attr, (_Unavailable,), {"__module__": name})

    module.__getattr__ = attribute
    return module


class _Scope(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds only the SCOPED modules (the real file, the real loader) and runs them with a private
    `__import__` that answers `transformer_engine...` with stand-ins."""

    def __init__(self, scoped=SCOPED):
        self.scoped = frozenset(scoped)
        self.served: list[tuple[str, str]] = []
        self._loaders: dict[str, importlib.abc.Loader] = {}

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.scoped:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None:
            return None
        self._loaders[fullname] = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._loaders[spec.name].create_module(spec)

    def exec_module(self, module):
        module.__dict__["__builtins__"] = {**builtins.__dict__, "__import__": self._importer(module.__name__)}
        self._loaders[module.__name__].exec_module(module)

    def _importer(self, importer: str):
        real = builtins.__import__

        def scoped_import(name, globals=None, locals=None, fromlist=(), level=0):
            if level or name.split(".", 1)[0] != PACKAGE:
                return real(name, globals, locals, fromlist, level)
            self.served.append((importer, name))
            top = leaf = _module(PACKAGE)
            for part in name.split(".")[1:]:
                child = _module(f"{leaf.__name__}.{part}")
                setattr(leaf, part, child)
                leaf = child
            return leaf if fromlist else top

        return scoped_import


_SCOPE: _Scope | None = None


def needed() -> bool:
    return importlib.util.find_spec(PACKAGE) is None


def install() -> _Scope | None:
    """The scope, installed once per process where Transformer Engine is absent (else None: the real one)."""
    global _SCOPE
    if not needed():
        return None
    if _SCOPE is None:
        _SCOPE = _Scope()
        sys.meta_path.insert(0, _SCOPE)
    return _SCOPE


def record() -> dict:
    """What the verdicts' metrics say about the stand-in."""
    if _SCOPE is None:
        return {"transformer_engine_stand_in": False}
    return {"transformer_engine_stand_in": True,
            "stand_in_served": sorted({f"{importer}: import {name}" for importer, name in _SCOPE.served})}
