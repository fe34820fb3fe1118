"""An invocation's body and an error's JSON, shared by the router and a cluster's serving pod (both take
the endpoint's API from clients) and by the instance (whose errors reach clients unchanged)."""

from __future__ import annotations

import json
from typing import Any


def error_body(kind: str, message: str) -> dict[str, Any]:
    return {"error": {"type": kind, "message": message}}


def error_json(kind: str, message: str) -> bytes:
    return json.dumps(error_body(kind, message)).encode()


class BadRequest(ValueError):
    """A malformed invocation body: HTTP 400 naming the problem."""


def read_invocation(data: bytes, group: str) -> tuple[Any, str]:
    """(record, requested model: GROUP when the body names none) of an invocation body."""
    try:
        payload = json.loads(data)
    except ValueError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(payload, dict) or "record" not in payload:
        raise BadRequest('the body must be a JSON object with a "record" (and an optional "model")')
    requested = payload.get("model", group)
    if not isinstance(requested, str):
        raise BadRequest(f'"model" must be GROUP or GROUP:vN, got {requested!r}')
    return payload["record"], requested
