"""The sync-vs-fully-async benchmark's summary (no timings asserted: `nox -s bench -- --async` runs it)."""
from harness.benchmarks.async_grpo import summarise_sides


def _side(seconds, reached=True, overlap=None):
    return {"seconds_to_threshold": seconds, "reached": reached, "overlap_fraction": overlap}


def test_speedup_is_sync_time_over_fully_async_time_and_needs_every_seed():
    out = summarise_sides({"sync": [_side(10.0), _side(14.0)],
                           "fully-async-1": [_side(8.0, overlap=0.3), _side(10.0, overlap=0.5)]})
    assert out["sync"]["seconds_to_threshold"] == 12.0
    assert out["fully-async-1"]["speedup_over_sync"] == 12.0 / 9.0
    assert abs(out["fully-async-1"]["overlap_fraction"] - 0.4) < 1e-12
    out = summarise_sides({"sync": [_side(10.0)], "fully-async-1": [_side(None, reached=False)]})
    assert out["fully-async-1"]["speedup_over_sync"] is None and not out["fully-async-1"]["reached_every_seed"]
