"""Check strata's provider request bodies against the official Python SDKs.

Reads a JSON Lines file of `{"provider": ..., "body": ..., "wire": ...}` records (`wire` is the
exact compact serialisation strata produced) and, for each record:

1. validates the body against the SDK's own request type, item by item: every message, every
   content block of every message, every tool, the tool choice, the system blocks and every
   Responses `input` item is checked against the SDK's param type for it, with keys the type does
   not declare refused and no coercion (a number where a string belongs is refused); see
   `StrictTypes`;
2. for the first `--send N` records of each provider, sends the body through the official client
   (`openai.OpenAI().chat.completions.create`, `.responses.create`,
   `anthropic.Anthropic().messages.create`) to a recorder on 127.0.0.1 and checks that the bytes
   the client put on the wire are strata's bytes (falling back to JSON equality, reported, if
   only the serialisation differs).

Prints what is wrong with each refused record (its index, the path inside the body and the
SDK type's complaint) and one closing line `N passed, M failed`; exits non-zero if any record
failed.
"""

from __future__ import annotations

import argparse
import collections.abc
import json
import sys
import threading
import types
import typing
from collections.abc import Callable, Iterable
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any, ClassVar

import anthropic
import openai
import pydantic
import typing_extensions as te
from anthropic.types.message_create_params import MessageCreateParamsNonStreaming
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming

# typing's forms as plain values: the strict types are built at run time.
ANNOTATED: Any = te.Annotated
LITERAL: Any = typing.Literal
UNION: Any = typing.Union
LIST: Any = list
DICT: Any = dict
TYPED_DICT: Any = te.TypedDict
INSTANCE_OF: Any = pydantic.InstanceOf
# What a JSON document can hold besides objects and arrays.
JSON_LEAVES: frozenset[Any] = frozenset({str, int, float, bool, type(None), object, Any})
# Field qualifiers kept as they are, so pydantic reads required and optional keys as the SDK's.
QUALIFIERS: frozenset[Any] = frozenset({te.Required, te.NotRequired, te.ReadOnly})
# Containers of one item type; pydantic checks `Iterable` fields lazily, a list eagerly.
SEQUENCES: frozenset[Any] = frozenset(
    {
        list,
        collections.abc.Iterable,
        collections.abc.Iterator,
        collections.abc.Collection,
        collections.abc.Sequence,
        collections.abc.MutableSequence,
    }
)
MAPPINGS: frozenset[Any] = frozenset(
    {dict, collections.abc.Mapping, collections.abc.MutableMapping}
)
# Keys that tell the members of a union apart, tried in this order.
TAG_KEYS = ("type", "role")


def is_union(tp: Any) -> bool:
    return te.get_origin(tp) in (typing.Union, types.UnionType)


def peel(tp: Any) -> Any:
    """The type under `Annotated`, `Required`, `NotRequired` and `ReadOnly`."""
    while True:
        origin = te.get_origin(tp)
        if origin is te.Annotated or origin in QUALIFIERS:
            tp = te.get_args(tp)[0]
        else:
            return tp


def is_python_only(tp: Any) -> bool:
    """Whether `tp` stands only for Python objects the client serialises itself (a pydantic
    model of a response, a file, bytes), which no value parsed from JSON can be."""
    tp = peel(tp)
    if is_union(tp):
        return all(is_python_only(member) for member in te.get_args(tp))
    origin = te.get_origin(tp)
    if origin is not None:
        return origin is typing.IO
    if te.is_typeddict(tp) or tp in JSON_LEAVES:
        return False
    return isinstance(tp, type)


class StrictTypes:
    """Strict, eager copies of the SDKs' param types.

    Every `TypedDict` is copied with `extra="forbid"` (unless the SDK declares the type open, as
    Anthropic's `InputSchemaTyped`), so a key the SDK type does not declare is refused at any
    depth; every `Iterable[X]` becomes `list[X]`, so each item is validated (pydantic wraps an
    `Iterable` in a generator that checks items only when consumed, which nothing does); union
    members only a Python object can satisfy are dropped, since a JSON body holds none; and a
    union of `TypedDict`s told apart by a literal `type` or `role` validates an item only
    against the members its tag allows, so a refused item is reported against the types it
    could be. Field types, required keys and literals are the SDK's own, read with
    `typing.get_type_hints`; the SDKs' own classes are left unchanged.
    """

    def __init__(self) -> None:
        self._copies: dict[Any, Any] = {}
        self._hints: dict[Any, dict[str, Any]] = {}

    def hints(self, typed_dict: Any) -> dict[str, Any]:
        if typed_dict not in self._hints:
            self._hints[typed_dict] = te.get_type_hints(typed_dict, include_extras=True)
        return self._hints[typed_dict]

    def convert(self, tp: Any) -> Any:
        """The strict, eager form of the SDK annotation `tp`."""
        origin = te.get_origin(tp)
        args = te.get_args(tp)
        if origin is te.Annotated:
            return ANNOTATED[(self.convert(args[0]), *tp.__metadata__)]
        if origin in QUALIFIERS:
            return origin[self.convert(args[0])]
        if origin is LITERAL:
            return tp
        if is_union(tp):
            return self.union(args)
        if origin in SEQUENCES:
            return LIST[self.convert(args[0])]
        if origin in MAPPINGS:
            return DICT[self.convert(args[0]), self.convert(args[1])]
        if te.is_typeddict(tp):
            return self.typed_dict(tp)
        if tp in JSON_LEAVES:
            return tp
        if is_python_only(tp):
            return INSTANCE_OF[origin or tp]
        raise TypeError(f"no strict form for the SDK annotation {tp!r}")

    def union(self, members: tuple[Any, ...]) -> Any:
        kept = [m for m in members if not is_python_only(m)] or list(members)
        typed = [m for m in kept if te.is_typeddict(peel(m))]
        converted = [self.convert(m) for m in kept if m not in typed]
        tagged = self.tagged(typed) if len(typed) > 1 else None
        if tagged is None:
            converted.extend(self.convert(m) for m in typed)
        else:
            converted.append(tagged)
        if len(converted) == 1:
            return converted[0]
        return UNION[tuple(converted)]

    def tagged(self, typed_dicts: list[Any]) -> Any:
        """`typed_dicts` as a union that validates an item only against the members its tag
        (`type` or `role`) allows, or `None` if no tag key tells any of them apart.

        The members that declare the item's tag value, or that leave the key out when the item
        does, are the only ones it could match anyway; the others would each add errors
        about the tag to the report of an item that fails.
        """
        for key in TAG_KEYS:
            groups = self.tag_groups(typed_dicts, key)
            if groups is not None and max(len(g) for g in groups.values()) < len(typed_dicts):
                break
        else:
            return None
        choices = []
        for label, group in groups.items():
            members = [self.convert(m) for m in group]
            inner = members[0] if len(members) == 1 else UNION[tuple(members)]
            choices.append(ANNOTATED[inner, pydantic.Tag(label)])
        values = [repr(t) for t in groups if t not in (f"(no {key})", f"({key} null)")]
        if f"({key} null)" in groups:
            values.append("null")
        allowed = "one of " + ", ".join(values)
        if f"(no {key})" in groups:
            allowed += " or absent"
        return ANNOTATED[
            UNION[tuple(choices)],
            pydantic.Discriminator(
                tag_reader(key),
                custom_error_type="item_tag_invalid",
                custom_error_message=f"Input should be an object whose {key!r} is {allowed}",
            ),
        ]

    def tag_groups(self, typed_dicts: list[Any], key: str) -> dict[str, list[Any]] | None:
        """The members of `typed_dicts` by the value of `key` each allows: a string literal,
        `(KEY null)` for `null` and `(no KEY)` for leaving it out; `None` if one of them does
        not declare `key` as string literals."""
        groups: dict[str, list[Any]] = {}
        for member in typed_dicts:
            typed_dict = peel(member)
            hint = self.hints(typed_dict).get(key)
            if hint is None:
                return None
            inner = peel(hint)
            options = te.get_args(inner) if is_union(inner) else (inner,)
            tags: list[str] = []
            for option in options:
                if option is type(None):
                    tags.append(f"({key} null)")
                elif te.get_origin(option) is LITERAL:
                    if not all(isinstance(t, str) for t in te.get_args(option)):
                        return None
                    tags.extend(te.get_args(option))
                else:
                    return None
            if not self.required(typed_dict, key, hint):
                tags.append(f"(no {key})")
            for tag in dict.fromkeys(tags):
                groups.setdefault(tag, []).append(member)
        return groups

    @staticmethod
    def required(typed_dict: Any, key: str, hint: Any) -> bool:
        """Whether `key` is required, as pydantic decides it: in `__required_keys__` or marked
        `Required`, and not marked `NotRequired`."""
        marks = set()
        while (origin := te.get_origin(hint)) is te.Annotated or origin in QUALIFIERS:
            marks.add(origin)
            hint = te.get_args(hint)[0]
        if te.NotRequired in marks:
            return False
        return key in typed_dict.__required_keys__ or te.Required in marks

    def typed_dict(self, sdk: Any) -> Any:
        if sdk in self._copies:
            return self._copies[sdk]
        # Registered before its fields are converted, so a type that contains itself refers to
        # this copy.
        copy: Any = TYPED_DICT(sdk.__name__, {}, total=False)
        copy.__qualname__ = sdk.__qualname__
        self._copies[sdk] = copy
        annotations = {}
        for name, hint in self.hints(sdk).items():
            annotations[wire_name(name, hint)] = self.convert(hint)
        required = {wire_name(k, self.hints(sdk)[k]) for k in sdk.__required_keys__}
        copy.__annotations__ = annotations
        copy.__required_keys__ = frozenset(required)
        copy.__optional_keys__ = frozenset(annotations) - copy.__required_keys__
        declared = sdk.__dict__.get("__pydantic_config__") or {}
        copy.__pydantic_config__ = pydantic.ConfigDict(extra=declared.get("extra", "forbid"))
        return copy


def wire_name(name: str, hint: Any) -> str:
    """The key a field has in JSON: the SDKs mark a Python name that differs from it (`async_`)
    with an `alias` in the field's `Annotated` metadata."""
    while (origin := te.get_origin(hint)) is te.Annotated or origin in QUALIFIERS:
        for meta in getattr(hint, "__metadata__", ()):
            alias = getattr(meta, "alias", None)
            if isinstance(alias, str):
                return alias
        hint = te.get_args(hint)[0]
    return name


def tag_reader(key: str) -> Callable[[Any], str | None]:
    """The function that names the group of union members an item belongs to by its `key`
    (see `StrictTypes.tag_groups`); `None`, refused, for an item that is not an object."""

    def read(item: Any) -> str | None:
        if not isinstance(item, dict):
            return None
        if key not in item:
            return f"(no {key})"
        tag = item[key]
        if tag is None:
            return f"({key} null)"
        return tag if isinstance(tag, str) else None

    read.__name__ = f"read_{key}"
    return read


REQUEST_TYPES: dict[str, Any] = {
    "openai-chat": CompletionCreateParamsNonStreaming,
    "openai-responses": ResponseCreateParamsNonStreaming,
    "anthropic": MessageCreateParamsNonStreaming,
}


def build_adapters() -> dict[str, pydantic.TypeAdapter[Any]]:
    strict = StrictTypes()
    return {
        provider: pydantic.TypeAdapter(strict.convert(tp)) for provider, tp in REQUEST_TYPES.items()
    }


ADAPTERS = build_adapters()
# Errors shown per refused body; a union of many types can report one per member.
SHOWN_ERRORS = 8


def location(loc: Iterable[int | str]) -> str:
    """`messages[1].content[0].text` from pydantic's `('messages', 1, 'content', 0, 'text')`.

    The union member an item was tried against appears as its type's name (`ToolParam`) or, in
    a discriminated union, its tag (`user`); pydantic's labels of parametrised members
    (`list[union[...]]`, `literal['auto']`) are left out, as they repeat the SDK's annotation.
    """
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif "[" not in part:
            out += f".{part}" if out else part
    return out or "(body)"


def beside_the_point(err: Any, errors: list[Any]) -> bool:
    """Whether `err` only says that a field of type `Union[str, list[...]]` is not a string,
    while errors from inside the list say what is wrong with it."""
    loc = err["loc"]
    if not loc or loc[-1] != "str" or err["type"] != "string_type":
        return False
    field = loc[:-1]
    return any(
        other is not err
        and len(other["loc"]) > len(field) + 1
        and other["loc"][: len(field)] == field
        for other in errors
    )


def problems(provider: str, body: Any) -> list[str]:
    """What the SDK's request types refuse in `body`, one line each (the path inside the body,
    the complaint, its kind and the value); empty if nothing. Validation is strict: JSON values
    are not coerced to the declared type."""
    try:
        ADAPTERS[provider].validate_python(body, strict=True)
    except pydantic.ValidationError as e:
        errors = e.errors(include_url=False)
        lines = []
        for err in errors:
            if beside_the_point(err, errors):
                continue
            shown = json.dumps(err["input"], default=repr)
            if len(shown) > 120:
                shown = shown[:117] + "..."
            lines.append(f"{location(err['loc'])}: {err['msg']} [{err['type']}] (got {shown})")
        return lines
    return []


# Minimal well-formed responses, so the clients parse the reply and return normally.
REPLIES = {
    "/v1/chat/completions": {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "finish_reason": "stop",
                "message": {"role": "assistant", "content": "ok"},
            }
        ],
    },
    "/v1/responses": {
        "id": "resp_1",
        "object": "response",
        "created_at": 0,
        "model": "m",
        "status": "completed",
        "output": [],
        "parallel_tool_calls": False,
        "tool_choice": "auto",
        "tools": [],
    },
    "/v1/messages": {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "ok"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1, "output_tokens": 1},
    },
}


class Recorder(BaseHTTPRequestHandler):
    recorded: ClassVar[list[tuple[str, bytes]]] = []

    def do_POST(self) -> None:
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        Recorder.recorded.append((self.path, body))
        reply = json.dumps(REPLIES.get(self.path, {})).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args: Any) -> None:
        pass


def send(provider: str, body: dict[str, Any], base: str) -> None:
    create: Callable[..., Any]
    if provider == "openai-chat":
        client = openai.OpenAI(base_url=base + "/v1", api_key="test", max_retries=0)
        create = client.chat.completions.create
    elif provider == "openai-responses":
        client = openai.OpenAI(base_url=base + "/v1", api_key="test", max_retries=0)
        create = client.responses.create
    else:
        an = anthropic.Anthropic(base_url=base, api_key="test", max_retries=0)
        create = an.messages.create
    create(**body)


class Sender:
    """Sends bodies through the official clients to a recorder on 127.0.0.1 and compares what
    they put on the wire with strata's bytes."""

    def __init__(self) -> None:
        self.server = HTTPServer(("127.0.0.1", 0), Recorder)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.byte_equal = 0
        self.json_equal = 0

    def check(self, provider: str, body: dict[str, Any], wire: str) -> str | None:
        """What went wrong sending `body`, or `None` if the client sent it unchanged."""
        Recorder.recorded.clear()
        try:
            send(provider, body, self.base)
        except Exception as e:  # the client refused or failed: a real failure
            return f"the official client failed: {e!r}"
        if len(Recorder.recorded) != 1:
            return f"expected one request, recorded {len(Recorder.recorded)}"
        _, sent = Recorder.recorded[0]
        if sent == wire.encode("utf-8"):
            self.byte_equal += 1
        elif json.loads(sent) == body:
            self.json_equal += 1
            if self.json_equal == 1:
                shown = sent[:300].decode("utf-8", "replace")
                print(f"first body equal as JSON only ({provider}):")
                print(f"sent:   {shown}\nstrata: {wire[:300]}")
        else:
            shown = sent.decode("utf-8", "replace")
            return f"the client sent a different body:\n{shown}\n---\n{wire}"
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("corpus")
    ap.add_argument("--send", type=int, default=5)
    args = ap.parse_args(argv)

    sender = Sender()
    passed = failed = 0
    sent: dict[str, int] = {}
    with open(args.corpus, encoding="utf-8") as f:
        for i, line in enumerate(f):
            rec = json.loads(line)
            provider, body = rec["provider"], rec["body"]
            if provider not in ADAPTERS:
                failed += 1
                print(f"record {i}: unknown provider {provider!r}")
                continue
            found = problems(provider, body)
            if found:
                failed += 1
                print(f"record {i} ({provider}): the SDK's request types refuse the body:")
                for text in found[:SHOWN_ERRORS]:
                    print("  " + text)
                if len(found) > SHOWN_ERRORS:
                    print(f"  ... and {len(found) - SHOWN_ERRORS} more")
                continue
            if sent.get(provider, 0) < args.send:
                sent[provider] = sent.get(provider, 0) + 1
                wrong = sender.check(provider, body, rec["wire"])
                if wrong is not None:
                    failed += 1
                    print(f"record {i} ({provider}): {wrong}")
                    continue
            passed += 1
    sender.server.shutdown()
    print(
        f"sent through the official clients: {sender.byte_equal} byte-identical, "
        f"{sender.json_equal} equal as JSON only"
    )
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
