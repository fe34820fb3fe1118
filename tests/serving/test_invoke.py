"""Invocations over real HTTP: the user's predict over the user's trained state, and every bad input
answered with a JSON error while the instance keeps serving."""

from __future__ import annotations

import os
import socket
import stat

import pytest

from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.serving.config import MAX_BODY_BYTES
from tests.serving.served import Home


def test_production_answers_with_the_built_in_predict_over_its_trained_state(served: Home) -> None:
    status, body = served.http("main", {"record": {"x": 2}})
    assert status == 200 and body["model"] == "g:v1"
    loss = 0.9**2  # the built-in step decays loss by learning_rate 0.1 for 2 epochs
    assert body["output"] == {"score": pytest.approx(loss * 2), "loss": pytest.approx(loss)}


def test_a_version_answers_with_the_user_predict_over_the_user_state(served: Home) -> None:
    status, body = served.http("main", {"record": {"x": 2}, "model": "g:v2"})
    assert (status, body["model"], body["output"]) == (200, "g:v2", {"y": 3.0})  # w = 3 epochs * lr 0.5
    assert "g:v2" in body["cache"]["loaded"]


def test_the_cli_invokes_over_http_with_the_token(served: Home) -> None:
    result = served.run("invoke main g:v2 '{\"x\": 4}'")
    assert result["model"] == "g:v2" and result["prediction"] == {"y": 6.0}


def test_unknown_version_is_404_naming_the_known_ones(served: Home) -> None:
    status, body = served.http("main", {"record": {}, "model": "g:v99"})
    assert status == 404 and "g:v1 (Production)" in body["error"]["message"] and "g:v2" in body["error"]["message"]
    with pytest.raises(NotFoundError, match="known versions"):
        served.run("invoke main other '{}'")


@pytest.mark.parametrize(
    ("raw", "says"),
    [(b"{not json", "not JSON"), (b'{"model": "g"}', '"record"'), (b"[1, 2]", '"record"')],
)
def test_malformed_requests_are_400_naming_the_problem(served: Home, raw: bytes, says: str) -> None:
    status, body = served.http("main", raw=raw)
    assert status == 400 and says in body["error"]["message"]


def test_a_predict_that_raises_is_500_with_its_type_and_message_and_serving_goes_on(served: Home) -> None:
    status, body = served.http("main", {"record": {"x": 1}, "model": "g:v3"})
    assert status == 500
    assert body["error"]["type"] == "ValueError" and "cannot score" in body["error"]["message"]
    assert "Traceback" not in str(body)
    status, body = served.http("main", {"record": {"x": 1}, "model": "g:v2"})
    assert (status, body["output"]) == (200, {"y": 1.5})


def test_non_json_output_is_500_naming_the_type(served: Home) -> None:
    status, body = served.http("main", {"record": {}, "model": "g:v4"})
    assert status == 500 and body["error"]["type"] == "NotJSON" and "set" in body["error"]["message"]


def test_a_wrong_or_missing_token_is_401(served: Home) -> None:
    status, body = served.http("main", {"record": {}}, token="wrong")
    assert status == 401 and "token" in body["error"]["message"]


def test_a_body_over_the_limit_is_413(served: Home) -> None:
    status, body = served.http("main", raw=b'{"record": "' + b"x" * MAX_BODY_BYTES + b'"}')
    assert status == 413 and body["error"]["type"] == "TooLarge"


def test_a_version_registered_without_its_model_is_409_saying_how_to_register_it(served: Home) -> None:
    from kinetic_tui.core.backends.local.workspace import store
    from kinetic_tui.core.paths import using_home

    with using_home(served.home):
        store().registry.load_registry().register("legacy", "a" * 64, {"metric": 1.0}, "base")
    served.run("endpoint create old --model legacy --tick-seconds 0")
    try:
        status, body = served.http("old", {"record": {}, "model": "legacy:v1"})
        assert status == 409
        assert "register legacy --from-training base" in body["error"]["message"]
    finally:
        served.run("endpoint stop old")


def test_show_endpoint_says_where_it_listens_and_the_token_file_is_owner_only(served: Home) -> None:
    shown = served.run("show endpoint main")["serving"]
    assert shown["url"].startswith("http://127.0.0.1:")
    assert stat.S_IMODE(os.stat(shown["token_file"]).st_mode) == 0o600
    assert shown["router_pid"] and shown["instances"][0]["pid"]
    assert shown["live"]["requests"] >= 1 and "p99_ms" in shown["live"]


def test_a_port_in_use_is_refused_at_create_and_nothing_is_recorded(served: Home) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(ValidationError, match=f"port {port} on 127.0.0.1 is in use"):
            served.run(f"endpoint create busy --model g --port {port}")
    with pytest.raises(NotFoundError):
        served.run("show endpoint busy")


@pytest.mark.parametrize(
    ("predict", "says"),
    [
        ("nomodule:predict", "does not import"),
        ("usermodel:missing", "has no"),
        ("usermodel:not_callable", "not callable"),
    ],
)
def test_register_refuses_a_predict_that_does_not_import_or_is_not_callable(
    served: Home, predict: str, says: str
) -> None:
    before = len(served.run("models g")["versions"])
    with pytest.raises(KineticError, match=says):
        served.run(f"register g --from-training user --predict {predict}")
    assert len(served.run("models g")["versions"]) == before


def test_a_user_step_training_needs_a_predict(served: Home) -> None:
    with pytest.raises(ValidationError, match="--predict"):
        served.run("register g --from-training user")
