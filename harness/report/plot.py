"""Inline SVG plots of grpo-convergence results: the reward curve against the reference, band shaded.

Only numbers reach the SVG (every value is parsed as a float first), so result files cannot inject
markup through a plot. No scripts, no external references: the SVG is part of a standalone page.
"""
from __future__ import annotations

import functools
import math
from array import array
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .htmltext import escape_html

MAX_POINTS = 5000  # longer curves are cut: a report must stay small whatever a result file holds
DRAWN_POINTS = 300  # curves longer than this are thinned for drawing
# Styles of the plot's classes, for the page that holds the SVGs (thousands of plots share them). No selector
# names an ancestor: the parts a plot shows with <use> (plotshare.py) are copies that have none to match.
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


# Reference and band curves that passed the fast check of _floats: thousands of cells repeat a few of
# them. A curve equal to one of these, item by item, passes the check too (only numbers equal numbers),
# and the check would return it unchanged, as the cache does.
_PLAIN_CURVES: set[tuple] = set()


def _floats(value: Any, shared: bool = False) -> tuple[float | None, ...] | None:
    """The finite numbers of a curve, None where an item is not one; None when nothing is usable.

    `shared`: the curve is likely to repeat across cells (a reference or a band); remember it.
    """
    if not isinstance(value, (list, tuple)) or not value:
        return None
    value = tuple(value[:MAX_POINTS])
    if shared:
        try:
            if value in _PLAIN_CURVES:
                return value
        except TypeError:  # an unhashable item (a list): not a plain curve
            shared = False
    try:
        fast = array("d", value)  # C speed for the usual list of floats
    except (TypeError, OverflowError):
        pass
    else:
        # nan anywhere makes the sum nan; min/max alone can miss it.
        if not math.isnan(sum(fast)) and -1e300 < min(fast) and max(fast) < 1e300:
            if shared:
                if len(_PLAIN_CURVES) >= 256:  # hostile inputs must not grow it without bound
                    _PLAIN_CURVES.clear()
                _PLAIN_CURVES.add(value)
            return value  # ints stay ints (bool is an int): all are finite numbers here
    out = tuple(float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and -1e300 < x < 1e300
                else None for x in value)
    return out if any(v is not None for v in out) else None


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


def convergence_series(metrics_list: Iterable[dict[str, Any]]) -> dict[str, Any] | None:
    """{"reward": tuple, "guide": Guide} from the first metrics with a reward curve, else None.

    Metrics: reward_curve (floats per step), reference_curve, and band (a tolerance around the
    reference) or band_lower and band_upper (lists). Items that are not finite numbers become gaps.
    """
    for metrics in metrics_list:
        if not isinstance(metrics, dict):
            continue
        reward = _floats(metrics.get("reward_curve"))
        if reward is None:
            continue
        reference = _floats(metrics.get("reference_curve"), shared=True) or ()
        lower = _floats(metrics.get("band_lower"), shared=True) or ()
        upper = _floats(metrics.get("band_upper"), shared=True) or ()
        band = metrics.get("band")
        if lower and upper:
            guide = _guide(reference, lower, upper)
        elif reference and isinstance(band, (int, float)) and not isinstance(band, bool) and 0 <= band < 1e300:
            guide = _guide_with_band(reference, float(band))
        else:
            guide = _guide(reference, (), ())
        return {"reward": reward, "guide": guide}
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
    size), length and scale, so a page can hold each once and show it where needed (plotshare.py)."""

    head: str  # the opening <svg> tag
    guide: str  # the band and the reference curve
    reward: str
    axes: str  # the axis lines and their labels


def draw(series: dict[str, Any], width: int = 320, height: int = 160) -> Drawing:
    """Reward (solid red), reference (dashed grey) and the tolerance band (shaded blue), in pixels."""
    reward, guide = series["reward"], series["guide"]
    n = max(len(reward), len(guide.reference), len(guide.lower), len(guide.upper))
    extents = [e for e in (guide.extent, _extent(reward)) if e]
    y_range = _nice_range(min(e[0] for e in extents), max(e[1] for e in extents))
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
