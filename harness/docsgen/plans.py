"""docs/launch-plans.md's table of the shipped plans against each megatron-core release, from the launch-plans
verdicts a matrix bench kept (bench/figures.json, group `matrix`, key `launch_plans`: benchmarks/plan_verdicts.py),
stamped with that run's machine, date and revision. Nothing in it is written by hand."""
from __future__ import annotations

from html import escape

from packaging.version import InvalidVersion, Version

from harness.docsgen import figures
from harness.docsgen.tables import ROOT, _table
from harness.plans.plan_format import load_plan

PLANS_DIR = ROOT / "plans"
LONGEST = 200  # characters of a verdict's message in a table cell; the report has it whole


def _release_order(release: str):
    try:
        return (0, Version(release))
    except InvalidVersion:
        return (1, release)


def _text(verdict: dict | None) -> str:
    if not isinstance(verdict, dict):
        return "not in this run"
    status, message = str(verdict.get("status", "")), str(verdict.get("message", ""))
    memory = verdict.get("memory_gib")
    text = message if len(message) <= LONGEST else message[:LONGEST - 1].rstrip() + "…"
    if status in ("fail", "xfail", "error"):
        text = f"**{status}**: {text}"
    if isinstance(memory, (int, float)) and f"{memory:.1f} GiB" not in text:
        text += f"; {memory:.1f} GiB per device"
    return escape(text, quote=False)  # a message is the check's text: no HTML of its own reaches the page


def launch_plans_table(data: dict | None = None) -> str:
    """One row per plan and verdict: the releases it holds for in the last column (a plan whose verdict differs
    between releases has a row for each)."""
    data = figures.load() if data is None else data
    group = data.get("matrix")
    kept = group.get("launch_plans") if isinstance(group, dict) else None
    if not isinstance(kept, dict) or not kept:
        return ("Not measured: `bench/figures.json` has no launch-plans verdicts (`matrix.launch_plans`, written by "
                "`nox -s bench -- --matrix`).\n")
    releases = sorted(kept, key=_release_order)
    rows = []
    for path in sorted(PLANS_DIR.glob("*.toml")):
        plan = load_plan(path)
        texts: dict[str, list[str]] = {}
        for release in releases:
            texts.setdefault(_text(kept[release].get("verdicts", {}).get(path.stem)), []).append(release)
        rows += [[f"`{path.name}`", f"{plan.source}: {plan.name}", text, ", ".join(held)]
                 for text, held in texts.items()]
    cells = ", ".join(f"`{kept[r].get('cell')}`" for r in releases)
    stamped = (f"From the matrix bench's cold run (`bench/figures.json`, group `matrix`): "
               f"{figures.machine_line(group)}, {figures.stamp(group, 'date')}, revision "
               f"{figures.stamp(group, 'harness_revision')}; one cell per megatron-core release, the one with the "
               f"newest transformers: {cells}.")
    return _table(["plan (`plans/`)", "from", "verdict", "megatron-core"], rows) + "\n\n" + stamped + "\n"
