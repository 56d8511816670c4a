"""The check registry. A check is a module with one entry point, `run(options) -> CheckResult`.

Check modules are imported only when they run, inside the cell's own environment, so the
harness itself never needs torch or transformers.

May import: harness.errors, harness.files, harness.results, harness.plans, harness.envs (and, inside a cell's
environment, trainers).
"""
from __future__ import annotations

import fnmatch
import importlib
import os
import re
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from harness.results.records import CheckResult, Status

from .support import verl


@dataclass(frozen=True)
class CheckSpec:
    name: str
    module: str
    summary: str
    backends: tuple[str, ...] = ("fsdp", "megatron")
    timeout: float = 600.0  # seconds; a cell's own timeout overrides it
    # On an accelerator cell, whether its verdict needs the device itself: the CPU pre-flight on a cell's exact
    # wheels (harness/preflight/cpu_side.py) runs only the checks that do not, with the device forced to cpu.
    # True unless declared: a check nobody has judged is never run CPU-side.
    needs_accelerator: bool = True
    # The part of a check that needs an accelerator that still needs none, run CPU-side when PART_VARIABLE is
    # set (the check itself returns only that part); "" for none.
    cpu_part: str = ""
    # In a row that installs verl (the `verl` axis): what of verl's own code the check runs, named in its
    # `verl:` verdicts (support/verl.py); "" where verl has no counterpart, which the report says.
    verl: str = ""
    # Axes a cell must carry for the check to say anything (verl-tests: a row that installs verl); bisect picks
    # its template cell among those.
    needs_axes: tuple[str, ...] = ()
    # Modules the check imports on top of what every check does, where installed: a cell's check server imports
    # them once, in a tier of its own that only the checks asking for them fork from (execution/forkserver.py).
    preload: tuple[str, ...] = ()
    # Whether the check's outcome depends on the row's mode (sync or fully-async): only such a check is given
    # `--mode`, so that every other check of a fully-async row is the same run as in its sync twin, and is reused
    # from it.
    reads_mode: bool = False


# vLLM's offline engine, which the vLLM checks (and grpo-convergence's rollout rank) import: about 3 s on a core
# after the server's preload, 3 checks a vLLM cell. vLLM's import sets environment variables
# (TORCHINDUCTOR_COMPILE_THREADS, PYTORCH_NVML_BASED_CUDA_CHECK, LD_LIBRARY_PATH through cv2), so only these checks
# fork from where it was imported.
VLLM_PRELOAD = ("vllm.entrypoints.llm",)
# verl's modules that the checks with a verl counterpart import in a row that installs verl: about 3 s on a core
# after the server's preload, which each of those checks paid again (about 8 a row). verl's import sets environment
# variables (RAY_CLIENT_MODE, TORCH_CUDA_ARCH_LIST), a root logging handler and tensordict's lazy-legacy mode
# (verl.protocol: off, as tensordict's default), so only the checks that run verl's code fork from where it was
# imported; in such a check this project's part now runs after verl's import, as in a verl user's process. In a row
# without verl the request comes to no installed module, and the check forks from the server (forkserver's
# installed_part), or from the vLLM tier where it also asks for vLLM.
VERL_PRELOAD = ("verl", "verl.protocol", "verl.utils.fsdp_utils", "verl.workers.engine.fsdp.transformer_impl",
                "verl.experimental.agent_loop.agent_loop", "verl.trainer.ppo.core_algos")

CHECKS: dict[str, CheckSpec] = {
    spec.name: spec
    for spec in (
        CheckSpec("stack-smoke", "harness.checks.stack_smoke",
                  "builds a tiny Qwen3.5 text model from a config and runs forward and backward", timeout=300),
        # (needs_accelerator: it runs the model with the cell's kernels; where a CUDA cell installs
        # flash-linear-attention, transformers calls its Triton kernels even on CPU tensors, which cannot run there)
        CheckSpec("patch-parity", "harness.checks.patch_parity",
                  "every applicable patch gives the stock numbers; packed equals unpacked, also split over 2 "
                  "sequence-parallel ranks", ("fsdp",), cpu_part="target audit",
                  verl="verl's apply_monkey_patch (its Qwen3.5 base model, decoder layer, packed gated delta net with "
                       "its fallbacks, VL forward), called through its FSDP engine (forward_step, prepare_model_inputs "
                       "and prepare_model_outputs on a batch from left_right_2_no_padding), packed and padded, "
                       "against stock transformers; verl's _build_fla_cp_context on the packed-sp ranks (a skip "
                       "naming why verl's side needs a GPU)",
                  preload=VERL_PRELOAD),
        CheckSpec("offload-regression", "harness.checks.offload_regression",
                  "text, VL and MoE models under FSDP2 CPU offload: a verdict per host tensor that meets device "
                  "compute, upstream and trainer", ("fsdp",),
                  verl="the model set up by verl's apply_fsdp2 and fsdp2_load_full_state_dict with CPU offload and "
                       "verl's apply_monkey_patch (its fast_pos_embed_interpolate), stepped through its FSDP engine: "
                       "real FSDP2 ranks, and the strict device emulation fed with verl's units and buffer placement",
                  preload=VERL_PRELOAD),
        # (needs_accelerator: it runs the model with the cell's kernels, as patch-parity does)
        CheckSpec("gate-precision", "harness.checks.gate_precision",
                  "the Gated DeltaNet's A_log and dt_bias under FSDP2's bf16 policy: float32 or rounded, as stored and "
                  "in the forward, upstream and trainer; what transformers keeps float32; the log-prob drift",
                  ("fsdp",), timeout=300,
                  verl="verl.utils.fsdp_utils.apply_fsdp2 with the policy of verl's FSDP engine (bf16 parameters, "
                       "fp32 reduce): A_log and dt_bias in the forward",
                  preload=VERL_PRELOAD),
        CheckSpec("nested-chunking", "harness.checks.nested_chunking",
                  "jagged mRoPE position ids survive micro-batch chunking", ("fsdp", "megatron"),
                  needs_accelerator=False,
                  verl="verl's own batch chunking, row by row: left_right_2_no_padding, BatchData.chunk and a pickle "
                       "round trip, maybe_fix_3d_position_ids, make_iterator, prepare_micro_batches, the FSDP engine's "
                       "prepare_model_inputs, postprocess_batch_func; non-tensor data through BatchData.chunk and "
                       "BatchData.concat",
                  preload=VERL_PRELOAD),  # its tensors stay on the CPU on every device
        CheckSpec("bridge-parity", "harness.checks.bridge_parity",
                  "HF and megatron-core agree on hybrid Qwen3.5 and MoE (TP1, TP2, EP2; Megatron-Bridge's own bridges "
                  "too): log-probs, grads, round trip",
                  ("megatron",)),
        CheckSpec("grpo-convergence", "harness.checks.grpo_convergence",
                  "a short GRPO run raises the reward and follows the reference curve", timeout=900, reads_mode=True,
                  # its FSDP trainer rolls out with the cell's vLLM, where one is installed
                  preload=VLLM_PRELOAD + VERL_PRELOAD,
                  verl="verl's GRPO math against this project's trainer on the same batch, with what verl's Qwen3.5 "
                       "scripts select: compute_grpo_outcome_advantage, losses.ppo_loss, "
                       "compute_rollout_correction_weights (the training run itself is this project's trainer)"),
        CheckSpec("launch-plans", "harness.checks.launch_plans",
                  "the shipped launch plans (plans/*.toml) checked against this cell's megatron-core, "
                  "transformers and vLLM rules, with memory per device", needs_accelerator=False,
                  verl="verl's own Qwen3.5 example scripts of the release (from its git repository), run under "
                       "recording stubs; their launch checked by verl's own config check (validate_config) and, read "
                       "as a plan, by this project's rules",
                  preload=VERL_PRELOAD),
        CheckSpec("vllm-rollout", "harness.checks.vllm_rollout",
                  "the cell's vLLM loads Qwen3.5; its log-probs and greedy tokens match the trainer's, also after a "
                  "GRPO update and a weight sync, and after sleep and wake", timeout=900, preload=VLLM_PRELOAD),
        CheckSpec("vllm-chat-parity", "harness.checks.vllm_chat_parity",
                  "the trainer's tool-call parser and chat rendering agree with vLLM's parser and vLLM's own chat "
                                    "path, token for token", timeout=300, needs_accelerator=False,
                  preload=VLLM_PRELOAD + VERL_PRELOAD,
                  verl="verl's tool parser (ToolParser.get_tool_parser('qwen3_coder'), Qwen3XMLToolParser) against "
                       "vLLM's, or against this project's parser without vLLM; verl's chat rendering is not compared"),
        CheckSpec("verl-tests", "harness.checks.verl_tests",
                  "the installed verl release's own CPU tests (its sdist's tests/*_on_cpu.py) in the row, a verdict "
                  "per test file; the row inside verl's declared range is the baseline", timeout=1200,
                  needs_accelerator=False, needs_axes=("verl",),
                  verl="verl's own test suite from the release's sdist or git revision, run with pytest against the "
                  "installed verl"),
        CheckSpec("multi-turn-tokens", "harness.checks.multi_turn_tokens",
                  "an agent loop's per-turn tokens equal the whole-conversation rendering; the template dropping "
                  "earlier thinking told apart from a bug", timeout=300, needs_accelerator=False,
                  verl="verl's ToolAgentLoop.run with a scripted engine, and its Continuous Token builder with user "
                       "turns",
                  preload=VERL_PRELOAD),
    )
}


# The verdicts each built-in check gives (patterns: some carry a patch, family or engine name), so that a verdict
# named elsewhere (`bisect --verdict`, a matrix's [[standing]]) that none of them matches is refused before anything
# runs. A check not listed here (an extra check) may give any.
VERDICTS: dict[str, tuple[str, ...]] = {
    "stack-smoke": (),
    "patch-parity": ("patched-vs-stock:*", "packed-vs-unpacked:*", "packed-stock-upstream*", "packed-sp:*",
                     "fused-logprob:*", "rollout-vs-trainer:*", "target-audit:*"),
    "offload-regression": ("upstream", "trainer", "upstream/*", "trainer/*"),
    "nested-chunking": ("*/*",),
    "bridge-parity": ("*-tp[0-9]*", "*-ep[0-9]*", "packed-gdn"),
    "grpo-convergence": ("threshold", "gain", "band"),
    "vllm-chat-parity": ("tool-calls", "tool-calls-malformed", "chat-rendering"),
    "verl-tests": ("tests/*.py",),  # one of verl's own test files
    "multi-turn-tokens": ("trainer/*", "verl:multi-turn-tokens*"),
    "gate-precision": ("upstream", "trainer", "upstream/load", "verl:fsdp2-policy"),
}
# In a verl row, a check with a verl counterpart also gives `verl:` verdicts (support/verl.py).
for _name in ("patch-parity", "offload-regression", "nested-chunking", "grpo-convergence", "launch-plans",
              "vllm-chat-parity"):
    VERDICTS[_name] = (*VERDICTS.get(_name, ("*",)), "verl:*")


def gives_verdict(check: str, verdict: str) -> bool:
    """Whether `check` can give a verdict named `verdict` (any name for a check not in VERDICTS)."""
    return check not in VERDICTS or any(fnmatch.fnmatchcase(verdict, pattern) for pattern in VERDICTS[check])


def _extra_checks(spec: str) -> dict[str, CheckSpec]:
    """Checks from other modules: HARNESS_EXTRA_CHECKS="name=package.module,..." (validated names only)."""
    extra = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, module = item.partition("=")
        if not re.fullmatch(r"[a-z][a-z0-9-]{0,40}", name) or not re.fullmatch(r"[A-Za-z_][\w.]{0,200}", module):
            raise ValueError(f"HARNESS_EXTRA_CHECKS: {item!r} is not name=package.module")
        extra[name] = CheckSpec(name, module, f"extra check from {module}")
    return extra


CHECKS.update(_extra_checks(os.environ.get("HARNESS_EXTRA_CHECKS", "")))


@dataclass
class CheckOptions:
    """Options every check accepts where they make sense."""

    model: str = "text"
    backend: str = "fsdp"
    seed: int = 0
    steps: int | None = None
    model_config: Path | None = None
    mode: str = "sync"  # the cell's mode axis: sync or fully-async (grpo-convergence reads it)
    # where a check may write artifacts; by default a fresh scratch folder, never the current directory (work
    # files left in a checkout end up committed)
    work_dir: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="harness-check-")))
    max_ranks: int | None = None  # the most ranks a check may start at once ([matrix] max_ranks); None: no limit


PART_VARIABLE = "HARNESS_CHECK_PART"  # set to NO_ACCELERATOR: a check with a cpu_part runs only that part
NO_ACCELERATOR = "no-accelerator"


CORES_VARIABLE = "HARNESS_CELL_CORES"  # the cores the check's cell holds in a shared run (execution/jobs.py)


def cell_cores() -> int | None:
    """The cores this check's cell holds while cells run side by side (a check starts no more workers than
    that: more would only take cores the other cells hold); None where the cell may use every core."""
    value = os.environ.get(CORES_VARIABLE, "")
    return int(value) if value.isdigit() and int(value) > 0 else None


def cpu_part_only() -> bool:
    """Whether this check process was asked for its part that needs no accelerator (CheckSpec.cpu_part)."""
    return os.environ.get(PART_VARIABLE) == NO_ACCELERATOR


def unknown_checks(names: list[str]) -> list[str]:
    return [n for n in names if n not in CHECKS]


def load(name: str):
    """The module of check `name`; KeyError for an unknown name."""
    return importlib.import_module(CHECKS[name].module)


def run_in_process(name: str, options: CheckOptions) -> CheckResult:
    """Run one check here and now; the caller turns exceptions into a status (see runner). A verdict named for
    verl that did not run the installed verl's code becomes a failure (support/verl.py)."""
    result = load(name).run(options)
    if isinstance(result, CheckResult) and any(v.name.startswith(verl.PREFIX) for v in result.verdicts):
        checked = [verl.attributed(v) for v in result.verdicts]
        demoted = [a for a, b in zip(checked, result.verdicts) if a is not b]  # the guard made a failure of it
        result.verdicts = checked
        if demoted and not result.status.is_failure:
            result.status = Status.FAIL
            result.message = "a verdict named for verl did not run verl's code; " + result.message
    return result
