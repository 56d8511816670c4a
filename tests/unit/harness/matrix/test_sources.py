"""What only GPU clusters need is left out of a row's resolution as data (`install.exclude`), and a package
axis may name a git revision (`mbridge = "git+https://github.com/OWNER/REPO@REV"`), validated before it
reaches uv; a row whose source this runner cannot reach is "not installable on this runner"."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from harness import matrix
from harness.envs import cellenv
from harness.errors import InputError
from harness.execution import cell as cell_module
from harness.execution.cell import RunOptions, run_cell
from harness.matrix import sources
from harness.results.records import Status

ROOT = Path(__file__).resolve().parents[4]
REV = "9b43cc0d0e220416523a9fe46e9164558870b124"
SOURCE = f"git+https://github.com/ISEEKYAN/mbridge@{REV}"
HEAD = """
[matrix]
name = "t"
checks = ["stack-smoke"]
[axes]
transformers = ["5.23.0"]
backend = ["megatron"]
model = ["text"]
device = ["cpu"]
[[include]]
megatron_core = "0.16.1"
"""
# uv 0.13.9's words on a runner without a route to github.com (measured on this project's CPU runner)
UV_UNREACHABLE = f"""error: Failed to download and build `mbridge @ {SOURCE}`
  cause: Git operation failed
  cause: failed to clone into: /cache/git-v2/db/168c39e83a966d0f
  cause: failed to fetch commit `{REV}`
         fatal: unable to access 'https://github.com/ISEEKYAN/mbridge/': Could not resolve host: github.com"""


def _load(tmp_path, text):
    path = tmp_path / "m.toml"
    path.write_text(text)
    return matrix.load(path)


def test_the_megatron_bridge_row_leaves_the_cluster_packages_out_and_says_so_in_its_install_order():
    cell, = matrix.load(ROOT / "matrices" / "cpu.toml").select(tags=["megatron-bridge"])
    assert cell.axes["megatron_bridge"] == "0.6.2"
    assert "nvidia-resiliency-ext" in cell.install.exclude and "fast-hadamard-transform" in cell.install.exclude
    assert cell.install.overrides()[0] == 'nvidia-resiliency-ext; python_version < "0"'
    venv, pins = cell.install_order()
    assert venv == "uv venv --python 3.12"
    assert pins.startswith("uv pip install --override overrides.txt ") and "megatron-bridge==0.6.2" in pins
    assert 'nvidia-resiliency-ext; python_version < "0"' in pins and "left out of the resolution" in pins


@pytest.mark.parametrize("value", ["nvidia-resiliency-ext; python_version < '0'", "a b", "--index-url=x", ""])
def test_an_excluded_name_must_be_a_distribution_name(tmp_path, value):
    with pytest.raises(InputError) as caught:
        _load(tmp_path, HEAD + f"install = {{ exclude = [{json.dumps(value)}] }}\n")
    assert "include[0].install.exclude" in str(caught.value) and "is not a distribution name" in str(caught.value)


def test_build_hands_uv_the_override_file_of_the_excluded_names(tmp_path, monkeypatch):
    calls = []

    def run_logged(argv, log, env):
        calls.append(argv[1:])
        if argv[1] == "venv":
            (Path(argv[-1]) / "bin").mkdir(parents=True, exist_ok=True)
            (Path(argv[-1]) / "bin" / "python").write_text("")
        if "--override" in argv:  # the file exists when uv reads it
            calls[-1] = [*argv[1:], Path(argv[argv.index("--override") + 1]).read_text()]

    monkeypatch.setattr(cellenv, "_run_logged", run_logged)
    monkeypatch.setattr(cellenv, "uv_binary", lambda: "uv")
    monkeypatch.setattr(cellenv, "install_import_recorder", lambda env: None)
    cellenv.build("mb", ["megatron-bridge==0.6.2"], tmp_path / "envs", tmp_path / "setup.log",
                  overrides=('nvidia-resiliency-ext; python_version < "0"',))
    install = calls[1]
    assert install[:2] == ["pip", "install"] and "--override" in install
    assert install[-1] == 'nvidia-resiliency-ext; python_version < "0"\n'
    assert "megatron-bridge==0.6.2" in install


def test_a_git_revision_is_an_axis_value_with_its_own_id_requirement_and_no_index_release(tmp_path):
    m = _load(tmp_path, HEAD + f'mbridge = "{SOURCE}"\n[[tags]]\ntag = "release"\nwhen = {{ mbridge = ">=0" }}\n'
              f'[[include]]\nmegatron_core = "0.16.1"\nmbridge = "0.15.1"\n')
    source = next(c for c in m.cells if sources.is_source(c.axes.get("mbridge", "")))
    assert source.id.endswith(f"mbridgegit-{REV[:12]}")
    assert f"mbridge @ {SOURCE}" in source.requirements
    assert "mbridge" not in source.pinned_releases()  # nothing to look up on the package index
    assert [c.axes["mbridge"] for c in m.select(tags=["release"])] == ["0.15.1"]  # no version matches a source


@pytest.mark.parametrize("value", [
    "git+http://github.com/ISEEKYAN/mbridge@main",                   # not https
    "git+ssh://git@github.com/ISEEKYAN/mbridge@main",                # not https
    "git+https://evil.example/ISEEKYAN/mbridge@main",                # host not allowed
    "git+https://github.com/ISEEKYAN/mbridge",                       # no revision
    "git+https://github.com/ISEEKYAN/mbridge@main;rm -rf /",         # shell syntax
    "git+https://user:pw@github.com/ISEEKYAN/mbridge@main",          # credentials
    "git+https://github.com/ISEEKYAN/mbridge@main#egg=x",            # fragment
    "git+https://github.com/../mbridge@main",                        # path tricks
])
def test_a_malformed_git_source_is_a_one_line_error(tmp_path, value):
    with pytest.raises(InputError) as caught:
        _load(tmp_path, HEAD + f'mbridge = "{value}"\n')
    assert "include[0].mbridge" in str(caught.value) and "\n" not in str(caught.value)


def test_only_the_source_axes_take_a_git_value(tmp_path):
    with pytest.raises(InputError, match="not a valid version"):
        _load(tmp_path, HEAD.replace('megatron_core = "0.16.1"', f'megatron_core = "{SOURCE}"'))


def test_an_unreachable_git_source_is_a_runner_limit_and_nothing_else_is():
    found = sources.unreachable_source([f"mbridge @ {SOURCE}"], UV_UNREACHABLE)
    assert found.startswith("not installable on this runner") and "github.com" in found
    assert sources.unreachable_source(["mbridge==0.15.1"], UV_UNREACHABLE) is None  # no source in the row
    assert sources.unreachable_source([f"mbridge @ {SOURCE}"], "No solution found when resolving") is None


def test_a_row_whose_source_cannot_be_reached_reads_not_installable_never_broken(tmp_path, monkeypatch):
    (tmp_path / "m.toml").write_text(textwrap.dedent(HEAD + f'mbridge = "{SOURCE}"\n'))
    m = matrix.load(tmp_path / "m.toml")
    cell = next(c for c in m.cells if "mbridge" in c.axes)
    tries = []

    def build(*args, **kwargs):
        tries.append(1)
        raise cellenv.SetupFailed(f"`uv pip install` exited with status 1: {UV_UNREACHABLE}")

    monkeypatch.setattr(cell_module.cellenv, "build", build)
    result = run_cell(cell, m, RunOptions(out_dir=tmp_path / "out", env_root=tmp_path / "envs", retries=2))
    check, = result.checks
    assert check.message.startswith("not installable on this runner") and "github.com" in check.message
    assert check.status == Status.ERROR and check.failure_class == "install-runner"  # a runner limit, not a failure
    assert len(tries) == 1  # out of reach: trying again cannot help

    def other(*args, **kwargs):
        raise cellenv.SetupFailed("`uv pip install` exited with status 2: disk full")

    monkeypatch.setattr(cell_module.cellenv, "build", other)
    again = run_cell(cell, m, RunOptions(out_dir=tmp_path / "out2", env_root=tmp_path / "envs", retries=0))
    assert again.checks[0].message.startswith("environment setup failed")


def test_the_report_shows_a_git_source_row_beside_release_rows():
    from harness.report.build import build_report
    from harness.report.html.page import to_html
    from harness.results.records import CellResult, CheckResult

    axes = {"backend": "megatron", "model": "text", "transformers": "5.23.0", "megatron_core": "0.16.1"}
    rows = [CellResult("cpu", "a", {**axes, "mbridge": SOURCE}, checks=[CheckResult(
                "stack-smoke", Status.ERROR, "not installable on this runner: it cannot reach github.com <x>",
                failure_class="infra")]),
            CellResult("cpu", "b", {**axes, "mbridge": "0.15.1"},
                       checks=[CheckResult("stack-smoke", Status.PASS, "ok")])]
    page = to_html(build_report(rows))
    assert SOURCE in page and "0.15.1" in page and "<x>" not in page


VERL_SOURCE = "git+https://github.com/verl-project/verl@1dda039b9c6311889a9c9a26040677e1254814f9"
VERL_HEAD = HEAD.replace('backend = ["megatron"]', 'backend = ["fsdp"]').replace('megatron_core = "0.16.1"\n', "")


def test_verl_from_git_is_a_row_named_by_its_commit_that_a_selector_can_name(tmp_path):
    m = _load(tmp_path, VERL_HEAD + f'verl = "{VERL_SOURCE}"\nverl_extra = "cpu"\n'
                                    f'[[tags]]\ntag = "verl-git"\nwhen = {{ verl = "{VERL_SOURCE}" }}\n')
    cell, = m.select(tags=["verl-git"])
    assert cell.id == "fsdp-text-verlgit-1dda039b9c63-extra-cpu-tf5.23.0"
    assert cell.requirements[0] == f"verl[cpu] @ {VERL_SOURCE}" and "verl" not in cell.pinned_releases()


@pytest.mark.parametrize("rev", ["main", "v0.9.1", "1dda039b9c63"])
def test_verl_from_git_names_a_full_commit(tmp_path, rev):
    with pytest.raises(InputError) as caught:
        _load(tmp_path, VERL_HEAD + f'verl = "git+https://github.com/verl-project/verl@{rev}"\n')
    assert "include[0].verl" in str(caught.value) and "full 40-character commit hash" in str(caught.value)


def test_a_selector_naming_a_malformed_source_is_refused(tmp_path):
    with pytest.raises(InputError, match=r"tags\[0\]\.when\.verl: .*not a git source"):
        _load(tmp_path, VERL_HEAD + f'verl = "{VERL_SOURCE}"\n[[tags]]\ntag = "x"\n'
                                    'when = { verl = "git+https://github.com/verl-project/verl" }\n')
