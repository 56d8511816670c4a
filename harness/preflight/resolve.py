"""One cell's install verdict and lock, from uv's resolver run for the runner's platform and Python.

The verdicts are plain words, the ones the report and the setup findings use (INSTALLS, CONFLICT, NEEDS_BUILD,
NOT_ON_RUNNER, and UNKNOWN when the resolver could not answer).

`uv pip compile` reads only metadata (wheel METADATA files, served apart from the wheels by the index): no
wheel is downloaded, so a CUDA or Ascend cell resolves on a CPU machine in seconds. The cell's pins are never
built (`--only-binary` each): a pin that is a source release only is named, not built. (uv's `--no-build` for
every package is not used: it refuses dependencies declared with a platform marker, llguidance under vLLM,
even where their wheels fit.) Its failures say what kind of problem it is, in uv's words:

- "X==V has no usable wheels" (a source release only): the pin needs a build on the runner; the rest of the
  pins are resolved without it, so a conflict among them is still found.
- "X==V has no wheels with a matching platform tag": wheels for other platforms and no source release.
- any other "No solution found": the pins cannot be installed together, and uv's "cause" says why.

Pins that the cell's install recipe builds from source (vLLM for no device, under vllm-ascend) are never
resolved from their wheels, which are another build: they are named as needing a build on the runner.
"""
from __future__ import annotations

import re
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from harness.envs import cellenv
from harness.matrix import Cell
from harness.matrix.recipe import InstallRecipe

DEFAULT_GLIBC = "2_28"  # the manylinux the runners' wheels are chosen for (uv's --python-platform)
_IMAGE_PYTHON = re.compile(r"[-_]py(3)\.?(\d{1,2})(?:$|[-_.])")
_PIN = r"(?P<pin>[A-Za-z0-9._-]+==[A-Za-z0-9.+!_-]+)"
_SOURCE_ONLY = re.compile(_PIN + r" has no usable wheels")
_OTHER_PLATFORMS = re.compile(_PIN + r" has no wheels with a matching [A-Za-z ]*tag")
_AVAILABLE_ON = re.compile(
    r"Wheels are available for `[^`]+` \([^)]*\) on the following platforms?: (?P<tags>.+)")
METHOD = "pins-only-binary/1"  # how resolutions are made: part of the cache key, so a change forgets old answers
UNRESOLVABLE = ("No solution found", "unsatisfiable")  # uv's words for a conflict (as harness/execution/run.py)
TIMEOUT_S = 300.0
NO_SUCH_RELEASE = "0+excluded.by.harness"  # a version no index holds (a local label): see unrequired

INSTALLS = "installs"
CONFLICT = "cannot be installed together"  # the resolver's reason follows
NEEDS_BUILD = "needs a build on the runner"  # a pin is a source release only (or the recipe builds it)
NOT_ON_RUNNER = "not installable on this runner"  # a pin has wheels for other platforms and no source release
UNKNOWN = "pre-flight failed"  # the resolver could not answer (index unreachable): no verdict, the runner decides

ALL = (INSTALLS, CONFLICT, NEEDS_BUILD, NOT_ON_RUNNER, UNKNOWN)
# What the nightly still dispatches: the runner can build what needs a build, and an unanswered cell is tried.
DISPATCHED = (INSTALLS, NEEDS_BUILD, UNKNOWN)


@dataclass(frozen=True)
class Target:
    """Where the cell would be installed: uv's --python-platform and --python-version."""

    platform: str
    python: str

    def __str__(self) -> str:
        return f"{self.platform}, Python {self.python}"


@dataclass
class Resolution:
    verdict: str
    reason: str  # one line: what the verdict rests on
    lock: str  # `name==version` lines of what resolved ("" when nothing did)
    built: list[str] = field(default_factory=list)  # pins that need a build on the runner
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "reason": self.reason, "lock": self.lock, "built": list(self.built),
                "seconds": self.seconds}

    @classmethod
    def from_dict(cls, data: dict) -> Resolution:
        return cls(str(data["verdict"]), str(data["reason"]), str(data["lock"]), [str(p) for p in data["built"]],
                   float(data.get("seconds", 0.0)))


def counted(verdict: str, count: int) -> str:
    """'1 installs', '2 install', '37 need a build on the runner': a count of cells with the verb agreeing."""
    if count != 1:
        verdict = {INSTALLS: "install", NEEDS_BUILD: "need a build on the runner"}.get(verdict, verdict)
    return f"{count} {verdict}"


def image_python(image: str | None) -> str | None:
    """The Python an image's tag names (cann:9.1.0-910b-ubuntu22.04-py3.12 -> 3.12), else None."""
    match = _IMAGE_PYTHON.search(image.rsplit(":", 1)[-1]) if image and ":" in image else None
    return f"{match[1]}.{match[2]}" if match else None


def target_for(cell: Cell, default_python: str, glibc: str = DEFAULT_GLIBC) -> Target:
    """The cell's runner platform (aarch64 where its runner label says so) and Python (the cell's own, its
    image's, else `default_python`)."""
    arch = "aarch64" if re.search(r"aarch64|arm64", cell.runner) else "x86_64"
    python = cell.python or image_python(cell.axes.get("image")) or default_python
    return Target(f"{arch}-manylinux_{glibc}", python)


def cell_pins(cell: Cell) -> list[str]:
    """What the runner installs from the index: the cell's pins, where its recipe reinstalls one from the index
    alone (harness/matrix/recipe.py) that pin instead."""
    again = {_name(p) for p in cell.install.from_index}
    return [r for r in cell.requirements if _name(r) not in again] + list(cell.install.from_index)


def _name(pin: str) -> str:
    return canonicalize_name(Requirement(pin).name)


def _cause(stderr: str) -> str:
    """uv's explanation on one line: its `cause:` paragraph (else its last error line) and any hint."""
    text = stderr.strip()
    cause = text.split("cause:", 1)[1] if "cause:" in text else text.splitlines()[-1] if text else "no output"
    cause, _, hint = cause.partition("hint:")
    available = _AVAILABLE_ON.search(hint)
    line = " ".join(cause.split())
    return f"{line} ({' '.join(available['tags'].split())})" if available else line


def runner_env() -> dict[str, str]:
    """uv's environment for a lock of another machine: the index and find-links as the harness uses them, without
    this machine's own pip constraints (a cap such as torch<=2.14.1 here says nothing about a GPU runner)."""
    env = cellenv.uv_process_env()
    for key in ("UV_CONSTRAINT", "PIP_CONSTRAINT"):
        env.pop(key, None)
    return env


def compile_lock(requirements: list[str], target: Target, overrides: tuple[str, ...] = ()) -> tuple[int, str, str]:
    """(status, lock, stderr) of uv's resolution of `requirements` for `target`, none of them built; `overrides`:
    the lines of the cell recipe's override file (its `exclude`, as the cell's install applies it)."""
    never_built = [arg for pin in requirements for arg in ("--only-binary", Requirement(pin).name)]
    argv = [cellenv.uv_binary(), "pip", "compile", "-", "--python-platform", target.platform, "--python-version",
            target.python, *never_built, "--quiet", "--no-header", "--no-annotate", "--color", "never"]
    with tempfile.TemporaryDirectory(prefix="preflight-") as folder:
        argv += cellenv.uv_override_args(overrides, Path(folder, "overrides.txt"))
        # No preexec_fn (die_with_parent): preflight resolves from a thread pool, and a preexec_fn runs Python in the
        # forked child of a threaded process, which first clears the other threads' state; with torch loaded (the
        # test suite's workers) that ran a process group's destructor in the child, which never returned. The
        # resolution ends by itself within TIMEOUT_S.
        try:
            done = subprocess.run(argv, input="\n".join(requirements) + "\n", capture_output=True, text=True,
                                  env=runner_env(), timeout=TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            return 124, "", f"uv pip compile did not finish within {TIMEOUT_S:.0f} s"
    return done.returncode, done.stdout, done.stderr


def unrequired(requirements: list[str], exclude: tuple[str, ...], target: Target,
               compile=compile_lock) -> list[str]:
    """The names of a recipe's `exclude` that nothing in the resolution of `requirements` requires (a misspelt name
    excludes nothing, in silence). Each is asked of the resolver on its own: the other names left out as the cell
    leaves them out, this one overridden to a release that cannot exist. A resolution that still succeeds never
    needed it; one that fails, for that reason or another, is not taken as proof of anything."""
    found = []
    for name in exclude:
        others = InstallRecipe(exclude=tuple(n for n in exclude if n != name)).overrides()
        status, _, _ = compile(requirements, target, (*others, f"{name}=={NO_SUCH_RELEASE}"))
        if status == 0:
            found.append(name)
    return found


def resolve(requirements: list[str], from_source: tuple[str, ...], target: Target, compile=compile_lock,
            source_only: set[str] | None = None) -> Resolution:
    """The verdict and lock of one cell's pins (`requirements`) and its recipe's source builds. `source_only`:
    pins already found to be source releases (by other cells of the run), set aside without asking again;
    those found here are added to it."""
    start = time.perf_counter()
    source_only = set() if source_only is None else source_only
    known = [r for r in requirements if r in source_only]
    built = list(from_source) + known
    wanted = [r for r in requirements if _name(r) not in {_name(p) for p in from_source} and r not in known]
    while True:
        status, lock, stderr = compile(wanted, target)
        flat = " ".join(stderr.split())  # uv wraps its sentences at the terminal's width (COLUMNS)
        if status == 0:
            verdict = NEEDS_BUILD if built else INSTALLS
            reason = (f"{', '.join(built)} built on the runner; the other pins resolve for {target}" if built
                      else f"{len(lock.splitlines())} packages resolve for {target}")
            return Resolution(verdict, reason, lock, built, round(time.perf_counter() - start, 3))
        other = _OTHER_PLATFORMS.search(flat)
        unbuilt = _SOURCE_ONLY.search(flat)
        if other:
            return Resolution(NOT_ON_RUNNER, _cause(stderr), "", built, round(time.perf_counter() - start, 3))
        pinned = [r for r in wanted if unbuilt and _name(r) == _name(unbuilt["pin"])]
        if pinned:  # resolve the rest without it: a conflict among them still shows
            wanted.remove(pinned[0])
            built.append(pinned[0])
            source_only.add(pinned[0])
            continue
        if unbuilt:  # a dependency, not a pin, is a source release: the rest cannot be resolved without it
            return Resolution(NEEDS_BUILD, f"{unbuilt['pin']} (a dependency) is a source release only: "
                              f"{_cause(stderr)}", "", [*built, unbuilt["pin"]], round(time.perf_counter() - start, 3))
        verdict = CONFLICT if any(word in flat for word in UNRESOLVABLE) else UNKNOWN
        return Resolution(verdict, _cause(stderr), "", built, round(time.perf_counter() - start, 3))
