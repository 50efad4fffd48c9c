"""Logit bias: added per row after penalties, only on biased rows; validated in SamplingParams."""

from __future__ import annotations

import secrets

import pytest
import torch

from arbi_grpc.engine.sampler import Sampler, SamplingState, apply_logit_bias
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.errors import InvalidArgumentError

STOPPING = StoppingParams(max_output_tokens=8)


def _state(params: SamplingParams) -> SamplingState:
    return SamplingState(params, STOPPING, (), frozenset({0}))


def test_bias_is_added_to_its_row_only() -> None:
    generator = torch.Generator().manual_seed(secrets.randbits(32))
    logits = torch.randn(3, 11, generator=generator)
    states = [_state(SamplingParams(logit_bias={4: 2.5, 9: -1.0})), _state(SamplingParams()),
              _state(SamplingParams(logit_bias={0: 7.0}))]
    expected = logits.clone()
    expected[0, 4] += 2.5
    expected[0, 9] -= 1.0
    expected[2, 0] += 7.0
    apply_logit_bias(logits, states)
    torch.testing.assert_close(logits, expected)


def test_a_large_bias_decides_the_greedy_token() -> None:
    generator = torch.Generator().manual_seed(secrets.randbits(32))
    logits = torch.randn(2, 50, generator=generator)
    favoured = int(logits[0].argmin())
    states = [_state(SamplingParams(temperature=0, logit_bias={favoured: 100.0})),
              _state(SamplingParams(temperature=0))]
    token_ids = Sampler().sample(logits, states).token_ids
    assert token_ids == [favoured, int(logits[1].argmax())]


@pytest.mark.parametrize("bias", [{-1: 1.0}, {3: 100.5}, {3: float("nan")}, {i: 1.0 for i in range(301)}])
def test_invalid_bias_is_refused(bias: dict[int, float]) -> None:
    with pytest.raises(InvalidArgumentError, match="sampling.logit_bias"):
        SamplingParams(logit_bias=bias)


def test_bias_outside_the_vocabulary_is_refused() -> None:
    params = SamplingParams(logit_bias={10: 1.0})
    params.check_vocab(11)
    with pytest.raises(InvalidArgumentError, match="outside the vocabulary"):
        params.check_vocab(10)
