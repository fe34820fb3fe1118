"""Cache keys and code fingerprints: a step's identity must be equal across processes and hash seeds.

Keys are SHA-256 over canonical JSON (sorted keys, no whitespace, no NaN) so a SQLite-backed cache written by
one process is hit by another; code is fingerprinted by bytecode, constants and names rather than identified
by object, so an unchanged function keeps its key in a new process and moving it (line numbers) does not
change it.
"""

from __future__ import annotations

import hashlib
import json
import json.encoder
import types
from collections.abc import Callable, Mapping
from typing import Any

from kinetic_tui.core.errors import ValidationError

_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False, check_circular=False)
# JSONEncoder.encode builds a new C encoder per call, which costs about as much as encoding a small step's
# inputs; the C encoder object itself is reusable (same arguments as JSONEncoder.iterencode passes it).
# `c_make_encoder` is the C accelerator's private constructor (None without it); typeshed does not declare it.
_MAKE_C_ENCODER = getattr(json.encoder, "c_make_encoder", None)
_C_ENCODE = _MAKE_C_ENCODER and _MAKE_C_ENCODER(
    None, _ENCODER.default, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, False
)
# What canonical JSON raises for values it cannot represent (a cycle surfaces as RecursionError).
NOT_JSON = (TypeError, ValueError, RecursionError)


def canonical(value: Any) -> str:
    """Sorted keys, no whitespace, no NaN: equal values give equal text in any process."""
    return "".join(_C_ENCODE(value, 0)) if _C_ENCODE else _ENCODER.encode(value)


def compute_cache_key(
    name: str, resolved_inputs: Mapping[str, Any], params: Mapping[str, Any], version: str = ""
) -> str:
    """The identity of a step's work: SHA-256 of the canonical JSON of {"inputs", "name", "params",
    "version"}. Raises TypeError, ValueError or RecursionError for values JSON cannot represent."""
    return framed_key(key_frame(name, version), resolved_inputs, params)


def key_frame(name: str, version: str) -> tuple[str, str]:
    """The canonical JSON around a step's inputs and params (sorted keys: inputs, name, params, version).
    It is constant per step, so a run encodes it once per pipeline instead of once per step and run."""
    return ',"name":' + canonical(name) + ',"params":', ',"version":' + canonical(version) + "}"


def framed_key(frame: tuple[str, str], resolved_inputs: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """compute_cache_key with the step's frame already encoded (what a run calls per step)."""
    middle, tail = frame
    text = f'{{"inputs":{canonical(resolved_inputs)}{middle}{canonical(params) if params else "{}"}{tail}'
    return hashlib.sha256(text.encode()).hexdigest()


def _const_token(value: Any, memo: dict[types.CodeType, str]) -> str:
    """Constants as text that is stable across processes (frozenset order depends on the hash seed)."""
    if isinstance(value, types.CodeType):
        return "code:" + code_fingerprint(value, memo)
    if isinstance(value, tuple):
        return "(" + ",".join(_const_token(v, memo) for v in value) + ")"
    if isinstance(value, frozenset):
        return "{" + ",".join(sorted(_const_token(v, memo) for v in value)) + "}"
    return f"{type(value).__name__}:{value!r}"


def code_fingerprint(code: types.CodeType, memo: dict[types.CodeType, str] | None = None) -> str:
    """SHA-256 over bytecode, constants (nested code objects recursively) and names: editing code changes it,
    moving it (line numbers) does not."""
    memo = {} if memo is None else memo
    if code not in memo:
        digest = hashlib.sha256(code.co_code)
        digest.update("\0".join(_const_token(c, memo) for c in code.co_consts).encode())
        digest.update(("\0" + "\0".join(code.co_names)).encode())
        memo[code] = digest.hexdigest()
    return memo[code]


def fingerprint_callable(name: str, fn: Callable[..., Any], memo: dict[types.CodeType, str]) -> str:
    code = getattr(fn, "__code__", None)
    if not isinstance(code, types.CodeType):
        raise ValidationError(
            f"step {name!r}: cannot fingerprint a callable without __code__ "
            f"({type(fn).__name__}); pass version= explicitly"
        )
    return code_fingerprint(code, memo)
