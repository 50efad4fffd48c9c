"""SamplingParams / StoppingParams: every invalid value is refused with the API field name."""

from __future__ import annotations

import dataclasses
import math
import random

import pytest

from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.errors import InvalidArgumentError


@pytest.mark.parametrize(
    "overrides, field, message",
    [
        ({"temperature": -1}, "sampling.temperature", "must be >= 0, got -1"),
        ({"temperature": math.nan}, "sampling.temperature", "must be finite"),
        ({"temperature": "hot"}, "sampling.temperature", "must be a number"),
        ({"top_p": 0.0}, "sampling.top_p", "must be in (0, 1]"),
        ({"top_p": 1.01}, "sampling.top_p", "must be in (0, 1]"),
        ({"top_p": math.inf}, "sampling.top_p", "must be finite"),
        ({"top_k": -1}, "sampling.top_k", "0 (off) or >= 1"),
        ({"top_k": 2.5}, "sampling.top_k", "must be an integer"),
        ({"top_k": True}, "sampling.top_k", "must be an integer"),
        ({"min_p": -0.1}, "sampling.min_p", "must be in [0, 1]"),
        ({"min_p": 1.5}, "sampling.min_p", "must be in [0, 1]"),
        ({"repetition_penalty": 0}, "sampling.repetition_penalty", "must be > 0"),
        ({"presence_penalty": 2.5}, "sampling.presence_penalty", "must be in [-2.0, 2.0]"),
        ({"frequency_penalty": -2.01}, "sampling.frequency_penalty", "must be in [-2.0, 2.0]"),
        ({"seed": -1}, "sampling.seed", "must be in [0, 2**64 - 1]"),
        ({"seed": 2**64}, "sampling.seed", "must be in [0, 2**64 - 1]"),
        ({"seed": "7"}, "sampling.seed", "must be an integer"),
        ({"logprobs_count": 21}, "sampling.logprobs_count", "must be in [0, 20]"),
        ({"logprobs_count": -1}, "sampling.logprobs_count", "must be in [0, 20]"),
        ({"prompt_logprobs": 1}, "sampling.prompt_logprobs", "must be a bool"),
    ],
)
def test_sampling_params_refuse(overrides: dict, field: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        SamplingParams(**overrides)
    assert caught.value.field == field
    assert message in caught.value.description


@pytest.mark.parametrize(
    "overrides, field, message",
    [
        ({"max_output_tokens": 0}, "stopping.max_output_tokens", "must be >= 1"),
        ({"max_output_tokens": 3.0}, "stopping.max_output_tokens", "must be an integer"),
        ({"min_output_tokens": -1}, "stopping.min_output_tokens", "must be in [0, max_output_tokens=8]"),
        ({"min_output_tokens": 9}, "stopping.min_output_tokens", "must be in [0, max_output_tokens=8]"),
        ({"stop_strings": ("a",) * 17}, "stopping.stop_strings", "at most 16"),
        ({"stop_strings": ("a", "")}, "stopping.stop_strings", "non-empty string"),
        ({"stop_strings": (b"a",)}, "stopping.stop_strings", "non-empty string"),
        ({"stop_strings": "stop"}, "stopping.stop_strings", "must be a list"),
        ({"stop_token_ids": (3, -1)}, "stopping.stop_token_ids", "must be >= 0"),
        ({"stop_token_ids": (1.0,)}, "stopping.stop_token_ids", "must be an integer"),
        ({"ignore_eos": "yes"}, "stopping.ignore_eos", "must be a bool"),
    ],
)
def test_stopping_params_refuse(overrides: dict, field: str, message: str) -> None:
    with pytest.raises(InvalidArgumentError) as caught:
        StoppingParams(**{"max_output_tokens": 8, **overrides})
    assert caught.value.field == field
    assert message in caught.value.description


def test_valid_values_are_kept_and_lists_become_tuples() -> None:
    rng = random.Random()
    seed = rng.randrange(2**64)
    params = SamplingParams(temperature=0.0, top_p=rng.uniform(0.01, 1), top_k=rng.randint(0, 50), seed=seed)
    assert params.is_greedy and params.seed == seed and not params.has_penalties
    assert SamplingParams(frequency_penalty=-2.0).has_penalties
    stopping = StoppingParams(max_output_tokens=4, min_output_tokens=4, stop_strings=["x"], stop_token_ids=[7])
    assert stopping.stop_strings == ("x",) and stopping.stop_token_ids == (7,)
    assert hash(stopping) == hash(StoppingParams(max_output_tokens=4, min_output_tokens=4, stop_strings=("x",),
                                                 stop_token_ids=(7,)))
    with pytest.raises(dataclasses.FrozenInstanceError):
        stopping.ignore_eos = True  # type: ignore[misc]


def test_tiny_temperature_is_greedy() -> None:
    assert SamplingParams(temperature=1e-7).is_greedy
    assert not SamplingParams(temperature=0.01).is_greedy


def test_check_vocab_refuses_out_of_range_stop_ids() -> None:
    stopping = StoppingParams(max_output_tokens=4, stop_token_ids=(3, 100))
    stopping.check_vocab(101)
    with pytest.raises(InvalidArgumentError, match="100 is outside the vocabulary") as caught:
        stopping.check_vocab(100)
    assert caught.value.field == "stopping.stop_token_ids"
