"""The engine on CUDA (Triton attention, fused kernels, CUDA graphs, GPU sampling) against the CPU path.

Random-weight models check the numbers without tie-fragile greedy comparisons: every token the GPU engine
generated is re-scored by the CPU reference (its prompt log-probabilities) and must carry the same logprob
and be the reference's best choice within tolerance. The real SmolLM2 checks greedy text equality. The
overlapped loop (the default; tokens carried on the device) is checked against the synchronous one.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from arbi_grpc.attention.selection import TORCH_DTYPES, build_kv_cache, select_attention_backend
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.offline import generate
from arbi_grpc.engine.request import FinishReason, GenerationRequest
from arbi_grpc.engine.sampling_params import StoppingParams
from arbi_grpc.models.random_weights import random_causal_lm
from arbi_grpc.models.reference_shapes import model_config_for_shape
from arbi_grpc.served_model import assemble_engine, build_runner
from tests.gpu.engine_pair import (
    build_engine,
    greedy_requests,
    on_device,
    rescore_on_cpu,
    worst_logprob_gap,
)
from tests.unit.engine.stream_harness import (
    Outputs,
    assert_same_streams,
    run_requests,
    sampling_for,
    token_ids,
)


@pytest.mark.parametrize(("shape", "dtype", "graph_batch", "tolerance"), [
    ("smollm2-135m", "float32", 0, 2e-3), ("smollm2-135m", "float32", 16, 2e-3), ("smollm2-135m", "bfloat16", 16, 0.15),
    ("qwen3-0.6b", "float32", 16, 2e-3), ("qwen3-0.6b", "bfloat16", 0, 0.15),  # q/k norms fused into the rotary
])
def test_gpu_generation_rescored_by_the_cpu_reference(shape: str, dtype: str, graph_batch: int,
                                                      tolerance: float) -> None:
    config = model_config_for_shape(shape)
    if shape == "qwen3-0.6b":  # 6 of its 28 layers keep the CPU re-scoring quick; each layer is the real shape
        config = replace(config, num_layers=6)
    common = dict(max_model_len=512, max_running_requests=16, max_step_tokens=96, max_prefill_chunk_tokens=64,
                  enable_prefix_cache=True, kv_cache_memory_mib=512)
    cpu_config = EngineConfig(device="cpu", **common)
    gpu_config = EngineConfig(device="cuda", dtype=dtype, cuda_graph_max_batch=graph_batch, **common)
    cpu_model = random_causal_lm(config, torch.float32, "cpu", seed=3)
    cpu_engine = build_engine(cpu_model, config, cpu_config)
    gpu_engine = build_engine(on_device(cpu_model, config, gpu_config), config, gpu_config)
    try:
        generator = torch.Generator().manual_seed(11)
        shared = torch.randint(0, config.vocab_size, (40,), generator=generator).tolist()
        prompts = [shared + torch.randint(0, config.vocab_size, (n,), generator=generator).tolist()
                   for n in (1, 7, 16, 33, 90, 150, 5, 61, 17, 2, 120, 3)]  # ragged, shared prefix, > one chunk
        done = generate(gpu_engine, greedy_requests(prompts, 20))
        worst = worst_logprob_gap(done, rescore_on_cpu(cpu_engine, prompts, done))
        assert worst < tolerance, worst
        # The GPU's prompt logprobs (prefill kernel, chunked, over a cached prefix) match the CPU's too.
        gpu_scored = generate(gpu_engine, greedy_requests(prompts, 1, True))
        cpu_scored = generate(cpu_engine, greedy_requests(prompts, 1, True))
        worst_prompt = max(abs(g - c) for gs, cs in zip(gpu_scored, cpu_scored)
                           for g, c in zip(gs.prompt_logprobs[1:], cs.prompt_logprobs[1:]))
        assert worst_prompt < tolerance, worst_prompt
        stats = gpu_engine.stats()
        assert stats.num_running == stats.num_waiting == 0
    finally:
        cpu_engine.shutdown()
        gpu_engine.shutdown()


def test_real_smollm2_greedy_text_equals_the_cpu_path(smollm2_dir) -> None:
    from arbi_grpc.models.loader import load_model
    from arbi_grpc.text.tokenizer import TextTokenizer

    tokenizer = TextTokenizer.from_model_dir(smollm2_dir)
    questions = ["What is the capital of France?", "Name three primary colors.", "What is 12 times 12?",
                 "Write a haiku about the sea.", "Who wrote Romeo and Juliet?", "Explain photosynthesis briefly.",
                 "What is the boiling point of water?", "Give me a synonym for happy."]
    prompts = [tokenizer.encode(f"<|im_start|>user\n{q}<|im_end|>\n<|im_start|>assistant\n") for q in questions]
    outputs: dict[str, list[list[int]]] = {}
    for name, device, dtype in (("cpu", "cpu", "float32"), ("cuda-fp32", "cuda", "float32"),
                                ("cuda-bf16", "cuda", "bfloat16")):
        engine_config = EngineConfig(device=device, dtype=dtype, max_model_len=1024, max_running_requests=8,
                                     kv_cache_memory_mib=256, cuda_graph_max_batch=8)
        model, config = load_model(smollm2_dir, dtype=TORCH_DTYPES[dtype], device=device,
                                   attention_backend=select_attention_backend(engine_config))
        kv_cache = build_kv_cache(engine_config, config, num_blocks=256)
        runner, _ = build_runner(model, kv_cache, engine_config, 1024, model.model.layers[0].self_attn.backend)
        engine = assemble_engine(runner, config, tokenizer, engine_config, 1024)
        engine.start()
        try:
            outputs[name] = [r.token_ids for r in generate(engine, greedy_requests(prompts, 32))]
        finally:
            engine.shutdown()
    assert "Paris" in tokenizer.decode(outputs["cuda-bf16"][0])
    assert outputs["cuda-fp32"] == outputs["cpu"]
    # bf16 weights are another model than fp32 ones: near-ties flip some greedy continuations within 32 tokens
    # (5 of 8 whole outputs equal on the H200, 2026-11-29); the bf16 logits are checked against the reference
    # within tolerance by test_gpu_generation_rescored_by_the_cpu_reference.
    agreeing = sum(g == c for g, c in zip(outputs["cuda-bf16"], outputs["cpu"]))
    print(f"bf16 greedy outputs equal to the fp32 CPU path: {agreeing}/{len(prompts)}")
    assert agreeing >= len(prompts) // 2
    first_tokens_agree = sum(g[:8] == c[:8] for g, c in zip(outputs["cuda-bf16"], outputs["cpu"]))
    print(f"bf16 outputs whose first 8 tokens equal the CPU path's: {first_tokens_agree}/{len(prompts)}")


@pytest.mark.parametrize("graph_batch", [0, 16])
def test_overlapped_steps_stream_what_the_synchronous_loop_streams(graph_batch: int) -> None:
    """On CUDA (fp32 weights, Triton kernels) the overlapped loop, whose input ids come from the previous step's
    sampled tokens on the device, streams the synchronous loop's outputs: greedy and seeded, stop tokens,
    max_output_tokens, cancellations, a shared prefix; the KV pool is free at the end of each run."""
    config = model_config_for_shape("smollm2-135m")
    engine_config = EngineConfig(device="cuda", dtype="float32", cuda_graph_max_batch=graph_batch, max_model_len=512,
                                 max_running_requests=16, max_step_tokens=96, max_prefill_chunk_tokens=64,
                                 enable_prefix_cache=True, kv_cache_memory_mib=512)
    model = on_device(random_causal_lm(config, torch.float32, "cpu", seed=3), config, engine_config)
    generator = torch.Generator().manual_seed(12)
    shared = torch.randint(0, config.vocab_size, (40,), generator=generator).tolist()
    prompts = [tuple(shared + torch.randint(0, config.vocab_size, (n,), generator=generator).tolist())
               for n in (1, 7, 16, 33, 90, 150, 5, 61, 17, 2, 120, 3)]

    def requests(stop_token_ids: dict[int, int]) -> list[GenerationRequest]:
        return [
            GenerationRequest(f"o{i}", prompt, sampling_for(i), StoppingParams(
                max_output_tokens=10 + 4 * (i % 5), ignore_eos=True,
                stop_token_ids=(stop_token_ids[i],) if i in stop_token_ids else ()))
            for i, prompt in enumerate(prompts)
        ]

    def run(overlap_steps: bool, stop_token_ids: dict[int, int], cancel_after: dict[str, int]) -> Outputs:
        engine = build_engine(model, config, replace(engine_config, overlap_steps=overlap_steps), start=False)
        return run_requests(engine, requests(stop_token_ids), cancel_after)

    plain = run(False, {}, {})
    stops = {i: token_ids(plain[f"o{i}"])[4] for i in range(0, len(prompts), 3)}
    cancel_after = {"o1": 2, "o5": 6}
    sync = run(False, stops, cancel_after)
    overlap = run(True, stops, cancel_after)
    assert_same_streams(overlap, sync, logprob_tolerance=2e-3)
    assert {outs[-1].finish_reason for outs in sync.values()} == {
        FinishReason.STOP_TOKEN, FinishReason.MAX_OUTPUT_TOKENS, FinishReason.CANCELLED}
