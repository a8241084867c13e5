"""One turn of a conversation through `strata serve` and the official `anthropic` SDK.

strata prepares the request (the signed identity in the system channel, tools narrowed to the
agent's allowlist, history and memory within budget); the SDK sends it unchanged; the reply,
text and tool calls, is recorded back into the session so the next turn sees it.

    strata serve --agent agent.signed.json --trust trust.toml &
    ANTHROPIC_API_KEY=... python anthropic_turn.py --session s1 "What does notes.txt say?"

``--anthropic-base-url`` (or ``$ANTHROPIC_BASE_URL``) points the SDK elsewhere, e.g. at a proxy.
"""

from __future__ import annotations

import argparse
import os

import anthropic
from anthropic.types import Message

from strata_client import DEFAULT_BASE_URL, StrataClient, ToolCall


def run_turn(
    strata: StrataClient, claude: anthropic.Anthropic, session_id: str, question: str
) -> Message:
    """Prepares the turn, sends it with the SDK, records the reply; returns the SDK's message."""
    turn = strata.prepare_turn(session_id, question)
    # The prepared body is exactly the keyword arguments of messages.create, typed as such.
    message = claude.messages.create(**turn.request_for("anthropic"))
    text = "".join(block.text for block in message.content if block.type == "text")
    calls: list[ToolCall] = [
        {"id": block.id, "name": block.name, "arguments": dict(block.input)}
        for block in message.content
        if block.type == "tool_use"
    ]
    strata.record_reply(session_id, text, tool_calls=calls)
    return message


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("question")
    parser.add_argument("--session", default="example")
    parser.add_argument("--strata", default=os.environ.get("STRATA_URL", DEFAULT_BASE_URL))
    parser.add_argument("--token-file", default=".strata/serve.token")
    parser.add_argument("--anthropic-base-url", default=os.environ.get("ANTHROPIC_BASE_URL"))
    args = parser.parse_args()

    claude = anthropic.Anthropic(base_url=args.anthropic_base_url)
    with StrataClient(args.strata, token_file=args.token_file) as strata:
        message = run_turn(strata, claude, args.session, args.question)
    for block in message.content:
        if block.type == "text":
            print(block.text)
        elif block.type == "tool_use":
            print(f"[tool call {block.id}: {block.name}({block.input})]")


if __name__ == "__main__":
    main()
