"""The repro command the report shows: plain ids as they are, anything else quoted so a shell gets the words back."""
import shlex

import pytest

from harness.report.build import repro_command as command

HOSTILE = ["cell with spaces", "x;rm -rf ~", "$(touch pwned)", "it's", "`id`", "a\"b", "", "-leading-dash"]


def test_a_plain_command_is_written_as_is():
    assert command("fsdp-text-tf5.9.0-torch2.13.0", "stack-smoke") == \
        "python -m harness repro fsdp-text-tf5.9.0-torch2.13.0 --check stack-smoke"
    assert command("c", "x", "reports/cpu") == "python -m harness repro c --check x --dir reports/cpu"


@pytest.mark.parametrize("word", HOSTILE)
def test_a_shell_gets_back_exactly_the_words(word):
    for args in ((word, "stack-smoke"), ("cell", word), ("cell", "stack-smoke", word)):
        expected = ["python", "-m", "harness", "repro", args[0], "--check", args[1]]
        expected += ["--dir", word] if len(args) == 3 and word else []
        assert shlex.split(command(*args)) == expected
        assert command(*args) == shlex.join(expected)


def test_the_round_trip_sees_an_unquoted_word():
    """The comparison above fails on a command that leaves a hostile word unquoted."""
    unquoted = "python -m harness repro cell with spaces --check stack-smoke"
    assert shlex.split(unquoted) != ["python", "-m", "harness", "repro", "cell with spaces", "--check", "stack-smoke"]
