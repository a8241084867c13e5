"""Checks a decoded JSON value against a type annotation: ``TypedDict`` s (required keys
present, no key they do not declare), unions, ``Literal`` s, lists and scalars. What a type
checker assumes of the server's answers, held to what the server sends."""

from __future__ import annotations

import types
import typing
from typing import Any, Literal, Union


def problems(value: Any, hint: Any, where: str = "$") -> list[str]:
    """Where ``value`` is not of type ``hint``; empty when it is."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return []
    if hint is None or hint is type(None):
        return [] if value is None else [f"{where}: {value!r} is not null"]
    if origin in (Union, types.UnionType):
        found = [problems(value, option, where) for option in typing.get_args(hint)]
        if any(not p for p in found):
            return []
        return [f"{where}: {value!r} matches none of {hint}: {found}"]
    if origin is Literal:
        ok = value in typing.get_args(hint)
        return [] if ok else [f"{where}: {value!r} not in {typing.get_args(hint)}"]
    if typing.is_typeddict(hint):
        return _typeddict(value, hint, where)
    if origin is list:
        if not isinstance(value, list):
            return [f"{where}: {value!r} is not a list"]
        (item,) = typing.get_args(hint)
        return [p for i, v in enumerate(value) for p in problems(v, item, f"{where}[{i}]")]
    if origin is dict:
        return [] if isinstance(value, dict) else [f"{where}: {value!r} is not an object"]
    if hint is bool:
        return [] if isinstance(value, bool) else [f"{where}: {value!r} is not a boolean"]
    if hint is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
        return [] if ok else [f"{where}: {value!r} is not an integer"]
    if hint is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return [] if ok else [f"{where}: {value!r} is not a number"]
    if hint is str:
        return [] if isinstance(value, str) else [f"{where}: {value!r} is not a string"]
    raise TypeError(f"{where}: no check for {hint!r}")


def _typeddict(value: Any, hint: Any, where: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{where}: {value!r} is not an object ({hint.__name__})"]
    fields = typing.get_type_hints(hint)
    found = [f"{where}: {hint.__name__} has no `{k}`" for k in value if k not in fields]
    missing = hint.__required_keys__ - value.keys()
    found += [f"{where}: `{k}` of {hint.__name__} is missing" for k in sorted(missing)]
    for key, field_hint in fields.items():
        if key in value:
            found += problems(value[key], field_hint, f"{where}.{key}")
    return found
