"""Reading error bodies: each stable code maps to its class, `Retry-After` is kept, and a body
that is not the API's error shape (a proxy's HTML page, say) is a TransportError, not a crash."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from strata_client import (
    ERROR_CLASSES,
    OverloadedError,
    StrataError,
    TransportError,
    read_token_file,
)
from strata_client._errors import error_from_response

from strata_server import OPENAPI


def _body(code: str, message: str = "what to do") -> bytes:
    return json.dumps({"error": {"code": code, "message": message}}).encode()


def test_every_code_has_its_class() -> None:
    for code, cls in ERROR_CLASSES.items():
        err = error_from_response(418, {}, _body(code))
        assert type(err) is cls
        assert (err.status, err.code, err.message) == (418, code, "what to do")


def test_every_documented_code_has_a_class() -> None:
    schemas = json.loads(OPENAPI.read_text())["components"]["schemas"]
    assert set(ERROR_CLASSES) == set(schemas["ErrorCode"]["enum"])
    assert len(set(ERROR_CLASSES.values())) == len(ERROR_CLASSES), "one class per code"


def test_overloaded_keeps_retry_after() -> None:
    err = error_from_response(503, {"retry-after": "2"}, _body("overloaded", "busy; retry"))
    assert isinstance(err, OverloadedError)
    assert err.retry_after == 2.0
    assert str(err) == "overloaded (HTTP 503): busy; retry"


def test_an_unknown_code_is_still_a_strata_error() -> None:
    err = error_from_response(409, {}, _body("conflict_from_a_newer_server"))
    assert type(err) is StrataError
    assert err.code == "conflict_from_a_newer_server"


@pytest.mark.parametrize(
    "body",
    [b"<html>502 Bad Gateway</html>", b'{"error": "flat"}', b'{"error": {"code": 7}}', b""],
)
def test_a_foreign_body_is_a_transport_error(body: bytes) -> None:
    err = error_from_response(502, {}, body)
    assert isinstance(err, TransportError)
    assert (err.status, err.code) == (502, "unexpected_response")
    assert "strata serve" in err.message


def test_token_file_without_a_usable_token(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text(f"# only hashes\nsha256:{'a' * 64}\n\n")
    with pytest.raises(ValueError, match="no usable token"):
        read_token_file(path)
