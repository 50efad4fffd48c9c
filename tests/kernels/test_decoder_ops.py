"""The decoder's kernel sets: the same weights run through the Triton ops (the CUDA path; here in Triton's
interpreter) and through the C++ CPU ops give the torch reference's hidden states and logits, for every supported
architecture's features (tied embeddings, q/k/v bias, Qwen3's head norms, Llama 3.1 RoPE scaling)."""

from __future__ import annotations

import pytest
import torch

from arbi_grpc.attention.metadata import AttentionMetadata, token_positions
from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.attention.torch_paged import TorchPagedAttention
from arbi_grpc.models.cpu_decoder_ops import KERNELS_SOURCE, CpuDecoderOps
from arbi_grpc.cpu_extensions import load_cpu_extension
from arbi_grpc.models.decoder import CausalLM, rotary_inverse_frequencies
from arbi_grpc.models.decoder_ops import DecoderOps, TorchDecoderOps, decoder_ops_for
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.models.triton_decoder_ops import TritonDecoderOps
from tests.unit.memory.shapes import model_config

CPU = torch.device("cpu")
LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                  "original_max_position_embeddings": 64}


def _hidden_and_logits(model: CausalLM, query_lens: list[int], seq_lens: list[int]) -> tuple[torch.Tensor, ...]:
    """One step over a fresh cache: the first sequence's whole prompt, and the other's chunk after a prefix
    written by an earlier step (here by this model too)."""
    config = model.config
    cache = PagedKVCache.for_model(config, num_blocks=8, block_size=16, dtype=torch.float32, device=CPU)
    tables = [[0, 1], [2, 3]]
    with torch.inference_mode():
        prefix_len = seq_lens[1] - query_lens[1]
        prefix = AttentionMetadata.build(query_lens=[prefix_len], seq_lens=[prefix_len], block_tables=[tables[1]],
                                         block_size=16, device=CPU)
        prefix_positions = token_positions(prefix.query_lens_host, prefix.seq_lens_host, CPU)
        model(torch.arange(len(prefix_positions)) % config.vocab_size, prefix_positions, prefix, cache)
        metadata = AttentionMetadata.build(query_lens=query_lens, seq_lens=seq_lens, block_tables=tables,
                                           block_size=16, device=CPU)
        positions = token_positions(metadata.query_lens_host, metadata.seq_lens_host, CPU)
        input_ids = (torch.arange(len(positions)) * 7) % config.vocab_size
        hidden = model(input_ids, positions, metadata, cache)
        return hidden, model.compute_logits(hidden)


def _triton_ops(inverse_frequencies: torch.Tensor, max_positions: int) -> DecoderOps:
    return TritonDecoderOps(inverse_frequencies, max_positions)


def _cpu_ops(inverse_frequencies: torch.Tensor, max_positions: int) -> DecoderOps:
    return CpuDecoderOps(inverse_frequencies, load_cpu_extension(KERNELS_SOURCE))


@pytest.mark.parametrize("candidate_ops", [_triton_ops, _cpu_ops], ids=["triton", "cpu"])
@pytest.mark.parametrize(("architecture", "tie", "overrides"), [
    ("LlamaForCausalLM", True, {}),
    ("LlamaForCausalLM", False, {"rope_scaling": LLAMA3_SCALING}),
    ("Qwen2ForCausalLM", False, {}),
    ("Qwen3ForCausalLM", True, {"head_dim": 32}),
])
def test_the_kernel_ops_compute_what_the_torch_ops_do(architecture: str, tie: bool, overrides: dict,
                                                      candidate_ops) -> None:
    config = model_config(architecture, tie=tie, num_hidden_layers=2, **overrides)
    inverse_frequencies = rotary_inverse_frequencies(config, CPU)
    reference = CausalLM.from_weights(
        config, lambda _: dict(random_causal_lm(config, torch.float32, CPU, seed=11).state_dict()),
        attention_backend=TorchPagedAttention(), device=CPU, ops=TorchDecoderOps(inverse_frequencies))
    weights = reference.state_dict()
    candidate = CausalLM.from_weights(config, lambda _: dict(weights), attention_backend=TorchPagedAttention(),
                                      device=CPU, ops=candidate_ops(inverse_frequencies,
                                                                    config.max_position_embeddings))
    expected = _hidden_and_logits(reference, query_lens=[20, 3], seq_lens=[20, 25])
    actual = _hidden_and_logits(candidate, query_lens=[20, 3], seq_lens=[20, 25])
    for got, want in zip(actual, expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_cpu_model_runs_the_cpu_kernels() -> None:
    config = model_config()
    assert type(decoder_ops_for(CPU, rotary_inverse_frequencies(config, CPU), 512)) is CpuDecoderOps


def test_a_model_whose_projections_were_never_fused_refuses_to_run() -> None:
    config = model_config(num_hidden_layers=1)
    model = CausalLM(config, attention_backend=TorchPagedAttention(), device=CPU).eval()
    cache = PagedKVCache.for_model(config, num_blocks=2, block_size=16, dtype=torch.float32, device=CPU)
    metadata = AttentionMetadata.build(query_lens=[4], seq_lens=[4], block_tables=[[0]], block_size=16, device=CPU)
    with torch.inference_mode(), pytest.raises(RuntimeError, match="fuse_projections"):
        model(torch.arange(4), torch.arange(4), metadata, cache)
    model.fuse_projections()
    with torch.inference_mode():
        assert model(torch.arange(4), torch.arange(4), metadata, cache).shape == (4, config.hidden_size)
