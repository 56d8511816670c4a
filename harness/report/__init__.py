"""The compatibility report, generated only from the result files of a report directory (and the [[standing]]
rules of the matrix files its cells name: which comparisons are against a named upstream component).

    DIR/cells/<cell-id>.json   one CellResult per cell (logs and lock files under DIR/cells/<cell-id>/), and
                               beside DIR/cells the offline box's, CPU-side and pre-flight results of the cells
                               no runner has run (harness/results/sources.py reads them all)
    DIR/run.json               optional: {"matrix", "title", "notes": [...], "generated_by"}
    DIR/history.json           last known good, carried across runs (history.py)
    DIR/first-bad.json         optional: first bad releases found by bisection (harness/rerun/first_bad.py)

pipeline.py is the one way from a directory to the report: build_from_dir builds one Report (build.py, the
data in model.py), and render gives each format of it: report.md (markdown.py), report.html (html/),
report.json and support.json (json_files.py), report.junit.xml (junit.py). command.py is the `report` verb:
it writes every format into DIR, or prints one (`--format`), and checks a baseline (history.py).
What the report says is decided in row_verdicts.py (a verdict per row), standing_findings.py, ranges.py,
pins.py, verl_rows.py (what a verl row says of verl's code and its range) and order.py; safe_text.py cleans
and escapes what result files say, failure_text.py reads install failures and parser findings.

May import: harness.errors, harness.files, harness.results, harness.checks, harness.matrix.
"""
