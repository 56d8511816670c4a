"""report.junit.xml (junit.py): a suite per cell and a case per check; what did not install is skipped, a real
failure still fails; every text escaped."""
from __future__ import annotations

import random
import xml.etree.ElementTree as ET
from xml.sax.saxutils import quoteattr

from cause_cells import cell, not_installed, parity, ran
from report_helpers import CELLS

from harness.report.build import build_report
from harness.report.junit import _Quoted, to_junit
from harness.report.synthetic import HOSTILE_MESSAGES, hostile_cells
from harness.results.records import Status


def test_junit_has_a_suite_per_cell_and_a_case_per_check():
    root = ET.fromstring(to_junit(build_report(CELLS)))
    suites = root.findall("testsuite")
    assert [s.get("name") for s in suites] == sorted(c.cell_id for c in CELLS)
    assert int(root.get("tests")) == 12 and int(root.get("failures")) == 1 and int(root.get("skipped")) == 4
    by_name = {(s.get("name"), c.get("name")): c for s in suites for c in s.findall("testcase")}
    timeout = by_name[("fsdp-text-tf5.11.0", "other")].find("failure")
    assert timeout.get("type") == "timeout" and timeout.get("message") == "no result in 600 s"
    assert "repro: python -m harness repro fsdp-text-tf5.11.0 --check other" in timeout.text
    xfail = by_name[("fsdp-text-tf5.1.0", "probe")].find("skipped")
    assert xfail.get("message").startswith("known failure: not there yet (https://x.example/1")
    affected = by_name[("fsdp-text-tf5.3.0", "probe")]
    assert affected.find("failure") is None and affected.find("skipped") is None
    assert "stock: affected: bug" in affected.find("system-out").text


def test_junit_escapes_hostile_text():
    root = ET.fromstring(to_junit(build_report(hostile_cells())))  # parses: nothing broke out of its place
    messages = [f.get("message") for f in root.iter("failure")]
    assert len(messages) == len(HOSTILE_MESSAGES) and all(messages)
    assert "</table><script>alert(1)</script>" in messages  # shown as text, exactly
    assert len(root.findall("testsuite")) == len(HOSTILE_MESSAGES)


def test_junit_skips_what_did_not_install_and_still_fails_a_real_failure():
    cells = [cell("5.12.1", "0.32.0", *not_installed("bridge")), cell("5.23.0", "0.32.0", *not_installed("vllm032")),
             ran("5.19.0", "0.32.0", parity("0.32.0"), rollout=Status.FAIL)]
    root = ET.fromstring(to_junit(build_report(cells)))
    suites = {s.get("name"): s for s in root}
    for name in ("fsdp-text-tf5.12.1-vllmcpu0.32.0", "fsdp-text-tf5.23.0-vllmcpu0.32.0"):
        assert suites[name].get("failures") == "0" and suites[name].get("skipped") == "3"
    assert "not installable on this runner" in suites["fsdp-text-tf5.12.1-vllmcpu0.32.0"].find(
        "testcase/skipped").get("message")
    assert suites["fsdp-text-tf5.19.0-vllmcpu0.32.0"].get("failures") == "2"


def test_remembered_quoting_is_quoteattr():
    rng = random.Random(0)
    alphabet = "ab&<>\"'\n\r\t x\u00e9"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(5000)]
    texts += ["fsdp-text-tf5.23.0-torch2.13.0", "it's", 'say "hi"', "a\tb", ""]
    quoted = _Quoted()
    for text in texts:
        assert quoted[text] == quoteattr(text), repr(text)
    # The comparison sees a value quoted as it is where quoteattr escapes it.
    assert f'"{texts[-4]}"' != quoteattr(texts[-4]) or f'"{texts[-3]}"' != quoteattr(texts[-3])
