"""The settings of one Converse session, validated once when the client's config is converted."""

from __future__ import annotations

from dataclasses import dataclass

from arbi_grpc.audio.turns import VadSettings
from arbi_grpc.engine.sampling_params import SamplingParams, StoppingParams

INPUT_RATES_HZ = (16_000, 24_000)
OUTPUT_RATES_HZ = (16_000, 22_050, 24_000)
DEFAULT_OUTPUT_RATE_HZ = 24_000
DEFAULT_REPLY_TOKENS = 128
MAX_CHUNK_MS = 1000


@dataclass(frozen=True)
class SessionSettings:
    """`vad` None means manual turns (the client commits)."""

    model: str
    input_rate_hz: int
    output_rate_hz: int
    voice: str
    instructions: str
    vad: VadSettings | None
    sampling: SamplingParams
    stopping: StoppingParams

    @property
    def max_chunk_bytes(self) -> int:
        return self.input_rate_hz * 2 * MAX_CHUNK_MS // 1000
