"""A directory option is checked before anything runs: a file, a path under a file, or a directory that
cannot be written is named; a directory that exists or can be made is fine."""
from pathlib import Path

from harness.results import directories
from harness.results.directories import directory_problem


def test_files_and_paths_under_files_are_named(tmp_path):
    (tmp_path / "file").write_text("x")
    assert directory_problem("--out", tmp_path / "file") == f"--out {tmp_path / 'file'}: exists and is not a directory"
    assert directory_problem("--out", tmp_path / "file" / "a" / "b") == (
        f"--out {tmp_path / 'file' / 'a' / 'b'}: {tmp_path / 'file'} is not a directory")


def test_existing_and_makeable_directories_pass(tmp_path):
    assert directory_problem("--work-dir", tmp_path) is None
    assert directory_problem("--work-dir", tmp_path / "new" / "deeper") is None
    assert not (tmp_path / "new").exists()  # asking makes nothing


def test_a_directory_that_cannot_be_written_is_named(tmp_path, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    # as the kernel would answer for another user's directory (root may write anywhere, so it is asked, not made)
    monkeypatch.setattr(directories.os, "access", lambda path, mode: Path(path) != locked)
    assert directories.directory_problem("--out", locked) == f"--out {locked}: directory not writable"
    assert directories.directory_problem("--out", locked / "sub") == (
        f"--out {locked / 'sub'}: cannot create it under {locked} (not writable)")
