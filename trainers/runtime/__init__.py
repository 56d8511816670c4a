"""Where a trainer runs: the device plan (cpu, cuda or npu, decided in one place) and the determinism settings."""
