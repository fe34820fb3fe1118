"""The shared argument checks: strict about types, one-line messages that name the field and what was expected."""

import math

import pytest

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.validation import json_copy, known_names, positive_int, require_int, require_name, require_number


@pytest.mark.parametrize(
    ("check", "message"),
    [
        (lambda: require_name("group", "  "), "group: expected a non-empty string, got '  '"),
        (lambda: require_int("width", True, 1), "width: expected an integer >= 1, got True"),
        (lambda: require_int("width", 0, 1), "width: must be >= 1, got 0"),
        (lambda: require_number("at", math.nan), "at: expected a finite number, got nan"),
        (lambda: require_number("rate", 0, minimum=0, exclusive=True), "rate: must be > 0, got 0"),
        (lambda: positive_int("max_trials", 0), "max_trials must be an integer >= 1, got 0"),
        (lambda: json_copy("state", {"x": object()}), "state must be JSON-serialisable"),
    ],
)
def test_bad_values_give_one_line_errors_naming_the_field(check, message) -> None:
    with pytest.raises(ValidationError) as caught:
        check()
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_good_values_come_back_and_json_copy_is_a_deep_copy() -> None:
    assert (require_name("g", "a"), require_int("n", 3, 1), require_number("x", 2.5), positive_int("n", 1)) == (
        "a",
        3,
        2.5,
        1,
    )
    value = {"a": [1]}
    copied = json_copy("v", value)
    assert copied == value and copied["a"] is not value["a"]


def test_known_names_is_sorted_and_short() -> None:
    assert known_names([]) == "none"
    assert known_names(["b", "a"]) == "a, b"
    assert known_names([f"n{i:02d}" for i in range(12)], limit=3) == "n00, n01, n02 (+9 more)"
