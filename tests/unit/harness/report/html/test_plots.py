"""The reward plots of report.html (html/plots.py): inline SVG inside the plot area, whole-curve polylines at the
expected pixels, curves checked as a plain reference checks them, and remembered guides that draw what fresh ones
draw."""
from __future__ import annotations

import math
import random
import re
from array import array

from report_helpers import expand_shared_plot_parts, make_cell, ok

from harness.report.build import build_report
from harness.report.html import plots
from harness.report.html.page import to_html
from harness.results.records import CheckResult


def convergence(curve, **metrics) -> CheckResult:
    return ok("grpo-convergence", metrics={"reward_curve": curve, **metrics})


def _plot_points(svg: str) -> list[tuple[float, float]]:
    """Every drawn point of the curves and the band, in pixels."""
    pairs = [p for attr in re.findall(r'points="([^"]*)"', svg) for p in attr.split()]
    return [tuple(map(float, pair.split(","))) for pair in pairs]


def test_convergence_cell_gets_an_inline_svg_with_band_inside_the_plot_area():
    reward = [0.2, 0.35, 0.5, float("nan"), 0.8, 0.9]
    cells = [make_cell("scalar", [convergence(reward, reference_curve=[0.2, 0.4, 0.6, 0.7, 0.8, 0.85], band=0.1)]),
             make_cell("lists", [convergence(reward, reference_curve=[0.3] * 6, band_lower=[0.1] * 6,
                                             band_upper=[0.5, 0.6, 0.7, 0.8, 0.9, 1.0])], transformers="5.9.0"),
             make_cell("none", [ok("grpo-convergence")], transformers="5.10.0")]
    html = expand_shared_plot_parts(to_html(build_report(cells)))
    svgs = re.findall(r"<svg.*?</svg>", html, flags=re.DOTALL)
    assert len(svgs) == 2  # one per cell with a reward curve
    for svg in svgs:
        assert svg.count('class="band"') == 1 and 'class="ref"' in svg
        assert svg.count('class="rew"') == 2  # the nan splits the reward curve in two
        points = _plot_points(svg)
        assert points and all(44 - 0.5 <= x <= 310.5 and 10 - 0.5 <= y <= 138.5 for x, y in points)
    assert 'href="#plot-0"' in html and 'id="plot-0"' in html and "<script" not in html


def test_curve_without_band_and_garbage_curves():
    html = expand_shared_plot_parts(to_html(build_report([
        make_cell("a", [convergence([0.5])]),
        make_cell("b", [convergence(["x", None, True])], transformers="5.9.0"),
        make_cell("c", [convergence("not a list", band="wide")], transformers="5.10.0"),
    ])))
    (svg,) = re.findall(r"<svg.*?</svg>", html, flags=re.DOTALL)
    assert 'class="band"' not in svg and 'class="ref' not in svg and 'class="rew dot"' in svg


def test_a_whole_curve_is_one_polyline_at_the_expected_pixels():
    values = (0.4, 0.55, 0.5, 0.9, 0.75, 0.8, 0.6)
    guide = plots._guide((), (), ())
    svg = plots.convergence_svg({"reward": values, "guide": guide}, label="c")
    (points,) = re.findall(r'<polyline class="rew" points="([^"]*)"/>', svg)
    low, high = plots._nice_range(min(values), max(values))
    sy = 128 / (high - low)
    expected = [f"{44 + i * 266 / 6:.1f},{10 + high * sy - v * sy:.1f}" for i, v in enumerate(values)]
    assert points.split() == expected
    # The same curve with a gap goes through the general path: the same pixels, in two lines.
    gap = plots.convergence_svg({"reward": (*values[:2], None, *values[3:]), "guide": guide}, label="c")
    runs = re.findall(r'<polyline class="rew" points="([^"]*)"/>', gap)
    assert [r.split() for r in runs] == [expected[:2], expected[3:]]


TRICKY_CURVES = [[1, 2.5], [True, 2.5], [1.0, 2.5], [0.5, "x"], [0.5, None], [0.5, float("nan")], [1e301, 0.5],
                 [0.5, [1]], [2.5, 1], [True, "x"], [1, "x"], (0.25, 0.5), [], [10**400, 0.5], [10**400, 10**400],
                 [0.5, float("inf")], [1j, 0.5], "ab", None, [0.5] * (plots.MAX_POINTS + 3)]


def _floats_as_first_written(value):
    """plots._floats written plainly, with an array: the reference for its fast path."""
    if not isinstance(value, (list, tuple)) or not value:
        return None
    value = tuple(value[:plots.MAX_POINTS])
    try:
        fast = array("d", value)
    except (TypeError, OverflowError):
        pass
    else:
        if not math.isnan(sum(fast)) and -1e300 < min(fast) and max(fast) < 1e300:
            return value
    out = tuple(float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and -1e300 < x < 1e300
                else None for x in value)
    return out if any(v is not None for v in out) else None


def test_a_curve_is_checked_as_it_was_first():
    for curve in TRICKY_CURVES:
        assert repr(plots._floats(curve)) == repr(_floats_as_first_written(curve)), curve
        checked = plots._checked(curve)
        if checked:
            assert checked[1] == plots._extent(checked[0])


def _fresh_series(metrics):
    plots._GUIDES.clear()
    plots._guide.cache_clear()
    plots._guide_with_band.cache_clear()
    return plots.convergence_series([metrics])


def test_a_remembered_guide_draws_what_a_fresh_one_draws():
    """Guides are remembered by the curves and band as given: equal inputs must draw alike, and a band that
    differs only in type (True is none, 1 is one) must not reuse another's."""
    bands = [0.1, 1, True, 1.0, None, float("nan"), -1, "x"]
    metrics = [{"reward_curve": [0.5, 0.7, 0.9, 0.8], "reference_curve": curve, "band": band}
               for curve in TRICKY_CURVES[:12] for band in bands]
    metrics += [{"reward_curve": [0.2, 0.4], "band_lower": [0.1, True], "band_upper": upper}
                for upper in ([0.3, 0.6], [0.3, "x"], [[0.3], 0.6])]
    drawn = {}
    for _ in range(2):
        for i in random.Random(1).sample(range(len(metrics)), len(metrics)):
            drawn.setdefault(i, []).append(plots.draw(plots.convergence_series([metrics[i]])))
    for i, m in enumerate(metrics):
        fresh = _fresh_series(m)
        assert drawn[i] == [plots.draw(fresh)] * 2, m
        # The reward's extent, carried from the check, is the one draw would work out.
        assert plots.draw({"reward": fresh["reward"], "guide": fresh["guide"]}) == plots.draw(fresh)
    # The comparison can fail: a band of True draws no band, a band of 1 does.
    with_true, with_one = (plots.draw(_fresh_series({**metrics[0], "band": b})) for b in (True, 1))
    assert with_true != with_one
