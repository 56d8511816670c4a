"""verl-tests on the real verl release installed here and its sdist from the package index (network): verl's own
protocol tests pass on the stack verl declares, turn red when a tensordict utility of verl is broken under them
(a conftest injected into the unpacked suite), and a file that cannot be collected for a missing module is a skip,
never red. Runs in the `tests-verl` session (verl 0.9.1, transformers 5.8.1, tensordict 0.10.0)."""
from __future__ import annotations

import textwrap

import pytest

pytest.importorskip("verl")
pytestmark = pytest.mark.verl

from harness.checks import verl_tests as check  # noqa: E402 - after the skip: these need verl installed
from harness.checks.support import verl  # noqa: E402
from harness.checks.verl_tests import pytest_run, source  # noqa: E402
from harness.results.records import Status  # noqa: E402

PROTOCOL = "tests/test_protocol_v2_on_cpu.py"
# verl's concatenation of TensorDicts, changed under its own tests: every batch but the first is dropped.
BREAKER = """\
    import verl.utils.tensordict_utils as tu

    tu.concat_tensordict = lambda data, *args, **kwargs: data[0]
    """
MISSING = "import no_such_module_for_verl_tests\n\ndef test_never_collected():\n    pass\n"


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    release = verl.installed()
    try:
        origin = source.locate(release, tmp_path_factory.mktemp("cache"))
    except source.Unavailable as exc:
        pytest.skip(f"verl {release}'s tests cannot be had here: {exc}")
    return origin


def _run(origin, tmp_path, conftest: str = "", extra: dict[str, str] | None = None):
    root = source.prepare(origin, source.installed_package(), tmp_path / "suite")
    if conftest:
        (root / "tests" / "conftest.py").write_text(textwrap.dedent(conftest))
    for name, text in (extra or {}).items():
        (root / name).write_text(text)
    files = [PROTOCOL, *(extra or {})]
    done = pytest_run.run_suite(root, files, workers=1, timeout=None)
    return {path: check.file_verdict(path, outcome, verl.outside_range()) for path, outcome in done.files.items()}


def test_verls_protocol_tests_pass_on_its_declared_stack_and_a_missing_module_is_no_failure(suite, tmp_path):
    if verl.outside_range():
        pytest.skip(f"this row is outside verl's declared range: {verl.outside_range()}")
    verdicts = _run(suite, tmp_path, extra={"tests/test_needs_missing_on_cpu.py": MISSING})
    assert verdicts[PROTOCOL].status is Status.PASS, verdicts[PROTOCOL].message
    missing = verdicts["tests/test_needs_missing_on_cpu.py"]
    assert missing.status is Status.SKIP and "missing module no_such_module_for_verl_tests" in missing.message


def test_a_broken_tensordict_utility_turns_the_protocol_tests_red(suite, tmp_path):
    verdict = _run(suite, tmp_path, conftest=BREAKER)[PROTOCOL]
    assert verdict.status is Status.FAIL
    assert "test_concat_tensordict" in {m["case"] for m in verdict.metrics["mismatches"]}
    assert all(m["first assertion line"] for m in verdict.metrics["mismatches"])
