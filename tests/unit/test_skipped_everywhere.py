""".ci/skipped_everywhere.py fails a CI run where a test was skipped in every environment."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("skipped_everywhere", ROOT / ".ci" / "skipped_everywhere.py")
script = importlib.util.module_from_spec(spec)
spec.loader.exec_module(script)


def _junit(path: Path, cases: dict[str, str | None]) -> Path:
    rows = []
    for name, skip in cases.items():
        classname, _, test = name.rpartition(".")
        inner = f'<skipped message="{skip}"/>' if skip else ""
        rows.append(f'<testcase classname="{classname}" name="{test}" time="0.1">{inner}</testcase>')
    path.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest">{"".join(rows)}</testsuite>'
                    "</testsuites>")
    return path


def test_a_test_skipped_in_every_environment_fails_the_run_naming_it(tmp_path, capsys):
    newest = _junit(tmp_path / "tests.xml", {"tests.test_a.test_bug": "no bug in 5.23.0", "tests.test_a.test_ok": None,
                                             "tests.test_b.test_gpu": "needs a GPU"})
    affected = _junit(tmp_path / "tests-affected.xml", {"tests.test_a.test_bug": None,
                                                        "tests.test_b.test_gpu": "needs a GPU"})
    assert script.main([str(newest), str(affected), "--allow", str(tmp_path / "none.toml")]) == 1
    err = capsys.readouterr().err
    assert "tests.test_b.test_gpu (tests: needs a GPU; tests-affected: needs a GPU)" in err
    assert "test_bug" not in err  # skipped on the newest, run on the affected release: fine


def test_an_allowed_skip_with_a_reason_passes_and_one_without_a_reason_is_refused(tmp_path):
    only = _junit(tmp_path / "tests.xml", {"tests.test_b.test_gpu": "needs a GPU", "tests.test_a.test_ok": None})
    allow = tmp_path / "allow.toml"
    allow.write_text('[[allow]]\ntest = "tests.test_b.*"\nreason = "needs a GPU; no GPU runner in .ci/run"\n')
    assert script.main([str(only), "--allow", str(allow)]) == 0
    allow.write_text('[[allow]]\ntest = "tests.test_b.*"\n')
    try:
        script.main([str(only), "--allow", str(allow)])
    except SystemExit as exc:
        assert "needs test and reason" in str(exc)
    else:
        raise AssertionError("an allow entry without a reason was accepted")


def test_a_missing_report_is_an_error_not_a_pass(tmp_path):
    assert script.main([str(tmp_path / "never-written.xml")]) == 2


def test_the_real_allow_list_is_well_formed():
    assert all(reason for _, reason in script.allow_list(script.DEFAULT_ALLOW))


def test_a_module_skipped_at_collection_counts_as_run_where_its_tests_ran(tmp_path, capsys):
    """pytest reports a module skipped at import as one entry named after the module; its tests, run in
    another environment, are named module.test. Seen in CI: the browser tests skip in tests-affected."""
    newest = _junit(tmp_path / "tests.xml", {"tests.e2e.test_browser.test_marks": None})
    affected = _junit(tmp_path / "tests-affected.xml", {"tests.e2e.test_browser": "no playwright",
                                                        "tests.test_gpu": "no GPU"})
    assert script.main([str(newest), str(affected), "--allow", str(tmp_path / "none.toml")]) == 1
    err = capsys.readouterr().err
    assert "tests.test_gpu (" in err and "test_browser" not in err
