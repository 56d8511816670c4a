"""Bisect: the search itself, its inputs, and a real bisect of a known change."""
import math
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from harness.errors import InputError
from harness.matrix.index import PackageIndex
from harness.rerun import bisect as bs

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("n, change", [(2, 1), (9, 5), (16, 1), (16, 15), (33, 20)])
def test_bisect_finds_the_first_change_in_log_calls(n, change):
    versions = [Version(f"1.{i}.0") for i in range(n)]
    calls = []

    def verdict(v):
        calls.append(v)
        return "pass" if versions.index(v) < change else "affected"

    result = bs.bisect(versions, verdict)
    assert result.first_changed == versions[change] and result.last_same == versions[change - 1]
    assert len(calls) <= 2 + math.ceil(math.log2(n))


def test_no_change_between_the_ends_says_so():
    result = bs.bisect([Version("1.0"), Version("1.1"), Version("1.2")], lambda v: "pass")
    assert result.first_changed is None and "does not change" in result.summary()


@pytest.fixture
def index(tmp_path):
    simple = tmp_path / "simple" / "transformers"
    simple.mkdir(parents=True)
    names = ["5.3.0", "5.4.0", "5.5.0rc1", "5.5.0", "5.9.0"]
    simple.joinpath("index.html").write_text("".join(f'<a href="transformers-{v}.tar.gz">x</a>' for v in names))
    return PackageIndex(f"file://{tmp_path / 'simple'}", [])


def test_releases_between_skip_prereleases(index):
    assert [str(v) for v in bs.releases_between(index, "transformers", "5.3.0", "5.9.0")] == \
        ["5.3.0", "5.4.0", "5.5.0", "5.9.0"]


@pytest.mark.parametrize("good, bad, message", [
    ("5.3.0", "5.3.0", "nothing to bisect"),
    ("5.3.1", "5.9.0", "--good: transformers 5.3.1 is not a release"),
    ("5.3.0", "9.9.9", "--bad: transformers 9.9.9 is not a release"),
    ("five", "5.9.0", "--good/--bad"),
    ("5.9.0", "5.3.0", "--good 5.9.0 is newer than --bad 5.3.0"),
])
def test_bad_ranges_are_clear_errors(index, good, bad, message):
    with pytest.raises(InputError, match=message):
        bs.releases_between(index, "transformers", good, bad)


def test_a_package_that_does_not_exist_is_a_clear_error(index):
    with pytest.raises(InputError, match="not found"):
        bs.releases_between(index, "no-such-package", "1.0", "2.0")
    with pytest.raises(InputError, match="is not a package axis"):
        bs.package_axis("left-pad")


def test_cli_rejects_a_range_without_releases():
    done = subprocess.run([sys.executable, "-m", "harness", "bisect", "--package", "transformers", "--good", "5.3.0",
                           "--bad", "5.3.0", "--check", "stack-smoke"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "nothing to bisect" in done.stderr


@pytest.mark.slow
def test_real_bisect_finds_the_release_that_brought_qwen35(tmp_path):
    done = subprocess.run([sys.executable, "-m", "harness", "bisect", "--package", "transformers", "--good", "5.0.0",
                           "--bad", "5.2.0", "--check", "stack-smoke", "--out", str(tmp_path / "b"),
                           "--env-root", str(tmp_path / "envs")], capture_output=True, text=True, cwd=ROOT,
                          timeout=1500)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "first transformers release with a different verdict is 5.2.0" in done.stdout
    assert "last like the good end: 5.1.0" in done.stdout
    assert (tmp_path / "b" / "bisect.json").exists()


@pytest.mark.parametrize("args, message", [
    (("--good", "5.9.0", "--bad", "5.3.0", "--check", "stack-smoke"), "--good 5.9.0 is newer than --bad 5.3.0"),
    (("--good", "5.3.0", "--bad", "5.9.0", "--check", "offload-regression", "--verdict", "upsteam"),
     "--verdict: offload-regression gives no verdict 'upsteam'"),
    (("--good", "5.3.0", "--bad", "5.9.0", "--check", "stack-smoke", "--verdict", "trainer"),
     "--verdict: stack-smoke gives no verdict 'trainer'"),
])
def test_cli_refuses_a_bisect_that_cannot_mean_what_it_says_before_building_anything(tmp_path, args, message):
    done = subprocess.run([sys.executable, "-m", "harness", "bisect", "--package", "transformers", *args,
                           "--out", str(tmp_path / "b"), "--env-root", str(tmp_path / "envs")],
                          capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert done.stderr.strip().count("\n") == 0
    assert not (tmp_path / "b").exists() and not (tmp_path / "envs").exists()


def test_every_verdict_a_check_declares_is_accepted():
    for check, names in (("offload-regression", ["upstream", "trainer/real-fsdp2"]),
                         ("patch-parity", ["packed-vs-unpacked:text", "target-audit:torch_npu-ops"]),
                         ("nested-chunking", ["ragged-middle/trainer"]), ("grpo-convergence", ["band"]),
                         ("bridge-parity", ["text-hybrid-tp1", "moe-hybrid-ep2", "packed-gdn"])):
        for name in names:
            bs.check_verdict(check, name)
    bs.check_verdict("stack-smoke", None)
