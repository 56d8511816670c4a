"""Generated blocks in Markdown pages: find them, render them, rewrite or compare them."""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from harness.docsgen import figures, plans, tables
from harness.files import write_text_atomic

ROOT = tables.ROOT
BLOCK = re.compile(r"(<!-- generated: ([a-z-]+) -->\n)(.*?)(<!-- end generated -->)", re.S)

GENERATORS: dict[str, Callable[[], str]] = {
    "checks": tables.checks_table,
    "checks-from-readme": lambda: tables.checks_table("docs/checks/"),
    "checks-from-docs": lambda: tables.checks_table("checks/"),
    "verl-counterparts": tables.verl_table,
    "exit-statuses": tables.exit_status_table,
    "trainer-exit-statuses": tables.trainer_exit_status_table,
    "sessions": tables.sessions_table,
    "sessions-full": lambda: tables.sessions_table(full=True),
    "measured": figures.measured_table,
    "measured-matrix-time": figures.matrix_time_tables,
    "measured-matrix-runs": figures.matrix_runs_table,
    "launch-plans-verdicts": plans.launch_plans_table,
    **{f"check-{name}": (lambda name=name: tables.check_doc(name)) for name in tables.CHECKS},
}


@dataclass(frozen=True)
class Stale:
    page: Path
    block: str
    root: Path = ROOT

    def __str__(self) -> str:
        return (f"{self.page.relative_to(self.root)}: the generated table {self.block!r} differs from the code; "
                f"run `python -m harness.docsgen`")


def pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def render(text: str, cache: dict[str, str]) -> str:
    """`text` with each generated block rendered anew (an unknown block name is a ValueError)."""
    def replace(match: re.Match) -> str:
        name = match.group(2)
        if name not in GENERATORS:
            raise ValueError(f"unknown generated block {name!r}; known: {', '.join(GENERATORS)}")
        if name not in cache:
            cache[name] = GENERATORS[name]().rstrip("\n") + "\n"
        return match.group(1) + cache[name] + match.group(4)

    return BLOCK.sub(replace, text)


def _fresh_pages(root: Path) -> list[tuple[Path, str, str]]:
    """(page, its text, its text with every generated block rendered anew) for each page with a change."""
    cache: dict[str, str] = {}
    changed = []
    for page in pages(root):
        text = page.read_text(encoding="utf-8")
        fresh = render(text, cache)
        if fresh != text:
            changed.append((page, text, fresh))
    return changed


def stale(root: Path = ROOT) -> list[Stale]:
    found = []
    for page, text, fresh in _fresh_pages(root):
        old = {m.group(2): m.group(3) for m in BLOCK.finditer(text)}
        new = {m.group(2): m.group(3) for m in BLOCK.finditer(fresh)}
        found += [Stale(page, name, root) for name in old if old[name] != new.get(name)]
    return found


def write(root: Path = ROOT) -> list[Path]:
    changed = _fresh_pages(root)
    for page, _, fresh in changed:
        write_text_atomic(page, fresh)
    return [page for page, _, _ in changed]
