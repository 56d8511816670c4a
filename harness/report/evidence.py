"""Two kinds of result text the report shows in a form of its own: install failures and parser findings.

An install failure's message is "the pins cannot be installed together: <uv's command>: <log tail>"
(harness/execution/run.py); the reason a reader needs is uv's last sentence, near the end, so the message
is kept longer than others and `install_reason` turns it into one plain line. A parser or template verdict
(vllm-chat-parity) records each disagreement as {"case", <side>: <output>, <side>: <output>}; `findings`
keeps those pairs so the page can show both outputs side by side.
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

INSTALL_MESSAGE_LIMIT = 1600
INSTALL_PREFIXES = ("the pins cannot be installed together", "environment setup failed",
                    "not installable on this runner", "cannot be installed together")
MAX_FINDINGS = 5
FINDING_TEXT_LIMIT = 600

# uv's resolution report: "Because A==1 depends on B>=2,<3 and ..." or "Because there is no version of A==1 ...".
_NAME = r"([A-Za-z0-9._-]+)"
_DEPENDS = re.compile(rf"Because {_NAME}==(\S+?) depends on {_NAME}([<>=!~][^ ,]*(?:,[<>=!~][^ ,]*)*)")
_NO_VERSION = re.compile(r"there is no version of ([A-Za-z0-9._-]+)(==[0-9A-Za-z.+!-]*[0-9A-Za-z+!-])?")
_ARROW = "\u2570\u2500\u25b6"  # uv's arrow before its explanation
_NO_WHEEL = re.compile(r"(\S+)==(\S+) has no wheels? with a matching (platform|Python)[^.]*")


def is_install_failure(message: str) -> bool:
    return isinstance(message, str) and message.startswith(INSTALL_PREFIXES)


def install_reason(message: str) -> str:
    """One plain line: what cannot be installed and why, from uv's own words where they are present."""
    head = "cannot be installed together" if "installed together" in message[:60] else \
        message.split(":", 1)[0].removeprefix("the ")
    found = _DEPENDS.search(message)
    if found:
        package, version, dependency, spec = found.groups()
        return f"{head}: {package} {version} requires {dependency} {spec}"
    found = _NO_WHEEL.search(message)
    if found:
        return f"{head}: {found.group(0)}"
    found = _NO_VERSION.search(message)
    if found:
        return f"{head}: there is no version of {found.group(1)}{found.group(2) or ''} for this runner"
    tail = message.rsplit(_ARROW, 1)[-1] if _ARROW in message else message.split(": ", 1)[-1]
    return f"{head}: {tail.strip()}"


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
