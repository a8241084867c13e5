/**
 * Reading error bodies: each stable code maps to its class, `Retry-After` is kept, and a body
 * that is not the API's error shape (a proxy's HTML page, say) is a TransportError.
 * @module
 */

import assert from "node:assert/strict";
import { describe, it } from "node:test";

import {
  ERROR_CLASSES,
  OverloadedError,
  StrataError,
  TransportError,
  errorFromResponse,
} from "@strata/client";

const body = (code: unknown, message = "what to do") => JSON.stringify({ error: { code, message } });

describe("error bodies", () => {
  it("map every code to its class", () => {
    for (const [code, Class] of Object.entries(ERROR_CLASSES)) {
      const err = errorFromResponse(418, new Headers(), body(code));
      assert.equal(err.constructor, Class);
      assert.deepEqual([err.status, err.code, err.message, err.name], [418, code, "what to do", Class.name]);
    }
  });

  it("keep Retry-After", () => {
    const err = errorFromResponse(503, new Headers({ "retry-after": "2" }), body("overloaded", "busy"));
    assert.ok(err instanceof OverloadedError);
    assert.equal(err.retryAfter, 2);
    assert.equal(String(err), "OverloadedError: overloaded (HTTP 503): busy");
  });

  it("keep an unknown code as a StrataError", () => {
    const err = errorFromResponse(409, new Headers(), body("conflict_from_a_newer_server"));
    assert.equal(err.constructor, StrataError);
    assert.equal(err.code, "conflict_from_a_newer_server");
  });

  it("turn a foreign body into a TransportError", () => {
    for (const text of ["<html>502 Bad Gateway</html>", '{"error": "flat"}', body(7), ""]) {
      const err = errorFromResponse(502, new Headers(), text);
      assert.ok(err instanceof TransportError, text);
      assert.deepEqual([err.status, err.code], [502, "unexpected_response"]);
    }
  });
});
