"""report.junit.xml's attribute quoting: the fast path gives quoteattr's text, whatever the value holds."""
import random
from xml.sax.saxutils import quoteattr

from harness.report.junit import _Quoted


def test_remembered_quoting_is_quoteattr():
    rng = random.Random(0)
    alphabet = "ab&<>\"'\n\r\t x\u00e9"
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 8))) for _ in range(5000)]
    texts += ["fsdp-text-tf5.23.0-torch2.13.0", "it's", 'say "hi"', "a\tb", ""]
    quoted = _Quoted()
    for text in texts:
        assert quoted[text] == quoteattr(text), repr(text)
    # The comparison sees a value quoted as it is where quoteattr escapes it.
    assert f'"{texts[-4]}"' != quoteattr(texts[-4]) or f'"{texts[-3]}"' != quoteattr(texts[-3])
