"""The test tools: only what the row lacks, from uv's plan against the row as installed, into an overlay kept per
set of pins; a tool that would change one of the row's distributions is refused; the row itself never changes."""
from __future__ import annotations

import json
import sys
import textwrap

import pytest

from harness.checks.verl_tests import tools
from harness.checks.verl_tests.selection import Tool
from harness.checks.verl_tests.source import Unavailable

PLAN = "Resolved 9 packages in 10ms\nWould install 2 packages\n + pytest-timeout==2.4.0\n + orjson==3.13.0\n"


@pytest.fixture
def fake_uv(tmp_path, monkeypatch):
    """A uv that prints FAKE_UV_PLAN for --dry-run, writes a module per pin for --target, and logs its calls."""
    script = tmp_path / "uv"
    script.write_text(f"#!{sys.executable}\n" + textwrap.dedent("""\
        import json, os, pathlib, sys
        args = sys.argv[1:]
        with open(os.environ["FAKE_UV_LOG"], "a") as log:
            log.write(json.dumps(args) + "\\n")
        if "--dry-run" in args:
            sys.stderr.write(os.environ["FAKE_UV_PLAN"])
        elif "--target" in args:
            target = pathlib.Path(args[args.index("--target") + 1])
            for pin in [a for a in args if "==" in a]:
                (target / (pin.split("==")[0].replace("-", "_") + ".py")).write_text("")
        sys.exit(int(os.environ.get("FAKE_UV_EXIT", "0")))
        """))
    script.chmod(0o755)
    monkeypatch.setenv(tools.UV_VARIABLE, str(script))
    monkeypatch.setenv("FAKE_UV_LOG", str(tmp_path / "calls"))
    monkeypatch.setenv("FAKE_UV_PLAN", PLAN)
    return tmp_path / "calls"


def _calls(log):
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


TOOLS = [Tool("pytest", "runs the suite"), Tool("pytest-timeout", "a per-test timeout"), Tool("orjson", "undeclared")]


def test_only_what_the_row_lacks_goes_into_an_overlay_that_cells_share(fake_uv, tmp_path):
    kit = tools.overlay(TOOLS, tmp_path / "cache", python="/row/bin/python")
    assert kit.pins == ["orjson==3.13.0", "pytest-timeout==2.4.0"]
    assert (kit.path / "pytest_timeout.py").is_file() and (kit.path / ".complete").is_file()
    sources = {t["requirement"]: t["source"] for t in kit.listed}
    assert sources["pytest-timeout"] == "installed for this check: pytest-timeout==2.4.0"
    assert sources["pytest"].startswith("present in the row")
    calls = _calls(fake_uv)
    assert calls[0][:3] == ["pip", "install", "--dry-run"] and "/row/bin/python" in calls[0]
    assert calls[1][:4] == ["pip", "install", "--target", calls[1][3]] and "--no-deps" in calls[1]
    again = tools.overlay(TOOLS, tmp_path / "cache", python="/row/bin/python")
    assert again.path == kit.path and len(_calls(fake_uv)) == 3  # planned again, installed once


def test_a_row_with_every_tool_needs_no_overlay(fake_uv, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_UV_PLAN", "Audited 3 packages in 1ms\n")
    kit = tools.overlay(TOOLS, tmp_path / "cache")
    assert kit.path is None and kit.pins == [] and len(kit.listed) == 3


def test_a_tool_that_would_change_the_row_is_refused(fake_uv, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_UV_PLAN", "Would uninstall 1 package\n - torch==2.13.0\n + torch==2.15.0\n")
    with pytest.raises(Unavailable, match=r"would change the row's own distributions \(torch==2.13.0\)"):
        tools.overlay(TOOLS, tmp_path / "cache")
    assert len(_calls(fake_uv)) == 1  # nothing installed


def test_a_resolution_that_fails_says_uvs_words(fake_uv, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_UV_PLAN", "error: No solution found: orjson has no wheel for this platform\n")
    monkeypatch.setenv("FAKE_UV_EXIT", "1")
    with pytest.raises(Unavailable, match="cannot be installed with this row's settings.*No solution found"):
        tools.overlay(TOOLS, tmp_path / "cache")


def test_uvs_environment_keeps_the_forwarded_settings_and_never_downloads_a_python(monkeypatch, tmp_path):
    monkeypatch.setattr(tools.pipconfig, "pip_config", lambda: {})  # the row's interpreter has no pip
    wheels, constraints = str(tmp_path / "wheels"), str(tmp_path / "c.txt")
    env = tools.uv_environment({"UV_FIND_LINKS": wheels, "VIRTUAL_ENV": str(tmp_path / "venv"),
                                "UV_CONSTRAINT": constraints, "PIP_FIND_LINKS": str(tmp_path / "elsewhere")})
    assert env["UV_FIND_LINKS"] == wheels and env["UV_CONSTRAINT"] == constraints  # the harness's win
    assert env["UV_PYTHON_DOWNLOADS"] == "never" and "VIRTUAL_ENV" not in env
    by_hand = tools.uv_environment({"PIP_FIND_LINKS": wheels, "PIP_CONSTRAINT": constraints})
    assert by_hand["UV_FIND_LINKS"] == wheels and by_hand["UV_CONSTRAINT"] == constraints
