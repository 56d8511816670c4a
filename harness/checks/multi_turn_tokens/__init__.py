"""multi-turn-tokens: does an agent loop's per-turn token sequence equal the whole-conversation rendering?

Agent loops build a rollout's tokens turn by turn: the first prompt, the engine's tokens, then each tool result or
user turn appended. Where that differs from `apply_chat_template` of the whole conversation, the trainer trains on
a sequence no chat server would send (verl #7807, open; with the Qwen3.5-9B template 783 of 10,726 conversations
differed, reported in verl #7322). Qwen3.5's template is not append-only: it drops the thinking of the assistant
turns before the last user query, so the main difference is the template's, not a trainer's.

Over the conversations of conversations.py (tools, tool results, parallel calls, thinking on and off, a system turn
or none, several assistant turns with reasoning, later user queries), each side is replayed and its sequence is
compared, token for token, with the template's rendering at every generation point and at the end
(compare.py). The template's own behaviour is measured without any side: where the rendering of the history
changes once later messages follow. A difference is named by conversation, point, rendered turn and message,
with both texts and its kind: the template dropping earlier thinking the sequence keeps, a generation prompt the
template's rendering of the turn does not keep, or tokens of the side's own making.

Verdicts, per template (templates.py: the project's template always; a released Qwen3.5 tokenizer named by
HARNESS_QWEN35_TOKENIZER where the runner has one, skipped otherwise; the label on each verdict says which):
- trainer/<template>: trainers/rollout/turns.py's TurnTokens, the trainer's agent-loop tokenization. It starts a
  new segment where the template renders the history again at a new user query; any other difference fails.
- verl:multi-turn-tokens/tool-agent-loop/<template> and verl:multi-turn-tokens/builder/<template> (rows with
  verl): verl's ToolAgentLoop with a scripted engine in place of its rollout server, and verl's Continuous Token
  builder on the conversations with a later user query (verl_side.py). Earlier thinking that only the template
  drops at a new user query, kept by verl, is `affected` (the verl #7807 class); anything else fails.
Seconds of CPU, no model; a verl row adds verl's import.
"""
from __future__ import annotations

import functools

from harness.checks import CheckOptions
from harness.checks.support import verl
from harness.results.records import CheckResult, Status, Verdict

from . import conversations, replay, templates, verl_side

NAME = "multi-turn-tokens"
VERL_PARTS = {"tool-agent-loop": (verl_side.tool_agent_loop, lambda c: not conversations.has_later_user(c),
                                  "the sequence of verl's ToolAgentLoop.run (a scripted engine stands in for its "
                                  "rollout server)"),
              "builder": (verl_side.builder, conversations.has_later_user,
                          "the sequence of verl's Continuous Token builder with user turns appended (no verl 0.9.1 "
                          "agent loop appends one)")}


def trainer_verdict(template: templates.Template, side: replay.Side = replay.trainer_side) -> Verdict:
    segments: dict[str, list[str]] = {}
    outcome = replay.replay(template, functools.partial(side, segments=segments))
    outcome.segments = segments
    status, message = replay.judge(outcome, template.label, "the trainer's sequence (trainers/rollout/turns.py)")
    return Verdict(f"trainer/{template.key}", status, message, _metrics(outcome, template))


def verl_verdicts(template: templates.Template) -> list[Verdict]:
    functions = verl_side.ran()
    verdicts = []
    for part, (side, applies, what) in VERL_PARTS.items():
        if not functions[part]:
            continue  # a release without the Continuous Token builder: its loop's verdict says so
        chosen = [c for c in conversations.CONVERSATIONS if applies(c)]
        outcome = replay.replay(template, side, chosen)
        status, message = replay.judge(outcome, template.label, what, thinking_kept_is_known=True)
        if not functions["builder"]:
            message += "; this verl has no Continuous Token builder (verl.utils.tokenizer.continuous_token)"
        verdicts.append(verl.verdict(f"{NAME}/{part}/{template.key}", status, message, functions[part],
                                     _metrics(outcome, template), emulated=part == "tool-agent-loop"))
    return verdicts


def _metrics(outcome: replay.Outcome, template: templates.Template) -> dict:
    return {"template": template.label, "template_sha256": template.digest, "conversations": outcome.total,
            "findings": outcome.findings, "template_changes": outcome.changes, "segments": outcome.segments}


def run(options: CheckOptions) -> CheckResult:
    from trainers.runtime.device import set_cpu_threads

    set_cpu_threads()
    chosen = [templates.project()]
    verdicts = []
    setting = templates.released_setting()
    if setting is None:
        verdicts.append(Verdict("trainer/released-template", Status.SKIP,
                                f"no released Qwen3.5 template on this runner: {templates.VARIABLE} names none (a "
                                "tokenizer folder, or owner/name@<commit> in the local hub cache)"))
    else:
        try:
            chosen.append(templates.released(setting))
        except templates.BadSetting as exc:
            verdicts.append(Verdict("trainer/released-template", Status.ERROR, str(exc)))
    with_verl = verl.installed() is not None
    for template in chosen:
        verdicts.append(trainer_verdict(template))
        if with_verl:
            verdicts.extend(verl.guarded("multi-turn-tokens", lambda t=template: verl_verdicts(t)))
    failed = [v for v in verdicts if v.status.is_failure]
    status = Status.FAIL if failed else Status.AFFECTED if any(v.status is Status.AFFECTED for v in verdicts) \
        else Status.PASS
    shown = failed or [v for v in verdicts if v.status is not Status.SKIP]
    return CheckResult(NAME, status, "; ".join(f"{v.name}: {v.message}" for v in shown),
                       metrics={"templates": [t.label for t in chosen]}, verdicts=verdicts)
