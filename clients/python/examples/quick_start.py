# pip install ./clients/python anthropic; strata serve --agent agent.signed.json --trust trust.toml
import anthropic

from strata_client import StrataClient, ToolCall

with StrataClient(token_file=".strata/serve.token") as strata:  # http://127.0.0.1:8177
    turn = strata.prepare_turn("s1", "What does notes.txt say about deploys?")
    message = anthropic.Anthropic().messages.create(**turn.request_for("anthropic"))
    text = "".join(b.text for b in message.content if b.type == "text")
    uses = [b for b in message.content if b.type == "tool_use"]
    calls: list[ToolCall] = [{"id": b.id, "name": b.name, "arguments": b.input} for b in uses]
    strata.record_reply("s1", text, tool_calls=calls)  # then record_tool_result, prepare_turn
