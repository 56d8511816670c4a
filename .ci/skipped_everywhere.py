"""Fail when a test was skipped in every test environment of a CI run.

    python .ci/skipped_everywhere.py reports/tests/*.xml [--allow .ci/skip-allowlist.toml]

Reads each environment's JUnit XML (`nox -s tests`, `tests-e2e`, `tests-affected`, `tests-vllm`,
`tests-megatron-bridge`, `tests-verl`). A test counts as run where any environment ran it (passed or failed); one
skipped wherever it appeared is listed, with each environment's reason, and the exit status is 1, unless the allow
list names it with a reason (a test that needs hardware CI does not have). Standard library only: it runs before any
environment exists.
"""
from __future__ import annotations

import argparse
import fnmatch
import sys
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

DEFAULT_ALLOW = Path(__file__).with_name("skip-allowlist.toml")


def outcomes(path: Path) -> dict[str, str | None]:
    """Test id -> the skip reason, or None where the test ran."""
    seen: dict[str, str | None] = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        test = ".".join(part for part in (case.get("classname", ""), case.get("name", "")) if part)
        skipped = case.find("skipped")
        seen[test] = None if skipped is None else (skipped.get("message") or "skipped")
    return seen


def allow_list(path: Path) -> list[tuple[str, str]]:
    """(pattern, reason) pairs; every entry needs both."""
    data = tomllib.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    entries = data.get("allow", [])
    bad = [e for e in entries if not (isinstance(e, dict) and e.get("test") and e.get("reason"))]
    if bad:
        raise SystemExit(f"{path}: every [[allow]] needs test and reason, got {bad[0]!r}")
    return [(e["test"], e["reason"]) for e in entries]


def skipped_everywhere(reports: list[Path], allowed: list[tuple[str, str]]) -> list[str]:
    """One line per test no environment ran and the allow list does not name."""
    reasons: dict[str, list[str]] = {}
    ran: set[str] = set()
    for path in reports:
        for test, reason in outcomes(path).items():
            if reason is None:
                ran.add(test)
            else:
                reasons.setdefault(test, []).append(f"{path.stem}: {reason}")
    lines = []
    for test in sorted(set(reasons) - ran):
        if any(other.startswith(test + ".") for other in ran):
            continue  # a module skipped at collection in one environment whose tests ran in another
        if not any(fnmatch.fnmatchcase(test, pattern) for pattern, _ in allowed):
            lines.append(f"{test} ({'; '.join(reasons[test])})")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("reports", nargs="+", type=Path)
    parser.add_argument("--allow", type=Path, default=DEFAULT_ALLOW)
    args = parser.parse_args(argv)
    missing = [p for p in args.reports if not p.is_file()]
    if missing:
        print(f"error: {missing[0]}: no JUnit report (did its tests session run?)", file=sys.stderr)
        return 2
    try:
        lines = skipped_everywhere(args.reports, allow_list(args.allow))
    except ET.ParseError as exc:
        print(f"error: a JUnit report is not XML ({exc})", file=sys.stderr)
        return 2
    if lines:
        print(f"{len(lines)} tests were skipped in every environment ({', '.join(p.stem for p in args.reports)}); "
              "run them somewhere or allow them with a reason in .ci/skip-allowlist.toml:", file=sys.stderr)
        for line in lines:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"every test ran in at least one of: {', '.join(p.stem for p in args.reports)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
