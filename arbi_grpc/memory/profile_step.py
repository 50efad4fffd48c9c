"""The shape of the step whose activations the budget reserves: the engine's largest step."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProfileStep:
    """Fresh prompts that fill the per-step token budget (none longer than the context limit), logits for
    every token, and as many sampled rows as the running batch allows."""

    prompt_lengths: tuple[int, ...]
    num_sampled_rows: int

    @classmethod
    def worst_case(cls, max_step_tokens: int, max_model_len: int, max_running_requests: int) -> ProfileStep:
        lengths = []
        remaining = max_step_tokens
        while remaining > 0:
            lengths.append(min(remaining, max_model_len))
            remaining -= lengths[-1]
        return cls(tuple(lengths), min(max_running_requests, max_step_tokens))

    @property
    def num_tokens(self) -> int:
        return sum(self.prompt_lengths)

    @property
    def longest_prompt(self) -> int:
        return max(self.prompt_lengths)
