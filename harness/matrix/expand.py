"""Matrix files: load a TOML file, validate every key, expand it into cells deterministically.

The matrix is data. This module turns it into `Cell` records and reports every problem as an
`InputError` naming the file, the key (and line where it can be found) and what was expected.
"""
from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
import re
import tomllib
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

from harness.checks import CHECKS, VERDICTS, gives_verdict
from harness.errors import InputError

from . import axes as ax
from . import crossing, derived, sources, symbols
from .recipe import InstallRecipe, RecipeError
from .recipe import parse as parse_recipe
from .rules import KnownFailure, Note, RuleError, Selector, StandingRule, TagRule

TOP_KEYS = {"matrix", "axes", "include", "exclude", "tags", "runners", "known_failures", "notes", "standing"}
BENCHMARK_RE = re.compile(r"^[a-z][a-z0-9-]{0,40}$")
MATRIX_KEYS = {"name", "description", "checks", "timeout", "runner", "python", "memory_limit_mb", "offline",
               "max_ranks", "benchmarks"}
# The numeric [matrix] keys' ranges: what `run --timeout` allows, an address-space cap that fits the system's
# limit (bytes in 63 bits), and more ranks than any check starts.
MAX_TIMEOUT_S = 7 * 24 * 3600
MAX_MEMORY_MB = 2**30  # 1 PiB
MAX_RANKS = 4096
RULE_KEYS = {"tags": {"tag", "when"}, "runners": {"label", "when"},
             "known_failures": {"check", "verdict", "when", "reason", "link", "expires"}, "notes": {"text", "when"},
             "standing": {"check", "verdict", "ours", "upstream", "when"}}
NAME_LIMIT = 200  # a [[standing]] rule's `ours` and `upstream`: a name, shown in the report


@dataclass(frozen=True)
class Cell:
    matrix: str
    id: str
    axes: dict[str, str]
    tags: tuple[str, ...]
    checks: tuple[str, ...]
    known_failures: tuple[KnownFailure, ...] = ()
    runner: str = ""  # the CI runner label this cell needs (matrix default, or a [[runners]] rule)
    extra_requirements: tuple[str, ...] = ()  # undeclared dependencies of the pins (from [[include]])
    python: str | None = None  # the interpreter version it names (axis, else [matrix] python); None: the harness's
    install: InstallRecipe = InstallRecipe()  # steps after the pins are installed (from [[include]])
    resolved: tuple = ()  # newest.Resolution per axis whose symbol (`newest`...) was resolved at run start
    max_ranks: int | None = None  # [matrix] max_ranks: the most ranks one check may start (None: no limit)
    derived_axes: tuple[str, ...] = ()  # axes read from another release's declared pins (as-pinned-by-AXIS)

    def symbolic_axes(self) -> dict[str, str]:
        """Package axes whose value is a symbol such as `newest`, not yet resolved."""
        return {a: v for a, v in self.axes.items() if a in ax.PACKAGE_AXES and symbols.parse(v)}

    @property
    def requirements(self) -> list[str]:
        return ax.requirements(self.axes) + list(self.extra_requirements)

    def install_order(self) -> list[str]:
        """The commands that install this cell, in order (its pins, then its install recipe), inside its image
        when it names one."""
        image = [f"in the image {self.axes['image']}:"] if self.axes.get("image") else []
        return image + self.install.install_order(self.requirements, self.python)

    def install_record(self) -> dict:
        """How a result records the row's install: its install order and, in a row that crosses a package's declared
        range (verl's), its pins in install order and those outside that range (installed through the override)."""
        record: dict = {"install": self.install_order()}
        if any(axis in self.axes for axis in ax.CROSSED_AXES):
            record["requirements"] = self.requirements
            record["outside_range"] = [o.to_dict() for o in self.install.outside]
        return record

    def pinned_releases(self, written_only: bool = False) -> dict[str, str]:
        """Distribution -> exact version of every release this cell pins (axes and extra pins); `written_only`:
        without the pins read from another release's declarations (as-pinned-by-AXIS), which are that release's."""
        pins = {dist: self.axes[axis] for axis, dist in ax.PACKAGE_AXES.items()
                if axis in self.axes and not sources.is_source(self.axes[axis])  # a git source is no release
                and not (written_only and axis in self.derived_axes)}
        for value in self.extra_requirements:
            req = Requirement(value)  # validated as an exact pin when the matrix was loaded
            pins[req.name] = next(iter(req.specifier)).version
        return {**pins, **self.install.pins()}


@dataclass
class Matrix:
    path: Path
    name: str
    description: str
    checks: tuple[str, ...]
    timeout: float | None  # per check; None: each check's own default
    runner: str
    python: str | None
    memory_limit_mb: int | None
    cells: list[Cell]
    notes: list[Note] = field(default_factory=list)
    known_failures: list[KnownFailure] = field(default_factory=list)  # all of them: resolved cells match again
    # The comparisons against a named upstream component ([[standing]]): the only failures the report may state
    # once as standing findings (harness/report/standing_findings.py)
    standing: list[StandingRule] = field(default_factory=list)
    # An air-gapped box's matrix: run there with `run --here --wheelhouse`, never dispatched as nightly cells
    offline: bool = False
    benchmarks: tuple[str, ...] = ()  # an offline run's benchmarks (harness.offline.benchmarks), after its rows

    def locate(self, distribution: str, version: str) -> str:
        """'FILE, line N' of the line that pins `version` (preferring one that names the package)."""
        lines = self.path.read_text(encoding="utf-8").splitlines()
        quoted = (f'"{version}"', f"'{version}'", f"=={version}")
        hits = [n for n, line in enumerate(lines, 1) if any(q in line for q in quoted)]
        named = [n for n in hits if distribution.replace("-", "_") in lines[n - 1].replace("-", "_")]
        line = (named or hits or [0])[0]
        return f"{self.path}, line {line}" if line else str(self.path)

    def select(self, ids: list[str] | None = None, tags: list[str] | None = None) -> list[Cell]:
        """Cells with any of `ids` and any of `tags`; an id or tag that matches nothing is an error."""
        cells = self.cells
        if ids:
            known = {c.id for c in cells}
            missing = [i for i in ids if i not in known]
            if missing:
                raise InputError(f"{self.path}: no cell {missing[0]!r}; run `python -m harness matrix list "
                                 f"{self.path}` to see the ids")
            cells = [c for c in cells if c.id in ids]
        if tags:
            present = {t for c in self.cells for t in c.tags}
            missing = [t for t in tags if t not in present]
            if missing:
                raise InputError(f"{self.path}: no cell has tag {missing[0]!r}; tags: {', '.join(sorted(present))}")
            cells = [c for c in cells if set(tags) & set(c.tags)]
        if not cells:
            raise InputError(f"{self.path}: the selection matches no cell")
        return cells


_HEADER = re.compile(r"^[ \t]*\[\[?[ \t]*([A-Za-z0-9_\-]+)[ \t]*\]\]?", re.M)


def _line_of(text: str, where: str) -> str:
    """' (line N)' for the line `where` names ("include[1].model", "axes.torch", "tags[2]"), to point a
    person at it: the key inside that table (the N-th [[section]] for an index), else the table's
    header; '' if not found."""
    head, *keys = where.split(".")
    match = re.fullmatch(r"(\w+)(?:\[(\d+)\])?", head)
    headers = list(_HEADER.finditer(text))
    blocks = [h for h in headers if match and h.group(1) == match.group(1)]
    index = int(match.group(2) or 0) if match else 0
    start, end = 0, len(text)
    if len(blocks) > index:
        start = blocks[index].start()
        end = next((h.start() for h in headers if h.start() > start), len(text))
    else:
        keys = [head.split("[")[0], *keys]  # a top-level key, not a table
    for key in reversed(keys):  # the innermost key that can be found
        hit = re.search(rf"(?:^|[{{,\s])\[*\s*(?P<key>{re.escape(key.split('[')[0])})\s*[=\]]", text[start:end], re.M)
        if hit:
            return f" (line {text.count(chr(10), 0, start + hit.start('key')) + 1})"
    return f" (line {text.count(chr(10), 0, start) + 1})" if len(blocks) > index else ""


class _Loader:
    def __init__(self, path: Path, text: str):
        self.path, self.text = path, text

    def error(self, where: str, what: str) -> InputError:
        return InputError(f"{self.path}{_line_of(self.text, where)}: {where}: {what}")

    def unknown_keys(self, table: dict, allowed: set[str], where: str) -> None:
        for key in table:
            if key not in allowed:
                raise self.error(f"{where}.{key}" if where else key,
                                 f"unknown key; expected one of {', '.join(sorted(allowed))}")

    def axis_values(self, axis: str, values: Any, where: str) -> list[str]:
        if isinstance(values, str):
            values = [values]
        if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
            raise self.error(where, "expected a non-empty list of strings")
        if axis in ax.PACKAGE_AXES:
            values = [v for value in values for v in (symbols.expand(value) or [value])]
            for value in values:
                if axis in sources.SOURCE_AXES and sources.is_source(value):
                    try:
                        sources.parse_for(axis, value)
                    except sources.SourceError as exc:
                        raise self.error(where, str(exc)) from None
                    continue
                if derived.source_axis(value) is not None:
                    if not derived.is_valid(value) or where == "axes" or where.startswith("axes."):
                        raise self.error(where, f"{value!r}: expected as-pinned-by-AXIS in an [[include]], AXIS "
                                                f"one of {', '.join(ax.PACKAGE_AXES)}")
                    continue
                if symbols.looks_symbolic(value):
                    if not symbols.parse(value):
                        raise self.error(where, f"{value!r} is not a release rank; expected {symbols.SYNTAX}")
                    continue
                try:
                    version = Version(value)
                except InvalidVersion:
                    raise self.error(where, f"{value!r} is not a valid version (expected an exact version "
                                            f"like 5.3.0)") from None
                if str(version) != value and value.lower() != str(version):
                    raise self.error(where, f"{value!r} is not in normal form; write {str(version)!r}")
        elif axis == ax.PYTHON_AXIS:
            bad = [v for v in values if not ax.PYTHON_RE.match(v)]
            if bad:
                raise self.error(where, f"{bad[0]!r} is not a Python version like \"3.12\" or \"3.12.1\"")
        elif axis == ax.IMAGE_AXIS:
            bad = [v for v in values if not ax.IMAGE_RE.match(v)]
            if bad:
                raise self.error(where, f"{bad[0]!r} is not a container image reference")
        elif axis in ax.EXTRA_AXES:
            bad = [v for v in values if not ax.EXTRA_RE.match(v)]
            if bad:
                raise self.error(where, f"{bad[0]!r} is not an extra name of {ax.EXTRA_AXES[axis]} (lower-case "
                                        "letters, digits and single hyphens, e.g. \"cpu\" or \"verl-core\")")
        else:
            bad = [v for v in values if v not in ax.CHOICE_AXES[axis]]
            if bad:
                raise self.error(where, f"{bad[0]!r} is not one of {', '.join(ax.CHOICE_AXES[axis])}")
        twice = next((v for i, v in enumerate(values) if v in values[:i]), None)
        if twice is not None:
            raise self.error(where, f"{twice!r} is listed twice")
        return values

    def axes_table(self, table: Any, where: str) -> dict[str, list[str]]:
        if not isinstance(table, dict):
            raise self.error(where, "expected a table of axis = [values]")
        self.unknown_keys(table, set(ax.ALL_AXES), where)
        return {axis: self.axis_values(axis, values, f"{where}.{axis}") for axis, values in table.items()}

    def requirements(self, values: Any, where: str) -> tuple[str, ...]:
        """Extra requirements for undeclared dependencies: exact `name==version` pins only."""
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            raise self.error(where, "expected a list of requirements like \"einops==0.8.1\"")
        for value in values:
            try:
                req = Requirement(value)
            except InvalidRequirement as exc:
                raise self.error(where, f"{value!r} is not a requirement ({exc})") from None
            specs = list(req.specifier)
            if req.url or req.marker or req.extras or len(specs) != 1 or specs[0].operator != "==":
                raise self.error(where, f"{value!r}: expected an exact pin like einops==0.8.1")
        return tuple(values)

    def recipe(self, table: Any, where: str) -> InstallRecipe:
        """An include's `install` table (see recipe.py); none: nothing to do after the pins."""
        if table is None:
            return InstallRecipe()
        try:
            return parse_recipe(table, where)
        except RecipeError as exc:  # the message names the key; the line is the `install` one
            raise InputError(f"{self.path}{_line_of(self.text, 'install')}: {exc}") from None

    def excluded_pins(self, recipe: InstallRecipe, axes: dict[str, list[str]], extras: tuple[str, ...],
                      where: str) -> None:
        """`exclude` leaves out what the pins pull in, never a pin itself: a row without its own torch would be
        resolved, installed and reported as something it is not."""
        pinned = {canonicalize_name(ax.PACKAGE_AXES[a]): a for a in axes if a in ax.PACKAGE_AXES}
        pinned.update({canonicalize_name(Requirement(r).name): "requirements" for r in extras})
        pinned.update({canonicalize_name(name): "install" for name in recipe.pins()})
        for name in recipe.exclude:
            if canonicalize_name(name) in pinned:
                raise self.error(where, f"{name!r} is pinned by the row ({pinned[canonicalize_name(name)]}); "
                                        "exclude leaves out only what the pins require")

    def selector(self, table: Any, where: str) -> Selector:
        try:
            return Selector.parse(table, where)
        except RuleError as exc:
            key = str(exc).split(":", 1)[0]
            raise self.error(key, str(exc).split(": ", 1)[1]) from None

    def rules(self, data: dict, section: str) -> list[dict]:
        entries = data.get(section, [])
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise self.error(section, f"expected an array of tables ([[{section}]])")
        for i, entry in enumerate(entries):
            if section in RULE_KEYS:
                self.unknown_keys(entry, RULE_KEYS[section], f"{section}[{i}]")
        return entries


def load(path: str | Path) -> Matrix:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"{path}: cannot read matrix file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise InputError(f"{path}: not UTF-8 text (byte {exc.start}); matrix files are TOML, which is UTF-8") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path}: not valid TOML: {exc}") from None
    return _build(path, text, data)


def _build(path: Path, text: str, data: dict) -> Matrix:
    ld = _Loader(path, text)
    ld.unknown_keys(data, TOP_KEYS, "")
    meta = data.get("matrix")
    if not isinstance(meta, dict):
        raise ld.error("matrix", "missing [matrix] table with at least name and checks")
    ld.unknown_keys(meta, MATRIX_KEYS, "matrix")
    name = meta.get("name")
    if not isinstance(name, str) or not ax.TAG_RE.match(name):
        raise ld.error("matrix.name", "expected a short name of letters, digits, '.', '_' or '-'")
    checks = meta.get("checks")
    if not isinstance(checks, list) or not checks or not all(isinstance(c, str) for c in checks):
        raise ld.error("matrix.checks", f"expected a list of check names from: {', '.join(CHECKS)}")
    for check in checks:
        if check not in CHECKS:
            raise ld.error("matrix.checks", f"unknown check {check!r}; expected one of {', '.join(CHECKS)}")
    timeout = meta.get("timeout")  # TOML has nan and inf; a timer takes neither
    if timeout is not None and (not isinstance(timeout, (int, float)) or isinstance(timeout, bool)
                                or not 0 < timeout <= MAX_TIMEOUT_S):
        raise ld.error("matrix.timeout", f"expected seconds above 0 and at most a week ({MAX_TIMEOUT_S}), "
                                         f"got {timeout!r}")
    python = meta.get("python")
    if python is not None and (not isinstance(python, str) or not ax.PYTHON_RE.match(python)):
        raise ld.error("matrix.python", 'expected a Python version such as "3.11" or "3.11.7"')
    memory = meta.get("memory_limit_mb")
    if memory is not None and (not isinstance(memory, int) or isinstance(memory, bool)
                               or not 256 <= memory <= MAX_MEMORY_MB):
        raise ld.error("matrix.memory_limit_mb", f"expected a whole number of MiB from 256 to {MAX_MEMORY_MB}, "
                                                 f"got {memory!r}")
    offline = meta.get("offline", False)
    if not isinstance(offline, bool):
        raise ld.error("matrix.offline", "expected true or false")
    max_ranks = meta.get("max_ranks")
    if max_ranks is not None and (not isinstance(max_ranks, int) or isinstance(max_ranks, bool)
                                  or not 1 <= max_ranks <= MAX_RANKS):
        raise ld.error("matrix.max_ranks", f"expected a whole number of ranks from 1 to {MAX_RANKS}, got {max_ranks!r}")
    benchmarks = meta.get("benchmarks", [])  # the names are checked by the offline run (harness.offline.benchmarks)
    if not isinstance(benchmarks, list) or not all(isinstance(b, str) and BENCHMARK_RE.match(b) for b in benchmarks):
        raise ld.error("matrix.benchmarks", f"expected a list of benchmark names, got {benchmarks!r}")
    if benchmarks and not offline:
        raise ld.error("matrix.benchmarks", "only an offline matrix (offline = true) runs benchmarks with its rows")

    base = ld.axes_table(data.get("axes"), "axes")
    for axis in ("backend", "model", "device"):
        if axis not in base:
            raise ld.error(f"axes.{axis}", "missing; every matrix names its backend, model and device")
    if python is not None and ax.PYTHON_AXIS in base:
        raise ld.error("matrix.python", "unused: [axes] python names every cell's interpreter; keep one of the two")
    products: list[tuple[dict, tuple[tuple[str, ...], InstallRecipe]]] = [(base, ((), InstallRecipe()))]
    for i, entry in enumerate(ld.rules(data, "include")):
        entry = dict(entry)
        extras = ld.requirements(entry.pop("requirements", []), f"include[{i}].requirements")
        recipe = ld.recipe(entry.pop("install", None), f"include[{i}].install")
        axes = {**base, **ld.axes_table(entry, f"include[{i}]")}
        ld.excluded_pins(recipe, axes, extras, f"include[{i}].install.exclude")
        products.append((axes, (extras, recipe)))
    combos, extra_for = _expand(ld, products)  # extra_for: cell id -> (extra pins, install recipe)
    for axes in combos.values():
        orphan = next((e for e, axis in ax.EXTRA_AXES.items() if e in axes and axis not in axes), None)
        if orphan:
            raise ld.error(f"include.{orphan}", f"{axes[orphan]!r}: an extra of {ax.EXTRA_AXES[orphan]}, which the "
                                                "cell does not install")
    declarations = derived.Declarations(path)  # releases' declared requirements, read only where needed
    derived_axes: dict[str, tuple[str, ...]] = {}
    if any(derived.source_axis(v) for axes in combos.values() for v in axes.values()):  # as-pinned-by-AXIS
        derived_axes = derived.substitute(combos, extra_for, python, declarations.exact,
                                          lambda axis, what: ld.error(f"include.{axis}", what))

    defaulted = set()  # rules see [matrix] python as the interpreter of cells that name none; their ids do not
    for cid, axes in combos.items():
        if python is not None and ax.PYTHON_AXIS not in axes:
            axes[ax.PYTHON_AXIS] = python
            defaulted.add(cid)
    _cross(ld, combos, extra_for, declarations)

    for i, entry in enumerate(ld.rules(data, "exclude")):
        selector = ld.selector(entry, f"exclude[{i}]")
        hit = [cid for cid, axes in combos.items() if selector.matches(axes)]
        if not hit:
            raise ld.error(f"exclude[{i}]", f"matches no cell ({selector.describe()})")
        for cid in hit:
            del combos[cid]
    if not combos:
        raise ld.error("exclude", "every cell is excluded")

    tag_rules = _label_rules(ld, data, combos, "tags", "tag")
    runner_rules = _label_rules(ld, data, combos, "runners", "label")
    default_runner = str(meta.get("runner", ""))
    if default_runner and not ax.TAG_RE.match(default_runner):
        raise ld.error("matrix.runner", "expected a runner label of letters, digits, '.', '_' or '-'")

    known = [_known_failure(ld, entry, i, combos, checks) for i, entry in enumerate(ld.rules(data, "known_failures"))]
    standing = [_standing(ld, entry, i, combos, checks) for i, entry in enumerate(ld.rules(data, "standing"))]
    notes = []
    for i, entry in enumerate(ld.rules(data, "notes")):
        if not isinstance(entry.get("text"), str) or not entry["text"].strip():
            raise ld.error(f"notes[{i}].text", "expected the note's text")
        when = ld.selector(entry["when"], f"notes[{i}].when") if "when" in entry else None
        matching = [c for c, a in combos.items() if when is None or when.matches(a)]
        notes.append(Note(entry["text"].strip(), when, matching))

    cells = []
    for cid, axes in combos.items():
        tags = {name, axes["backend"], axes["model"], axes["device"]}
        tags |= {r.tag for r in tag_rules if r.when.matches(axes)}
        runner = next((r.tag for r in reversed(runner_rules) if r.when.matches(axes)), default_runner)
        named = {a: v for a, v in axes.items() if a != ax.PYTHON_AXIS or cid not in defaulted}
        extras, recipe = extra_for[cid]
        # A check that needs an axis (verl-tests: a verl release) is in the cells that carry it only.
        own_checks = tuple(c for c in checks if c not in CHECKS or all(a in axes for a in CHECKS[c].needs_axes))
        cells.append(Cell(name, cid, named, tuple(sorted(tags)), own_checks,
                          tuple(k for k in known if k.when.matches(axes)), runner, extras,
                          axes.get(ax.PYTHON_AXIS), recipe, max_ranks=max_ranks,
                          derived_axes=derived_axes.get(cid, ())))
    return Matrix(path, name, str(meta.get("description", "")), tuple(checks), float(timeout) if timeout else None,
                  default_runner, meta.get("python"), memory, cells, notes, known, standing, offline,
                  tuple(benchmarks))


def _expand(ld: _Loader, products: list[tuple[dict, tuple]]) -> tuple[dict[str, dict[str, str]], dict[str, tuple]]:
    """Every cell of [axes] and each [[include]], once, by id. A cell two products make with the same
    extra pins is one cell; with different ones it is an error (one would be dropped)."""
    made_by: dict[tuple, tuple[int, tuple]] = {}  # the cell's axes -> (product, its extra pins and recipe)
    where = ["axes", *(f"include[{i}]" for i in range(len(products) - 1))]
    for index, (product, extras) in enumerate(products):
        order = [a for a in ax.ALL_AXES if a in product]
        added = 0
        for values in itertools.product(*(product[a] for a in order)):
            key = tuple(zip(order, values))
            if key not in made_by:
                made_by[key], added = (index, extras), added + 1
            elif made_by[key][1] != extras:
                first = made_by[key][0]
                differ = "other extra pins" if made_by[key][1][0] != extras[0] else "another install recipe"
                raise ld.error(where[index], f"cell {_readable_id(dict(key))} is also made by {where[first]} "
                                             f"({_line_of(ld.text, where[first]).strip(' ()')}) with {differ}")
        if index and not added:  # products[0] is [axes]; an include that adds nothing is a mistake
            raise ld.error(where[index], "adds no cell: every combination it names is already in the matrix")
    readable = [ax.cell_id(dict(key)) for key in made_by]
    shared = Counter(readable)
    combos: dict[str, dict[str, str]] = {}
    extra_for: dict[str, tuple] = {}
    for key, plain in zip(made_by, readable):
        # Images with the same readable form (another registry or digest) get a short hash each.
        cid = ax.cell_id(dict(key), qualified=shared[plain] > 1)
        if cid in combos:
            raise ld.error(where[made_by[key][0]], f"two different cells would both be called {cid}")
        combos[cid], extra_for[cid] = dict(key), made_by[key][1]
    return combos, extra_for


def _readable_id(axes: dict[str, str]) -> str:
    """The cell's id, or before its as-pinned-by values are read (derived.py) its id without them and what they
    will be read from: 'fsdp-text-vllm0.18.0-cuda (torch as pinned by vllm)'."""
    pending = {a: derived.source_axis(v) for a, v in axes.items() if a in ax.PACKAGE_AXES and derived.source_axis(v)}
    if not pending:
        return ax.cell_id(axes)
    known = ax.cell_id({a: v for a, v in axes.items() if a not in pending})
    return f"{known} ({', '.join(f'{a} as pinned by {source}' for a, source in pending.items())})"


def _cross(ld: _Loader, combos: dict[str, dict[str, str]], extra_for: dict[str, tuple],
           declarations: derived.Declarations) -> None:
    """Each row's pins outside its crossed packages' declared ranges (verl's), into its recipe's overrides."""
    from .newest import harness_python

    for cid, axes in combos.items():
        if not any(axis in axes for axis in ax.CROSSED_AXES):
            continue
        try:
            outside = crossing.out_of_range(axes, axes.get(ax.PYTHON_AXIS) or harness_python(), declarations)
        except ValueError as exc:
            raise ld.error(f"include.{next(a for a in ax.CROSSED_AXES if a in axes)}", f"cell {cid}: {exc}") from None
        if outside:
            extras, recipe = extra_for[cid]
            extra_for[cid] = (extras, dataclasses.replace(recipe, outside=outside))


def _label_rules(ld: _Loader, data: dict, combos: dict[str, dict[str, str]], section: str,
                 key: str) -> list[TagRule]:
    """[[tags]] and [[runners]]: a label and a `when` selector that must match some cell."""
    rules = []
    for i, entry in enumerate(ld.rules(data, section)):
        label = entry.get(key)
        if not isinstance(label, str) or not ax.TAG_RE.match(label):
            raise ld.error(f"{section}[{i}].{key}", f"expected a {key} of letters, digits, '.', '_' or '-'")
        rule = TagRule(label, ld.selector(entry.get("when"), f"{section}[{i}].when"))
        if not any(rule.when.matches(a) for a in combos.values()):
            raise ld.error(f"{section}[{i}]", f"{key} {label!r} matches no cell ({rule.when.describe()})")
        rules.append(rule)
    return rules


def _known_failure(ld: _Loader, entry: dict, i: int, combos: dict[str, dict[str, str]],
                   checks: list[str]) -> KnownFailure:
    where = f"known_failures[{i}]"
    for key in ("check", "when", "reason", "link", "expires"):
        if key not in entry:
            raise ld.error(f"{where}.{key}", "missing; a known failure needs check, when, reason, link and expires")
    if entry["check"] not in CHECKS:
        raise ld.error(f"{where}.check", f"unknown check {entry['check']!r}; expected one of {', '.join(CHECKS)}")
    if entry["check"] not in checks:
        raise ld.error(f"{where}.check", f"check {entry['check']!r} is not run by this matrix "
                                         f"(matrix.checks: {', '.join(checks)})")
    if not isinstance(entry["reason"], str) or not entry["reason"].strip():
        raise ld.error(f"{where}.reason", "expected a sentence saying why it fails")
    link = entry["link"]
    if not isinstance(link, str) or not re.match(r"^https://[^\s\"'<>]+$", link):
        raise ld.error(f"{where}.link", "expected an https:// link to the upstream issue")
    expires = entry["expires"]
    if not isinstance(expires, dt.date) or isinstance(expires, dt.datetime):
        raise ld.error(f"{where}.expires", "expected a TOML date like 2027-03-31 (no quotes)")
    verdict = entry.get("verdict")
    if verdict is not None and not isinstance(verdict, str):
        raise ld.error(f"{where}.verdict", "expected the name of one verdict of the check")
    selector = ld.selector(entry["when"], f"{where}.when")
    if not any(selector.matches(a) for a in combos.values()):
        raise ld.error(where, f"matches no cell ({selector.describe()})")
    return KnownFailure(entry["check"], selector, entry["reason"].strip(), link, expires, verdict)


def _standing(ld: _Loader, entry: dict, i: int, combos: dict[str, dict[str, str]], checks: list[str]) -> StandingRule:
    """A [[standing]] rule: a verdict of a check this matrix runs, what it compares and the upstream component it
    compares against (both named), and an optional `when` that must match a cell."""
    where = f"standing[{i}]"
    for key in ("check", "verdict", "ours", "upstream"):
        if key not in entry:
            raise ld.error(f"{where}.{key}", "missing; a standing rule needs check, verdict, ours and upstream")
    check, verdict = entry["check"], entry["verdict"]
    if check not in CHECKS:
        raise ld.error(f"{where}.check", f"unknown check {check!r}; expected one of {', '.join(CHECKS)}")
    if check not in checks:
        raise ld.error(f"{where}.check", f"check {check!r} is not run by this matrix "
                                         f"(matrix.checks: {', '.join(checks)})")
    if not isinstance(verdict, str) or not verdict or not gives_verdict(check, verdict):
        given = ", ".join(VERDICTS.get(check, ())) or "none (it gives no sub-verdict)"
        raise ld.error(f"{where}.verdict", f"{check} gives no verdict {verdict!r}; its verdicts: {given}")
    for key in ("ours", "upstream"):
        value = entry[key]
        if not isinstance(value, str) or not value.strip() or len(value) > NAME_LIMIT or not value.isprintable():
            raise ld.error(f"{where}.{key}", f"expected a name of at most {NAME_LIMIT} printable characters, such as "
                                             "\"vLLM's qwen3_coder tool parser\"")
    selector = ld.selector(entry["when"], f"{where}.when") if "when" in entry else None
    if selector is not None and not any(selector.matches(a) for a in combos.values()):
        raise ld.error(where, f"matches no cell ({selector.describe()})")
    return StandingRule(check, verdict, entry["ours"].strip(), entry["upstream"].strip(), selector)
