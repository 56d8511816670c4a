"""A cheap real check whose outcome a test controls: it reads a number from the file GAUGE_INPUT names
and fails when it is above the limit, as a numeric tolerance check does. Registered through
HARNESS_EXTRA_CHECKS (gauge=gauge) by tests/e2e/test_report_lifecycle.py."""
import os

from harness.results.records import CheckResult, Status

LIMIT = 1.0


def run(options):
    with open(os.environ["GAUGE_INPUT"]) as handle:
        value = float(handle.read())
    if value > LIMIT:
        return CheckResult("gauge", Status.FAIL, f"measured {value} above the limit {LIMIT}", metrics={"value": value})
    return CheckResult("gauge", Status.PASS, f"measured {value} within the limit {LIMIT}", metrics={"value": value})
