"""Plots that draw their shared parts once: thousands of cells compare with a handful of reference curves.

Every grpo-convergence plot of one reference, length and scale has the same band, reference curve and
axes; drawn inline, they were two thirds of every plot (about 15 MB of a 10,000-cell page). Here each
distinct part is written once, as a <g id="ppN"> in a zero-size <svg> of its own, and every plot shows it
with <use href="#ppN">, an in-page reference (no load, allowed by the page's Content-Security-Policy). A
plot keeps its own order of painting: band and reference, then its reward curve, then the axes. The copies
<use> shows have no ancestors to match a CSS selector against, so PLOT_CSS names none.
"""
from __future__ import annotations

from typing import Any

from .plot import draw


class SharedPlots:
    """Draws plots for one page; `defs()` holds the shared parts, to be written once anywhere in the page."""

    def __init__(self) -> None:
        self._ids: dict[str, str] = {}  # the part's SVG -> its id
        self._parts: list[str] = []

    def _use(self, part: str) -> str:
        if not part:
            return ""
        ident = self._ids.get(part)
        if ident is None:
            ident = self._ids[part] = f"pp{len(self._ids)}"
            self._parts.append(f'<g id="{ident}">{part}</g>')
        return f'<use href="#{ident}"/>'

    def svg(self, series: dict[str, Any], label_html: str) -> str:
        """The plot of `series` (see plot.draw), titled `label_html` (escaped), showing its shared parts by
        reference."""
        d = draw(series)
        return (f"{d.head}<title>{label_html}</title>{self._use(d.guide)}{d.reward}"
                f"{self._use(d.axes)}</svg>")

    def defs(self) -> str:
        """The shared parts of every plot drawn so far, in an <svg> that takes no room on the page."""
        return ('<svg class="plot-defs" width="0" height="0" aria-hidden="true"><defs>' + "".join(self._parts)
                + "</defs></svg>")
