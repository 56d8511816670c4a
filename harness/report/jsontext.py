"""report.json and support.json as text: orjson's encoding, kept pure ASCII.

orjson writes the same data as json.dumps, several times faster, but writes characters beyond ASCII as
UTF-8. Decoded to a str, a single emoji (the legend's status symbols) makes Python store every one of
the 31 million characters of a 10,000-cell report.json in four bytes: decoding and writing that cost more
than orjson saved. So the ASCII decoder reads it, and an error handler writes each other character as
json.dumps does (\\uXXXX, a surrogate pair beyond the BMP); the ASCII in between is decoded at C speed.

Without orjson (an air-gapped box runs the harness on its own interpreter, which need not have it), json.dumps
writes the same JSON data, pure ASCII, more slowly.
"""
from __future__ import annotations

import codecs
import json
from typing import Any

try:
    import orjson
except ModuleNotFoundError:  # a box's own interpreter (`run --here`): the standard library writes the same data
    orjson = None

_ASCII = bytes(range(128))
# Past this many non-ASCII bytes (a report of Chinese messages), one UTF-8 decode is faster than escaping
# each character: the text then holds them as they are, which is the same JSON data.
MANY_NON_ASCII = 100_000


_ESCAPED: dict[bytes, str] = {}  # a few characters repeat thousands of times (the " · " of column labels)


def _escape(error: UnicodeDecodeError) -> tuple[str, int]:
    """The \\u escape of the UTF-8 character at the error (orjson writes only valid UTF-8), and where to go on."""
    data, start = error.object, error.start
    lead = data[start]
    size = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    char = data[start:start + size]
    escaped = _ESCAPED.get(char)
    if escaped is None:
        if len(_ESCAPED) > 10_000:  # a report in another script must not grow it without bound
            _ESCAPED.clear()
        escaped = _ESCAPED[char] = json.dumps(char.decode("utf-8"))[1:-1]
    return escaped, start + size


codecs.register_error("harness-json-ascii", _escape)


def json_text(data: Any) -> str:
    """`data` as one line of JSON (no spaces), ending in a newline."""
    if orjson is None:
        return json.dumps(data, separators=(",", ":")) + "\n"
    raw = orjson.dumps(data, option=orjson.OPT_APPEND_NEWLINE)
    if raw.isascii():
        return raw.decode("ascii")
    if len(raw.translate(None, _ASCII)) > MANY_NON_ASCII:
        return raw.decode("utf-8")
    return raw.decode("ascii", "harness-json-ascii")
