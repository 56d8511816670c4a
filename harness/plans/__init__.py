"""Launch plans checked before the cluster: parallel sizes, packed sequences and memory.

A plan (`plans/*.toml`, format in `plan_format.py`) names a model (`plans/models/*.json`, the
published config) and how a run would lay it out. `rules.py` asks the installed megatron-core
(and the vLLM rule) whether it would start; `memory.py` counts what one rank holds on the real
modules built on the `meta` device. `verdict.py` puts the two together, one line per reason, and is
the `plan` verb; `validate.py` measures the estimate against a real step on CPU.
`megatron_count.py` builds megatron-core's own modules of one rank per stage to check the count.
`verl_sources.py` reads verl's own Qwen3.5 example scripts of a release from its git repository, and
`verl_launch.py` runs one under recording stubs and reads its launch as a plan (launch-plans' verl rows).

May import: harness.errors, harness.files (and trainers.megatron's layer specs, inside megatron_count's functions).
"""
