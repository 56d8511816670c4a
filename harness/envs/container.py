"""Run one cell inside its container image (`image` axis) through the docker Python SDK.

Nothing is built on the host. The container gets the repository read-only at /harness/src (importable
through PYTHONPATH), the results directory writable at /harness/out, a writable env directory under the
env root at /harness/envs (bootstrap venv, cell venv and uv cache: a second run reuses them), this
machine's pip find-links, constraint files and CA bundle read-only, and the cell's devices (never
privileged). Inside, `harness.envs.incontainer` runs `harness run` for that one cell, which writes the cell
file as on the host; the image name, id and digests reach its environment capture.
"""
from __future__ import annotations

import contextlib
import glob
import hashlib
import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from harness import checks
from harness.errors import EnvironmentMissing
from harness.results import records
from harness.results.records import CellResult, CheckResult, Status, combine_checks, kept_results, load_cell
from trainers.runtime import determinism

from . import pipconfig
from .cellenv import PROJECT_ROOT, tail
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
SETUP_BUDGET = 3600.0  # seconds for bootstrap and the cell's install, on top of the checks' own timeouts
TAIL_LINES = 200
_LIVE: set = set()  # containers this process waits on, for stop_all()
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()


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


def budget(cell, matrix, opts) -> float:
    """Wall-time limit of the whole container: setup plus every check's timeout on every try."""
    names = opts.checks or cell.checks
    per = [opts.timeout or matrix.timeout or checks.CHECKS[n].timeout for n in names if n in checks.CHECKS]
    return SETUP_BUDGET + sum(per) * (opts.retries + 1)


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


def _image(docker, client, ref: str) -> Image:
    try:
        found = client.images.get(ref)
    except docker.errors.ImageNotFound:
        try:
            found = client.images.pull(ref)  # public images (CANN) come from their registry
        except docker.errors.DockerException as exc:
            raise docker.errors.DockerException(f"image {ref!r} is not on this engine and pulling it failed: "
                                                f"{exc}") from None
    return Image(ref, found.id, tuple(found.attrs.get("RepoDigests") or ()))


def stop_all() -> None:
    """Stop and remove every container this process waits on, and start no more: an interrupted
    parallel run (the interrupt reaches only the main thread; workers wait on their containers)."""
    _STOPPING.set()
    with _LIVE_LOCK:
        boxes = list(_LIVE)
    for box in boxes:
        with contextlib.suppress(Exception):
            box.stop(timeout=10)
            box.remove(force=True)


def _run(docker, client, image: Image, kwargs: dict, limit: float) -> tuple[int | None, str]:
    """(exit status or None past the limit, output tail); the container is removed whatever happens."""
    import requests

    with contextlib.suppress(docker.errors.NotFound):
        client.containers.get(kwargs["name"]).remove(force=True)  # left by a run killed with SIGKILL
    box = client.containers.create(image.id, **kwargs)
    with _LIVE_LOCK:
        _LIVE.add(box)
    try:
        if _STOPPING.is_set():
            raise KeyboardInterrupt
        box.start()
        try:
            code = box.wait(timeout=limit)["StatusCode"]
        except requests.exceptions.ReadTimeout:
            code = None
            box.stop(timeout=10)
        if _STOPPING.is_set():
            raise KeyboardInterrupt  # stopped by stop_all(): no result to record
        return code, box.logs(tail=TAIL_LINES).decode("utf-8", "replace")
    except BaseException:  # KeyboardInterrupt (and SIGTERM, which the CLI turns into one) included
        with contextlib.suppress(Exception):
            box.stop(timeout=10)
        raise
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(box)
        with contextlib.suppress(Exception):
            box.remove(force=True)


def run_cell(cell, matrix, opts, earlier: CellResult | None = None) -> CellResult:
    """Run the cell in its image; a failure of the engine, image or container becomes an infra error."""
    docker = sdk()
    import requests


    path, rel_log = records.cell_path(opts.out_dir, cell.id), f"cells/{cell.id}/logs/setup.log"
    before = path.stat().st_mtime_ns if path.exists() else None
    started, start = records.now(), time.perf_counter()
    image, code, output, reason = None, None, "", ""
    Path(opts.out_dir, rel_log).parent.mkdir(parents=True, exist_ok=True)
    (Path(opts.env_root) / "containers").mkdir(parents=True, exist_ok=True)
    try:
        try:
            client = docker.from_env(timeout=300)
        except docker.errors.DockerException as exc:
            where = os.environ.get("DOCKER_HOST") or "the default socket"
            raise docker.errors.DockerException(f"no docker engine reachable at {where}: {exc}") from None
        image = _image(docker, client, cell.axes["image"])
        limit = budget(cell, matrix, opts)
        code, output = _run(docker, client, image, run_args(cell, matrix, opts, image), limit)
        if code is None:
            reason = f"the container ran past its limit of {limit:.0f} s and was stopped"
    except (docker.errors.DockerException, requests.exceptions.RequestException, OSError) as exc:
        reason = f"{type(exc).__name__}: {exc}"
    with open(Path(opts.out_dir) / rel_log, "a", encoding="utf-8") as log:
        log.write(f"\n== container for {cell.id}: image {cell.axes['image']} "
                  f"({image.id if image else 'unavailable'}), exit status {code}\n{reason}\n"
                  f"== container output (last {TAIL_LINES} lines)\n{output}\n")
    if not reason and code == 0 and path.exists() and path.stat().st_mtime_ns != before:
        try:
            return load_cell(path)
        except ValueError as exc:
            reason = str(exc)
    if not reason:
        reason = f"the container exited with status {code} without a cell result: " \
                 f"{tail(Path(opts.out_dir) / rel_log)[-2500:]}"
    result = CellResult(matrix.name, cell.id, dict(cell.axes), list(cell.tags), started=started, setup_log=rel_log,
                        environment={"image": cell.axes["image"], "image_id": image.id if image else None,
                                     "image_digest": image.digest if image else None,
                                     "install": cell.install_order()})
    wanted = opts.checks or cell.checks
    result.checks = combine_checks(wanted, kept_results(earlier, wanted, opts.redo), lambda name: CheckResult(
        name, Status.ERROR, f"container: {reason}", log=rel_log, failure_class="infra"))
    result.finished = records.now()
    result.duration = round(time.perf_counter() - start, 3)
    records.write_json_atomic(path, result.to_dict())
    return result
