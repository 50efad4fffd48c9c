"""cpu_vs_llama_cpp's perplexity helpers: llama-perplexity's chunks and scoring rule on our side, its printed
running means read back into per-window losses, and the paired ratio of the two."""

from __future__ import annotations

import math

import pytest

from benchmarks.cpu_vs_llama_cpp import (first_difference, paired_ratio, perplexity_windows, running_mean_losses,
                                         second_half_losses, wikitext_text, window_means)

# llama-perplexity --ppl-output-type 1 on stdout: the ETA's end, then offset, perplexity, mean loss, its error.
LLAMA_PERPLEXITY_STDOUT = """0.30 minutes
       0  12.5967  2.533437  0.192979
     512  21.3334  3.060273  0.147246
    1024  22.2375  3.101781  0.118702


"""


def test_windows_are_consecutive_slices_with_bos_first_where_the_model_adds_one() -> None:
    tokens = list(range(10, 20))
    assert perplexity_windows(tokens, 4, 2, None) == [[10, 11, 12, 13], [14, 15, 16, 17]]
    assert perplexity_windows(tokens, 4, 2, 1) == [[1, 11, 12, 13], [1, 15, 16, 17]]
    with pytest.raises(SystemExit):
        perplexity_windows(tokens, 4, 3, None)


def test_second_half_losses_score_tokens_after_the_middle_of_the_window() -> None:
    logprobs = [None, -1.0, -2.0, -3.0, -4.0, -5.0, -6.0, -7.0]  # 8 tokens: llama-perplexity scores 5, 6 and 7
    assert second_half_losses(logprobs) == [5.0, 6.0, 7.0]
    assert second_half_losses(logprobs[:7]) == [4.0, 5.0, 6.0]  # odd: first = 7 // 2 = 3, tokens 4 to 6


def test_running_means_become_each_windows_own_mean_loss() -> None:
    running = running_mean_losses(LLAMA_PERPLEXITY_STDOUT)
    assert running == [2.533437, 3.060273, 3.101781]
    means = window_means(running)
    assert means == pytest.approx([2.533437, 2 * 3.060273 - 2.533437, 3 * 3.101781 - 2 * 3.060273])
    assert math.exp(sum(means) / 3) == pytest.approx(22.2375, abs=1e-3)


def test_paired_ratio_is_the_perplexity_ratio_with_the_spread_of_the_differences() -> None:
    ratio, error = paired_ratio([2.1, 3.2, 2.6], [2.0, 3.0, 2.5])
    assert ratio == pytest.approx(math.exp((0.1 + 0.2 + 0.1) / 3))
    assert error == pytest.approx(ratio * 0.057735 / math.sqrt(3), rel=1e-4)
    assert paired_ratio([2.0, 3.0], [2.0, 3.0]) == (1.0, 0.0)


def test_first_difference_counts_a_missing_token() -> None:
    assert first_difference([1, 2, 3], [1, 2, 3]) is None
    assert first_difference([1, 2, 3], [1, 5, 3]) == 1
    assert first_difference([1, 2, 3], [1, 2]) == 2


def test_wikitext_text_keeps_crlf_and_drops_one_final_newline(tmp_path) -> None:
    path = tmp_path / "wiki.test.raw"
    path.write_bytes(b" = A = \r\n text .\r\n\n")
    assert wikitext_text(path) == " = A = \r\n text .\r\n"
