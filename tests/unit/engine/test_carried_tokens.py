"""Input ids carried on the device from the previous step's sampled tokens, and the sampler's no-sync path."""

from __future__ import annotations

import torch

from arbi_grpc.engine.carried_tokens import CarriedTokens
from arbi_grpc.engine.sampler import Sampler, SamplingState
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams


def test_rows_in_order_and_permuted_rows_take_their_own_source_token() -> None:
    source = torch.tensor([70, 71, 72, 73])
    in_order = torch.zeros(5, dtype=torch.int64)
    CarriedTokens(source, rows=[0, 1, 2], source_rows=[0, 1, 2]).write_into(in_order)
    assert in_order.tolist() == [70, 71, 72, 0, 0]
    # A sequence finished (row 1 of the source gone) and a prefill chunk sits between two decodes.
    permuted = torch.tensor([5, 5, 5, 9, 9])
    CarriedTokens(source, rows=[0, 4, 2], source_rows=[3, 0, 2]).write_into(permuted)
    assert permuted.tolist() == [73, 5, 72, 9, 70]


def test_sampling_without_sync_gives_what_sample_gives() -> None:
    logits = torch.randn(3, 50, generator=torch.Generator().manual_seed(0))

    def states() -> list[SamplingState]:
        params = [SamplingParams(temperature=0.0, logprobs_count=2),
                  SamplingParams(temperature=0.7, top_p=0.9, seed=3),
                  SamplingParams(temperature=1.0, top_k=5, seed=4, logprobs_count=1)]
        return [SamplingState(p, StoppingParams(max_output_tokens=8), (1, 2), frozenset()) for p in params]

    in_flight = Sampler(unseeded_seed=0).sample_without_sync(logits, states())
    result = in_flight.result()
    assert in_flight.token_ids.tolist() == result.token_ids
    assert result == Sampler(unseeded_seed=0).sample(logits, states())
    assert [len(top) for top in result.top_logprobs] == [2, 0, 1]
