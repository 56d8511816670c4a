"""Which weights an engine holds: an exact fingerprint of tensors, and what each engine fingerprints.

A tensor's fingerprint is three integer sums over its bit patterns, modulo 2**64: the plain sum, the
sum of squares and the sum weighted by position. Integer sums are exact and do not depend on the order of
the reduction, so no device or kernel changes them; they run where the tensor lives, one pass and no copy
to the host. A change of any bit moves the plain sum unless other changes cancel it exactly, and a swap of
two elements moves the weighted one. The sums of several named tensors, with their dtypes and shapes,
are hashed into one short string.

- The Hugging Face engine holds a whole copy of the policy in this process: it fingerprints all of it.
- A vLLM engine holds its weights in its workers, repacked and fused into its own layout: the one tensor
  that every worker keeps in the checkpoint's layout and dtype cast is read there, the text model's final
  RMSNorm weight (`FINAL_NORM`), through a worker method (`WorkerFingerprint`, vLLM's
  `worker_extension_cls`). Every update changes it (its gradient is dense), so it tells versions apart;
  it cannot see a sync that reloads that tensor and not the others.
"""
from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable

import torch

# The text model's final norm: `model.norm.weight` (causal LM, and vLLM's names for both kinds) or
# `model.language_model.norm.weight` (Hugging Face's vision-language model); never a layer's, the vision
# tower's or the MTP head's norm.
FINAL_NORM = re.compile(r"^(?:model\.(?:language_model\.)?|language_model\.model\.)norm\.weight$")
_CHUNK = 1 << 24  # elements per pass: bounds the int64 temporaries of a large tensor
_INTS = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _sums(tensor: torch.Tensor) -> torch.Tensor:
    """(plain, squares, position-weighted) sums of the bit patterns, int64, on the tensor's device."""
    flat = tensor.detach().contiguous().reshape(-1)
    bits = flat.view(_INTS[flat.element_size()]) if flat.dtype != torch.bool else flat.to(torch.uint8)
    total = torch.zeros(3, dtype=torch.int64, device=flat.device)
    for start in range(0, bits.numel(), _CHUNK):
        part = bits[start:start + _CHUNK].to(torch.int64)
        where = torch.arange(start + 1, start + 1 + part.numel(), dtype=torch.int64, device=flat.device)
        total += torch.stack([part.sum(), (part * part).sum(), (part * where).sum()])
    return total


def fingerprint(named: Iterable[tuple[str, torch.Tensor]]) -> str:
    """One string for these tensors' exact contents (with their names, dtypes and shapes)."""
    items = sorted(named, key=lambda item: item[0])
    if not items:
        raise ValueError("no tensors to fingerprint")
    found = [_sums(t) for _, t in items]
    same_device = len({t.device for t in found}) == 1  # then one copy to the host, not one per tensor
    sums = (torch.stack(found) if same_device else torch.stack([t.cpu() for t in found])).tolist()
    digest = hashlib.blake2b(digest_size=12)
    for (name, tensor), numbers in zip(items, sums):
        digest.update(f"{name}|{str(tensor.dtype)}|{tuple(tensor.shape)}|{numbers}\n".encode())
    return digest.hexdigest()


def final_norm(named: Iterable[tuple[str, torch.Tensor]]) -> torch.Tensor:
    """The text model's final norm weight among these tensors (exactly one must match FINAL_NORM)."""
    found = [(name, tensor) for name, tensor in named if FINAL_NORM.match(name)]
    if len(found) != 1:
        raise ValueError(f"expected one final norm weight, found {[name for name, _ in found] or 'none'}")
    return found[0][1]


def final_norm_fingerprint(tensor: torch.Tensor) -> str:
    """The fingerprint of a final norm weight, under a name both sides share (their own names differ)."""
    return fingerprint([("final-norm", tensor)])


class WorkerFingerprint:
    """vLLM's `worker_extension_cls`: its methods join the engine's workers and are called by name through
    `collective_rpc`. It needs nothing from vLLM here; it reads the worker's `model_runner.model`."""

    def held_weights_fingerprint(self) -> dict | None:
        """The fingerprint and dtype of this worker's final norm weight (None where the worker holds none: a
        pipeline stage before the last)."""
        model = self.model_runner.model
        try:
            norm = final_norm(model.named_parameters())
        except ValueError:
            return None
        return {"fingerprint": final_norm_fingerprint(norm), "dtype": str(norm.dtype).removeprefix("torch.")}
