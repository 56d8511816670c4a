"""Axis values read from another pin's declared requirements when a matrix expands, so that no matrix
copies them by hand: `torch = "as-pinned-by-vllm"` is the torch release each cell's vLLM release pins
exactly (Requires-Dist: torch==2.14.0), a conflict-free crossing by construction. In a row that names an
extra of its source (`verl_extra = "cpu"`), the pin is read as that extra installs it: `transformers =
"as-pinned-by-verl"` is the transformers==5.9.0 that verl 0.9.1 declares for `extra == "cpu"`.

The requirements come from the releases' wheel metadata (metadata.py), cached beside the matrices
(matrices/metadata/, each file with the index it was read from and the date) and read from the index only
when a release is not there yet, so a checkout expands its matrices the same way without the network.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from packaging.version import Version

from . import axes as ax
from . import sources, symbols

_DERIVED = re.compile(r"^as-pinned-by-([a-z_]+)$")
CACHE_DIR = "metadata"  # beside the matrix file


def source_axis(value: str) -> str | None:
    """The axis an `as-pinned-by-AXIS` value reads from, or None for any other value."""
    match = _DERIVED.match(value)
    return match.group(1) if match else None


def is_valid(value: str) -> bool:
    return source_axis(value) in ax.PACKAGE_AXES


class Declarations:
    """Releases' declared requirements for one matrix file: read from the index only when a value needs them
    (the cache beside the matrix first), for its derived values and its rows' crossings (crossing.py)."""

    def __init__(self, matrix_path: Path):
        self.cache = matrix_path.parent / CACHE_DIR
        self._resolver = None

    @property
    def resolver(self):
        from .index import PackageIndex
        from .metadata import MetadataSource
        from .newest import Resolver

        if self._resolver is None:  # the index is opened only when a release's requirements are not cached
            index = PackageIndex()
            self._resolver = Resolver(index, MetadataSource(index, self.cache, per_index=False), limits={})
        return self._resolver

    @property
    def metadata(self):
        return self.resolver.metadata

    def requirement_on(self, distribution: str, version: str, target: str, python: str, extra: str = ""):
        return self.resolver.requirement_on(distribution, version, target, python, extra)

    def exact(self, source: str, version: str, target: str, python: str, extra: str = "") -> str:
        """The exact `target` release `source` `version` declares (in its `extra` when named); ValueError, with what
        it declares instead, when it pins none."""
        spec = self.requirement_on(source, version, target, python, extra)
        exact = [s for s in spec or () if s.operator in ("==", "===") and "*" not in s.version]
        if not exact:
            named = f"{source}[{extra}]" if extra else source
            raise ValueError(f"{named} {version} declares {target}{spec or ' nothing'}, not one exact release")
        return Version(exact[0].version).public


def substitute(combos: dict[str, dict[str, str]], extra_for: dict[str, tuple], python: str | None,
               lookup: Callable[..., str], fail: Callable[[str, str], Exception]) -> dict[str, tuple[str, ...]]:
    """Replace every derived value in `combos` (cell id -> axes) by the release it names, re-keying the cells;
    returns the derived axes of each cell that has some, by its new id.
    `lookup(source distribution, its version, target distribution, python, extra)` (Declarations.exact)."""
    from .newest import harness_python

    derived_of: dict[str, tuple[str, ...]] = {}
    for cid in list(combos):
        axes = combos[cid]
        derived = {a: source_axis(v) for a, v in axes.items() if a in ax.PACKAGE_AXES and source_axis(v)}
        if not derived:
            continue
        for axis, source in derived.items():
            if source not in axes or source_axis(axes[source]):
                raise fail(axis, f"{axes[axis]!r}: the cell has no {source} release to read it from")
            if sources.is_source(axes[source]) or symbols.parse(axes[source]):
                raise fail(axis, f"{axes[axis]!r}: {source} {axes[source]!r} is no release on the index whose "
                                 "declared requirements can be read (name a release)")
            try:
                axes[axis] = lookup(ax.PACKAGE_AXES[source], axes[source], ax.PACKAGE_AXES[axis],
                                    axes.get(ax.PYTHON_AXIS) or python or harness_python(),
                                    ax.extras_of(axes).get(source, ""))
            except ValueError as exc:
                raise fail(axis, str(exc)) from None
        new = ax.cell_id(axes)
        if new != cid and new in combos:
            raise fail(next(iter(derived)), f"cell {new} is made twice: once with {next(iter(derived))} named, "
                                            "once read from its pins")
        combos[new] = combos.pop(cid)
        extra_for[new] = extra_for.pop(cid)
        derived_of[new] = tuple(sorted(derived))
    return derived_of
