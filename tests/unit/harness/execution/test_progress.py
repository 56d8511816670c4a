"""Progress of a run: a redrawn bar on a real terminal, plain lines in CI and in logs."""
import io
import os

from harness.execution.progress import Progress
from harness.results.records import Status


def _on_a_terminal(monkeypatch, ci: str | None) -> str:
    """What Progress writes to a real pseudo-terminal, with CI set or not."""
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    leader, follower = os.openpty()
    with os.fdopen(follower, "w") as terminal:
        progress = Progress(2, stream=terminal)
        progress.started("cell-a")
        progress.finished("cell-a", [Status.PASS, Status.PASS, Status.FAIL])
        progress.started("cell-b", reused=True)
        progress.finished("cell-b", [Status.PASS])
    chunks = []
    while True:  # one read returns only what is buffered now; read until the closed end is drained
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the other end is closed and everything has been read
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    return b"".join(chunks).decode()


def test_a_terminal_gets_a_redrawn_bar(monkeypatch):
    text = _on_a_terminal(monkeypatch, None)
    assert "\r\x1b[K[" in text and "0/2 running cell-a" in text and "1/2 reusing cell-b" in text
    assert "[1/2] cell-a: 1 fail, 2 pass" in text and "[2/2] cell-b: 1 pass" in text


def test_ci_gets_plain_lines_even_on_a_terminal(monkeypatch):
    text = _on_a_terminal(monkeypatch, "true")
    assert "\x1b" not in text and "\r\x1b" not in text
    assert "[0/2 done] cell-a: running" in text
    assert "cell-b: running" not in text  # a reused cell is not started again


def test_a_log_file_gets_plain_lines(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    log = io.StringIO()
    progress = Progress(1, stream=log)
    progress.started("cell-a")
    progress.finished("cell-a", [])
    lines = log.getvalue().splitlines()
    assert lines[0] == "[0/1 done] cell-a: running"
    assert lines[1].startswith("[1/1] cell-a: no checks (") and "\x1b" not in log.getvalue()
