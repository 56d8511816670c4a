"""Writing a file whole (harness/files.py): a unique temporary file beside the target, replaced in one rename, the
target's mode kept, a link in its place replaced and never followed; and a file option checked before a run."""
from __future__ import annotations

import pytest

from harness import files


def test_a_file_is_replaced_whole_keeping_its_mode(tmp_path):
    target = tmp_path / "review.toml"
    target.write_text("old\n")
    target.chmod(0o440)
    files.write_text_atomic(target, "new\n")
    assert target.read_text() == "new\n" and target.stat().st_mode & 0o777 == 0o440
    assert [p.name for p in tmp_path.iterdir()] == ["review.toml"]  # no temporary file left


def test_a_link_at_the_target_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    (tmp_path / "out.json").symlink_to(victim)
    files.write_json_atomic(tmp_path / "out.json", {"a": 1})
    assert victim.read_text() == "precious\n"
    assert not (tmp_path / "out.json").is_symlink() and (tmp_path / "out.json").read_text() == '{\n "a": 1\n}\n'
    assert (tmp_path / "out.json").stat().st_mode & 0o777 == 0o666 & ~files.umask()  # a new file's, not the link's


def test_a_link_planted_at_a_guessable_temporary_name_is_never_written(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    for name in ("out.json.tmp", ".out.json.tmp", "out.tmp"):
        (tmp_path / name).symlink_to(victim)
    files.write_text_atomic(tmp_path / "out.json", "{}\n")
    assert victim.read_text() == "precious\n" and (tmp_path / "out.json").read_text() == "{}\n"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    target = tmp_path / "figures.json"
    target.write_text("kept\n")
    with pytest.raises(RuntimeError), files.atomic_writer(target) as handle:
        handle.write(b"half")
        raise RuntimeError("the disk filled up")
    assert target.read_text() == "kept\n" and [p.name for p in tmp_path.iterdir()] == ["figures.json"]


def _a_file(folder):
    (folder / "f").write_text("")
    return folder / "f"


@pytest.mark.parametrize("make, expected", [
    (lambda tmp: tmp, "is a directory; expected a file"),
    (lambda tmp: _a_file(tmp) / "x.json", "is not a directory"),
    (lambda tmp: tmp / "new" / "deeper" / "x.json", None),
    (lambda tmp: tmp / "x.json", None),
])
def test_a_file_option_is_checked_before_anything_runs(tmp_path, make, expected):
    problem = files.file_problem("--out", make(tmp_path))
    assert problem is None if expected is None else problem.startswith("--out ") and expected in problem


def test_an_unwritable_folder_is_named(tmp_path, monkeypatch):
    monkeypatch.setattr(files.os, "access", lambda path, mode: False)
    assert files.file_problem("--write", tmp_path / "x.toml") == (
        f"--write {tmp_path / 'x.toml'}: cannot create it under {tmp_path} (not writable)")
