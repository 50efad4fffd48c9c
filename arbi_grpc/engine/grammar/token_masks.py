"""Each step's token masks: the bitmask of every constrained row, filled on the host and applied to the logits
on their device (CPU or CUDA) by xgrammar's `apply_token_bitmask_inplace`, after penalties, logit bias and the
min_output_tokens ban (`Sampler`).

Rows are filled one matcher at a time below `BATCH_FILL_MIN_ROWS`, else by xgrammar's batch fill over its own
threads. The model runner fills a step's masks while the device runs the step's forward pass, and queues the
sampling (`apply` first) behind it. On CUDA the bitmask is allocated in pinned memory (torch's caching host
allocator: a block is reused only once the copy that read it has run) and its copy, with the row indices, is queued
without a host wait; only the constrained rows are filled and masked. A row whose
grammar allows only its end (the stop tokens) while min_output_tokens still bans EOS is an `ending_rows` row:
the grammar wins, the ban is lifted, since no longer output could satisfy the grammar. A row that allows no token
marks its grammar a dead end (`SequenceGrammar.dead_end`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import xgrammar as xgr

from arbi_grpc.engine.grammar.matcher import SequenceGrammar
from arbi_grpc.engine.host_to_device import tensor_on_device_no_sync
from arbi_grpc.engine.sampler import SamplingState

BATCH_FILL_MIN_ROWS = 8


class TokenMasks:
    """The bitmask of one step's sample batch ([B, ceil(V / 32)] int32); `rows` are the rows it constrains."""

    def __init__(self, bitmask: torch.Tensor, rows: list[int], ending_rows: frozenset[int]) -> None:
        self.bitmask = bitmask
        self.rows = rows
        self.ending_rows = ending_rows

    def apply(self, logits: torch.Tensor) -> None:
        """Sets the logits of disallowed tokens to -inf, in place, in the logits' device queue."""
        if logits.device.type != "cuda":
            xgr.apply_token_bitmask_inplace(logits, self.bitmask, vocab_size=logits.shape[1], indices=self.rows)
            return
        bitmask = self.bitmask.to(logits.device, non_blocking=True)  # pinned: queued, no host wait
        rows = tensor_on_device_no_sync(self.rows, torch.int32, logits.device)
        xgr.apply_token_bitmask_inplace(logits, bitmask, vocab_size=logits.shape[1], indices=rows)


class TokenMaskBuilder:
    """Fills a step's masks for a model whose logits are `vocab_size` wide and whose grammars stop on
    `stop_token_ids`."""

    def __init__(self, vocab_size: int, stop_token_ids: Sequence[int]) -> None:
        self.vocab_size = vocab_size
        self.stop_token_ids = tuple(stop_token_ids)
        self._batch = xgr.BatchGrammarMatcher()

    def build(self, grammars: Sequence[SequenceGrammar | None], states: Sequence[SamplingState],
              device: torch.device) -> TokenMasks | None:
        """Masks for the rows whose grammar can fill one (None when there is none)."""
        rows = [row for row, grammar in enumerate(grammars) if grammar is not None and grammar.can_fill]
        if not rows:
            return None
        # Rows of unconstrained sequences stay unfilled: `apply` masks only `rows`.
        bitmask = torch.empty((len(grammars), xgr.get_bitmask_shape(1, self.vocab_size)[1]), dtype=torch.int32,
                              pin_memory=device.type == "cuda")
        matchers = [grammars[row].matcher for row in rows]
        if len(rows) >= BATCH_FILL_MIN_ROWS:
            self._batch.batch_fill_next_token_bitmask(matchers, bitmask, rows)
        else:
            for row, matcher in zip(rows, matchers):
                matcher.fill_next_token_bitmask(bitmask, row)
        words = bitmask.numpy()[rows]  # [R, W] int32, the filled rows
        for row in np.asarray(rows)[~words.any(axis=1)]:
            grammars[row].dead_end = True
        ending = frozenset(row for index, row in enumerate(rows)
                           if states[row].banned_token_ids() and self._allows_only_stops(words[index]))
        return TokenMasks(bitmask, rows, ending)

    def _allows_only_stops(self, words: np.ndarray) -> bool:
        words = words.view(np.uint32).copy()
        for token_id in self.stop_token_ids:
            words[token_id >> 5] &= ~np.uint32(1 << (token_id & 31))
        return not words.any()
