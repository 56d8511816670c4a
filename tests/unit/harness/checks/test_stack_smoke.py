"""stack-smoke fails on broken numerics, on a model that cannot learn, and where Qwen3.5 is missing."""
import pytest

from harness.checks import CheckOptions, stack_smoke
from harness.results.records import Status

models = pytest.importorskip("trainers.models")


def test_the_stock_tiny_model_passes():
    assert stack_smoke.run(CheckOptions()).status is Status.PASS


def test_broken_numerics_fail(monkeypatch):
    stock = models.build_model

    def scaled(*args, **kwargs):
        model = stock(*args, **kwargs)
        model.lm_head.weight.data.mul_(200.0)  # logits far from uniform: loss far from ln(vocab)
        return model

    monkeypatch.setattr(models, "build_model", scaled)
    result = stack_smoke.run(CheckOptions())
    assert result.status is Status.FAIL and "not near ln(vocab)" in result.message


def test_a_model_without_gradients_fails(monkeypatch):
    stock = models.build_model

    def frozen(*args, **kwargs):
        model = stock(*args, **kwargs)
        for p in model.parameters():  # every gradient arrives as zeros
            p.register_hook(lambda g: g * 0)
        return model

    monkeypatch.setattr(models, "build_model", frozen)
    result = stack_smoke.run(CheckOptions())
    assert result.status is Status.FAIL and "no usable gradient" in result.message


def test_missing_qwen35_fails_naming_the_version(monkeypatch):
    def unavailable(*args, **kwargs):
        raise models.Qwen35Unavailable("Qwen3.5 (text) is unavailable in transformers 5.1.0: no module")

    monkeypatch.setattr(models, "build_model", unavailable)
    result = stack_smoke.run(CheckOptions())
    assert result.status is Status.FAIL and "transformers 5.1.0" in result.message


def test_a_model_without_decoder_layers_is_refused_naming_the_field(tmp_path):
    """A config of zero layers never reaches the model: the config reading refuses it (trainers/models.py)."""
    from trainers.errors import TrainerInputError

    config = tmp_path / "zero.json"
    config.write_text('{"num_hidden_layers": 0, "layer_types": []}')
    with pytest.raises(TrainerInputError, match="num_hidden_layers: expected a whole number >= 1"):
        stack_smoke.run(CheckOptions(model_config=config))


def test_it_runs_on_the_cells_device(monkeypatch):
    monkeypatch.setenv("HARNESS_DEVICE", "cpu")
    assert stack_smoke.run(CheckOptions()).metrics["device"] == "cpu"


def test_a_device_that_is_not_there_is_never_replaced_by_the_cpu(monkeypatch):
    """A CUDA cell's smoke test ran on the CPU once, where flash-linear-attention's Triton kernels cannot take host
    tensors: the cell's device is the one the check runs on, or the check errors."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has the device")
    monkeypatch.setenv("HARNESS_DEVICE", "cuda")
    with pytest.raises(RuntimeError, match="device cuda requested"):
        stack_smoke.run(CheckOptions())
