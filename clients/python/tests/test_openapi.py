"""Every operation of the OpenAPI document the server publishes has a method in both clients,
calling the same route with the same body fields and headers (an ``Idempotency-Key`` for every
operation that changes a session), so a new endpoint, field or header cannot be missed."""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

from strata_client import OPERATIONS, AsyncStrataClient, StrataClient

from strata_server import OPENAPI

METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}


def _document() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(OPENAPI.read_text())
    return doc


def _route(method: str, path: str) -> tuple[str, str]:
    """A route with its path parameters' names left out."""
    return method.upper(), re.sub(r"\{[^}]*\}", "{}", path)


def _resolve(doc: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = doc
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def _documented() -> dict[tuple[str, str], dict[str, Any]]:
    doc = _document()
    return {
        _route(method, path): op
        for path, item in doc["paths"].items()
        for method, op in item.items()
        if method in METHODS
    }


def test_every_operation_has_a_client_method() -> None:
    documented = _documented()
    ours = {_route(op.method, op.path): (name, op) for name, op in OPERATIONS.items()}
    missing = sorted(
        f"{method} {path} ({op.get('operationId')})"
        for (method, path), op in documented.items()
        if (method, path) not in ours
    )
    assert not missing, f"operations without a client method: {missing}"
    stale = sorted(f"{m} {p}" for (m, p) in ours if (m, p) not in documented)
    assert not stale, f"client methods calling routes the API does not have: {stale}"
    for route, (name, op) in ours.items():
        assert documented[route].get("operationId") == op.operation_id, route
        assert bool(documented[route].get("security")) == op.auth, f"{route}: bearer token"
        assert callable(getattr(StrataClient, name))
        assert inspect.iscoroutinefunction(getattr(AsyncStrataClient, name)), name


def _header_parameters(op: dict[str, Any]) -> set[str]:
    """The operation's header parameters as Python names: ``Idempotency-Key`` is
    ``idempotency_key``."""
    return {
        p["name"].lower().replace("-", "_") for p in op.get("parameters", []) if p["in"] == "header"
    }


def test_request_fields_are_method_parameters() -> None:
    doc = _document()
    documented = _documented()
    for name, op in OPERATIONS.items():
        operation = documented[_route(op.method, op.path)]
        fields = _header_parameters(operation)
        assert op.keyed == ("idempotency_key" in fields), f"{name}: Idempotency-Key"
        # Path parameters past the session id (a tool call's id) are method parameters too.
        fields |= {
            p["name"]
            for p in operation.get("parameters", [])
            if p["in"] == "path" and p["name"] != "session_id"
        }
        body = operation.get("requestBody")
        if body is not None:
            schema = _resolve(doc, body["content"]["application/json"]["schema"])
            fields |= set(schema.get("properties", {}))
        for cls in (StrataClient, AsyncStrataClient):
            params = set(inspect.signature(getattr(cls, name)).parameters) - {"self", "session_id"}
            assert params == fields, f"{cls.__name__}.{name} takes {params}, the API {fields}"


def test_the_server_serves_the_checked_in_document(client: StrataClient) -> None:
    assert client.openapi() == _document()
