"""A verdict named for verl must have run the installed verl's code: the guard, against a stand-in verl release
installed into a temporary folder (its own dist-info and package), so it runs where verl is absent too."""
from __future__ import annotations

import sys
import textwrap

import pytest

from harness import checks
from harness.checks.support import verl
from harness.results.records import CheckResult, Status


@pytest.fixture
def fake_verl(tmp_path, monkeypatch):
    """A release `verl 9.9.0` declaring transformers<5.11 and tensordict<=0.10.0, with one function."""
    site = tmp_path / "site"
    (site / "verl").mkdir(parents=True)
    (site / "verl" / "__init__.py").write_text("")
    (site / "verl" / "core_algos.py").write_text("def advantage(x):\n    return x\n")
    info = site / "verl-9.9.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(textwrap.dedent("""\
        Metadata-Version: 2.1
        Name: verl
        Version: 9.9.0
        Requires-Dist: transformers<5.11,>=5.5.3
        Requires-Dist: tensordict<=0.10.0
        Requires-Dist: vllm==0.24.0; extra == "vllm"
        """))
    (info / "RECORD").write_text("")
    monkeypatch.syspath_prepend(str(site))
    for name in [m for m in sys.modules if m == "verl" or m.startswith("verl.")]:
        monkeypatch.delitem(sys.modules, name)
    yield site
    for name in [m for m in sys.modules if m == "verl" or m.startswith("verl.")]:
        del sys.modules[name]  # the stand-in's modules go with it; monkeypatch then puts a real verl's back


def test_the_release_and_its_declared_range_are_read_from_the_installed_metadata(fake_verl, monkeypatch):
    assert verl.installed() == "9.9.0"
    assert verl.declared("transformers") == "<5.11,>=5.5.3"
    assert verl.declared("vllm") is None  # only an extra names it: not the base requirement
    versions = {"verl": "9.9.0", "transformers": "5.23.0", "tensordict": "0.10.0"}

    def installed_release(dist):
        if dist not in versions:
            raise verl.PackageNotFoundError(dist)
        return versions[dist]

    monkeypatch.setattr(verl, "version", installed_release)
    status = verl.range_status()
    assert status["transformers"]["inside"] is False and status["tensordict"]["inside"] is True
    assert verl.outside_range(status) == ["transformers 5.23.0 (verl 9.9.0 declares <5.11,>=5.5.3)"]


def test_a_verdict_that_ran_verls_function_stands(fake_verl):
    from verl.core_algos import advantage

    made = verl.verdict("grpo-math", Status.PASS, "equal", [advantage])
    assert made.name == "verl:grpo-math" and made.metrics["verl"]["ran"] == ["verl.core_algos.advantage"]
    assert verl.attributed(made).status is Status.PASS


def _project_advantage(x):
    return x


@pytest.mark.parametrize("ran, why", [
    ([_project_advantage], "not the installed verl's code"),   # this project's code under a verl name
    ([len], "not the installed verl's code"),
    ([], "records no verl function"),
])
def test_a_verdict_named_for_verl_that_verl_did_not_produce_fails(fake_verl, ran, why):
    made = verl.verdict("grpo-math", Status.PASS, "equal", ran)
    checked = verl.attributed(made)
    assert checked.status is Status.FAIL and why in checked.message


def test_a_function_renamed_into_verls_namespace_is_still_caught(fake_verl):
    _project_advantage.__module__ = "verl.core_algos"  # claims verl's module, but is not defined in its file
    try:
        made = verl.verdict("grpo-math", Status.PASS, "equal", [_project_advantage])
        assert verl.attributed(made).status is Status.FAIL
    finally:
        _project_advantage.__module__ = __name__


def test_without_verl_every_verl_verdict_fails(monkeypatch):
    monkeypatch.setattr(verl, "_verl_root", lambda: None)
    made = verl.verdict("x", Status.PASS, "ok", [len])
    assert "verl is not installed" in verl.attributed(made).message


def _registered(monkeypatch, made) -> CheckResult:
    """A check whose own part passes, with verdict `made` beside it, run through the registry."""
    class Check:
        @staticmethod
        def run(options):
            return CheckResult("check", Status.PASS, "the project's part passes", verdicts=[made])

    monkeypatch.setitem(checks.CHECKS, "check", checks.CheckSpec("check", "check_module", "test"))
    monkeypatch.setattr(checks, "load", lambda name: Check)
    return checks.run_in_process("check", checks.CheckOptions())


def test_the_registry_applies_the_guard_to_every_check(fake_verl, monkeypatch):
    result = _registered(monkeypatch, verl.verdict("part", Status.PASS, "ok", [_project_advantage]))
    assert result.status is Status.FAIL and result.verdicts[0].status is Status.FAIL
    assert result.message.startswith("a verdict named for verl did not run verl's code")


def test_a_skip_named_for_verl_stands_without_a_function_but_not_with_a_foreign_one(fake_verl):
    assert verl.attributed(verl.verdict("plan/x", Status.SKIP, "cannot reach github.com", [])).status is Status.SKIP
    foreign = verl.verdict("plan/x", Status.SKIP, "skipped", [_project_advantage])
    assert verl.attributed(foreign).status is Status.FAIL


def _raise_from_verl(fake_verl, body: str):
    (fake_verl / "verl" / "attention_utils.py").write_text(f"def unpad():\n    {body}\n")
    from verl.attention_utils import unpad

    try:
        unpad()
    except Exception as exc:  # noqa: BLE001
        return exc
    raise AssertionError("expected a raise")


def test_verl_code_that_imports_an_accelerator_only_package_cannot_run_here_and_says_where(fake_verl):
    exc = _raise_from_verl(fake_verl, "import flash_attn.bert_padding")
    why = verl.unrunnable(exc)
    assert why.startswith("could not run on this runner: verl/attention_utils.py:2 imports flash_attn")
    assert "GPU runner" in why


def test_any_other_raise_is_verls_outcome_described_with_its_frame(fake_verl):
    exc = _raise_from_verl(fake_verl, "raise RuntimeError('Expected cond to be True\\nmore')")
    assert verl.unrunnable(exc) is None
    assert verl.describe(exc) == "RuntimeError at verl/attention_utils.py:2: Expected cond to be True"
    missing = _raise_from_verl(fake_verl, "import orjson_is_not_here")
    assert verl.unrunnable(missing) is None  # a missing ordinary package is verl's row's finding, not the runner's


def test_a_verl_verdict_that_fails_on_its_own_is_not_called_borrowed_code(fake_verl, monkeypatch):
    from verl.core_algos import advantage

    result = _registered(monkeypatch, verl.verdict("part", Status.FAIL, "verl differs", [advantage]))
    assert "did not run verl's code" not in result.message and result.verdicts[0].status is Status.FAIL


def test_verls_device_is_the_one_asked_for_through_its_platform_registry(fake_verl):
    import torch

    (fake_verl / "verl" / "plugin").mkdir()
    (fake_verl / "verl" / "plugin" / "__init__.py").write_text("")
    (fake_verl / "verl" / "plugin" / "platform.py").write_text(textwrap.dedent("""\
        import abc

        class PlatformBase(abc.ABC):
            @property
            @abc.abstractmethod
            def device_name(self): ...

            @abc.abstractmethod
            def current_device(self): ...

        class PlatformRegistry:
            @classmethod
            def register(cls, platform):
                return lambda made: made

        CURRENT = []

        def set_platform(platform):
            CURRENT.append(platform)
        """))
    assert "registered" in verl.use_cpu_platform(torch.device("cpu", 0))
    from verl.plugin.platform import CURRENT

    assert CURRENT[-1].current_device() == torch.device("cpu", 0) and CURRENT[-1].device_name == "cpu"


def test_without_a_registry_torch_answers_verls_current_device(fake_verl, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cpu, "current_device", torch.cpu.current_device)
    assert "without a platform registry" in verl.use_cpu_platform()
    assert torch.cpu.current_device() == "cpu"
    verl.use_cpu_platform(torch.device("cpu", 0))
    assert torch.cpu.current_device() == torch.device("cpu", 0)


def test_a_failure_raised_inside_verls_own_code_is_verls_outcome_and_one_raised_elsewhere_is_not(fake_verl):
    """verl 0.8.0's import of pyarrow failing inside verl/utils/dataset/rl_dataset.py: verl's code ran (and raised)
    though no function of it returned; the verdict keeps its own message. An exception raised outside verl gives
    the part nothing of verl's, so the guard still fails it with its own words."""
    exc = _raise_from_verl(fake_verl, "raise ImportError('pyarrow requires NumPy 2.0 or newer')")
    own = verl.verdict("chunking/jagged", Status.FAIL, f"verl's chunking raises {verl.describe(exc)}", [], raised=exc)
    assert own.metrics["verl"]["raised_in"] == "verl/attention_utils.py:2"
    assert verl.attributed(own) is own
    try:
        raise ImportError("not verl's")
    except ImportError as outside:
        foreign = verl.verdict("chunking/jagged", Status.FAIL, "raises", [], raised=outside)
    assert "raised_in" not in foreign.metrics["verl"]
    assert verl.attributed(foreign).message.startswith("named for verl but it records no verl function")


def test_verl_code_that_raises_before_giving_verdicts_is_one_verdict_not_the_checks_error(fake_verl):
    """A check's verl part whose verl modules do not import (verl 0.8.0's datasets against NumPy 1): one failing
    `verl:<part>` with verl's file:line, which the guard keeps; flash_attn missing is a skip; a raise outside
    verl's code is the check's own error."""
    (fake_verl / "verl" / "rl_dataset.py").write_text("raise ImportError('pyarrow requires NumPy 2.0 or newer')\n")

    def part():
        import verl.rl_dataset  # noqa: F401

    made, = verl.guarded("chunking", part)
    assert made.name == "verl:chunking" and made.status is Status.FAIL
    assert "verl's code raises ImportError at verl/rl_dataset.py:1: pyarrow requires NumPy 2.0" in made.message
    assert verl.attributed(made) is made
    (fake_verl / "verl" / "padding.py").write_text("import flash_attn.bert_padding\n")

    def needs_gpu():
        import verl.padding  # noqa: F401

    skipped, = verl.guarded("chunking", needs_gpu)
    assert skipped.status is Status.SKIP and "imports flash_attn" in skipped.message

    def ours():
        raise KeyError("a harness bug")

    with pytest.raises(KeyError):
        verl.guarded("chunking", ours)


def test_every_check_that_runs_verls_code_forks_from_the_verl_tier_and_no_other_does():
    """A check with a verl counterpart (its `verl` column) asks for verl's modules, imported once per verl row by the
    check server's tier; one without does not, so it never inherits what verl's import sets."""
    for name, spec in checks.CHECKS.items():
        asks = set(checks.VERL_PRELOAD) <= set(spec.preload)
        uses_the_tier = bool(spec.verl) and name != "verl-tests"  # verl-tests runs pytest in a fresh interpreter
        assert asks == uses_the_tier, name
    assert all(m == "verl" or m.startswith("verl.") for m in checks.VERL_PRELOAD)
