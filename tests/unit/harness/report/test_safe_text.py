"""Safe text (safe_text.py): hostile text and links in result files never become markup, scripts or links in any
report format; control and bidi characters go; HTML is pure ASCII; the fast paths follow the rules."""
from __future__ import annotations

import random
import re
from html import unescape
from html.parser import HTMLParser

import pytest

from harness.report.build import build_report
from harness.report.html.page import to_html
from harness.report.json_files import to_json
from harness.report.markdown import md_text, to_markdown
from harness.report.row_verdicts import varying_axes
from harness.report.safe_text import escape_html, safe_link, safe_url
from harness.report.synthetic import HOSTILE_LINKS, HOSTILE_MESSAGES, HOSTILE_TITLE, hostile_cells, synthetic_cells
from harness.results.records import CellResult, CheckResult, Status


def hostile_report():
    return build_report(hostile_cells(), title=HOSTILE_TITLE, notes=["<iframe src=//evil>", "[n](javascript:x)"],
                        problems=["cells/x.json: <script>bad</script>\nsecond line"])


class TagCollector(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_startendtag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


ALLOWED_TAGS = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "ul", "li", "strong", "table", "br",
                "details", "summary", "caption", "section", "h3", "pre",
                "thead", "tbody", "tr", "th", "td", "a", "span", "div", "sup", "code", "figure", "figcaption",
                "svg", "g", "polygon", "polyline", "path", "text", "defs", "use"}


ALLOWED_ATTRS = {"lang", "charset", "http-equiv", "content", "name", "class", "title", "href", "id", "rowspan",
                 "colspan", "role", "width", "height", "viewbox", "transform", "points", "d", "x", "y",
                 "text-anchor", "aria-label", "aria-hidden", "scope", "aria-labelledby"}


@pytest.mark.parametrize("with_plots", [False, True])
def test_html_has_no_injected_tags_attributes_or_links(with_plots):
    report = hostile_report()
    if with_plots:  # the plots' shared parts: <use> links only to them, in the page
        report = build_report([*hostile_cells(), *synthetic_cells(40, seed=2)], title=HOSTILE_TITLE)
    html = to_html(report)
    parser = TagCollector()
    parser.feed(html)
    parser.close()
    tags = {tag for tag, _ in parser.tags}
    assert tags <= ALLOWED_TAGS, tags - ALLOWED_TAGS
    for tag, attrs in parser.tags:
        assert set(attrs) <= ALLOWED_ATTRS, (tag, attrs)
        if tag == "use":
            assert re.fullmatch(r"#pp\d+", attrs["href"]) and f'<g id="{attrs["href"][1:]}">' in html
        if tag == "a":
            href = attrs["href"]
            assert re.fullmatch(r"#(plot-\d+|r\d+|e\d+-\d+|g\d+-\d+|details|pins|standing)", href) or (
                safe_link(href) == href and ":" not in href) or safe_url(href) == href, href
    assert [tag for tag, _ in parser.tags].count("style") == 1
    text = "".join(parser.text)
    # The hostile text is still there, as text: a reader sees exactly what the result file said.
    assert "</table><script>alert(1)</script>" in text
    assert "[x](javascript:alert(1))" in text
    assert HOSTILE_TITLE in text
    assert "javascript:alert(document.cookie)" in text  # a known-failure link is shown, never linked
    for path in ("../../etc/passwd", "/etc/passwd", "http://evil.example/log", "javascript:alert(1)"):
        assert f"unsafe link not shown as a link: {path}" in text


def test_html_is_standalone():
    html = to_html(build_report(synthetic_cells(60, seed=4)))
    assert "<script" not in html and "<link" not in html and "@import" not in html and "url(" not in html
    # Nothing loads an address, and the only addresses linked are known failures' plain https links (a
    # hostile log path such as http://evil.example/log is shown as text).
    parser = TagCollector()
    parser.feed(html)
    assert not [(tag, attrs) for tag, attrs in parser.tags
                if any(name in ("href", "src", "srcset", "action", "data") and "//" in (value or "")
                       and not (tag == "a" and name == "href" and safe_url(value) == value)
                       for name, value in attrs.items())]
    assert "Content-Security-Policy" in html and "default-src 'none'" in html.replace("&#x27;", "'")


UNESCAPED = re.compile(r"(?<!\\)[|`*_\[\]<>~$]")


@pytest.mark.parametrize("message", HOSTILE_MESSAGES + [HOSTILE_TITLE, "a\\|b", "\\`x\\`"])
def test_md_text_leaves_no_markup_characters(message):
    escaped = md_text(message)
    assert "\n" not in escaped and "\r" not in escaped
    # Backslash pairs are literal backslashes; what remains must be escaped punctuation only.
    assert not UNESCAPED.search(escaped.replace("\\\\", "")), escaped
    # No autolinks (scheme, protocol-relative or www.), no mentions.
    assert "://" not in escaped and "//" not in escaped and "www." not in escaped and "@" not in escaped


def test_markdown_has_no_injected_markup_or_links():
    report = hostile_report()
    md = to_markdown(report)
    # The only raw HTML is the <details> blocks' own tags.
    bare = re.sub(r"^(<details><summary>|</details>$)", "", md, flags=re.M).replace("</summary>\n", "\n")
    assert "<" not in bare and ">" not in bare.replace("&gt;", "")
    assert "@" not in bare and "://" not in bare
    links = re.findall(r"(?<!\\)\[([^\]\n]*)(?<!\\)\]\(([^)\n]*)\)", md)
    assert links, "the report's own log and lock links are present"
    for label, target in links:
        assert label in ("log", "lock") and safe_link(target) == target and ":" not in target, (label, target)
    table = [line for line in md.splitlines() if line.startswith("| ")]
    width = len(varying_axes(report)[0]) + 2 + len(report.columns)
    for line in table:  # hostile pipes never add table columns
        assert len(re.findall(r"(?<!\\)\|", line.replace("\\\\", ""))) == width + 1, line
    assert "`" not in md.replace("\\`", "")


@pytest.mark.parametrize("path", HOSTILE_LINKS + ["", "cells/a/./..", "cells/\x00/x", "~root/x", "cells//x",
                                                  "cells/x/", "cells\\..\\x", 42, None])
def test_unsafe_links_are_rejected(path):
    assert safe_link(path) is None


def test_plain_relative_links_survive_and_are_encoded():
    assert safe_link("cells/a/logs/x.log") == "cells/a/logs/x.log"
    assert safe_link("./cells/a/lock.txt") == "cells/a/lock.txt"
    cell = CellResult("cpu", "c", {"transformers": "5.3.0"}, lock="cells/c d/lock (1).txt",
                      checks=[CheckResult("stack-smoke", Status.PASS, log='cells/c d/"x"#1.log')])
    report = build_report([cell])
    assert "[lock](cells/c%20d/lock%20%281%29.txt)" in to_markdown(report)
    html = to_html(report)
    assert 'href="cells/c%20d/lock%20%281%29.txt"' in html and 'href="cells/c%20d/%22x%22%231.log"' in html


def test_html_is_ascii_and_its_decoded_text_has_no_controls_or_bidi():
    # report.html writes non-ASCII characters as references: check what a browser would decode.
    cell = CellResult("cpu", "c\u202e", {"transformers": "5.3.0\x1b[31m"},
                      checks=[CheckResult("stack-smoke", Status.FAIL, "a\u202eb\x00c\x1b[0m\u2066d \u2705 \u00e9")])
    for report in (build_report([cell]), hostile_report()):
        html = to_html(report)
        assert html.isascii()
        decoded = unescape(html)
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]", decoded)
    assert "abc[0md \u2705 \u00e9" in unescape(to_html(build_report([cell])))


def test_control_and_bidi_characters_are_removed_everywhere():
    cell = CellResult("cpu", "c\u202e", {"transformers": "5.3.0\x1b[31m"},
                      checks=[CheckResult("stack-smoke", Status.FAIL, "a\u202eb\x00c\x1b[0m\u2066d")])
    report = build_report([cell])
    for text in (to_markdown(report), to_html(report), str(to_json(report))):
        assert not re.search("[\x00-\x08\x0b-\x1f\x7f\u202a-\u202e\u2066-\u2069]", text)


def _safe_link_rules(path):
    """safe_link's rules written plainly: the reference for its fast path."""
    if not isinstance(path, str) or not path or len(path) > 1000 or path[0] in "/~" \
            or re.search(r"[\x00-\x1f\x7f:\\]", path):
        return None
    parts = [p for p in path.split("/") if p != "."]
    if not parts or "" in parts or ".." in parts:
        return None
    return "/".join(parts)


def test_safe_link_fast_path_follows_the_rules():
    rng = random.Random(3)
    alphabet = "ab._-~/:\\+=,\x00 é"
    paths = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 12))) for _ in range(20_000)]
    paths += ["a/b.log", ".a/b", "a/..b", "a/b..", "..a", "a/.", "a/./b", "-a/_b", "a" * 1001, "a/" * 500 + "b"]
    for path in paths:
        assert safe_link(path) == _safe_link_rules(path), path


def test_escape_html_is_html_escape_written_in_ascii():
    text = "<a href='x'>&</a> \u2705 \u00b7 \U0001f4a5 \u202e"
    assert escape_html(text) == "&lt;a href=&#x27;x&#x27;&gt;&amp;&lt;/a&gt; &#9989; &#183; &#128165; &#8238;"
