"""The activation tracker counts new tensor storages exactly, ignores views and in-place results of
existing tensors, and the profile leaves the KV pool zeroed (a TKV pool too, its tail slots shared by the prompts)."""

from __future__ import annotations

import torch

from arbi_grpc.attention.paged_kv_cache import PagedKVCache
from arbi_grpc.attention.torch_paged import TorchPagedAttention
from arbi_grpc.kv_codec import TkvCalibration, TkvSpec
from arbi_grpc.kv_codec.paged_cache import TkvPagedKVCache
from arbi_grpc.kv_codec.torch_attention import TkvTorchPagedAttention
from arbi_grpc.memory.activation_profile import LiveTensorPeak, measure_activation_peak
from arbi_grpc.memory.profile_step import ProfileStep
from arbi_grpc.models.decoder import CausalLM
from tests.unit.memory.shapes import model_config


def test_peak_of_live_storages() -> None:
    weight = torch.ones(256, 256)  # exists before: never counted
    tracker = LiveTensorPeak()
    with tracker:
        first = weight * 2  # 256 KiB
        view = first.t()  # a view: no new memory
        weight.add_(1)  # in place on an existing tensor: no new memory
        second = view + 1  # 256 KiB
        del first, view
        third = second.sum(dim=0)  # 1 KiB, while `first` is already freed
    assert tracker.peak_bytes == 2 * 256 * 256 * 4
    assert tracker.live_bytes == 256 * 256 * 4 + 256 * 4
    del second, third
    assert tracker.live_bytes == 0


def test_profile_runs_the_step_and_zeroes_the_pool() -> None:
    config = model_config()
    torch.manual_seed(0)
    model = CausalLM(config, attention_backend=TorchPagedAttention(), device="cpu").eval()
    model.fuse_projections()
    cache = PagedKVCache.for_model(config, num_blocks=8, block_size=16, dtype=torch.float32, device="cpu")
    step = ProfileStep.worst_case(max_step_tokens=96, max_model_len=40, max_running_requests=4)
    assert step.prompt_lengths == (40, 40, 16) and step.num_sampled_rows == 4
    peak = measure_activation_peak(model, cache, step)
    logits_bytes = step.num_tokens * config.vocab_size * 4
    assert peak > logits_bytes
    assert all(not t.any() for t in (*cache.key_caches, *cache.value_caches))


def test_a_tkv_profile_with_more_prompts_than_tail_slots_wraps_them_around() -> None:
    config = model_config()
    calibration = TkvCalibration.uniform("tkvfp1:test", TkvSpec(4, 4, 16, 1), config.num_layers,
                                         config.num_kv_heads, config.head_dim)
    torch.manual_seed(0)
    model = CausalLM(config, attention_backend=TkvTorchPagedAttention.for_device("cpu"), device="cpu").eval()
    model.fuse_projections()
    cache = TkvPagedKVCache(calibration, num_blocks=8, block_size=16, device="cpu", num_tail_slots=2)
    step = ProfileStep.worst_case(max_step_tokens=96, max_model_len=40, max_running_requests=4)
    assert len(step.prompt_lengths) == 3  # one more prompt than the pool has tail slots
    assert measure_activation_peak(model, cache, step) > step.num_tokens * config.vocab_size * 4
    assert all(not t.any() for t in (*cache.key_caches, *cache.value_caches))
