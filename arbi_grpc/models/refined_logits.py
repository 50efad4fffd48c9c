"""The logits projection of a Q8_0 table on the CPU: the int4 kernel's bfloat16 logits, with every token that could
be a row's largest recomputed in float32.

The float32 product with the dequantized table reads 4 bytes per weight; the int4 kernel (`PackedInt4Linear`, a
Q8_0 group as two int4 groups) reads half a byte but rounds inputs, scales and outputs to bfloat16, which alone
ties near-equal candidates (steps of 0.125 at a logit of 20). Here each coarse logit y' of table row n gets a bound
on its error, b = sum_g |s_ng| ||x_g||_1 + 2^-8 |y'| (groups g of 32 inputs, s the group's scale): the rounding
of x, of the scales and of the kernel's dequantized weights stays under 0.82 |s_ng| ||x_g||_1, its float32
accumulation under 0.01 of it, the output's under 2^-9 |y|. A token whose y' + b reaches the row's largest
y' - b may be the largest; those are recomputed from the float32 table, so greedy choices are the float32 ones'.
The other tokens keep their coarse logit (within b), which moves log-probabilities by at most a few hundredths.
A row with more than `MAX_CANDIDATES` such tokens is projected in float32 whole.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from arbi_grpc.models.cpu_quantized_ops import PackedInt4Linear
from arbi_grpc.models.quantized_weights import GROUP_SIZE, QuantizedWeight

MAX_CANDIDATES = 256  # per row; beyond, the row's coarse logits are not worth refining
_OUTPUT_ROUNDING = 2.0**-8  # bfloat16 keeps 8 significant bits: its rounding is under 2^-9 of the value


class RefinedLogits(nn.Module):
    """hidden [N, K] float32 -> logits [N, V] float32 for a q8 table [V, K] and its dequantized `table`."""

    @staticmethod
    def takes(weight: QuantizedWeight) -> bool:
        return weight.kind == "q8" and PackedInt4Linear.packs(weight.shape)

    def __init__(self, weight: QuantizedWeight, table: Tensor) -> None:
        super().__init__()
        if not self.takes(weight):
            raise NotImplementedError(f"refined logits need a q8 table the int4 kernel packs, got {weight.kind} "
                                      f"{list(weight.shape)}")
        self.coarse = PackedInt4Linear(weight, None)
        self.register_buffer("scale_magnitudes", weight.scale.abs().t().contiguous())  # [G, V]
        self.table = table.detach()  # [V, K] float32: the embedding's own storage, not held twice nor registered

    def forward(self, hidden: Tensor) -> Tensor:
        coarse = self.coarse(hidden)  # [N, V] float32 of bfloat16 values
        if hidden.shape[0] == 0:
            return coarse
        group_norms = hidden.view(hidden.shape[0], -1, GROUP_SIZE).abs().sum(dim=-1)  # [N, G]
        bound = torch.addmm(coarse.abs().mul_(_OUTPUT_ROUNDING), group_norms, self.scale_magnitudes)  # [N, V]
        floor = (coarse - bound).amax(dim=-1, keepdim=True)  # [N, 1]: the largest logit is at least this
        candidates = coarse + bound >= floor  # [N, V]
        counts = candidates.sum(dim=-1).tolist()
        rows, columns = candidates.nonzero(as_tuple=True)
        if max(counts) > MAX_CANDIDATES:
            wide = [row for row, count in enumerate(counts) if count > MAX_CANDIDATES]
            coarse[wide] = hidden[wide] @ self.table.t()
            kept = ~torch.isin(rows, torch.tensor(wide))
            rows, columns = rows[kept], columns[kept]
        coarse[rows, columns] = (self.table.index_select(0, columns) * hidden.index_select(0, rows)).sum(dim=-1)
        return coarse
