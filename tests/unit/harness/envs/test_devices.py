"""Which accelerators this host has (harness/envs/devices.py): the device nodes of their drivers, and the devices
a runner may use, from the user's variable or the vendor tool."""


def test_visible_devices_come_from_the_users_variable_or_the_vendor_tool(monkeypatch):
    from harness.envs import devices

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")
    assert devices.visible_devices("cuda") == ["2", "3"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    listing = "GPU 0: NVIDIA H100 (UUID: GPU-a)\nGPU 1: NVIDIA H100 (UUID: GPU-b)"
    monkeypatch.setattr(devices, "_run", lambda argv: (0, listing))
    assert devices.visible_devices("cuda") == ["0", "1"]
    monkeypatch.setattr(devices, "_run", lambda argv: (127, "nvidia-smi not found on PATH"))
    assert devices.visible_devices("cuda") is None
    assert devices.visible_devices("cpu") == []
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    assert len(devices.visible_devices("npu")) == 8


def test_accelerator_nodes_are_found_by_their_patterns(tmp_path):
    from harness.envs import devices

    assert devices.accelerator_nodes((str(tmp_path / "nvidia[0-9]*"),)) == []
    (tmp_path / "nvidia0").touch()
    (tmp_path / "nvidiactl").touch()
    assert devices.accelerator_nodes((str(tmp_path / "nvidia[0-9]*"),)) == [str(tmp_path / "nvidia0")]
