"""What several checks share: how they start ranks (`ranks`: forked or torchrun), and the in-process vLLM engine."""
