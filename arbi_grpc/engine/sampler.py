"""Chooses the next token for a batch of requests with different sampling settings, in one call.

Order per row: repetition/presence/frequency penalties, logit bias, the min_output_tokens ban on EOS and stop ids, the
output constraint's token mask (`TokenMask`, lifting the ban on rows whose grammar can only end), then greedy argmax (temperature 0) or temperature, top_k, top_p, min_p and a draw. Reported logprobs are the
log-softmax of the model's raw logits, before penalties, bans and temperature: they describe the model, not
the sampling settings. A seeded request draws only from its own generator, so its tokens do not depend on
the rest of the batch or on its row.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch

from arbi_grpc.engine.host_to_device import tensor_on_device_no_sync
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams

PROMPT_LOGPROBS_CHUNK_ROWS = 1024


@dataclass
class SamplingState:
    """One request's mutable sampling history: output tokens, its seeded generator, penalty counts.

    `Sampler.sample` only reads it (and advances the generator): the caller records each token that the
    request keeps with `append_output`, which penalties and min_output_tokens then see.
    """

    params: SamplingParams
    stopping: StoppingParams
    prompt_token_ids: Sequence[int]
    eos_token_ids: frozenset[int]
    output_token_ids: list[int] = field(default_factory=list)
    _generator: torch.Generator | None = field(default=None, init=False, repr=False)
    _seen_mask: torch.Tensor | None = field(default=None, init=False, repr=False)  # [V] bool
    _output_counts: torch.Tensor | None = field(default=None, init=False, repr=False)  # [V] float32

    def append_output(self, token_id: int) -> None:
        self.output_token_ids.append(token_id)
        if self._seen_mask is not None and self._output_counts is not None:
            # The penalty tensors were made during an inference-mode forward step; update them in kind.
            with torch.inference_mode():
                self._seen_mask[token_id] = True
                self._output_counts[token_id] += 1

    def banned_token_ids(self) -> list[int]:
        """Ids that may not be sampled yet: EOS (unless ignore_eos) and stop ids, until min_output_tokens."""
        if len(self.output_token_ids) >= self.stopping.min_output_tokens:
            return []
        eos_ids = () if self.stopping.ignore_eos else sorted(self.eos_token_ids)
        return [*eos_ids, *self.stopping.stop_token_ids]

    def generator(self, device: torch.device) -> torch.Generator:
        """The request's own generator, seeded from `params.seed` on first use; advanced once per draw."""
        if self.params.seed is None:
            raise ValueError("generator() is only for requests with a seed")
        if self._generator is None:
            self._generator = torch.Generator(device=device)
            self._generator.manual_seed(self.params.seed)
        return self._generator

    def penalty_tensors(self, vocab_size: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """(seen in prompt or output [V] bool, output occurrence counts [V] float32), kept up to date."""
        if self._seen_mask is None or self._output_counts is None:
            seen_ids = torch.tensor([*self.prompt_token_ids, *self.output_token_ids], dtype=torch.long)
            output_ids = torch.tensor(self.output_token_ids, dtype=torch.long)
            self._seen_mask = torch.zeros(vocab_size, dtype=torch.bool, device=device)
            self._seen_mask[seen_ids.to(device)] = True
            self._output_counts = torch.bincount(output_ids, minlength=vocab_size).to(device, torch.float32)
        return self._seen_mask, self._output_counts


class TokenMask(Protocol):
    """A step's output-constraint masks (`engine.grammar.token_masks.TokenMasks`)."""

    ending_rows: frozenset[int]  # rows whose grammar allows only its end: the min_output_tokens ban is lifted

    def apply(self, logits: torch.Tensor) -> None:
        """Sets disallowed logits of the constrained rows to -inf, in place."""


@dataclass(frozen=True)
class SampleResult:
    """Per row: the chosen token, its raw logprob, and the top `logprobs_count` (id, logprob) pairs."""

    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]


class SampleInFlight:
    """A batch's sampled tokens on the device, with their copy to the host queued behind the sampling.

    `token_ids` can feed the next step on the device at once; `result()` waits for the copy and returns the
    host values.
    """

    def __init__(self, token_ids: torch.Tensor, chosen_logprobs: torch.Tensor,
                 top_logprobs: tuple[torch.Tensor, torch.Tensor] | None, top_counts: list[int]) -> None:
        self.token_ids = token_ids  # [B] int64 on the device
        # One device-to-host copy (float64 holds every token id exactly), plus one for top logprobs if asked.
        self._ids_and_logprobs = _to_host_no_sync(torch.stack((token_ids.double(), chosen_logprobs.double())))
        self._top = None if top_logprobs is None else tuple(_to_host_no_sync(t) for t in top_logprobs)
        self._top_counts = top_counts
        self._copied: torch.cuda.Event | None = None
        if token_ids.device.type == "cuda":
            self._copied = torch.cuda.Event()
            self._copied.record()

    def result(self) -> SampleResult:
        if self._copied is not None:
            self._copied.synchronize()
        ids_and_logprobs = self._ids_and_logprobs.tolist()
        top_logprobs: list[list[tuple[int, float]]] = [[] for _ in self._top_counts]
        if self._top is not None:
            value_rows, id_rows = self._top[0].tolist(), self._top[1].tolist()
            top_logprobs = [list(zip(id_rows[row], value_rows[row]))[:count]
                            for row, count in enumerate(self._top_counts)]
        return SampleResult(
            token_ids=[int(token_id) for token_id in ids_and_logprobs[0]],
            logprobs=ids_and_logprobs[1],
            top_logprobs=top_logprobs,
        )


def _to_host_no_sync(tensor: torch.Tensor) -> torch.Tensor:
    """A host copy of `tensor` queued on its device (into pinned memory from CUDA); valid once the queue ran."""
    return tensor.to("cpu", non_blocking=True)


class Sampler:
    """Stateless apart from the generator used by requests without a seed (one per device)."""

    def __init__(self, unseeded_seed: int | None = None) -> None:
        self._unseeded_seed = secrets.randbits(63) if unseeded_seed is None else unseeded_seed
        self._unseeded_generators: dict[torch.device, torch.Generator] = {}

    def sample(self, logits: torch.Tensor, states: Sequence[SamplingState],
               mask: TokenMask | None = None) -> SampleResult:
        """Pick one token per row of `logits` ([B, V]) for `states[row]`; does not append it to the state."""
        return self.sample_without_sync(logits, states, mask).result()

    def sample_without_sync(self, logits: torch.Tensor, states: Sequence[SamplingState],
                            mask: TokenMask | None = None) -> SampleInFlight:
        """Like `sample`, but returns as soon as the work is queued on the device (the host does not wait)."""
        if logits.dim() != 2 or logits.shape[0] != len(states):
            raise ValueError(f"logits must be [len(states)={len(states)}, V], got {tuple(logits.shape)}")
        logits = logits.float()
        raw_logprobs = torch.log_softmax(logits, dim=-1)  # [B, V]
        adjusted = logits
        if mask is not None or any(state.params.has_penalties or state.params.logit_bias or state.banned_token_ids()
                                   for state in states):
            adjusted = logits.clone()
            apply_penalties(adjusted, states)
            apply_logit_bias(adjusted, states)
            _ban_tokens_until_min_output(adjusted, states, frozenset() if mask is None else mask.ending_rows)
            if mask is not None:
                mask.apply(adjusted)

        greedy_rows = [row for row, state in enumerate(states) if state.params.is_greedy]
        random_rows = [row for row, state in enumerate(states) if not state.params.is_greedy]
        if not random_rows:
            token_ids = adjusted.argmax(dim=-1)  # [B]
        else:
            token_ids = torch.empty(len(states), dtype=torch.long, device=logits.device)
            if greedy_rows:
                greedy_index = _index(greedy_rows, logits.device)
                token_ids[greedy_index] = adjusted[greedy_index].argmax(dim=-1)
            random_index = _index(random_rows, logits.device)
            random_states = [states[row] for row in random_rows]
            token_ids[random_index] = self._draw(adjusted[random_index], random_states)

        chosen_logprobs = raw_logprobs.gather(1, token_ids[:, None]).squeeze(1)  # [B]
        top_counts = [state.params.logprobs_count for state in states]
        widest = min(max(top_counts, default=0), raw_logprobs.shape[1])
        top_logprobs = tuple(raw_logprobs.topk(widest, dim=-1)) if widest else None  # ([B, widest], [B, widest])
        return SampleInFlight(token_ids, chosen_logprobs, top_logprobs, top_counts)

    def _draw(self, logits: torch.Tensor, states: Sequence[SamplingState]) -> torch.Tensor:
        """Temperature, top_k/top_p/min_p filters, then a draw: argmax(probs / Exp(1) noise) ~ probs."""
        device = logits.device
        temperatures = tensor_on_device_no_sync([state.params.temperature for state in states], torch.float32,
                                                device)
        scaled = _filter_candidates(logits / temperatures[:, None], [state.params for state in states])
        probs = torch.softmax(scaled, dim=-1)  # [S, V], zero outside the allowed set
        noise = torch.empty_like(probs)
        unseeded_rows = [row for row, state in enumerate(states) if state.params.seed is None]
        if unseeded_rows:
            unseeded_noise = torch.empty(len(unseeded_rows), probs.shape[1], device=device)
            noise[_index(unseeded_rows, device)] = unseeded_noise.exponential_(generator=self._generator(device))
        for row, state in enumerate(states):
            if state.params.seed is not None:
                noise[row].exponential_(generator=state.generator(device))
        # A zero draw would turn a banned token's 0 / 0 into NaN, which argmax would pick.
        noise.clamp_min_(torch.finfo(noise.dtype).tiny)
        return (probs / noise).argmax(dim=-1)

    def _generator(self, device: torch.device) -> torch.Generator:
        if device not in self._unseeded_generators:
            generator = torch.Generator(device=device)
            generator.manual_seed(self._unseeded_seed)
            self._unseeded_generators[device] = generator
        return self._unseeded_generators[device]


def _index(rows: list[int], device: torch.device) -> torch.Tensor:
    return tensor_on_device_no_sync(rows, torch.long, device)


def apply_penalties(logits: torch.Tensor, states: Sequence[SamplingState]) -> None:
    """In place on [B, V]: HF repetition penalty over prompt+output, OpenAI presence/frequency over output."""
    rows = [row for row, state in enumerate(states) if state.params.has_penalties]
    if not rows:
        return
    vocab_size, device = logits.shape[1], logits.device
    tensors = [states[row].penalty_tensors(vocab_size, device) for row in rows]
    seen = torch.stack([seen_mask for seen_mask, _ in tensors])  # [P, V] bool
    counts = torch.stack([output_counts for _, output_counts in tensors])  # [P, V]
    params = [states[row].params for row in rows]
    repetition = torch.tensor([p.repetition_penalty for p in params], device=device)[:, None]  # [P, 1]
    presence = torch.tensor([p.presence_penalty for p in params], device=device)[:, None]
    frequency = torch.tensor([p.frequency_penalty for p in params], device=device)[:, None]
    index = _index(rows, device)
    penalized = logits[index]  # [P, V]
    repeated = torch.where(penalized > 0, penalized / repetition, penalized * repetition)
    penalized = torch.where(seen, repeated, penalized)
    penalized = penalized - frequency * counts - presence * (counts > 0).float()
    logits[index] = penalized


def apply_logit_bias(logits: torch.Tensor, states: Sequence[SamplingState]) -> None:
    """In place on [B, V]: add each request's per-token bias (ids beyond the logits width cannot occur)."""
    vocab_size = logits.shape[1]
    rows: list[int] = []
    columns: list[int] = []
    biases: list[float] = []
    for row, state in enumerate(states):
        for token_id, bias in state.params.logit_bias:
            if token_id < vocab_size:
                rows.append(row)
                columns.append(token_id)
                biases.append(bias)
    if rows:
        index = (_index(rows, logits.device), _index(columns, logits.device))
        logits[index] += tensor_on_device_no_sync(biases, logits.dtype, logits.device)


def _ban_tokens_until_min_output(logits: torch.Tensor, states: Sequence[SamplingState],
                                 exempt_rows: frozenset[int]) -> None:
    """In place: -inf for ids a request may not produce yet (ids beyond the logits width cannot occur), except on
    `exempt_rows`."""
    vocab_size = logits.shape[1]
    rows: list[int] = []
    columns: list[int] = []
    for row, state in enumerate(states):
        if row in exempt_rows:
            continue
        banned = [token_id for token_id in state.banned_token_ids() if token_id < vocab_size]
        rows.extend([row] * len(banned))
        columns.extend(banned)
    if rows:
        logits[_index(rows, logits.device), _index(columns, logits.device)] = float("-inf")


def _filter_candidates(scaled: torch.Tensor, params: Sequence[SamplingParams]) -> torch.Tensor:
    """Set to -inf every token outside top_k, the top_p nucleus, or min_p * best probability ([S, V])."""
    vocab_size, device = scaled.shape[1], scaled.device
    top_k = [p.top_k if 0 < p.top_k < vocab_size else vocab_size for p in params]
    top_p = [p.top_p for p in params]
    if any(k < vocab_size for k in top_k) or any(p < 1 for p in top_p):
        sorted_logits, sorted_ids = scaled.sort(dim=-1, descending=True)  # [S, V]
        ranks = torch.arange(vocab_size, device=device)
        remove_sorted = ranks[None, :] >= tensor_on_device_no_sync(top_k, torch.long, device)[:, None]
        sorted_probs = torch.softmax(sorted_logits.masked_fill(remove_sorted, float("-inf")), dim=-1)
        mass_before = sorted_probs.cumsum(dim=-1) - sorted_probs  # probability of strictly better tokens
        # top_p == 1 keeps everything, whatever rounding does to the cumulative sum.
        nucleus = tensor_on_device_no_sync([p if p < 1 else float("inf") for p in top_p], torch.float32,
                                           device)[:, None]
        remove_sorted |= mass_before >= nucleus
        remove = torch.zeros_like(remove_sorted).scatter_(1, sorted_ids, remove_sorted)
        scaled = scaled.masked_fill(remove, float("-inf"))
    min_p = [p.min_p for p in params]
    if any(p > 0 for p in min_p):
        probs = torch.softmax(scaled, dim=-1)
        best = probs.max(dim=-1, keepdim=True).values  # [S, 1]
        threshold = tensor_on_device_no_sync(min_p, torch.float32, device)[:, None] * best
        scaled = scaled.masked_fill(probs < threshold, float("-inf"))
    return scaled


def prompt_logprobs(logits: torch.Tensor, prompt_token_ids: Sequence[int]) -> list[float]:
    """Raw logprob of each prompt token given its prefix: entry i is for prompt_token_ids[i + 1].

    `logits[i]` ([T, V]) is the model's output at prompt position i; the first token has no logprob, so
    the result has len(prompt_token_ids) - 1 entries. Rows are processed in chunks to bound memory.
    """
    targets = torch.tensor(list(prompt_token_ids[1:]), dtype=torch.long, device=logits.device)
    if logits.dim() != 2 or logits.shape[0] < targets.numel():
        raise ValueError(f"need logits [>= {targets.numel()}, V], got {tuple(logits.shape)}")
    results: list[float] = []
    for start in range(0, targets.numel(), PROMPT_LOGPROBS_CHUNK_ROWS):
        rows = logits[start : start + PROMPT_LOGPROBS_CHUNK_ROWS].float()[: targets.numel() - start]
        chunk_targets = targets[start : start + rows.shape[0]]
        chosen = rows.gather(1, chunk_targets[:, None]).squeeze(1)  # [C]
        results.extend((chosen - torch.logsumexp(rows, dim=-1)).tolist())
    return results
