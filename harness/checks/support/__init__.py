"""What several checks share: how they start ranks (`ranks`: forked or torchrun), the in-process vLLM engine, and
verl's own code as a check's trainer side in rows that install verl (`verl`; `verl_plans`: verl's example scripts as
launch-plans' verdicts)."""
