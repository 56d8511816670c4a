"""Where verl's example scripts come from: a folder (HARNESS_VERL_EXAMPLES) or GitHub's tarball of the release's
tag, read in memory and filtered; a runner that cannot reach github.com is told exactly that."""
from __future__ import annotations

import io
import tarfile
import urllib.error

import pytest

from harness.errors import InputError
from harness.plans import verl_sources


def test_a_folder_gives_its_qwen35_scripts_by_repository_path(resources, monkeypatch):
    monkeypatch.setenv(verl_sources.FOLDER_VARIABLE, str(resources / "verl_examples"))
    scripts, origin = verl_sources.scripts("0.9.1")
    assert list(scripts) == ["examples/grpo_trainer/run_qwen3_5_27b_fsdp.sh"]
    assert "HARNESS_VERL_EXAMPLES" in origin and "verl 0.9.1" in origin


def test_a_folder_without_examples_is_a_one_line_input_error(tmp_path):
    with pytest.raises(InputError, match="HARNESS_VERL_EXAMPLES=.*expected a folder holding verl's examples/"):
        verl_sources.from_folder(str(tmp_path))


def _tarball(path, members: dict[str, bytes], links: dict[str, str] = ()) -> None:
    with tarfile.open(path, "w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, target in dict(links).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = tarfile.SYMTYPE, target
            tar.addfile(info)


def test_the_tarball_is_read_in_memory_keeping_only_regular_qwen35_scripts_under_examples(tmp_path):
    archive = tmp_path / "verl.tar.gz"
    _tarball(archive, {"verl-0.9.1/examples/grpo_trainer/run_qwen3_5_27b_fsdp.sh": b"echo ok\n",
                       "verl-0.9.1/examples/grpo_trainer/run_qwen3_8b.sh": b"other model\n",
                       "verl-0.9.1/examples/../run_qwen3_5_escape.sh": b"outside\n",
                       "verl-0.9.1/verl/run_qwen3_5_x.sh": b"not an example\n"},
             links={"verl-0.9.1/examples/run_qwen3_5_link.sh": "/etc/passwd"})
    assert verl_sources.read_tarball(archive) == {"examples/grpo_trainer/run_qwen3_5_27b_fsdp.sh": "echo ok\n"}
    assert [p.name for p in tmp_path.iterdir()] == ["verl.tar.gz"]  # nothing extracted


def test_a_runner_that_cannot_reach_github_says_exactly_that(monkeypatch):
    def unreachable(url, timeout):
        raise urllib.error.URLError("Could not resolve host: codeload.github.com")

    monkeypatch.delenv(verl_sources.FOLDER_VARIABLE, raising=False)
    monkeypatch.setattr(verl_sources.urllib.request, "urlopen", unreachable)
    with pytest.raises(verl_sources.Unavailable) as caught:
        verl_sources.from_github("v0.9.1")
    assert str(caught.value).startswith("verl's example scripts are not shipped in its sdist or wheel; this runner "
                                        "cannot reach github.com")


@pytest.mark.parametrize("ref", ["v0.9.1; rm -rf /", "main", "v0.9", "../v0.9.1", "0" * 39])
def test_only_a_tag_or_a_commit_reaches_the_url(ref, monkeypatch):
    monkeypatch.setattr(verl_sources.urllib.request, "urlopen", lambda *a, **k: pytest.fail("no request"))
    with pytest.raises(verl_sources.Unavailable, match="not a verl tag or commit"):
        verl_sources.from_github(ref)


@pytest.mark.parametrize("release, expected", [("0.9.1", "v0.9.1"), ("0.8.0.post1", "v0.8.0.post1")])
def test_a_release_is_read_at_its_tag(release, expected, monkeypatch):
    monkeypatch.setattr(verl_sources, "distribution", lambda name: (_ for _ in ()).throw(
        verl_sources.PackageNotFoundError(name)))
    assert verl_sources.revision(release) == expected


def test_a_release_without_a_tag_or_commit_is_unavailable(monkeypatch):
    monkeypatch.setattr(verl_sources, "distribution", lambda name: (_ for _ in ()).throw(
        verl_sources.PackageNotFoundError(name)))
    with pytest.raises(verl_sources.Unavailable, match="neither a release with a tag"):
        verl_sources.revision("0.10.0.dev0+gabc")
