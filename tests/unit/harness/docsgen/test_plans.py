"""harness.docsgen.plans: docs/launch-plans.md's table comes from the verdicts a matrix bench kept, stamped with
that run, one row per plan and verdict; nothing in it is written by hand."""
from harness.docsgen import plans

PLANS = sorted(path.stem for path in plans.PLANS_DIR.glob("*.toml"))


def figures(kept):
    return {"matrix": {"machine": {"cpu": "Test CPU", "cores": 2}, "date": "2026-11-30", "harness_revision": "abc123",
                       "launch_plans": kept}}


def release(cell, verdicts):
    return {"cell": cell, "transformers": "5.23.0", "status": "pass", "verdicts": verdicts}


def test_each_plan_gets_a_row_per_verdict_with_the_releases_it_holds_for():
    first, second = PLANS[0], PLANS[1]
    start = {"status": "pass", "message": "would start", "memory_gib": 55.65}
    kept = {"0.19.2": release("cell-b", {first: start, second: start}),
            "0.16.1": release("cell-a", {first: start, second: {"status": "fail", "message": "parallel.cp: refused",
                                                                 "memory_gib": None}})}
    table = plans.launch_plans_table(figures(kept))
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    assert len(rows) == len(PLANS) + 1  # the second plan differs between the releases: two rows
    assert f"`{first}.toml`" in rows[0] and "would start; 55.6 GiB per device" in rows[0]
    assert "0.16.1, 0.19.2" in rows[0]  # releases in version order
    assert "**fail**: parallel.cp: refused" in table
    assert "not in this run" in table  # the other plans are in neither release's verdicts
    assert "Test CPU" in table and "2026-11-30" in table and "abc123" in table and "`cell-a`" in table


def test_a_message_is_text_on_the_page_and_a_long_one_is_cut():
    kept = {"0.16.1": release("c", {PLANS[0]: {"status": "xfail", "message": "<script>x</script> a | b " + "y" * 400,
                                               "memory_gib": None}})}
    table = plans.launch_plans_table(figures(kept))
    assert "<script>" not in table and "&lt;script&gt;" in table
    assert "a \\| b" in table
    assert "…" in table and "y" * 300 not in table


def test_without_kept_verdicts_the_table_says_not_measured():
    assert plans.launch_plans_table({}).startswith("Not measured")
    assert plans.launch_plans_table({"matrix": {"new_way": {}}}).startswith("Not measured")
