"""A cell's container (`image` axis), as the docker Python SDK makes it: its image, found or pulled, and
what it gets of this machine. execution/container_cell.py runs it.

Nothing is built on the host. The container gets the repository read-only at /harness/src (importable
through PYTHONPATH), the results directory writable at /harness/out, a writable env directory under the
env root at /harness/envs (bootstrap venv, cell venv and uv cache: a second run reuses them), this
machine's pip find-links, constraint files and CA bundle read-only, and the cell's devices (never
privileged). Inside, `harness.envs.incontainer` runs `harness run` for that one cell, which writes the cell
file as on the host; the image name, id and digests reach its environment capture.

Where no registry is reachable (these machines, air-gapped runners), the container tests and the `act`
session still need a real image: `ensure_local_image` makes a Debian bookworm one with Python 3.11 without
any registry. debootstrap writes a minimal root file system with python3 and python3-venv, and `docker
import` turns its tarball into an image. The tarball is kept in the user's cache directory (as uv keeps its
own), so only the first build on a machine pays for debootstrap (about a minute); later imports take seconds.
"""
from __future__ import annotations

import glob
import hashlib
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from harness.errors import EnvironmentMissing
from trainers.runtime import determinism

from . import pipconfig
from .cellenv import PROJECT_ROOT
from .envinfo import project_revision

# Paths inside the container.
SRC, OUT, ENVS, MATRIX_DIR = "/harness/src", "/harness/out", "/harness/envs", "/harness/matrix"
CA_BUNDLE = "/harness/ca.crt"
NPU_NODES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
NPU_MOUNTS = ("/usr/local/dcmi", "/usr/local/bin/npu-smi", "/usr/local/Ascend/driver/lib64",
              "/usr/local/Ascend/driver/version.info", "/etc/ascend_install.info")
# What a user exported reaches the run inside: the harness's own settings, device selection, and every
# determinism variable (trainers/runtime/determinism.py decides them; an exported value wins there too).
FORWARD = ("HARNESS_EXTRA_CHECKS", "HARNESS_DEBUG", "HARNESS_INDEX_URL", "CUDA_VISIBLE_DEVICES",
           "ASCEND_RT_VISIBLE_DEVICES", *dict.fromkeys(k for env in determinism.ENVIRONMENT.values() for k in env))
UV_PATHS = ("UV_FIND_LINKS", "UV_CONSTRAINT", "UV_DEFAULT_INDEX", "UV_INDEX_URL", "UV_INDEX", "UV_EXTRA_INDEX_URL")
LOCAL_IMAGE = "harness-test/bookworm-py311:1"  # the tag names the recipe in build_rootfs: change both together
CACHE = pipconfig.cache_folder()
ROOTFS = CACHE / "bookworm-py311-1.tar"


@dataclass(frozen=True)
class Image:
    ref: str  # as the matrix names it
    id: str
    repo_digests: tuple[str, ...] = ()

    @property
    def digest(self) -> str:
        """The registry digest where the image came from a registry, else its content id (a local image)."""
        return self.repo_digests[0] if self.repo_digests else self.id


def wanted(cell) -> bool:
    """A cell with an image runs in a container, unless this process already runs in that image
    (our own container, or a CI job's `container:` that sets HARNESS_IMAGE)."""
    image = cell.axes.get("image")
    return bool(image) and os.environ.get("HARNESS_IMAGE") != image


def sdk():
    """The docker SDK, imported only for image cells; exit 3 with the fix when it is absent."""
    try:
        import docker
    except ImportError:
        raise EnvironmentMissing("cells with an `image` run through the docker Python SDK, which is not "
                                 "installed: `pip install docker`") from None
    return docker


def _local_paths(value: str) -> list[str]:
    """Existing absolute paths named in a pip/uv setting (file:// URLs included), to mount read-only."""
    found = []
    for item in value.replace(",", " ").split():
        path = item.removeprefix("file://")
        if os.path.isabs(path) and os.path.exists(path):
            found.append(os.path.normpath(path))
    return found


def _ca_bundle(environ: dict[str, str]) -> str | None:
    for value in (environ.get("SSL_CERT_FILE"), environ.get("PIP_CERT"), environ.get("REQUESTS_CA_BUNDLE"),
                  pipconfig.pip_config().get("cert")):
        if value and os.path.isfile(value):
            return value
    return None


def package_settings(environ: dict[str, str]) -> tuple[dict[str, str], list[str], str | None]:
    """What a container needs of this machine's package configuration: the uv and pip variables
    (pip and uv see the same find-links, constraints and index), the host paths they name (to mount
    read-only at the same paths), and the CA bundle the host trusts (None if none is set), which
    the variables expect at CA_BUNDLE."""
    uv = {k: environ[k] for k in UV_PATHS if environ.get(k)}
    uv.update({k: v for k, v in pipconfig.uv_environment(environ).items() if k in UV_PATHS})
    env = dict(uv)
    if uv.get("UV_FIND_LINKS"):
        env["PIP_FIND_LINKS"] = " ".join(uv["UV_FIND_LINKS"].split(","))
    if uv.get("UV_CONSTRAINT"):
        env["PIP_CONSTRAINT"] = uv["UV_CONSTRAINT"]
    if uv.get("UV_DEFAULT_INDEX") or uv.get("UV_INDEX_URL"):
        env["PIP_INDEX_URL"] = uv.get("UV_DEFAULT_INDEX") or uv["UV_INDEX_URL"]
    ca = _ca_bundle(environ)
    if ca:
        env.update(SSL_CERT_FILE=CA_BUNDLE, PIP_CERT=CA_BUNDLE, REQUESTS_CA_BUNDLE=CA_BUNDLE)
    paths = list(dict.fromkeys(p for value in uv.values() for p in _local_paths(value)))
    return env, paths, ca


def _pythonpath(environ: dict[str, str]) -> str:
    """The project, plus the host's PYTHONPATH entries inside the project (extra checks), as mounted."""
    paths = [SRC]
    for entry in filter(None, environ.get("PYTHONPATH", "").split(os.pathsep)):
        rel = os.path.relpath(os.path.abspath(entry), PROJECT_ROOT)
        if rel != "." and not rel.startswith(".."):
            paths.append(f"{SRC}/{Path(rel).as_posix()}")
    return ":".join(dict.fromkeys(paths))


def run_args(cell, matrix, opts, image: Image, environ: dict[str, str] | None = None, host: str = "/") -> dict:
    """Keyword arguments for `containers.create`: command as an argv list, mounts, devices, environment.

    `host` is the root where device nodes and driver files are looked up (a test passes a fake one).
    """
    from docker.types import DeviceRequest, Mount

    environ = dict(os.environ if environ is None else environ)
    out, envs = Path(opts.out_dir).resolve(), (Path(opts.env_root) / "containers").resolve()
    mounts = [Mount(SRC, str(PROJECT_ROOT), type="bind", read_only=True),
              Mount(f"{MATRIX_DIR}/{matrix.path.name}", str(Path(matrix.path).resolve()), type="bind",
                    read_only=True),
              Mount(OUT, str(out), type="bind", read_only=False),
              Mount(ENVS, str(envs), type="bind", read_only=False)]
    package_env, shared_paths, ca = package_settings(environ)
    for path in shared_paths:
        mounts.append(Mount(path, path, type="bind", read_only=True))  # same path: the settings name it
    env = {"PYTHONPATH": _pythonpath(environ), "PYTHONPYCACHEPREFIX": f"{ENVS}/pycache", "HOME": "/tmp",
           "UV_CACHE_DIR": f"{ENVS}/uv-cache", "UV_PYTHON_DOWNLOADS": "never",  # the image's own Python only
           "OMP_NUM_THREADS": environ.get("OMP_NUM_THREADS", "1"),
           "HARNESS_IMAGE": image.ref, "HARNESS_IMAGE_ID": image.id, "HARNESS_IMAGE_DIGEST": image.digest,
           "HARNESS_IMAGE_REPO_DIGESTS": ",".join(image.repo_digests), "HARNESS_REVISION": project_revision() or "",
           **package_env, **{k: environ[k] for k in FORWARD if k in environ}}
    if ca:  # a TLS-intercepting proxy's CA, as the host trusts it
        mounts.append(Mount(CA_BUNDLE, ca, type="bind", read_only=True))
    env.update(opts.extra_env)

    device, devices, requests, groups = cell.axes["device"], [], [], set()
    if device == "cuda":
        requests.append(DeviceRequest(count=-1, capabilities=[["gpu"]]))
    elif device == "npu":
        root = Path(host)
        nodes = sorted(glob.glob(str(root / "dev" / "davinci[0-9]*")))
        nodes += [str(root / n.lstrip("/")) for n in NPU_NODES]
        for node in (n for n in nodes if os.path.exists(n)):
            inside = "/" + os.path.relpath(node, root)
            devices.append(f"{node}:{inside}:rwm")
            groups.add(os.stat(node).st_gid)  # device nodes belong to the driver's group (HwHiAiUser)
        for path in NPU_MOUNTS:
            if (root / path.lstrip("/")).exists():
                mounts.append(Mount(path, str(root / path.lstrip("/")), type="bind", read_only=True))

    tag = hashlib.sha256(str(out).encode()).hexdigest()[:8]
    command = ["python3", "-m", "harness.envs.incontainer", f"{ENVS}/bootstrap/{cell.id}",
               "run", f"{MATRIX_DIR}/{matrix.path.name}", "--cells", cell.id, "--out", OUT,
               "--env-root", f"{ENVS}/cells", "--no-report", "--no-index-check", "--jobs", "1",
               "--retries", str(opts.retries), "--seed", str(opts.seed), "--under-host-lock"]
    command += ["--steps", str(opts.steps)] if opts.steps is not None else []
    command += ["--timeout", str(opts.timeout)] if opts.timeout else []
    command += ["--checks", *opts.checks] if opts.checks else []
    command += ["--redo"] if opts.redo else []
    command += [] if opts.reuse else ["--no-reuse"]
    command += [] if opts.fork else ["--no-fork"]
    uid, gid = os.getuid(), os.getgid()
    return {"command": command, "name": f"harness-{tag}-{cell.id}", "labels": {"qwen35-harness.cell": cell.id},
            "mounts": mounts, "environment": env, "working_dir": OUT, "user": f"{uid}:{gid}",
            "group_add": sorted(groups - {gid}) if uid else [], "devices": devices, "device_requests": requests,
            "privileged": False, "init": True, "shm_size": "8g", "detach": True}


def find_image(docker, client, ref: str) -> Image:
    """The image the matrix names, from this engine, else pulled from its registry."""
    try:
        found = client.images.get(ref)
    except docker.errors.ImageNotFound:
        try:
            found = client.images.pull(ref)  # public images (CANN) come from their registry
        except docker.errors.DockerException as exc:
            raise docker.errors.DockerException(f"image {ref!r} is not on this engine and pulling it failed: "
                                                f"{exc}") from None
    return Image(ref, found.id, tuple(found.attrs.get("RepoDigests") or ()))


class LocalImageUnavailable(RuntimeError):
    """The image cannot be made here; the message says why and what would fix it."""


def build_rootfs(dest: Path = ROOTFS) -> Path:
    """A bookworm root file system with Python 3.11 and venv, as a tarball for `docker import` (LOCAL_IMAGE)."""
    tool = shutil.which("debootstrap")
    if tool is None:
        raise LocalImageUnavailable("debootstrap is not installed (Debian: apt-get install debootstrap)")
    if os.geteuid() != 0:
        raise LocalImageUnavailable("debootstrap needs root")
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=dest.parent))
    try:
        done = subprocess.run([tool, "--variant=minbase", "--include=python3,python3-venv", "bookworm",
                               str(work / "root")], capture_output=True, text=True, timeout=1500, check=False)
        if done.returncode != 0:
            raise LocalImageUnavailable(f"debootstrap bookworm failed with status {done.returncode} (is a Debian "
                                        f"mirror reachable?): {' | '.join(done.stdout.splitlines()[-5:])}")
        # The .debs debootstrap keeps and the docs are a third of the tree and nothing needs them.
        subprocess.run(["tar", "-C", str(work / "root"), "-cf", str(work / "rootfs.tar"),
                        "--exclude=./var/cache/apt/archives/*.deb", "--exclude=./usr/share/doc",
                        "--exclude=./usr/share/man", "--exclude=./usr/share/locale", "."], check=True)
        os.replace(work / "rootfs.tar", dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return dest


def ensure_local_image(client, ref: str = LOCAL_IMAGE):
    """The image `ref` on the engine of docker `client`: found, or imported from the (cached) root fs."""
    import docker

    try:
        return client.images.get(ref)
    except docker.errors.ImageNotFound:
        pass
    if not ROOTFS.exists():
        build_rootfs(ROOTFS)
    name, tag = ref.rsplit(":", 1)
    client.api.import_image(src=str(ROOTFS), repository=name, tag=tag)
    return client.images.get(ref)
