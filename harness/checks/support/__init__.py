"""What several checks share: the torchrun and forked-rank launchers, and the in-process vLLM engine."""
