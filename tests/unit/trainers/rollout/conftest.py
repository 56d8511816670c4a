import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    """One thread, as a check's process runs: the rollout tests' numbers and times do not depend on the cores."""
    torch.set_num_threads(1)
