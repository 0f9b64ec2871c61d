"""The trainer's value kinds (train/values.py), as a table: what each accepts, and what each says to bad input."""

from __future__ import annotations

import argparse
import math

import pytest

from train import values

GOOD = [
    (values.positive_int, "3", 3),
    (values.non_negative_int, "0", 0),
    (values.positive_float, "0.5", 0.5),
    (values.non_negative_float, "0", 0.0),
    (values.optional_int, "none", None),
    (values.optional_int, "OFF", None),
    (values.optional_int, "20", 20),
    (values.optional_float, "no", None),
    (values.optional_float, "2.5", 2.5),
    (values.reward_target, "none", math.inf),
    (values.reward_target, "-1.5", -1.5),
    (values.optional_str, "none", None),
    (values.optional_str, "env_runners/episode_return_mean", "env_runners/episode_return_mean"),
    (values.json_object, '{"a": 1}', {"a": 1}),
    (values.int_tuple, "[64, 64]", (64, 64)),
    (values.str_tuple, "a, b", ("a", "b")),
]

BAD = [
    (values.positive_int, "0", "expected a whole number of at least 1, got 0"),
    (values.positive_int, "1.5", "expected a whole number of at least 1, got '1.5'"),
    (values.non_negative_int, "-3", "expected a whole number of at least 0, got -3"),
    (values.positive_float, "0", "expected a number above 0, got '0'"),
    (values.positive_float, "inf", "expected a number above 0, got 'inf'"),
    (values.non_negative_float, "-1", "expected a number of at least 0, got '-1'"),
    (values.optional_int, "abc", "expected a whole number of at least 1 or 'none', got 'abc'"),
    (values.optional_float, "x", "expected a number of at least 0 or 'none', got 'x'"),
    (values.reward_target, "x", "expected a number or 'none' (never stop on reward), got 'x'"),
    (values.json_object, "[1]", "expected a JSON object like '{\"key\": 1}', got '[1]'"),
    (values.json_object, "{a", "not valid JSON"),
    (values.int_tuple, "64,x", "expected comma-separated whole numbers like 256,256, got '64,x'"),
    (values.int_tuple, "0,2", "expected layer sizes of at least 1 like 256,256, got '0,2'"),
]


@pytest.mark.parametrize("kind, text, value", GOOD)
def test_each_kind_takes_what_it_says(kind, text, value):
    assert kind(text) == value


@pytest.mark.parametrize("kind, text, message", BAD)
def test_each_kind_says_what_was_given_and_what_to_give(kind, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as refused:
        kind(text)
    assert message in str(refused.value)


def test_no_flag_of_the_trainer_takes_a_bare_int_or_float():
    """argparse's own int and float say only "invalid int value": every flag has a kind that explains."""
    from train import cli

    for build in cli.PARSERS.values():
        bare = [action.option_strings for action in build({})._actions if action.type in (int, float)]
        assert bare == []
