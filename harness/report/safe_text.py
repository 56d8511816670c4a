"""Safe text: what the report takes from result files, made one clean line, a safe link, or escaped HTML.

Free text from result files is cleaned once, when the report is built (control and bidi characters removed,
length capped); each renderer then escapes it for its own format. A log or lock path becomes a link only
when it is a plain relative path inside the report directory, and a known failure's link only when it is a
plain https URL; anything else is shown as text.

HTML escaping writes pure ASCII: every other character becomes a numeric character reference, which a
browser shows as the same text. The point is memory: Python stores an all-ASCII str with one byte per
character, but a str holding a single emoji (the status symbols) with four, and a 10,000-cell page is about
44 million characters. Keeping every piece ASCII makes rendering it about 40% faster.
"""
from __future__ import annotations

import re
from html import escape
from typing import Any

MESSAGE_LIMIT = 200

# C0/C1 controls, bidi overrides ("Trojan source") and lone surrogates (json.loads makes them from "\ud800";
# no UTF-8 file can hold one) never reach a rendered report.
_STRIP = {c: None for c in [*range(32), 127, *range(0x80, 0xA0), *range(0x202A, 0x202F), *range(0x2066, 0x206A),
                            *range(0xD800, 0xE000)]}
_STRIP.update({ord(c): " " for c in "\t\n\r\x0b\x0c"})


def clean_text(value: Any, limit: int = MESSAGE_LIMIT) -> str:
    """One line of plain text, at most `limit` characters."""
    text = value if isinstance(value, str) else str(value)
    if not text:
        return ""
    # Fast path for the common case; isprintable() is False for controls, newlines and bidi overrides.
    if not (len(text) <= limit and text.isprintable() and "  " not in text and text[0] != " " != text[-1]):
        text = " ".join(text.translate(_STRIP).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Cleaned(dict):
    """clean_text with memory, for the values thousands of rows repeat (versions, platforms)."""

    def __init__(self, limit: int):
        super().__init__()
        self.limit = limit

    def __missing__(self, value: str) -> str:
        text = self[value] = clean_text(value, self.limit)
        return text


# A scheme (javascript:, http:), a drive letter, a control, a lone surrogate.
_UNSAFE_LINK = re.compile(r"[\x00-\x1f\x7f:\\\ud800-\udfff]")


# Segments of these characters that do not start with a dot pass every rule of safe_link: the usual log
# and lock paths, accepted by one match.
PLAIN_LINK = re.compile(r"[A-Za-z0-9_+=,-][A-Za-z0-9._+=,-]*(?:/[A-Za-z0-9_+=,-][A-Za-z0-9._+=,-]*)*")


def safe_link(path: Any) -> str | None:
    """`path` if it is a plain relative path inside the report directory, else None (shown as text)."""
    if isinstance(path, str) and len(path) <= 1000 and PLAIN_LINK.fullmatch(path):
        return path
    if not isinstance(path, str) or not path or len(path) > 1000 or path[0] in "/~" or _UNSAFE_LINK.search(path):
        return None
    parts = path.split("/")
    if "." in parts:
        parts = [p for p in parts if p != "."]
        path = "/".join(parts)
    if not parts or "" in parts or ".." in parts:
        return None
    return path


# An https URL of plain characters (no quotes, spaces, angle brackets or backslashes): shown as a link.
_SAFE_URL = re.compile(r"https://[A-Za-z0-9.-]+(?::\d+)?(?:/[A-Za-z0-9._~!$&+,;=:@%/-]*)?(?:#[A-Za-z0-9._~/:-]*)?")


def safe_url(link: Any) -> str | None:
    """`link` if it is a plain https URL (a known failure's link, say), else None (shown as text)."""
    return link if isinstance(link, str) and len(link) <= 500 and _SAFE_URL.fullmatch(link) else None


def ascii_html(markup: str) -> str:
    """Markup or already-escaped text with its non-ASCII characters as &#N; references."""
    return markup if markup.isascii() else markup.encode("ascii", "xmlcharrefreplace").decode("ascii")


def escape_html(text: str) -> str:
    """html.escape (quotes included), then ascii_html: safe in text and in quoted attribute values."""
    # Most text has nothing to escape; five `in` tests find that four times faster than escape's replaces.
    if text.isascii() and not ("&" in text or "<" in text or ">" in text or '"' in text or "'" in text):
        return text
    return ascii_html(escape(text))


class Escaper(dict):
    """escape_html with memory: statuses, names and many messages repeat across thousands of entries."""

    def __missing__(self, text: str) -> str:
        value = self[text] = escape_html(text)
        return value
