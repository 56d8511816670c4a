"""The one explicit CPU shim megatron-core needs, switched on only when there is no accelerator.

megatron-core 0.16.1 assumes CUDA in two places that a CPU forward and backward reach:
1. `GlobalMemoryBuffer.get_tensor` (attention's matmul buffer, tensor-parallel all-gathers)
   allocates on `torch.cuda.current_device()`: the shim makes that answer the CPU device.
2. The RNG tracker that dropout and initialisation run under (`get_cuda_rng_tracker().fork()`)
   saves and restores CUDA RNG state: the shim installs a tracker that forks the CPU generator.
A third, for speed only: megatron's `jit_fuser` is `torch.compile`, whose first call on CPU
compiles for seconds in every process (about 8 s measured); the shim runs those small fused
functions eagerly (`torch._dynamo.config.disable`). All three are undone by `remove()`.
On CUDA and NPU nothing is touched: `cpu_shim_for(plan)` gives a no-op there, and that no-op
seeds Megatron's own CUDA tracker instead.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field

import torch


def _cpu_device() -> torch.device:
    return torch.device("cpu")


def _cpu_tracker_class():
    from megatron.core.tensor_parallel.random import CudaRNGStatesTracker

    class CpuRNGStatesTracker(CudaRNGStatesTracker):
        """Megatron's tracker with the CPU generator standing in for the CUDA one."""

        def add(self, name, seed):
            if seed in self.seeds_ or name in self.states_:
                raise ValueError(f"RNG stream {name!r} or seed {seed} is already tracked")
            self._is_initialized = True
            self.seeds_.add(seed)
            self.states_[name] = torch.Generator().manual_seed(seed).get_state()

        @contextlib.contextmanager
        def fork(self, name="model-parallel-rng"):
            if name not in self.states_:
                raise KeyError(f"RNG stream {name!r} was never added")
            outer = torch.get_rng_state()
            torch.set_rng_state(self.states_[name])
            try:
                yield
            finally:
                self.states_[name] = torch.get_rng_state()
                torch.set_rng_state(outer)

    return CpuRNGStatesTracker


@dataclass
class CpuShim:
    """Installs the two replacements; `remove()` restores exactly what was there."""

    installed: bool = False
    _saved: dict = field(default_factory=dict)

    def install(self, seed: int = 0, tp_rank: int = 0, ep_rank: int = 0) -> CpuShim:
        if self.installed:
            return self
        import torch._dynamo
        from megatron.core.tensor_parallel import random as mrandom

        self._saved = {"current_device": torch.cuda.current_device,
                       "dynamo_disable": torch._dynamo.config.disable,
                       "tracker": mrandom._CUDA_RNG_STATE_TRACKER,
                       "tracker_initialized": mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED}
        torch.cuda.current_device = _cpu_device
        torch._dynamo.config.disable = True
        tracker = _cpu_tracker_class()()
        # The three streams and seed offsets of model_parallel_cuda_manual_seed.
        tracker.add(mrandom._DATA_PARALLEL_RNG_TRACKER_NAME, seed)
        tracker.add(mrandom._MODEL_PARALLEL_RNG_TRACKER_NAME, seed + 2718 + tp_rank)
        tracker.add(mrandom._EXPERT_PARALLEL_RNG_TRACKER_NAME, seed + 1024 + 100 * ep_rank)
        mrandom._CUDA_RNG_STATE_TRACKER = tracker
        mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = True
        self.installed = True
        return self

    def remove(self) -> None:
        if not self.installed:
            return
        from megatron.core.tensor_parallel import random as mrandom

        torch.cuda.current_device = self._saved["current_device"]
        torch._dynamo.config.disable = self._saved["dynamo_disable"]
        mrandom._CUDA_RNG_STATE_TRACKER = self._saved["tracker"]
        mrandom._CUDA_RNG_STATE_TRACKER_INITIALIZED = self._saved["tracker_initialized"]
        self._saved = {}
        self.installed = False

    def __enter__(self) -> CpuShim:
        return self

    def __exit__(self, *exc) -> None:
        self.remove()


class NoShim:
    """What an accelerator gets: nothing patched; Megatron seeds its own CUDA/NPU tracker."""

    installed = False

    def install(self, seed: int = 0, tp_rank: int = 0, ep_rank: int = 0) -> NoShim:
        from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

        model_parallel_cuda_manual_seed(seed)
        return self

    def remove(self) -> None:
        return None

    def __enter__(self) -> NoShim:
        return self

    def __exit__(self, *exc) -> None:
        return None


def cpu_shim_for(plan) -> CpuShim | NoShim:
    """The shim for a `trainers.runtime.device.DevicePlan`: the CPU shim only where the plan is cpu."""
    return CpuShim() if plan.type == "cpu" else NoShim()
