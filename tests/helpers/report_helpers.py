"""Helpers for the report tests: a page with its plots' shared parts put back, and a page as a browser shows it."""
from __future__ import annotations

import re
from html.parser import HTMLParser

_SHARED = re.compile(r'<svg class="plot-defs"[^>]*><defs>(.*?)</defs></svg>', re.DOTALL)


def expand_shared_plot_parts(page: str) -> str:
    """The page with each `<use href="#ppN"/>` replaced by the part it shows, and the parts' holder removed."""
    page = page.replace("svg.plot-defs{position:absolute}\n", "")
    found = _SHARED.search(page)
    if not found:
        return page
    parts = dict(re.findall(r'<g id="(pp\d+)">(.*?)</g>', found.group(1)))
    page = page[:found.start()] + page[found.end():]
    return re.sub(r'<use href="#(pp\d+)"/>', lambda use: parts[use.group(1)], page)


class Shown(HTMLParser):
    """A page as a browser shows it: tags with their attributes (but class and aria-hidden) and text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.lines: list[str] = []
        self.in_style = False

    def handle_starttag(self, tag, attrs):
        self.in_style = tag == "style"
        kept = sorted((k, v) for k, v in attrs if k not in ("class", "aria-hidden"))
        self.lines.append(f"<{tag}" + "".join(f" {k}={v!r}" for k, v in kept) + ">")

    def handle_data(self, data):
        if not self.in_style and data.strip():
            self.lines.append(data)

    def handle_endtag(self, tag):
        self.in_style = False


def shown(page: str) -> list[str]:
    parser = Shown()
    parser.feed(expand_shared_plot_parts(page))
    return parser.lines
