"""`as-pinned-by-verl`: a package axis read from the pin verl's release declares, in the row's `verl_extra` when it
names one (markers `extra == "cpu"` evaluated with that extra, and the extras of verl itself that extra pulls in),
else the base requirements; an error naming what verl declares when that is not one exact release."""
from __future__ import annotations

import json

import pytest
from verl_index import verl_index, write_matrix

from harness import matrix
from harness.errors import InputError
from harness.matrix.derived import Declarations


def _load(tmp_path, body):
    return matrix.load(write_matrix(tmp_path, body))


def test_the_extras_pins_become_the_rows_axes(tmp_path, monkeypatch):
    verl_index(tmp_path, monkeypatch)
    m = _load(tmp_path, '[[include]]\nverl = "0.9.1"\nverl_extra = "cpu"\ntransformers = "as-pinned-by-verl"\n'
                        'torch = "as-pinned-by-verl"\n')
    cell = next(c for c in m.cells if "verl" in c.axes)
    assert cell.id == "fsdp-text-verl0.9.1-extra-cpu-tf5.9.0-torch2.11.0-td0.10.0"
    assert cell.requirements[:3] == ["verl[cpu]==0.9.1", "torch==2.11.0", "transformers==5.9.0"]
    assert cell.install.outside == ()  # the pins verl declares are inside its range
    cached = json.loads((tmp_path / "metadata" / "verl-0.9.1.json").read_text())
    assert cached["index"].startswith("file://") and 'torch==2.11.0; extra == "cpu"' in cached["requires_dist"]


def test_an_extra_pulled_in_by_another_extra_applies(tmp_path, monkeypatch):
    """verl[vllm] declares verl[verl-core], whose pyzmq==27.0.0 is then part of the vllm stack."""
    fake = verl_index(tmp_path, monkeypatch)
    fake.add("pyzmq", "27.0.0")
    fake.add("vllm", "0.24.0")
    m = _load(tmp_path, '[[include]]\nverl = "0.9.1"\nverl_extra = "vllm"\nvllm = "as-pinned-by-verl"\n'
                        'torch = "as-pinned-by-verl"\n')
    cell = next(c for c in m.cells if "verl" in c.axes)
    assert (cell.axes["vllm"], cell.axes["torch"]) == ("0.24.0", "2.11.0")
    declared = Declarations(tmp_path / "m.toml")
    assert str(declared.requirement_on("verl", "0.9.1", "pyzmq", "3.11", "vllm")) == "==27.0.0"
    assert declared.requirement_on("verl", "0.9.1", "pyzmq", "3.11") is None  # not in the base requirements


@pytest.mark.parametrize("body, said", [
    # no extra: the base requirements name a range, not a release
    ('verl = "0.9.1"\ntransformers = "as-pinned-by-verl"\n',
     "verl 0.9.1 declares transformers!=5.6.0,<5.11,>=5.5.3, not one exact release"),
    # an extra that pins no torch
    ('verl = "0.9.1"\nverl_extra = "fsdp"\ntorch = "as-pinned-by-verl"\n',
     "verl[fsdp] 0.9.1 declares torch nothing, not one exact release"),
    ('verl = "newest"\ntorch = "as-pinned-by-verl"\n', "verl 'newest' is no release on the index"),
])
def test_a_derived_value_that_verl_does_not_pin_is_a_one_line_error(tmp_path, monkeypatch, body, said):
    verl_index(tmp_path, monkeypatch)
    with pytest.raises(InputError) as caught:
        _load(tmp_path, "[[include]]\n" + body)
    assert said in str(caught.value) and "m.toml" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize("value, said", [("CPU", "'CPU' is not an extra name of verl"),
                                         ("cpu]; rm -rf /", "is not an extra name of verl"),
                                         ("--index-url", "is not an extra name of verl")])
def test_an_extra_is_a_plain_name(tmp_path, value, said):
    with pytest.raises(InputError, match=r"include\[0\]\.verl_extra: .*" + said.replace("[", r"\[")):
        _load(tmp_path, f'[[include]]\nverl = "0.9.1"\nverl_extra = {json.dumps(value)}\n')


def test_an_extra_needs_its_package(tmp_path):
    with pytest.raises(InputError, match="include.verl_extra: 'cpu': an extra of verl, which the cell does not"):
        _load(tmp_path, '[[include]]\nverl_extra = "cpu"\n')
