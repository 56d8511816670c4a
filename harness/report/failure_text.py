"""Failure text the report reads or shows in a form of its own: install failures, parser findings, and where a
traceback was raised.

An install failure's entry holds its install verdict's line (harness/results/install_verdict.py), and the
resolver's own output behind it; `install_reason` gives that one line (a raw set-up failure without a verdict
is classified by the same code), and the message is kept longer than others. A parser or template verdict
(vllm-chat-parity) records each disagreement as {"case", <side>: <output>, <side>: <output>}; `findings`
keeps those pairs so the page can show both outputs side by side. `raised_here` names the file of this project
(harness/ or trainers/) whose frame raised the exception a traceback ends in, where it is one: the harness is then
the cause, not the stack under test.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from harness.results.install_verdict import LABELS, classify

INSTALL_MESSAGE_LIMIT = 1600
INSTALL_PREFIXES = ("the pins cannot be installed together", "environment setup failed",
                    "not installable on this runner", "cannot be installed together")
MAX_FINDINGS = 5
FINDING_TEXT_LIMIT = 600


def is_install_failure(message: str) -> bool:
    return isinstance(message, str) and message.startswith(INSTALL_PREFIXES)


def install_reason(message: str) -> str:
    """One plain line: what cannot be installed and why. A cell's entry already holds its install verdict's
    line (results/install_verdict.py); a raw set-up failure without one is read by the same classifier."""
    if message.startswith(tuple(f"{label}: " for label in LABELS.values())):
        return message
    verdict = classify(message)
    if verdict is not None:
        return verdict.text()
    return message  # not a resolver's verdict (a disk, a network, a cut-off log): shown as it came


@dataclass(frozen=True, slots=True)
class Finding:
    case: str
    sides: tuple[tuple[str, str], ...]  # (which output, its text), in the order the verdict recorded them


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def _lines(text: str, clean: Callable[[Any, int], str]) -> str:
    """`text` cleaned line by line (a tool call or a rendered template reads by its lines), then capped."""
    kept = "\n".join(clean(line, FINDING_TEXT_LIMIT) for line in text.splitlines())
    return kept if len(kept) <= FINDING_TEXT_LIMIT else kept[:FINDING_TEXT_LIMIT - 1] + "\u2026"


def findings(metrics: dict[str, Any], clean: Callable[[Any, int], str]) -> tuple[Finding, ...]:
    """The first MAX_FINDINGS mismatches of a verdict's metrics, each output cleaned by `clean`."""
    found = metrics.get("mismatches")
    if not isinstance(found, list):
        return ()
    kept = []
    for item in found[:MAX_FINDINGS]:
        if isinstance(item, dict):
            sides = tuple((clean(key, 40), _lines(_text(value), clean))
                          for key, value in item.items() if key != "case")
            kept.append(Finding(clean(item.get("case", "?"), 80), sides))
    return tuple(kept)


_FRAME = re.compile(r'File "(?P<path>[^"\n]+)", line (?P<line>\d+)')
PROJECT_PACKAGES = ("harness", "trainers")
_INSTALLED = ("site-packages/", "dist-packages/")


def raised_here(*texts: Any) -> str | None:
    """"trainers/fsdp/engine.py, line 12" when the last frame of the last traceback in `texts` (a check's recorded
    traceback, a crash's log tail) is in this project's harness/ or trainers/ code; None otherwise. An installed
    package's file (site-packages) never counts, whatever its folders are called."""
    frames = [m for text in texts if isinstance(text, str) for m in _FRAME.finditer(text)]
    if not frames:
        return None
    path, line = frames[-1].group("path").replace("\\", "/"), frames[-1].group("line")
    parts = path.split("/")
    # The last such folder: a checkout may itself sit in a folder called harness.
    top = max((i for i, part in enumerate(parts[:-1]) if part in PROJECT_PACKAGES), default=None)
    if top is None or not path.endswith(".py") or any(part in path for part in _INSTALLED):
        return None
    return f"{'/'.join(parts[top:])}, line {line}"
