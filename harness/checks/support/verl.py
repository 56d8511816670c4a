"""verl's own code as the trainer side of a check, in a row that installs verl (the `verl` axis).

A check with a verl counterpart calls verl's functions from the installed release and names each such verdict
`verl:<part>` (`verdict`), recording in its metrics["verl"] the release, verl's declared range for the row's
packages, and the qualified names of the verl functions it ran. `attributed`, applied by the registry to every
result (harness/checks/__init__.py), turns a verdict named for verl into a failure when what it records was not
loaded from the installed verl: a verdict named for verl that this project's code produced must fail, as the
Megatron-Bridge guard does for its bridges.

Nothing here imports verl at module level: the harness imports this module in environments without it.
"""
from __future__ import annotations

import contextlib
import importlib
import sys
from collections.abc import Callable, Iterable
from importlib.metadata import PackageNotFoundError, distribution, requires, version
from pathlib import Path
from typing import Any

from harness.results.records import Status, Verdict

PREFIX = "verl:"
# The packages whose releases a verl row crosses, and whose bounds verl declares in its base requirements.
RANGE_PACKAGES = ("transformers", "tensordict", "torch", "numpy")


def installed() -> str | None:
    """The installed verl release, None where verl is absent."""
    try:
        return version("verl")
    except PackageNotFoundError:
        return None


def declared(dist: str) -> str | None:
    """verl's own requirement specifier on `dist` (base requirements: no extra, no marker), None if it sets none."""
    from packaging.requirements import Requirement

    try:
        lines = requires("verl") or []
    except PackageNotFoundError:
        return None
    for line in lines:
        req = Requirement(line)
        if req.name == dist and req.marker is None:
            return str(req.specifier) or None
    return None


def range_status() -> dict[str, dict[str, Any]]:
    """For each package verl bounds: its declared specifier, the installed release and whether it is inside."""
    from packaging.specifiers import SpecifierSet

    status = {}
    for dist in RANGE_PACKAGES:
        spec = declared(dist)
        if spec is None:
            continue
        try:
            have = version(dist)
        except PackageNotFoundError:
            have = None
        status[dist] = {"declared": spec, "installed": have,
                        "inside": None if have is None else SpecifierSet(spec).contains(have, prereleases=True)}
    return status


def outside_range(status: dict[str, dict[str, Any]] | None = None) -> list[str]:
    """The row's packages outside verl's declared range, as "transformers 5.23.0 (verl 0.9.1 declares >=5.5.3,...)"."""
    status = range_status() if status is None else status
    return [f"{dist} {entry['installed']} (verl {installed()} declares {entry['declared']})"
            for dist, entry in status.items() if entry["inside"] is False]


def qualname(function: Callable[..., Any]) -> str:
    """module.qualname of a function, class or method: what a verl verdict records it ran."""
    target = getattr(function, "__func__", function)
    return f"{target.__module__}.{target.__qualname__}"


def verdict(part: str, status: Status, message: str, ran: Iterable[Callable[..., Any]],
            metrics: dict[str, Any] | None = None, emulated: bool = False,
            raised: BaseException | None = None) -> Verdict:
    """A verdict named `verl:<part>`, recording the verl functions it ran and where the row stands against verl's
    declared range (an outside row says so in the message: the reader tells an unsupported stack from a break).
    `raised`: the exception the part ended with; where verl's own code raised it (an import of verl's module
    included), its file:line is recorded as what of verl ran."""
    status_of_range = range_status()
    names = [qualname(fn) for fn in ran]
    outside = outside_range(status_of_range)
    text = f"verl {installed()}: {message}"
    if outside:
        text += "; outside verl's declared range: " + ", ".join(outside)
    record = {"release": installed(), "ran": names, "range": status_of_range}
    where = verl_frame(raised) if raised is not None else None
    if where:
        record["raised_in"] = where
    return Verdict(PREFIX + part, status, text, emulated=emulated, metrics={**(metrics or {}), "verl": record})


def _verl_root() -> Path | None:
    try:
        return Path(distribution("verl").locate_file("verl")).resolve()
    except PackageNotFoundError:
        return None


def _loaded_from(name: str) -> Path | None:
    """The file the object `module.qualname` was defined in, resolved through the module that holds it."""
    parts = name.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:cut])
        module = sys.modules.get(module_name)
        if module is None:
            with contextlib.suppress(Exception):
                module = importlib.import_module(module_name)
        if module is None:
            continue
        target: Any = module
        try:
            for attribute in parts[cut:]:
                target = getattr(target, attribute)
        except AttributeError:
            return None
        defined_in = sys.modules.get(getattr(target, "__module__", module_name) or module_name, module)
        path = getattr(defined_in, "__file__", None)
        return Path(path).resolve() if path else None
    return None


def attributed(result_verdict: Verdict) -> Verdict:
    """The verdict itself, or a failure where one named for verl records no function of the installed verl."""
    if not result_verdict.name.startswith(PREFIX):
        return result_verdict
    root = _verl_root()
    record = result_verdict.metrics.get("verl") or {}
    ran = record.get("ran") or []
    foreign = [name for name in ran if root is None or not name.startswith("verl.")
               or (path := _loaded_from(name)) is None or root not in path.parents]
    # A skip claims nothing of verl's code: it may record none. A failure raised inside verl's own code (its
    # file:line recorded) is verl's outcome, even where no function of it returned.
    raised_by_verl = result_verdict.status.is_failure and str(record.get("raised_in", "")).startswith("verl/")
    if root is not None and not foreign and (ran or result_verdict.status is Status.SKIP or raised_by_verl):
        return result_verdict
    why = ("verl is not installed" if root is None else "it records no verl function" if not ran
           else f"it ran {', '.join(foreign)}, not the installed verl's code")
    return Verdict(result_verdict.name, Status.FAIL, f"named for verl but {why} (its result was: "
                   f"{result_verdict.message})", metrics=result_verdict.metrics, emulated=result_verdict.emulated)


def use_cpu_platform(current_device: Any = "cpu") -> str:
    """Name a CPU device for verl on a machine without an accelerator, through verl's own extension point.

    verl 0.9's platform registry (verl.plugin.platform) falls back to its CUDA platform when it finds no
    accelerator, whose current device is torch.cuda.current_device(): that raises on a CPU torch. Registering a
    platform is how verl takes new hardware; nothing in verl is changed. verl releases without the registry
    already answer "cpu" there (torch.cpu.current_device()). `current_device` is what verl's get_device_id() then
    answers: torch.device("cpu", 0) lets a recorder tell verl's moves "to the device" from its moves to the host
    ("cpu"); without the registry torch.cpu.current_device answers it, in a rank process of its own only. Returns
    what was done, for the verdicts' metrics."""
    import torch

    try:
        from verl.plugin.platform import PlatformBase, PlatformRegistry, set_platform
    except ImportError:
        if current_device != "cpu":
            torch.cpu.current_device = lambda: current_device
        return "verl without a platform registry: its device helpers answer cpu"

    answers = {"device_name": "cpu", "vendor_name": "cpu", "device_module": torch.cpu, "is_available": True,
               "current_device": current_device, "device_count": 1, "communication_backend_name": "gloo",
               "visible_devices_envvar": "CUDA_VISIBLE_DEVICES", "ray_resource_name": "CPU", "ray_noset_envvars": [],
               "is_ipc_supported": False, "get_device_capability": (None, None)}
    names = {name: answers.get(name) for name in PlatformBase.__abstractmethods__}
    namespace = {name: property(lambda self, _v=value: _v) if isinstance(getattr(PlatformBase, name, None), property)
                 else (lambda self, *args, _v=value, **kwargs: _v) for name, value in names.items()}
    # The profiler's range marker is a context manager; seeding is torch's own.
    namespace["nvtx_range"] = lambda self, *args, **kwargs: contextlib.nullcontext()
    namespace["manual_seed"] = namespace["manual_seed_all"] = lambda self, seed: torch.manual_seed(seed)
    CpuPlatform = type("CpuPlatform", (PlatformBase,), namespace)

    PlatformRegistry.register(platform="cpu")(CpuPlatform)
    set_platform(CpuPlatform())
    return "a CPU platform registered through verl.plugin.platform (verl has none of its own)"


# Packages that exist only for an accelerator: verl code that imports one cannot run on a CPU runner, which is
# this runner's limit, never verl's failure (verl 0.8.0's padding helpers import flash_attn on any non-NPU machine).
ACCELERATOR_ONLY = {"flash_attn": "a GPU runner with flash-attn installed", "flash_attn_2_cuda": "a GPU runner with "
                    "flash-attn installed", "torch_npu": "an Ascend NPU runner with torch-npu",
                    "apex": "a GPU runner with NVIDIA Apex", "liger_kernel": "a GPU runner with liger-kernel"}


def verl_frame(exc: BaseException) -> str | None:
    """verl's own file:line nearest the raise (as "verl/utils/attention_utils.py:30"), None if verl is not in it."""
    import traceback

    root = _verl_root()
    for frame in reversed(traceback.extract_tb(exc.__traceback__)):
        path = Path(frame.filename).resolve()
        if root is not None and root in path.parents:
            return f"{path.relative_to(root.parent).as_posix()}:{frame.lineno}"
    return None


def unrunnable(exc: BaseException) -> str | None:
    """Why verl's code cannot run on this runner, when `exc` is its import of an accelerator-only package; else
    None (any other exception is verl's own outcome on this stack)."""
    package = (getattr(exc, "name", None) or "").split(".")[0]
    if not isinstance(exc, ImportError) or package not in ACCELERATOR_ONLY:
        return None
    return (f"could not run on this runner: {verl_frame(exc) or 'verl'} imports {package}, which exists only for "
            f"an accelerator ({ACCELERATOR_ONLY[package]} runs this part)")


def guarded(part: str, produce: Callable[[], list[Verdict]]) -> list[Verdict]:
    """A check's verl verdicts from `produce`. Where verl's own code raises before it gives any (its modules do not
    import on the row's stack: verl 0.8.0's datasets against NumPy 1), one verdict `verl:<part>` says so: a skip
    where verl needs a package only accelerators have, else a failure recording verl's file:line. The check's own
    verdicts stand either way. An exception raised outside verl's code is the check's (raised again)."""
    try:
        return produce()
    except Exception as exc:
        why = unrunnable(exc)
        if why:
            return [verdict(part, Status.SKIP, why, [])]
        if verl_frame(exc) is None:
            raise
        return [verdict(part, Status.FAIL, f"verl's code raises {describe(exc)}", [], raised=exc)]


def describe(exc: BaseException) -> str:
    """An exception from verl's code in one line: its class, verl's file:line nearest the raise, its first line."""
    first = (str(exc).splitlines() or [""])[0][:200]
    return f"{type(exc).__name__} at {verl_frame(exc) or 'a frame outside verl'}: {first}"
