"""Figures written by hand in the docs: a time the text says was measured (taken, cost, spent, "about N s",
"N s of CPU time") anywhere but the measured page, whose tables are generated from
bench/figures.json. Such a figure goes stale unseen as the code changes; a page points to docs/measured.md
instead. Settings (a timeout, a limit, a budget a setting holds) are no measurement and are not matched:
"a 300 s timeout", "older than 10 minutes". Every line counts, generated blocks too (a docstring's figure is written
by hand as well) and code blocks (pasted output)."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from harness.docsgen import pages as docpages

MEASURED_PAGE = Path("docs") / "measured.md"

_NUMBER = r"\d[\d.,]*(?:\s*(?:to|-|–)\s*\d[\d.,]*)?"
_TIME = r"(?:ms|s|sec|seconds?|min|minutes?|h|hours?)\b"
_SAYS_MEASURED = (r"(?:about|around|roughly|nearly|almost|approximately|~|takes?|took|taking|costs?|costing|spent|"
                  r"spends?|pays?|paid|saves?|saved|lasts?|lasted)")
PATTERN = re.compile(
    rf"(?<!\w){_SAYS_MEASURED}\s*(?:about\s+|only\s+|just\s+)?{_NUMBER}\s*{_TIME}"  # "takes about 3 s"
    rf"|{_NUMBER}\s*{_TIME}\s+of\s+(?:CPU|wall)\b",  # "12 s of CPU time"
    re.IGNORECASE)


@dataclass(frozen=True)
class Found:
    page: Path
    line: int
    text: str

    def __str__(self) -> str:
        return (f"{self.page}:{self.line}: a figure written by hand ({self.text!r}); figures belong in "
                f"{MEASURED_PAGE.as_posix()}, generated from bench/figures.json: point there instead")


def by_hand(root: Path = docpages.ROOT) -> list[Found]:
    found = []
    for page in docpages.pages(root):
        relative = page.relative_to(root)
        if relative == MEASURED_PAGE:
            continue
        for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), start=1):
            found += [Found(relative, number, match.group(0)) for match in PATTERN.finditer(line)]
    return found
