"""`RefinedLogits` against the float32 product with the dequantized Q8_0 table: near-tied rows that bfloat16
logits cannot tell apart are chosen as float32 chooses, every logit stays within its bound, and a row with too many
candidates is projected in float32 whole."""

from __future__ import annotations

import pytest
import torch

import arbi_grpc.models.refined_logits as refined_logits
from arbi_grpc.models.quantized_weights import QuantizedWeight
from arbi_grpc.models.refined_logits import RefinedLogits

VOCAB, WIDTH = 256, 64


def near_tied_table(generator: torch.Generator) -> QuantizedWeight:
    """q8 [VOCAB, WIDTH]; odd rows equal the even row before them but for one code one step higher."""
    codes = torch.randint(-100, 100, (VOCAB, WIDTH), generator=generator, dtype=torch.int8)
    codes[1::2] = codes[0::2]
    codes[1::2, 3] += 1
    scale = torch.rand(VOCAB, WIDTH // 32, generator=generator) * 0.01 + 0.001
    scale[1::2] = scale[0::2]
    return QuantizedWeight("q8", codes, scale, None)


def test_near_ties_are_chosen_as_float32_chooses(torch_generator) -> None:
    weight = near_tied_table(torch_generator)
    table = weight.dequantize()
    projection = RefinedLogits(weight, table)
    hidden = torch.randn(32, WIDTH, generator=torch_generator) * 3
    # The two rows of a pair differ by about 1e-4: far above float32's rounding, far below bfloat16's.
    signs = torch.randint(0, 2, (32,), generator=torch_generator) * 2 - 1
    hidden[:, 3] = signs * (0.01 + 0.01 * torch.rand(32, generator=torch_generator))
    best = (hidden @ table.t()).argmax(-1)
    hidden[:, 3] *= -1  # the other row of each pair wins now: bfloat16 logits alone tie them either way
    exact = hidden @ table.t()
    logits = projection(hidden)
    assert torch.equal(logits.argmax(-1), exact.argmax(-1))
    assert not torch.equal(best, exact.argmax(-1))
    winners = logits.gather(1, exact.argmax(-1, keepdim=True))
    torch.testing.assert_close(winners, exact.gather(1, exact.argmax(-1, keepdim=True)), rtol=1e-6, atol=1e-5)
    group_norms = hidden.view(32, -1, 32).abs().sum(-1)
    bound = group_norms @ weight.scale.abs().t() + exact.abs() * 2**-7
    assert ((logits - exact).abs() <= bound).all()


def test_rows_with_too_many_candidates_are_projected_in_float32(torch_generator, monkeypatch) -> None:
    weight = near_tied_table(torch_generator)
    table = weight.dequantize()
    hidden = torch.randn(4, WIDTH, generator=torch_generator)
    monkeypatch.setattr(refined_logits, "MAX_CANDIDATES", 0)  # every row has more
    torch.testing.assert_close(RefinedLogits(weight, table)(hidden), hidden @ table.t(), rtol=0, atol=0)


def test_only_packable_q8_tables_are_taken() -> None:
    q4 = QuantizedWeight("q4", torch.zeros(VOCAB, WIDTH // 2, dtype=torch.uint8), torch.ones(VOCAB, WIDTH // 32),
                         torch.zeros(VOCAB, WIDTH // 32))
    odd = QuantizedWeight("q8", torch.zeros(VOCAB - 8, WIDTH, dtype=torch.int8), torch.ones(VOCAB - 8, WIDTH // 32),
                          None)
    assert not RefinedLogits.takes(q4) and not RefinedLogits.takes(odd)
    with pytest.raises(NotImplementedError, match="q8 table"):
        RefinedLogits(q4, q4.dequantize())
