"""Check strata's provider request bodies against the official Python SDKs.

Reads a JSON Lines file of `{"provider": ..., "body": ..., "wire": ...}` records (`wire` is the
exact compact serialisation strata produced) and, for each record:

1. validates the body against the SDK's own request type with pydantic's `TypeAdapter`, with
   unknown keys forbidden, so a field the API does not take fails the check;
2. for the first `--send N` records of each provider, sends the body through the official client
   (`openai.OpenAI().chat.completions.create`, `.responses.create`,
   `anthropic.Anthropic().messages.create`) to a recorder on 127.0.0.1 and checks that the bytes
   the client put on the wire are strata's bytes (falling back to JSON equality, reported, if
   only the serialisation differs).

Exits non-zero on the first failure with the record's index and the SDK's message. Prints one
closing line `N passed, M failed`.
"""

import argparse
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import anthropic
import openai
import pydantic
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

def forbid_unknown_keys(package):
    """Make every TypedDict of the SDK's `types` package refuse keys it does not declare.

    pydantic ignores unknown keys of a TypedDict unless the class carries a config saying
    otherwise; the SDKs' param types carry none, so without this a misspelt field would pass.
    """
    import importlib
    import pkgutil

    strict = pydantic.ConfigDict(extra="forbid", arbitrary_types_allowed=True)
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        try:
            module = importlib.import_module(info.name)
        except Exception:
            continue
        for value in vars(module).values():
            if isinstance(value, type) and hasattr(value, "__total__") and hasattr(value, "__annotations__"):
                value.__pydantic_config__ = strict


forbid_unknown_keys(openai.types)
forbid_unknown_keys(anthropic.types)

ADAPTERS = {
    "openai-chat": pydantic.TypeAdapter(CompletionCreateParamsNonStreaming),
    "openai-responses": pydantic.TypeAdapter(ResponseCreateParamsNonStreaming),
    "anthropic": pydantic.TypeAdapter(MessageCreateParamsNonStreaming),
}

# Minimal well-formed responses, so the clients parse the reply and return normally.
REPLIES = {
    "/v1/chat/completions": {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": "ok"}}],
    },
    "/v1/responses": {
        "id": "resp_1", "object": "response", "created_at": 0, "model": "m", "status": "completed",
        "output": [], "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
    },
    "/v1/messages": {
        "id": "msg_1", "type": "message", "role": "assistant", "model": "m",
        "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
        "stop_sequence": None, "usage": {"input_tokens": 1, "output_tokens": 1},
    },
}


class Recorder(BaseHTTPRequestHandler):
    recorded = []

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        Recorder.recorded.append((self.path, body))
        reply = json.dumps(REPLIES.get(self.path, {})).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


def send(provider, body, base):
    if provider == "openai-chat":
        client = openai.OpenAI(base_url=base + "/v1", api_key="test", max_retries=0)
        client.chat.completions.create(**body)
    elif provider == "openai-responses":
        client = openai.OpenAI(base_url=base + "/v1", api_key="test", max_retries=0)
        client.responses.create(**body)
    else:
        client = anthropic.Anthropic(base_url=base, api_key="test", max_retries=0)
        client.messages.create(**body)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--send", type=int, default=5)
    args = ap.parse_args()

    server = HTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = "http://127.0.0.1:%d" % server.server_address[1]

    passed = failed = 0
    sent = {}
    byte_equal = json_equal = 0
    with open(args.corpus, encoding="utf-8") as f:
        for i, line in enumerate(f):
            rec = json.loads(line)
            provider, body = rec["provider"], rec["body"]
            try:
                ADAPTERS[provider].validate_python(body)
            except pydantic.ValidationError as e:
                failed += 1
                print("record %d (%s): the SDK's request type refuses the body:\n%s" % (i, provider, e))
                continue
            if sent.get(provider, 0) < args.send:
                sent[provider] = sent.get(provider, 0) + 1
                Recorder.recorded.clear()
                try:
                    send(provider, body, base)
                except Exception as e:  # the client refused or failed: a real failure
                    failed += 1
                    print("record %d (%s): the official client failed: %r" % (i, provider, e))
                    continue
                if len(Recorder.recorded) != 1:
                    failed += 1
                    print("record %d (%s): expected one request, recorded %d" % (i, provider, len(Recorder.recorded)))
                    continue
                _, wire = Recorder.recorded[0]
                if wire == rec["wire"].encode("utf-8"):
                    byte_equal += 1
                elif json.loads(wire) == body:
                    json_equal += 1
                    if json_equal == 1:
                        print("first body equal as JSON only (%s):\nsent:   %s\nstrata: %s"
                              % (provider, wire[:300].decode("utf-8", "replace"), rec["wire"][:300]))
                else:
                    failed += 1
                    print("record %d (%s): the client sent a different body:\n%s\n---\n%s"
                          % (i, provider, wire.decode("utf-8", "replace"), rec["wire"]))
                    continue
            passed += 1
    server.shutdown()
    print("sent through the official clients: %d byte-identical, %d equal as JSON only"
          % (byte_equal, json_equal))
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
