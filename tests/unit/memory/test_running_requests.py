"""The running batch limit auto chooses from the KV pool, and the admissions a TKV pool of equal bytes buys: the
scheduler counts blocks of the codes' size, so it admits several times the sequences of a bf16 pool."""

from __future__ import annotations

import pytest

from arbi_grpc.config import MIB, AUTO_RUNNING_REQUESTS_CAP, AUTO_RUNNING_REQUESTS_FLOOR, EngineConfig
from arbi_grpc.engine.block_manager import BlockManager
from arbi_grpc.engine.request import GenerationRequest
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams
from arbi_grpc.engine.scheduler import Scheduler
from arbi_grpc.engine.sequence import Sequence
from arbi_grpc.errors import ResourceExhaustedError
from arbi_grpc.kv_codec import TkvCalibration, TkvSpec
from arbi_grpc.memory.budget import MemoryLimit
from arbi_grpc.memory.kv_pool import KVPoolPlan, plan_kv_pool
from arbi_grpc.memory.kv_pool_default import plan_default_kv_pool
from tests.unit.memory.shapes import model_config

GIB = 1024 * MIB
MODEL = model_config()  # 3 layers, 2 KV heads of 16, a context of 512 tokens: the typical sequence is 32 blocks
TYPICAL_BLOCKS = 512 // 16
LIMIT = 256 * MIB  # the CUDA test device: a pool of about 14 MiB beside the other components at utilization 0.5
CALIBRATION = TkvCalibration.uniform("tkvfp1:test", TkvSpec(4, 4, 16, 1), MODEL.num_layers, MODEL.num_kv_heads,
                                     MODEL.head_dim)


def _config(kv_cache_dtype: str, **settings) -> EngineConfig:
    tkv = {"kv_calibration": "bundle-dir"} if kv_cache_dtype == "tkv" else {}
    steps = {"max_step_tokens": 1 << 20, "max_prefill_chunk_tokens": 1 << 20}  # one step takes whole prompts
    return EngineConfig(kv_cache_dtype=kv_cache_dtype, **{**steps, **tkv, **settings})


def _plan(kv_cache_dtype: str, **settings) -> KVPoolPlan:
    return plan_kv_pool(_config(kv_cache_dtype, **settings), MODEL, CALIBRATION if kv_cache_dtype == "tkv" else None)


@pytest.mark.parametrize("kv_cache_dtype", ["bfloat16", "tkv"])
def test_auto_takes_the_most_typical_sequences_the_pool_holds_beside_their_tail_slots(kv_cache_dtype: str) -> None:
    plan = _plan(kv_cache_dtype, kv_cache_memory_mib=16)
    count = plan.max_running_requests
    assert AUTO_RUNNING_REQUESTS_FLOOR < count < AUTO_RUNNING_REQUESTS_CAP
    assert plan.num_blocks >= count * TYPICAL_BLOCKS
    assert plan.running_source == "auto: the sequences of 512 tokens the KV pool holds, within 64..256"
    assert f"; {count} running requests (auto: " in plan.detail
    one_more = _plan(kv_cache_dtype, kv_cache_memory_mib=16, max_running_requests=count + 1)
    assert one_more.num_blocks < (count + 1) * TYPICAL_BLOCKS  # one more would not hold its typical sequence
    if kv_cache_dtype == "tkv":
        assert plan.num_tail_slots == count and plan.tail_bytes == count * plan.tail_slot_bytes
        assert plan.num_bytes <= 16 * MIB
        bf16 = _plan("bfloat16", kv_cache_memory_mib=16)
        assert count > 1.8 * bf16.max_running_requests  # K4V4 G16 codes: 144 B a token against bf16's 384


def test_auto_is_bounded_and_an_explicit_limit_wins() -> None:
    assert _plan("tkv", kv_cache_memory_mib=2).max_running_requests == AUTO_RUNNING_REQUESTS_FLOOR
    assert _plan("tkv", kv_cache_memory_mib=2).running_source.startswith("auto: the floor, within 64..256")
    roomy = _plan("bfloat16", kv_cache_memory_mib=512)
    assert (roomy.max_running_requests, roomy.running_source) == (256, "auto: the cap, within 64..256")
    stepped = plan_kv_pool(EngineConfig(kv_cache_memory_mib=512, max_step_tokens=100), MODEL)
    assert (stepped.max_running_requests, stepped.running_source) == (100, "auto: the cap, within 64..100")
    assert plan_kv_pool(EngineConfig(kv_cache_memory_mib=512, max_step_tokens=50), MODEL).max_running_requests == 50
    # A TKV pool too small for the floor's tail slots and one sequence of the context limit: fewer slots, not a
    # refused boot (an explicit 64 is refused, naming the tail slots).
    small = _plan("tkv", kv_cache_memory_mib=1, max_model_len=512)
    assert 1 < small.max_running_requests < 64 and small.num_blocks >= TYPICAL_BLOCKS
    assert small.running_source.startswith("auto: below the floor of 64, the most whose TKV tail slots leave")
    with pytest.raises(ResourceExhaustedError, match="does not fit one sequence of max_model_len=512"):
        _plan("tkv", kv_cache_memory_mib=1, max_model_len=512, max_running_requests=small.max_running_requests + 1)
    with pytest.raises(ResourceExhaustedError, match="tail slots of 64 running sequences"):
        _plan("tkv", kv_cache_memory_mib=1, max_running_requests=64)
    explicit = _plan("tkv", kv_cache_memory_mib=16, max_running_requests=12)
    assert (explicit.max_running_requests, explicit.num_tail_slots) == (12, 12)
    assert explicit.running_source == "max_running_requests=12"


def test_a_default_cpu_pool_follows_the_floor_and_a_cuda_pool_prices_the_graphs() -> None:
    cpu = plan_default_kv_pool(EngineConfig(), MODEL, MemoryLimit(8 * GIB, "test"))
    assert (cpu.max_running_requests, cpu.running_source) == (64, "auto: 64 on the CPU, where the default KV pool "
                                                                   "is sized from it")
    # On CUDA the pool is what the other components leave, and those grow with the limit (a decode graph per
    # batch size up to it, each keeping its logits): the limit is chosen with its own graphs counted.
    cuda = _config("tkv", device="cuda", gpu_memory_utilization=0.5, max_step_tokens=512, max_prefill_chunk_tokens=256)
    plan = plan_default_kv_pool(cuda, MODEL, MemoryLimit(LIMIT, "test"), CALIBRATION)
    count = plan.max_running_requests
    assert AUTO_RUNNING_REQUESTS_FLOOR < count < AUTO_RUNNING_REQUESTS_CAP
    assert plan.num_blocks >= count * TYPICAL_BLOCKS and plan.num_tail_slots == count
    bigger = plan_default_kv_pool(cuda.with_running_requests(count + 1), MODEL, MemoryLimit(LIMIT, "test"),
                                  CALIBRATION)
    assert bigger.num_blocks < (count + 1) * TYPICAL_BLOCKS


def _sequence(index: int, prompt_len: int) -> Sequence:
    request = GenerationRequest(request_id=f"r{index}", prompt_token_ids=tuple(range(1, prompt_len + 1)),
                                sampling=SamplingParams(), stopping=StoppingParams(max_output_tokens=1))
    return Sequence(request=request, sink=lambda _: None, sampling_state=None, detokenizer=None, stop_matcher=None)


def _admitted(plan: KVPoolPlan, config: EngineConfig, prompt_len: int, offered: int) -> int:
    """How many of `offered` waiting prompts one step admits into a pool laid out as `plan` (its first blocks)."""
    scheduler = Scheduler(BlockManager(plan.num_blocks, plan.block_size, num_first_blocks=plan.num_sink_blocks),
                          config.with_running_requests(plan.max_running_requests).scheduling_limits)
    for index in range(offered):
        scheduler.add(_sequence(index, prompt_len))
    return len(scheduler.schedule().chunks)


def test_the_scheduler_admits_by_the_codes_size() -> None:
    tkv_config = _config("tkv", kv_cache_memory_mib=16)
    tkv, bf16 = _plan("tkv", kv_cache_memory_mib=16), _plan("bfloat16", kv_cache_memory_mib=16)
    assert tkv.bytes_per_block * 2.6 < bf16.bytes_per_block  # 144 against 384 bytes a token
    # Prompts of the typical length: as many as the blocks hold, less the scheduler's reserve for running decodes.
    for plan, config in ((tkv, tkv_config), (bf16, _config("bfloat16", kv_cache_memory_mib=16))):
        reserve = max(1, plan.num_blocks // 64)
        expected = min(plan.max_running_requests, (plan.num_blocks - reserve) // TYPICAL_BLOCKS)
        assert _admitted(plan, config, 512, 400) == expected
    assert _admitted(tkv, tkv_config, 512, 400) > 1.8 * _admitted(bf16, _config("bfloat16"), 512, 400)
    # Short prompts: every batch slot fills; the sink rows (first blocks) never hold admission below the limit.
    assert tkv.num_sink_blocks > tkv.max_running_requests
    assert _admitted(tkv, tkv_config, 16, 400) == tkv.max_running_requests
