"""The "use these pins" boxes at the top of report.html (pins.py decides what goes in them).

Each box names the stack, links to its line in the grid, and holds the install commands in a <pre> a
reader selects and copies (no script: the page runs none). A kind of stack with no passing line says so,
with how many were tested, instead of being left out.
"""
from __future__ import annotations

from .htmltext import escape_html
from .pins import PinsBox, pins_boxes
from .table import Report

PINS_CSS = """
section.pins{display:flex;flex-wrap:wrap;gap:8px;margin:.5em 0 1em}
section.pins h2{flex-basis:100%;margin:0;font-size:1.1em}
div.pin{flex:1 1 300px;min-width:0;border:2px solid #1a7f37;border-radius:6px;padding:6px 8px;background:#f6fff8}
div.pin.none{border-color:#82071e;background:#fff5f5}
div.pin h3{margin:0 0 4px;font-size:14px}
div.pin p{margin:2px 0;font-size:12px}
div.pin pre{margin:4px 0 0;padding:4px 6px;background:#fff;border:1px solid #ccc;font-size:12px;
white-space:pre-wrap;overflow-wrap:anywhere;user-select:all}
p.topins{display:none}
@media (max-width:700px){div.first{display:flex;flex-direction:column}section.pins{order:1}
p.topins{display:block}div.pin p{display:none}div.pin{flex-basis:100%}}
"""


def _box(box: PinsBox) -> str:
    e = escape_html
    if box.line is None:
        return (f'<div class="pin none"><h3>{e(box.title)}</h3><p>{e(box.none_passes)}: see the grid. '
                f"By verdict: {e(box.by_verdict)}.</p></div>")
    versions = ", ".join(f"{name} {version}" for name, version in box.pins)
    other = "; ".join(f"{axis} {value}" for axis, value in box.other)
    kind = "pass every check" + ("" if box.line.verdict.kind == "works" else " with the trainer's patches")
    return (f'<div class="pin"><h3>{e(box.title)}</h3>'
            f'<p>The newest of the {box.tested} tested stacks that {kind}'
            f' (<a href="#{box.line.anchor}">its line</a>): {e(versions)}'
            + (f"{'; ' if versions else ''}Python {e(box.python)}" if box.python else "")
            + (f"; {e(other)}" if other else "") + ".</p>"
            f'<pre aria-label="{e(box.title)} install commands">{e(box.command)}</pre></div>')


def pins_html(report: Report) -> list[str]:
    boxes = pins_boxes(report)
    if not boxes:
        return []
    return ['<section class="pins" aria-labelledby="pins"><h2 id="pins">Use these pins</h2>',
            *(_box(b) for b in boxes), "</section>"]
