"""Which of verl's own test files the check runs, and the test tools they need: data, in suite.toml.

A selection is a list of fnmatch patterns to include and a list of patterns left out, each with its reason (the
report lists what was left out and why). HARNESS_VERL_TESTS_SELECTION may name a TOML file of the same form,
which replaces the shipped selection for a run (a matrix that wants tests/single_controller/ back, say); the
file's content then counts in the result's reuse fingerprint, as every file a HARNESS_ setting names does.
"""
from __future__ import annotations

import fnmatch
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harness.envs.cellenv import PROJECT_ROOT

SUITE = Path(__file__).with_name("suite.toml")
OVERRIDE = "HARNESS_VERL_TESTS_SELECTION"


class SelectionError(ValueError):
    """The selection or tools file is not of the expected form; the message names the file and the key."""


@dataclass(frozen=True)
class LeftOut:
    pattern: str
    reason: str


@dataclass(frozen=True)
class Tool:
    requirement: str
    reason: str


@dataclass(frozen=True)
class Selection:
    source: str  # the file it was read from (the shipped one relative to the project)
    include: tuple[str, ...]
    leave_out: tuple[LeftOut, ...]
    timeout: float | None  # per test, seconds (pytest-timeout); None (`timeout = 0`, or none given): no timeout

    def choose(self, files: list[str]) -> tuple[list[str], dict[str, str]]:
        """(files to run, {file left out: why}) among `files` (paths like tests/x/test_y.py), sorted."""
        chosen, left = [], {}
        for path in sorted(files):
            if not any(fnmatch.fnmatchcase(path, pattern) for pattern in self.include):
                continue
            why = next((item.reason for item in self.leave_out if fnmatch.fnmatchcase(path, item.pattern)), None)
            if why is None:
                chosen.append(path)
            else:
                left[path] = why
        return chosen, left


def _read(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SelectionError(f"{path}: cannot be read as TOML ({exc})") from None


def _strings(data: dict, key: str, where: Path) -> tuple[str, ...]:
    value = data.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise SelectionError(f"{where}: `{key}` must be a list of non-empty strings")
    return tuple(value)


def _table_list(data: dict, key: str, fields: tuple[str, str], where: Path) -> list[tuple[str, str]]:
    items = data.get(key, [])
    if not isinstance(items, list):
        raise SelectionError(f"{where}: `{key}` must be an array of tables")
    out = []
    for number, item in enumerate(items, 1):
        if not isinstance(item, dict) or set(item) != set(fields) or not all(
                isinstance(item[f], str) and item[f].strip() for f in fields):
            raise SelectionError(f"{where}: [[{key}]] entry {number} must have exactly "
                                 f"{' and '.join(fields)}, each a non-empty string")
        out.append((item[fields[0]], " ".join(item[fields[1]].split())))
    return out


def selection(environ: dict[str, str] | None = None) -> Selection:
    """The shipped selection, or the one HARNESS_VERL_TESTS_SELECTION names."""
    environ = os.environ if environ is None else environ
    path = Path(environ[OVERRIDE]) if environ.get(OVERRIDE) else SUITE
    data = _read(path)
    timeout = data.get("timeout", None if path == SUITE else _read(SUITE).get("timeout"))
    if timeout is not None and (not isinstance(timeout, int | float) or isinstance(timeout, bool) or timeout < 0):
        raise SelectionError(f"{path}: `timeout` must be a number of seconds (0: none)")
    include = _strings(data, "include", path)
    if not include:
        raise SelectionError(f"{path}: `include` names no pattern: nothing would run")
    left = tuple(LeftOut(p, r) for p, r in _table_list(data, "leave_out", ("path", "reason"), path))
    # The shipped file by its place in the project, so that a result names no folder of the runner it ran on.
    source = SUITE.resolve().relative_to(PROJECT_ROOT).as_posix() if path == SUITE else str(path)
    return Selection(source, include, left, float(timeout) if timeout else None)


def tools() -> list[Tool]:
    """The test tools suite.toml lists, each with why the suite needs it."""
    return [Tool(r, why) for r, why in _table_list(_read(SUITE), "tools", ("requirement", "reason"), SUITE)]
