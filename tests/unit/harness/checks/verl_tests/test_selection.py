"""Which of verl's test files run: the shipped selection, an override file, and clear errors for a bad one."""
from __future__ import annotations

import pytest

from harness.checks.verl_tests import selection

FILES = ["tests/test_protocol_v2_on_cpu.py", "tests/single_controller/test_decorator_on_cpu.py",
         "tests/trainer/ppo/test_core_algos_on_cpu.py", "tests/checkpoint_engine/test_correctness_on_gpu.py",
         "tests/trainer/ppo/test_rollout_corr.py"]


def test_the_shipped_selection_runs_the_cpu_tests_and_says_why_it_leaves_single_controller_out():
    chosen = selection.selection({})
    run, left = chosen.choose(FILES)
    assert run == ["tests/test_protocol_v2_on_cpu.py", "tests/trainer/ppo/test_core_algos_on_cpu.py"]
    assert list(left) == ["tests/single_controller/test_decorator_on_cpu.py"]
    assert "Ray" in left["tests/single_controller/test_decorator_on_cpu.py"]
    assert chosen.timeout == 300


def test_the_shipped_selection_is_named_by_its_place_in_the_project_not_the_runners_folder():
    source = selection.selection({}).source
    assert source == "harness/checks/verl_tests/suite.toml"
    assert (selection.SUITE.parents[3] / source).resolve() == selection.SUITE.resolve()


def test_every_tool_says_why_the_suite_needs_it():
    tools = {t.requirement: t.reason for t in selection.tools()}
    assert {"pytest", "pytest-xdist", "pytest-timeout", "torchdata", "TransferQueue>=0.1.10", "orjson"} <= set(tools)
    assert all(reason for reason in tools.values())


def test_an_override_file_replaces_the_selection_and_keeps_the_timeout(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text('include = ["tests/single_controller/*"]\n')
    chosen = selection.selection({selection.OVERRIDE: str(path)})
    assert chosen.choose(FILES)[0] == ["tests/single_controller/test_decorator_on_cpu.py"]
    assert chosen.timeout == 300 and chosen.source == str(path)
    path.write_text('include = ["tests/*"]\ntimeout = 0\n')
    assert selection.selection({selection.OVERRIDE: str(path)}).timeout is None


@pytest.mark.parametrize("text, message", [
    ("include = []\n", "names no pattern"),
    ('include = "tests/*"\n', "must be a list"),
    ('include = ["tests/*"]\ntimeout = "long"\n', "`timeout` must be a number"),
    ('include = ["tests/*"]\n[[leave_out]]\npath = "x"\n', r"entry 1 must have exactly path and reason"),
    ("include = [\n", "cannot be read as TOML"),
])
def test_a_bad_override_is_one_clear_error_naming_the_file(tmp_path, text, message):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(selection.SelectionError, match=message) as caught:
        selection.selection({selection.OVERRIDE: str(path)})
    assert str(path) in str(caught.value) and "\n" not in str(caught.value)
