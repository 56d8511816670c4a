"""trainers.fully_async.patch_agreement: the rollout engines and the trainer run the same patches; a
difference is named in one line."""
import pytest

pytest.importorskip("torch")  # the trainers' patch set

from trainers.fully_async.patch_agreement import PatchMismatch, check_agreement  # noqa: E402


def test_patch_disagreement_names_the_difference_in_one_line():
    check_agreement(["a:x", "b:y"], {"hf-0": ["b:y", "a:x"]})
    with pytest.raises(PatchMismatch) as caught:
        check_agreement(["a:x", "b:y"], {"hf-0": ["a:x"]})
    message = str(caught.value)
    assert "\n" not in message and "hf-0 lacks b:y" in message
    with pytest.raises(PatchMismatch, match="has c:z the trainer does not"):
        check_agreement(["a:x"], {"hf-0": ["a:x", "c:z"]})


def test_the_trainers_side_is_its_selection_minus_what_does_not_apply_here():
    from trainers.fully_async.patch_agreement import intended_patches
    from trainers.patches import training

    selection = [patch.name for patch in training.selected("cpu")]
    patches = training.TrainingPatches(not_applicable={selection[0]: "target gone"})
    assert intended_patches(patches, "cpu") == sorted(selection[1:])  # applied by it or before it: both count
    assert intended_patches(None, "cpu") == []  # a trainer without a patch set
