"""Sampler: seeded reproducibility, filters, penalties, min-token bans, logprobs, prompt logprobs."""

from __future__ import annotations

import dataclasses
import secrets
from collections import Counter

import pytest
import torch

from arbi_grpc.engine import sampler as sampler_module
from arbi_grpc.engine.sampler import Sampler, SamplingState, apply_penalties, prompt_logprobs
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams

EOS = 0
STOPPING = StoppingParams(max_output_tokens=64)


@pytest.fixture
def gen() -> torch.Generator:
    """Fresh random inputs every run; the seed is printed so a failure can be replayed."""
    seed = secrets.randbits(32)
    print(f"input seed: {seed}")
    return torch.Generator().manual_seed(seed)


def state(params: SamplingParams, stopping: StoppingParams = STOPPING, prompt: tuple[int, ...] = ()) -> SamplingState:
    return SamplingState(params, stopping, prompt, frozenset({EOS}))


def sample_and_record(sampler: Sampler, logits: torch.Tensor, states: list[SamplingState]) -> list[int]:
    result = sampler.sample(logits, states)
    for request_state, token_id in zip(states, result.token_ids):
        request_state.append_output(token_id)
    return result.token_ids


def sample_alone(request_state: SamplingState, logits_per_step: torch.Tensor) -> list[int]:
    """One token per step ([steps, V]) with the request alone in its batch and a fresh Sampler each time."""
    return [sample_and_record(Sampler(), step_logits[None], [request_state])[0] for step_logits in logits_per_step]


def test_seeded_request_ignores_batch_composition_and_row(gen: torch.Generator) -> None:
    vocab, steps = 300, 12
    settings = {"temperature": 1.3, "top_k": 40, "top_p": 0.9, "repetition_penalty": 1.2}
    params = SamplingParams(**settings, seed=secrets.randbits(40))
    own_logits = torch.randn(steps, vocab, generator=gen)

    tokens_alone = sample_alone(state(params), own_logits)

    crowded = state(params)
    neighbours = [state(SamplingParams(seed=7)), state(SamplingParams()), state(SamplingParams(temperature=0))]
    tokens_crowded = []
    for step in range(steps):
        row = step % (len(neighbours) + 1)
        batch = torch.randn(len(neighbours) + 1, vocab, generator=gen)
        batch[row] = own_logits[step]
        states = [*neighbours[:row], crowded, *neighbours[row:]]
        tokens_crowded.append(sample_and_record(Sampler(), batch, states)[row])
    assert tokens_crowded == tokens_alone

    assert sample_alone(state(SamplingParams(**settings, seed=params.seed + 1)), own_logits) != tokens_alone


def test_greedy_is_argmax(gen: torch.Generator) -> None:
    logits = torch.randn(5, 1000, generator=gen)
    states = [state(SamplingParams(temperature=0, seed=seed)) for seed in (None, 1, 2, None, 3)]
    assert Sampler().sample(logits, states).token_ids == logits.argmax(dim=-1).tolist()


def draw_many(logits_row: torch.Tensor, params: SamplingParams, draws: int = 4000) -> Counter[int]:
    logits = logits_row.expand(draws, -1).clone()
    result = Sampler(unseeded_seed=1234).sample(logits, [state(params) for _ in range(draws)])
    return Counter(result.token_ids)


def reference_allowed(logits: torch.Tensor, temperature: float, top_k: int, top_p: float, min_p: float) -> set[int]:
    """The candidate set by definition: top_k first, the nucleus of the renormalized rest, then min_p."""
    order = sorted(range(logits.numel()), key=lambda token: -float(logits[token]))
    kept = order[:top_k] if top_k else order
    probs = torch.softmax(logits[kept] / temperature, dim=0).tolist()
    nucleus, mass = [], 0.0
    for token, prob in zip(kept, probs):
        if mass >= top_p:
            break
        nucleus.append((token, prob))
        mass += prob
    best = nucleus[0][1]
    return {token for token, prob in nucleus if prob >= min_p * best}


@pytest.mark.parametrize(
    "temperature, top_k, top_p, min_p",
    [(1.0, 5, 1.0, 0.0), (1.5, 0, 0.6, 0.0), (2.0, 0, 1.0, 0.3), (0.8, 20, 0.8, 0.05), (3.0, 1, 1.0, 0.0)],
)
def test_filters_never_sample_outside_allowed_set(
    gen: torch.Generator, temperature: float, top_k: int, top_p: float, min_p: float
) -> None:
    logits = torch.randn(60, generator=gen) * 2
    allowed = reference_allowed(logits, temperature, top_k, top_p, min_p)
    counts = draw_many(logits, SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, min_p=min_p))
    assert set(counts) <= allowed
    assert len(set(counts)) >= min(len(allowed), 3)  # it does sample, not just argmax


def test_draws_follow_the_softmax(gen: torch.Generator) -> None:
    logits = torch.randn(6, generator=gen)
    draws = 20000
    counts = draw_many(logits, SamplingParams(temperature=0.7), draws)
    expected = torch.softmax(logits / 0.7, dim=0)
    observed = torch.tensor([counts[token] / draws for token in range(6)])
    assert 0.5 * (observed - expected).abs().sum() < 0.03


def reference_penalties(
    logits: torch.Tensor, params: SamplingParams, prompt: list[int], output: list[int]
) -> torch.Tensor:
    """HF repetition penalty over prompt + output, then OpenAI frequency/presence penalties over output."""
    result = logits.clone()
    for token in set(prompt) | set(output):
        value = float(result[token])
        result[token] = value / params.repetition_penalty if value > 0 else value * params.repetition_penalty
    for token, count in Counter(output).items():
        result[token] -= params.frequency_penalty * count + params.presence_penalty
    return result


def test_penalties_match_reference(gen: torch.Generator) -> None:
    vocab = 50
    cases = []
    for _ in range(6):
        uniform = torch.rand(3, generator=gen).tolist()
        params = SamplingParams(
            repetition_penalty=0.5 + 1.5 * uniform[0],
            presence_penalty=4 * uniform[1] - 2,
            frequency_penalty=4 * uniform[2] - 2,
        )
        prompt = torch.randint(0, vocab, (8,), generator=gen).tolist()
        output = torch.randint(0, vocab, (10,), generator=gen).tolist()
        cases.append((params, prompt, output))
    cases.append((SamplingParams(), [1, 2], [3]))  # no penalties: left untouched
    logits = torch.randn(len(cases), vocab, generator=gen) * 3
    states = []
    for params, prompt, output in cases:
        request_state = state(params, prompt=tuple(prompt))
        for token in output[:4]:
            request_state.append_output(token)
        request_state.penalty_tensors(vocab, logits.device)  # built here, then kept up to date by appends
        for token in output[4:]:
            request_state.append_output(token)
        states.append(request_state)
    penalized = logits.clone()
    apply_penalties(penalized, states)
    for row, (params, prompt, output) in enumerate(cases):
        torch.testing.assert_close(penalized[row], reference_penalties(logits[row], params, prompt, output))


def test_min_output_tokens_bans_eos_and_stop_ids(gen: torch.Generator) -> None:
    vocab, stop_id = 40, 5
    stopping = StoppingParams(max_output_tokens=10, min_output_tokens=3, stop_token_ids=(stop_id,))
    ignoring_eos = dataclasses.replace(stopping, ignore_eos=True)
    states = [
        state(SamplingParams(temperature=0), stopping),
        state(SamplingParams(seed=3), stopping),
        state(SamplingParams(temperature=0), ignoring_eos),
        state(SamplingParams(temperature=0), ignoring_eos),
    ]
    sampler = Sampler()
    for step in range(4):
        logits = torch.randn(4, vocab, generator=gen)
        logits[:, EOS] = 50.0
        logits[:, stop_id] = 40.0
        logits[3, EOS] = 0.0
        greedy, sampled, ignoring, ignoring_stop = sample_and_record(sampler, logits, states)
        if step < 3:
            banned = logits[0].clone()
            banned[[EOS, stop_id]] = float("-inf")
            assert greedy == banned.argmax().item()
            assert sampled not in (EOS, stop_id)
            assert ignoring_stop not in (EOS, stop_id)  # stop ids stay banned under ignore_eos
        else:
            assert (greedy, ignoring_stop) == (EOS, stop_id)
        assert ignoring == EOS  # ignore_eos: EOS is an ordinary token, never banned


def test_logprobs_are_raw_model_logprobs(gen: torch.Generator) -> None:
    logits = torch.randn(3, 80, generator=gen)
    states = [
        state(SamplingParams(temperature=0.3, repetition_penalty=1.7, logprobs_count=5), prompt=(1, 2, 3)),
        state(SamplingParams(temperature=0, logprobs_count=20)),
        state(SamplingParams(top_k=3)),
    ]
    result = Sampler().sample(logits, states)
    raw = torch.log_softmax(logits, dim=-1)
    for row, token in enumerate(result.token_ids):
        assert result.logprobs[row] == pytest.approx(raw[row, token].item(), abs=1e-6)
    values, ids = raw.topk(20, dim=-1)
    for row, count in enumerate((5, 20, 0)):
        expected = list(zip(ids[row, :count].tolist(), values[row, :count].tolist()))
        assert [token for token, _ in result.top_logprobs[row]] == [token for token, _ in expected]
        assert [lp for _, lp in result.top_logprobs[row]] == pytest.approx([lp for _, lp in expected], abs=1e-6)


def test_sample_does_not_record_tokens(gen: torch.Generator) -> None:
    request_state = state(SamplingParams())
    Sampler().sample(torch.randn(1, 10, generator=gen), [request_state])
    assert request_state.output_token_ids == []


def test_prompt_logprobs_match_reference(gen: torch.Generator, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sampler_module, "PROMPT_LOGPROBS_CHUNK_ROWS", 3)  # exercise chunk edges
    prompt = torch.randint(0, 30, (11,), generator=gen).tolist()
    logits = torch.randn(len(prompt), 30, generator=gen)
    expected = [torch.log_softmax(logits[i], dim=0)[prompt[i + 1]].item() for i in range(len(prompt) - 1)]
    assert prompt_logprobs(logits, prompt) == pytest.approx(expected, abs=1e-5)
    assert prompt_logprobs(logits[:-1], prompt) == pytest.approx(expected, abs=1e-5)
    assert prompt_logprobs(logits[:1], prompt[:1]) == []


def test_shape_mismatch_is_refused(gen: torch.Generator) -> None:
    with pytest.raises(ValueError, match="logits must be"):
        Sampler().sample(torch.randn(2, 10, generator=gen), [state(SamplingParams())])
    with pytest.raises(ValueError, match="need logits"):
        prompt_logprobs(torch.randn(2, 10, generator=gen), [1, 2, 3, 4])


def test_penalized_request_records_tokens_after_an_inference_mode_step(gen: torch.Generator) -> None:
    """The engine samples inside torch.inference_mode() and records the token outside it."""
    state = SamplingState(SamplingParams(presence_penalty=0.5, frequency_penalty=0.5),
                          StoppingParams(max_output_tokens=4), [1, 2, 3], frozenset({0}))
    logits = torch.randn(1, 32, generator=gen)
    with torch.inference_mode():
        token = Sampler().sample(logits, [state]).token_ids[0]
    state.append_output(token)
    seen, counts = state.penalty_tensors(32, logits.device)
    assert bool(seen[token]) and counts[token].item() == 1.0
