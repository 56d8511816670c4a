"""verl's agent-loop tokenization as a side of multi-turn-tokens, in rows that install verl.

verl 0.9 builds an agent loop's tokens with its Continuous Token builder
(verl/utils/tokenizer/continuous_token.py, chosen by verl/utils/tokenizer/continuous_token_wiring.py from the
model type: `QwenContinuousTokenBuilder` for qwen3_5): the first prompt rendered whole, the engine's tokens
appended, and each appended message rendered after a synthetic context and cut out of it, with a newline put back
after `<|im_end|>`. Two sides:

- `tool_agent_loop`: verl's own `ToolAgentLoop.run` (verl/experimental/agent_loop/tool_agent_loop.py) on the
  conversations of one user query, its tools verl `FunctionTool`s answering with the conversation's results. A
  scripted engine stands in for the rollout server (verl's `server_manager`): it returns each assistant turn's
  tokens and records the prompt it was sent, so every prompt verl builds is observed; the loop's event loop runs
  it to the end (a conversation that ends on a tool result ends when the script has no turn left). No server,
  no Ray, no GPU: everything else is verl's code.
- `builder`: the builder itself (`build_initial_tokens`, `merge_assistant_tokens`, `merge_context_tokens`, as
  the agent loop calls them) on the conversations with a later user query: verl's builder takes user turns, but
  no agent loop of verl 0.9.1 appends one.
Both go through `create_continuous_token_builder(tokenizer, hf_model_type="qwen3_5")`, as the agent loop does.
verl 0.8 has no builder: its ToolAgentLoop renders each appended message alone (`AgentLoopBase.apply_chat_template`
with the system prompt cut off), so only the first side runs there, and its verdict says so.
"""
from __future__ import annotations

import json
from typing import Any

from .conversations import TOOLS, Conversation

MODEL_TYPE = "qwen3_5"
PARSER = "qwen3_coder"  # the tool parser verl's Qwen3.5 recipes name (`multi_turn.format`)
LENGTH = 1_000_000  # prompt and response lengths that never truncate


class ScriptEnd(Exception):
    """The engine was asked for a turn the conversation does not have."""


class ScriptedEngine:
    """Stands in for verl's server manager: each call returns the next assistant turn's tokens."""

    def __init__(self, turns: list[list[int]]):
        self.turns = list(turns)
        self.prompts: list[list[int]] = []

    async def generate(self, request_id: str, prompt_ids: list[int], sampling_params: dict, **_: Any):
        from verl.workers.rollout.replica import TokenOutput

        self.prompts.append(list(prompt_ids))
        if not self.turns:
            raise ScriptEnd
        return TokenOutput(token_ids=self.turns.pop(0))


def ran() -> dict[str, list]:
    """The verl functions each side runs, for its verdict; the builder's list is empty in a release without the
    Continuous Token builder (verl 0.8: its loop renders each appended message with its apply_chat_template)."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopBase
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
    from verl.experimental.agent_loop.tool_parser import ToolParser

    try:
        from verl.utils.tokenizer.continuous_token import ContinuousTokenBuilder, QwenContinuousTokenBuilder
        from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder
    except ImportError:
        return {"tool-agent-loop": [ToolAgentLoop.run, ToolParser.get_tool_parser, AgentLoopBase.apply_chat_template],
                "builder": []}
    builder = [create_continuous_token_builder, ContinuousTokenBuilder.build_initial_tokens,
               ContinuousTokenBuilder.merge_assistant_tokens, ContinuousTokenBuilder.merge_context_tokens,
               QwenContinuousTokenBuilder._merge_context_token_ids]
    return {"tool-agent-loop": [ToolAgentLoop.run, ToolParser.get_tool_parser, *builder], "builder": builder}


def _tools(conversation: Conversation) -> list:
    """verl FunctionTools for the conversation's tools, answering each call with its result in the conversation
    (keyed by name and arguments: verl runs a turn's calls concurrently)."""
    from verl.tools.function_tool import FunctionTool
    from verl.tools.schemas import OpenAIFunctionToolSchema

    answers: dict[tuple[str, str], list[str]] = {}
    messages = conversation.messages
    for index, message in enumerate(messages):
        for offset, call in enumerate(message.get("tool_calls") or []):
            key = (call["function"]["name"], json.dumps(call["function"]["arguments"], sort_keys=True))
            answers.setdefault(key, []).append(messages[index + 1 + offset]["content"])

    def tool(name: str):
        def answer(**arguments):
            return answers[(name, json.dumps(arguments, sort_keys=True))].pop(0)
        return answer

    if not conversation.tools:
        return []
    return [FunctionTool(name=t["function"]["name"], fn=tool(t["function"]["name"]),
                         tool_schema=OpenAIFunctionToolSchema.model_validate(t)) for t in TOOLS]


def _config(conversation: Conversation):
    from omegaconf import OmegaConf

    multi_turn = {"max_user_turns": None, "max_assistant_turns": None, "max_parallel_calls": 8,
                  "max_tool_response_length": LENGTH, "tool_response_truncate_side": "middle", "format": PARSER}
    trainer = OmegaConf.create({"actor_rollout_ref": {"rollout": {
        "prompt_length": LENGTH, "response_length": LENGTH, "full_determinism": False, "multi_turn": multi_turn}}})
    data = OmegaConf.create({"apply_chat_template_kwargs": {"enable_thinking": conversation.thinking}})
    return trainer, data


def tool_agent_loop(template, conversation: Conversation, outputs: dict[int, list[int]]) -> list:
    """verl's ToolAgentLoop on a conversation of one user query: its prompts and its final sequence."""
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop

    trainer, data = _config(conversation)
    engine = ScriptedEngine([outputs[i] for i in sorted(outputs)])
    loop = ToolAgentLoop(trainer_config=DictConfigWrap(trainer), server_manager=engine, tokenizer=template.tokenizer,
                         processor=None, dataset_cls=None, data_config=DictConfigWrap(data), hf_model_type=MODEL_TYPE,
                         tools=ToolListWrap(_tools(conversation)))
    first = conversation.first_assistant
    try:
        output = loop.loop.run_until_complete(loop.run({}, raw_prompt=list(conversation.messages[:first])))
        final = [(len(conversation.messages), False, list(output.prompt_ids) + list(output.response_ids))]
    except ScriptEnd:
        final = []  # the last prompt it asked for is the end of a conversation that ends on a tool result
    points = [i for i, m in enumerate(conversation.messages) if m["role"] == "assistant"] + [len(conversation.messages)]
    return [(before, True, prompt) for before, prompt in zip(points, engine.prompts)] + final


def builder(template, conversation: Conversation, outputs: dict[int, list[int]]) -> list:
    """verl's Continuous Token builder driven turn by turn, user turns included."""
    from verl.utils.tokenizer.continuous_token_wiring import create_continuous_token_builder

    made = create_continuous_token_builder(template.tokenizer, hf_model_type=MODEL_TYPE,
                                           chat_template_kwargs={"enable_thinking": conversation.thinking})
    tools = TOOLS if conversation.tools else None
    messages, first = conversation.messages, conversation.first_assistant
    ids = made.build_initial_tokens(list(messages[:first]), tools=tools)
    seen = [(first, True, list(ids))]
    for start, end in conversation.steps():
        if messages[start]["role"] == "assistant":
            ids = made.merge_assistant_tokens(ids, outputs[start]).token_ids
            continue
        ids = made.merge_context_tokens(list(messages[:start]), list(messages[:end]), ids, tools=tools).token_ids
        seen.append((end, True, list(ids)))
    if messages[-1]["role"] == "assistant":
        seen.append((len(messages), False, list(ids)))
    return seen
