"""The verdicts of real FSDP2 (what the worker's ranks saw on an accelerator): each failure makes its verdict fail."""
from __future__ import annotations

import pytest

from harness.results.records import Status


def _real_pass(loss=1.0, grad_norm=2.0, raised=False, calls=()):
    p = {"loss": loss, "grad_norm": grad_norm, "raised": raised, "calls": list(calls)}
    return {**p, "error_class": "RuntimeError", "error_site": "modeling_qwen3_5.py:forward:239"} if raised else p


@pytest.mark.parametrize(("broken", "upstream", "trainer"), [
    ("nothing", Status.PASS, Status.PASS),
    ("upstream-raises", Status.AFFECTED, Status.PASS),
    ("trainer-raises", Status.PASS, Status.FAIL),
    ("trainer-numbers", Status.PASS, Status.FAIL),
    ("pos-embed-index", Status.AFFECTED, Status.PASS),
    ("reference-raises", Status.ERROR, Status.PASS),
])
def test_real_fsdp2_verdicts_judge_every_model(broken, upstream, trainer):
    """What real FSDP2 saw on an accelerator, as the worker writes it: each failure makes its verdict fail."""
    from harness.checks.offload_regression.real_fsdp import verdicts

    ok = {"reference": _real_pass(), "reference_trainer": _real_pass(), "trainer": _real_pass(),
          "upstream": _real_pass()}
    text = dict(ok)
    if broken == "upstream-raises":
        text["upstream"] = _real_pass(raised=True)
    elif broken == "trainer-raises":
        text["trainer"] = _real_pass(raised=True)
    elif broken == "trainer-numbers":
        text["trainer"] = _real_pass(grad_norm=2.1)
    elif broken == "reference-raises":
        text["reference"] = _real_pass(raised=True)
    vl = dict(ok)
    if broken == "pos-embed-index":
        vl["upstream"] = _real_pass(calls=[{"input_devices": ["cpu"], "weight_device": "cuda:0", "mismatch": True}])
    result = {v.name: v for v in verdicts({"text": text, "vl": vl}, "real-fsdp2", deciding=True, emulated=False,
                                          rtol=1e-5, note="")}
    assert (result["upstream"].status, result["trainer"].status) == (upstream, trainer)
    assert set(result["upstream"].metrics["models"]) == {"text", "vl"}


def test_real_fsdp2_verdicts_name_their_set_up_with_the_buffers_devices_the_worker_saw():
    from harness.checks.offload_regression.real_fsdp import verdicts

    passes = {name: {**_real_pass(), "buffer_devices": ["cuda:0"]} for name in ("trainer", "upstream")}
    passes.update(reference=_real_pass(), reference_trainer=_real_pass())
    for verdict in verdicts({"text": passes}, "real-fsdp2", deciding=True, emulated=False, rtol=1e-5, note=""):
        assert verdict.message.startswith("[real FSDP2 CPUOffloadPolicy on a model built on the host, buffers "
                                          "moved to the device by fully_shard"), verdict.message
        assert "buffers on cuda:0]" in verdict.message and "verl sets" not in verdict.message
        assert verdict.metrics["models"]["text"]["buffer_devices"] == ["cuda:0"]
