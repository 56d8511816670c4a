"""The SVG plots of report.html: a grpo-convergence reward curve against its reference, band shaded.

Only numbers reach the SVG (every value is parsed as a float first), so result files cannot inject
markup through a plot. No scripts, no external references: the SVG is part of a standalone page.

Thousands of cells compare with a handful of reference curves, so a page draws the parts plots share once
(`SharedPlots`). Every plot of one reference, length and scale has the same band, reference curve and axes;
drawn inline, they would be two thirds of every plot (about 15 MB of a 10,000-cell page). Each distinct part is
written once, as a <g id="ppN"> in a zero-size <svg> of its own, and every plot shows it with <use
href="#ppN">, an in-page reference (no load, allowed by the page's Content-Security-Policy). A plot keeps its
own order of painting: band and reference, then its reward curve, then the axes. The copies <use> shows have
no ancestors to match a CSS selector against, so PLOT_CSS names none.
"""
from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..safe_text import escape_html

MAX_POINTS = 5000  # longer curves are cut: a report must stay small whatever a result file holds
DRAWN_POINTS = 300  # curves longer than this are thinned for drawing
# Styles of the plot's classes, for the page that holds the SVGs (thousands of plots share them). No selector
# names an ancestor: the parts a plot shows with <use> (SharedPlots) are copies that have none to match.
PLOT_CSS = """
text.ax{font-size:10px;fill:#333}
.band{fill:#9ecae1;fill-opacity:.5;stroke:none}
.ref,.rew,.axis{fill:none;stroke-linecap:round}
.ref{stroke:#666;stroke-width:1.5;stroke-dasharray:4 3}
.rew{stroke:#d62728;stroke-width:1.5}
.dot{stroke-width:4}
.axis{stroke:#333}
svg.plot-defs{position:absolute}
.plot-legend .rew{color:#d62728}.plot-legend .ref{color:#666}.plot-legend .band{color:#3182bd}
"""


def _checked(value: Any) -> tuple[tuple, tuple[float, float]] | None:
    """The finite numbers of a curve, None where an item is not one, and their (min, max); None when nothing
    is usable."""
    if not isinstance(value, (list, tuple)) or not value:
        return None
    value = tuple(value) if len(value) <= MAX_POINTS else tuple(value[:MAX_POINTS])
    try:
        # C speed for the usual curve of floats: nan anywhere makes the sum nan (min and max alone can miss it);
        # an item that is no number, or an int too large for a float, raises.
        low, high = min(value), max(value)
        if not math.isnan(sum(value)) and -1e300 < low and high < 1e300:
            return value, (low, high)  # ints stay ints (bool is an int): all are finite numbers here
    except (TypeError, OverflowError):
        pass
    out = tuple(float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and -1e300 < x < 1e300
                else None for x in value)
    extent = _extent(out)
    return (out, extent) if extent else None


def _floats(value: Any) -> tuple[float | None, ...] | None:
    """The finite numbers of a curve, None where an item is not one; None when nothing is usable."""
    checked = _checked(value)
    return checked[0] if checked else None


@dataclass(frozen=True, eq=False)  # hashed by identity: a cheap cache key, whatever the curve length
class Guide:
    """The reference curve and tolerance band one or many cells are compared with."""

    reference: tuple
    lower: tuple
    upper: tuple
    extent: tuple[float, float] | None
    drawn: dict = field(default_factory=dict)  # (n, y range, size) -> SVG of band and reference


@functools.lru_cache(maxsize=256)
def _guide(reference: tuple, lower: tuple, upper: tuple) -> Guide:
    """One Guide per distinct reference and band: cells of one model share theirs."""
    extents = [e for e in map(_extent, (reference, lower, upper)) if e]
    extent = (min(e[0] for e in extents), max(e[1] for e in extents)) if extents else None
    return Guide(reference, lower, upper, extent)


@functools.lru_cache(maxsize=256)
def _guide_with_band(reference: tuple, band: float) -> Guide:
    return _guide(reference, tuple(None if r is None else r - band for r in reference),
                  tuple(None if r is None else r + band for r in reference))


def _curve(value: Any) -> tuple[tuple, bool]:
    """A reference or band curve as checked (() when unusable), and whether every input equal to `value` gives
    the same curve: true when its items are all finite numbers, kept as given (True == 1, and they draw alike),
    or when it is no list at all; not when an item became a gap (True does, 1 becomes 1.0)."""
    checked = _checked(value)
    if not isinstance(value, (list, tuple)) or not value:
        return (), True
    if checked is None:
        return (), False
    return checked[0], len(checked[0]) == len(value) and all(a is b for a, b in zip(checked[0], value))


def _checked_guide(metrics: dict[str, Any]) -> tuple[Guide, bool]:
    """The Guide of a result's reference and band, and whether equal inputs give it too (see _curve)."""
    (reference, same_ref), (lower, same_low), (upper, same_up) = (
        _curve(metrics.get(key)) for key in ("reference_curve", "band_lower", "band_upper"))
    band = metrics.get("band")
    if lower and upper:
        guide = _guide(reference, lower, upper)
    elif reference and isinstance(band, (int, float)) and not isinstance(band, bool) and 0 <= band < 1e300:
        guide = _guide_with_band(reference, float(band))
    else:
        guide = _guide(reference, (), ())
    return guide, same_ref and same_low and same_up


# Guides by the reference and band exactly as result files gave them: thousands of cells give equal ones,
# checked once here. Only inputs whose equals give the same guide are remembered (see _curve); a band's type
# is part of the key, since True is no band and 1 is.
_GUIDES: dict[tuple, Guide] = {}


def _as_key(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


def _guide_of(metrics: dict[str, Any]) -> Guide:
    band = metrics.get("band")
    try:
        key = (_as_key(metrics.get("reference_curve")), _as_key(metrics.get("band_lower")),
               _as_key(metrics.get("band_upper")), band, type(band))
        guide = _GUIDES.get(key)
    except TypeError:  # an unhashable item (a list in a curve): checked every time
        key, guide = None, None
    if guide is None:
        guide, remember = _checked_guide(metrics)
        if key is not None and remember:
            if len(_GUIDES) >= 256:  # hostile inputs must not grow it without bound
                _GUIDES.clear()
            _GUIDES[key] = guide
    return guide


def convergence_series(metrics_list: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """{"reward": tuple, "extent": its (min, max), "guide": Guide} from the first metrics with a reward curve,
    else None.

    Metrics: reward_curve (floats per step), reference_curve, and band (a tolerance around the
    reference) or band_lower and band_upper (lists). Items that are not finite numbers become gaps.
    """
    for metrics in metrics_list:
        if not isinstance(metrics, dict):
            continue
        reward = _checked(metrics.get("reward_curve"))
        if reward is None:
            continue
        return {"reward": reward[0], "extent": reward[1], "guide": _guide_of(metrics)}
    return None


@functools.lru_cache(maxsize=256)
def _x_axis(n: int, left: int, plot_w: int) -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The steps drawn (every k-th, always the last) and their x pixels, shared by plots of equal length."""
    stride = max(1, math.ceil(n / DRAWN_POINTS))
    steps = list(range(0, n, stride))
    if steps[-1] != n - 1:
        steps.append(n - 1)
    scale = plot_w / (n - 1) if n > 1 else 0.0
    offset = left if n > 1 else left + plot_w / 2
    return tuple(steps), tuple(f"{offset + i * scale:.1f}" for i in steps)


def _extent(values: tuple) -> tuple[float, float] | None:
    if None in values:
        values = [v for v in values if v is not None]
    return (min(values), max(values)) if values else None


def _nice_range(low: float, high: float) -> tuple[float, float]:
    """The y range widened to round numbers: readable labels, and plots of one reference share a scale."""
    span = high - low
    if not span > 1e-12:
        return low - 0.5, high + 0.5
    unit = 10.0 ** math.floor(math.log10(span))
    return round(math.floor(low / unit) * unit, 12), round(math.ceil(high / unit) * unit, 12)


@functools.lru_cache(maxsize=256)
def _points_format(n: int, left: int, plot_w: int) -> str:
    """The points of a curve of n steps, all drawn, with a %.1f for each y: one % formats the whole curve,
    twice as fast as formatting point by point."""
    return " ".join(f"{x},%.1f" for x in _x_axis(n, left, plot_w)[1])


def _y_scale(y_range: tuple[float, float], box: tuple[int, int, int, int]) -> tuple[float, float]:
    """(y0, sy): a value v is drawn at pixel y0 - v * sy."""
    sy = box[3] / (y_range[1] - y_range[0])
    return box[1] + y_range[1] * sy, sy


def _runs(values: tuple, n: int, y_range: tuple[float, float], box: tuple[int, int, int, int]) -> list:
    """Pixel points of one curve, split where values are missing so a gap stays a gap."""
    steps, xs = _x_axis(n, box[0], box[2])
    y0, sy = _y_scale(y_range, box)
    picked = values if len(steps) == n else [values[i] for i in steps if i < len(values)]
    if None not in picked:
        return [[f"{x},{y0 - v * sy:.1f}" for x, v in zip(xs, picked)]] if picked else []
    runs: list[list[str]] = [[]]
    for x, v in zip(xs, picked):
        if v is None:
            if runs[-1]:
                runs.append([])
        else:
            runs[-1].append(f"{x},{y0 - v * sy:.1f}")
    return [r for r in runs if r]


def _curve_svg(values: tuple, css: str, n: int, y_range: tuple[float, float], box: tuple) -> str:
    if 1 < n == len(values) <= DRAWN_POINTS and None not in values:  # the usual curve: one line, every step
        y0, sy = _y_scale(y_range, box)
        points = _points_format(n, box[0], box[2]) % tuple([y0 - v * sy for v in values])
        return f'<polyline class="{css}" points="{points}"/>'
    parts = []
    for run in _runs(values, n, y_range, box):
        if len(run) > 1:
            parts.append(f'<polyline class="{css}" points="{" ".join(run)}"/>')
        else:  # a lone point: a zero-length path with round caps draws a dot
            parts.append(f'<path class="{css} dot" d="M{run[0]}h0"/>')
    return "".join(parts)


def _guide_svg(guide: Guide, n: int, y_range: tuple[float, float], box: tuple) -> str:
    """Band (one polygon per run without gaps: along the upper bound, back along the lower) and reference."""
    key = (n, y_range, box)
    svg = guide.drawn.get(key)
    if svg is None:
        lower, upper = guide.lower, guide.upper
        size = min(len(lower), len(upper))
        both = tuple(None if i >= size or lower[i] is None or upper[i] is None else upper[i] for i in range(n))
        above = _runs(both, n, y_range, box)
        below = _runs(tuple(None if b is None else lower[i] for i, b in enumerate(both)), n, y_range, box)
        svg = "".join(f'<polygon class="band" points="{" ".join(up + low[::-1])}"/>' for up, low in zip(above, below))
        svg += _curve_svg(guide.reference, "ref", n, y_range, box)
        if len(guide.drawn) > 64:
            guide.drawn.clear()
        guide.drawn[key] = svg
    return svg


PLOT_LEGEND = ('<p class="plot-legend"><span class="rew">━ reward</span> · '
               '<span class="ref">╍ reference</span> · <span class="band">▮ tolerance band</span></p>')


@dataclass(frozen=True, slots=True)
class Drawing:
    """A plot in its parts. `guide` and `axes` are the same str object for every plot of one guide (or
    size), length and scale, so a page can hold each once and show it where needed (SharedPlots)."""

    head: str  # the opening <svg> tag
    guide: str  # the band and the reference curve
    reward: str
    axes: str  # the axis lines and their labels


def draw(series: dict[str, Any], width: int = 320, height: int = 160) -> Drawing:
    """Reward (solid red), reference (dashed grey) and the tolerance band (shaded blue), in pixels."""
    reward, guide = series["reward"], series["guide"]
    n = max(len(reward), len(guide.reference), len(guide.lower), len(guide.upper))
    low, high = series.get("extent") or _extent(reward)
    if guide.extent:  # the guide's first: among equal values, as min and max pick
        low, high = min(guide.extent[0], low), max(guide.extent[1], high)
    y_range = _nice_range(low, high)
    head, box, axes = _frame(width, height, n, y_range)
    return Drawing(head, _guide_svg(guide, n, y_range, box), _curve_svg(reward, "rew", n, y_range, box), axes)


def convergence_svg(series: dict[str, Any], *, width: int = 320, height: int = 160, label: str = "") -> str:
    """An inline <svg> of the curves (see draw), whole: the band and reference drawn first, the axes last.

    Styled by PLOT_CSS, which the page holding the plots must include; PLOT_LEGEND explains the lines.
    """
    d = draw(series, width, height)
    return (f"{d.head}<title>{escape_html(label or 'reward against reference')}</title>"
            f"{d.guide}{d.reward}{d.axes}</svg>")


@functools.lru_cache(maxsize=1024)
def _frame(width: int, height: int, n: int, y_range: tuple[float, float]) -> tuple[str, tuple, str]:
    """The opening tag, the plot box and the axes of a plot (shared by plots of one size, length and scale)."""
    left, right, top, bottom = 44, 10, 10, 22
    plot_w, plot_h = width - left - right, height - top - bottom
    base = top + plot_h
    head = f'<svg class="plot" role="img" width="{width}" height="{height}" viewBox="0 0 {width} {height}">'
    axes = "".join((
        f'<path class="axis" d="M{left} {top}V{base}H{left + plot_w}"/>',
        f'<text class="ax" x="{left - 4}" y="{top + 8}" text-anchor="end">{y_range[1]:.3g}</text>',
        f'<text class="ax" x="{left - 4}" y="{base}" text-anchor="end">{y_range[0]:.3g}</text>',
        f'<text class="ax" x="{left}" y="{base + 12}" text-anchor="middle">0</text>',
        f'<text class="ax" x="{left + plot_w}" y="{base + 12}" text-anchor="end">{n - 1}</text>',
        f'<text class="ax" x="{left + plot_w // 2}" y="{base + 12}" text-anchor="middle">step</text>',
    ))
    return head, (left, top, plot_w, plot_h), axes


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
        """The plot of `series` (see draw), titled `label_html` (escaped), showing its shared parts by
        reference."""
        d = draw(series)
        return (f"{d.head}<title>{label_html}</title>{self._use(d.guide)}{d.reward}"
                f"{self._use(d.axes)}</svg>")

    def defs(self) -> str:
        """The shared parts of every plot drawn so far, in an <svg> that takes no room on the page."""
        return ('<svg class="plot-defs" width="0" height="0" aria-hidden="true"><defs>' + "".join(self._parts)
                + "</defs></svg>")
