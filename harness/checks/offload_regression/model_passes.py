"""One training step of each tiny model (text, VL, MoE): the patch sets, the batches, the step under the
strict device mode, and the sites it finds: the host tensors that met device compute, one record per tensor.

`trainer_patches` is the trainer's patch set (or, `stock`, a deliberately broken one), `model_batch` the fixed
batch of each model; fsdp_worker runs the same step under real FSDP2 with them.

A pass builds the model as `offload_setup.offloaded_model` does (parameters on meta, materialized on the
host; buffers left on the host with the offloaded parameters, unlike verl), with the
given patches applied before the build (some targets are bound when a layer is built), runs
forward and backward once on a fixed batch, and returns its loss, the norm of all parameter
gradients, and every mix the mode recorded. The same step without the mode is the reference:
the emulation must not change a number.
"""
from __future__ import annotations

import contextlib
import math
import re
import time
import traceback
from pathlib import Path
from typing import Any

import torch

MODEL_KINDS = ("text", "vl", "moe")
TRAINER_METHODS = ("project", "stock")  # stock: a deliberately broken patch (the unpatched method)
OFFLOAD_FIXES = ("pos-embed-device:", "offload-device:")  # the trainer's fixes of offload device sites
_PREFIX = re.compile(r"^Qwen3_5(Moe)?")
_LAYER = re.compile(r"\.\d+\.")


def trainer_patches(method: str, device_type: str = "cpu") -> list:
    """The patches the trainer applies on `device_type` (trainers.patches.training), for this transformers.

    `stock` swaps in the unpatched method for each offload fix (a deliberately broken patch set): it
    shows the check fails where a site exists. Where no fix applies (upstream fixed the sites), both
    give the same set.
    """
    from trainers.patches.base import Patch, resolve
    from trainers.patches.training import selected

    if method not in TRAINER_METHODS:
        raise ValueError(f"unknown trainer method {method!r}; expected one of {TRAINER_METHODS}")
    applicable = [p for p in selected(device_type) if p.applicable()[0]]
    if method == "project":
        return applicable
    patches = []
    for patch in applicable:
        if patch.name.startswith(OFFLOAD_FIXES):
            owner, attr = resolve(patch.target)
            patch = Patch(f"{patch.name}:stock", patch.target, owner.__dict__[attr], versions=patch.versions)
        patches.append(patch)
    return patches


@contextlib.contextmanager
def patches_applied(patches: list) -> Any:
    with contextlib.ExitStack() as stack:
        for patch in patches:
            stack.enter_context(patch.applied_context())
        yield


def vision_batch(config, seed: int, device: torch.device) -> dict[str, torch.Tensor]:
    """Two images (one of two frames, not square) placed in one prompt, with labels."""
    vision = config.vision_config
    generator = torch.Generator().manual_seed(seed)
    grid = torch.tensor([[1, 8, 8], [2, 4, 8]])
    merge = vision.spatial_merge_size ** 2
    patch_dim = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    pixels = torch.randn(int(grid.prod(-1).sum()), patch_dim, generator=generator)
    ids = torch.randint(3, config.image_token_id - 1, (4,), generator=generator).tolist()
    for image in grid:
        ids += [config.vision_start_token_id] + [config.image_token_id] * (int(image.prod()) // merge)
        ids += [config.vision_end_token_id, 5]
    input_ids = torch.tensor([ids])
    batch = {"input_ids": input_ids, "pixel_values": pixels, "image_grid_thw": grid,
             "mm_token_type_ids": (input_ids == config.image_token_id).int(), "labels": input_ids}
    return {k: v.to(device) for k, v in batch.items()}


def model_batch(kind: str, config, seed: int) -> dict[str, torch.Tensor]:
    """A fixed batch on the host: two images in one prompt for VL, two 16-token rows otherwise."""
    if kind == "vl":
        return vision_batch(config, seed, torch.device("cpu"))
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, config.vocab_size, (2, 16), generator=generator)
    return {"input_ids": ids, "labels": ids}


def _grad_norm(model: torch.nn.Module) -> float | None:
    grads = [p.grad.double().pow(2).sum() for p in model.parameters() if p.grad is not None]
    return float(torch.stack(grads).sum().sqrt()) if grads else None


def run_pass(kind: str, model_config, seed: int, patches: list, strict: bool) -> dict[str, Any]:
    """One step of `kind` with `patches` applied; under offload and the strict device mode if `strict`."""
    from harness.checks.offload_regression.offload_setup import OffloadedRun, offloaded_model
    from harness.checks.offload_regression.strict_device import StrictDeviceMode, on_device

    result: dict[str, Any] = {"patches": [p.name for p in patches], "mixes": []}
    start = time.perf_counter()
    with patches_applied(patches):
        model = offloaded_model(kind, model_config, seed)
        batch = model_batch(kind, model.config, seed)
        mode = StrictDeviceMode()
        try:
            if strict:
                with OffloadedRun(model, mode):
                    loss = model(**{k: on_device(v) for k, v in batch.items()}).loss
                    loss.backward()
            else:
                loss = model(**batch).loss
                loss.backward()
            result.update(loss=float(loss.detach()), raised=False)
        except Exception as exc:  # noqa: BLE001  (any failure is a finding: class and site)
            result.update(raised=True, error_class=type(exc).__name__, error_site=error_site(exc),
                          error=str(exc).splitlines()[0][:300] if str(exc) else "")
    result["mixes"] = [m.to_dict() for m in mode.mixes]
    result["grad_norm"] = _grad_norm(model)
    result["seconds"] = round(time.perf_counter() - start, 3)
    return result


def error_site(exc: BaseException) -> str:
    """`file:function:line` of the innermost frame in transformers or in the trainer's patches
    (where the offending tensor was built or used), else the innermost frame."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/transformers/" in f.filename or "/trainers/patches/" in f.filename]
    frame = (ours or frames or [None])[-1]
    return f"{Path(frame.filename).name}:{frame.name}:{frame.lineno}" if frame else "unknown"


def _short_class(name: str) -> str:
    return _PREFIX.sub("", name) or name


def site_key(mix: dict[str, Any]) -> str:
    """A name for the tensor of a mix that is the same in every layer and release: layer indices
    become `*`, a tensor made on the host is named by the function that made it."""
    if mix["tensor_kind"] == "created":
        return f"created in {mix['tensor']}"
    return f"{mix['tensor_kind']} {_LAYER.sub('.*.', mix['tensor'])}"


def site_label(kind: str, site: dict[str, Any]) -> str:
    """`model:Module<tensor`, short enough for the report's verdict names."""
    tensor = site["key"].split(" ", 1)[1]
    if site["key"].startswith("created"):  # made in a function, or in a module's forward (named by its class)
        tensor = "new@" + _short_class(tensor.split(" ")[-1].removesuffix(".forward"))
    else:
        tensor = tensor.rsplit(".", 1)[-1]
    return f"{kind}:{_short_class(site['modules'][0].split(' ')[0])}<{tensor}"


def sites(mixes: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The mixes of one pass grouped by tensor (`site_key`), with where each met device compute."""
    found: dict[str, dict[str, Any]] = {}
    for mix in mixes:
        site = found.setdefault(site_key(mix), {"key": site_key(mix), "modules": [], "calls": [], "where": [],
                                                "count": 0, "shape": mix["shape"]})
        module = f"{mix['module_class']} ({mix['module'] or 'root'})"
        for field, value in (("modules", module), ("calls", mix["call"]), ("where", mix["where"])):
            if value not in site[field]:
                site[field].append(value)
        site["count"] += 1
    return found


def same_numbers(p: dict[str, Any], ref: dict[str, Any], rtol: float) -> bool:
    def close(a, b) -> bool:
        return a is not None and b is not None and math.isclose(a, b, rel_tol=rtol, abs_tol=rtol * 1e-3)

    return close(p.get("loss"), ref.get("loss")) and close(p.get("grad_norm"), ref.get("grad_norm"))
