#!/usr/bin/env python3
"""A small OpenAI-compatible embeddings server for strata's tests (standard library only).

It answers POST /v1/embeddings with the vectors of a deterministic model of our own: every
word of a fixed table points along one or two concept axes (meals, opening hours, networks,
releases, secrets, files, memory), the vector of a text is the sum of its words' vectors, and
words outside the table add nothing. Texts about the same concept therefore point the same
way even when they share no word ("breakfast hours" and "the cafeteria serves morning meals"),
which is what a trained embedding model does and what the hashing embedder cannot.

Usage: embeddings.py --key KEY [--model NAME] [--port PORT]
It prints "listening on PORT" once it accepts connections, and answers HTTP 401 to a request
without "Authorization: Bearer KEY".
"""

import argparse
import json
import math
import re
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

AXES = ["meals", "hours", "network", "release", "secrets", "files", "memory", "weather"]

CONCEPTS = {
    "meals": "breakfast brunch lunch dinner supper meal meals cafeteria canteen food eat "
    "eating menu coffee kitchen snack snacks dish dishes serves served",
    "hours": "hours hour morning mornings evening noon opens opening closes closing "
    "schedule daily weekday weekdays",
    "network": "vpn wireguard tunnel tunnels network networking peer peers firewall subnet "
    "connect connection connections remote",
    "release": "deploy deploys deploying deployment deployments release releases releasing "
    "ship ships shipping version versions production rollout publish launch",
    "secrets": "key keys rotate rotates rotation secret secrets credential credentials "
    "password passwords certificate",
    "files": "file files read reading document documents notes text",
    "memory": "search searching find recall remember memory memories lookup",
    "weather": "weather rain sunny forecast",
}

VOCABULARY = {}
for axis, words in CONCEPTS.items():
    for word in words.split():
        VOCABULARY.setdefault(word, []).append(AXES.index(axis))


def embed(text, dims):
    """The model's vector of `text`, its first `dims` axes, at unit length (or all zeros)."""
    v = [0.0] * len(AXES)
    for word in re.findall(r"[0-9A-Za-z]+", text.lower()):
        for axis in VOCABULARY.get(word, []):
            v[axis] += 1.0
    v = v[:dims]
    norm = math.sqrt(sum(x * x for x in v))
    return [x / norm for x in v] if norm > 0 else v


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, message, kind):
        self.answer(status, {"error": {"message": message, "type": kind}})

    def do_POST(self):
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path.rstrip("/") != "/v1/embeddings":
            return self.error(404, f"no route {self.path}", "not_found")
        if self.headers.get("Authorization") != f"Bearer {self.server.key}":
            return self.error(401, "Incorrect API key provided", "invalid_request_error")
        try:
            req = json.loads(raw)
        except ValueError as e:
            return self.error(400, f"invalid JSON: {e}", "invalid_request_error")
        if req.get("model") != self.server.model:
            return self.error(404, f"model {req.get('model')!r} not found", "invalid_request_error")
        inputs = req.get("input")
        if isinstance(inputs, str):
            inputs = [inputs]
        if not isinstance(inputs, list) or not all(isinstance(t, str) for t in inputs):
            return self.error(400, "input must be a string or a list of strings", "invalid_request_error")
        dims = req.get("dimensions", len(AXES))
        if not isinstance(dims, int) or not 1 <= dims <= len(AXES):
            return self.error(400, f"dimensions must be 1 to {len(AXES)}", "invalid_request_error")
        data = [
            {"object": "embedding", "index": i, "embedding": embed(t, dims)}
            for i, t in enumerate(inputs)
        ]
        tokens = sum(len(t.split()) for t in inputs)
        self.server.requests += 1
        self.answer(200, {
            "object": "list",
            "data": data,
            "model": self.server.model,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        })


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--key", required=True)
    parser.add_argument("--model", default="concepts-v1")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.key = args.key
    server.model = args.model
    server.requests = 0
    print(f"listening on {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
