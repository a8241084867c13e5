"""An independent check of request bodies: the official `anthropic` SDK's own request type,
with every key it does not declare refused, validates what the server prepared."""

from __future__ import annotations

import functools
import importlib
import pkgutil
from typing import Any

import anthropic
import pydantic
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming


@functools.cache
def _adapter() -> pydantic.TypeAdapter[Any]:
    # The SDK's param types are TypedDicts without a pydantic config, so pydantic would ignore
    # a misspelt key; give each one a config that forbids keys it does not declare.
    strict = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    for info in pkgutil.walk_packages(anthropic.types.__path__, "anthropic.types."):
        try:
            module = importlib.import_module(info.name)
        except Exception:  # a module needing an optional extra; its types are not used here
            continue
        for value in vars(module).values():
            if isinstance(value, type) and hasattr(value, "__total__"):
                setattr(value, "__pydantic_config__", strict)  # noqa: B010 (not a declared attribute)
    return pydantic.TypeAdapter(MessageCreateParamsNonStreaming)


def validate_messages_request(body: dict[str, Any]) -> None:
    """Raises pydantic's ValidationError unless ``body`` is a valid `messages.create` request."""
    _adapter().validate_python(body)


def text_of(content: Any) -> str:
    """The text of a message's content: a string, or the text of its text blocks."""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict))


def blocks(message: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    """The content blocks of one type in a message."""
    content = message["content"]
    if isinstance(content, str):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]
