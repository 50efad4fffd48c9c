"""What the CUDA engine tests share: a SmolLM2-shaped model cut to a few layers with a uniform K4V4 calibration,
an engine over a model without a server, the same weights in a GPU engine config, greedy requests, and the
re-scoring of GPU-generated tokens by a CPU engine (its prompt logprobs)."""

from __future__ import annotations

from arbi_grpc.attention.selection import TORCH_DTYPES, build_kv_cache, select_attention_backend
from arbi_grpc.config import EngineConfig
from arbi_grpc.engine.engine import Engine
from arbi_grpc.engine.offline import CompletedRequest, generate
from arbi_grpc.engine.request import GenerationRequest
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.kv_codec.calibration.bundle import TkvCalibration
from arbi_grpc.kv_codec.spec import TkvSpec
from arbi_grpc.models.config import ModelConfig
from arbi_grpc.models.decoder import CausalLM
from arbi_grpc.models.reference_shapes import reference_hf_config
from arbi_grpc.served_model import assemble_engine, build_runner
from benchmarks.gpu_decode import synthetic_tokenizer


def smollm2_layers_with_k4v4(num_layers: int) -> tuple[ModelConfig, TkvCalibration]:
    """SmolLM2's config cut to `num_layers` layers, and a uniform K4V4 G32 calibration (one sink token) for it."""
    hf = reference_hf_config("smollm2-135m")
    hf.update(num_hidden_layers=num_layers)
    config = ModelConfig.from_hf_config(hf)
    return config, TkvCalibration.uniform("random", TkvSpec(4, 4, 32, 1), config.num_layers, config.num_kv_heads,
                                          config.head_dim)


def build_engine(model: CausalLM, config: ModelConfig, engine_config: EngineConfig,
                 tkv_calibration: TkvCalibration | None = None, start: bool = True) -> Engine:
    """An engine over `model` with a 256-block KV cache (TKV when the config asks for it)."""
    kv_cache = build_kv_cache(engine_config, config, num_blocks=256, tkv_calibration=tkv_calibration)
    runner, _ = build_runner(model, kv_cache, engine_config, engine_config.max_model_len,
                             model.model.layers[0].self_attn.backend)
    engine = assemble_engine(runner, config, synthetic_tokenizer(config.vocab_size), engine_config,
                             engine_config.max_model_len)
    if start:
        engine.start()
    return engine


def on_device(cpu_model: CausalLM, config: ModelConfig, engine_config: EngineConfig) -> CausalLM:
    """The same weights as `cpu_model`, in the engine config's device, dtype and attention backend."""
    dtype = TORCH_DTYPES[engine_config.dtype]
    return CausalLM.from_weights(
        config, lambda _: {name: tensor.to("cuda", dtype) for name, tensor in cpu_model.state_dict().items()},
        attention_backend=select_attention_backend(engine_config), device="cuda")


def greedy_requests(prompts: list[list[int]], new_tokens: int,
                    prompt_logprobs: bool = False) -> list[GenerationRequest]:
    return [
        GenerationRequest(f"r{i}", tuple(prompt), SamplingParams(temperature=0.0, prompt_logprobs=prompt_logprobs),
                          StoppingParams(max_output_tokens=new_tokens, ignore_eos=True))
        for i, prompt in enumerate(prompts)
    ]


def rescore_on_cpu(cpu_engine: Engine, prompts: list[list[int]], done: list[CompletedRequest]) -> list[list[float]]:
    """CPU logprobs of each generated token given everything before it."""
    scored = generate(cpu_engine, greedy_requests([p + r.token_ids for p, r in zip(prompts, done)], 1, True))
    return [list(s.prompt_logprobs[len(p):]) for p, s in zip(prompts, scored)]


def worst_logprob_gap(done: list[CompletedRequest], rescored: list[list[float]]) -> float:
    """Largest |GPU - CPU| logprob over every generated token."""
    return max(abs(g - c) for r, cpu in zip(done, rescored) for g, c in zip(r.logprobs, cpu))
