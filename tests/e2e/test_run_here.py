"""`run --here`: a row runs on the interpreter at hand, what it adds installed from the wheelhouse alone (the index
and every proxy point at a closed port, so a network access would fail the run)."""
from __future__ import annotations

import json

import pytest
from wheel_helpers import here_setup

from harness import cli


@pytest.fixture
def here(tmp_path, monkeypatch):
    return here_setup(tmp_path, monkeypatch)


def test_a_row_runs_on_this_interpreter_with_the_wheelhouse_only(here):
    tmp_path, cells, torch = here
    cell = cells["vl" + torch]
    out = tmp_path / "out"
    status = cli.main(["run", str(tmp_path / "here.toml"), "--here", "--wheelhouse", str(tmp_path / "wheels"),
                       "--cells", cell, "--out", str(out), "--env-root", str(tmp_path / "envs"), "--no-report",
                       "--no-fork"])  # one check: a fresh interpreter imports less than the check server's preload
    assert status == 0
    result = json.loads((out / "cells" / f"{cell}.json").read_text())
    assert result["checks"][0]["status"] == "pass", result["checks"][0]["message"]
    assert result["environment"]["origin"].startswith("offline run on the box's own Python")
    assert "tinypkg==1.0" in (out / result["lock"]).read_text().split()
    assert (tmp_path / "envs" / "overlays" / cell / "tinypkg" / "__init__.py").is_file()
