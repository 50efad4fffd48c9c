"""The audio pipeline's Prometheus metrics, registered in the server's process registry.

Turns, interruptions and speculative replies (by outcome) are counted; the loaded models' host memory is a gauge; the voice-to-voice latency (end of the user's speech, as the turn
detector saw it, to the first reply audio sent) and the recognition and synthesis time are histograms.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from arbi_grpc.audio.models import AudioModels

from arbi_grpc.observability.metrics import LATENCY_BUCKETS_S


class AudioMetrics:
    def __init__(self, registry: CollectorRegistry, models: AudioModels) -> None:
        self.models_memory = Gauge(
            "arbi_audio_models_memory_bytes",
            "Host memory reserved for the loaded audio models (0 until they load)", registry=registry,
        )
        self.models_memory.set_function(lambda: models.memory.num_bytes if models.memory else 0)
        self.turns = Counter(
            "arbi_audio_turns", "User turns committed on Converse streams, by how they ended",
            ["detection"], registry=registry,
        )
        self.interruptions = Counter(
            "arbi_audio_interruptions", "Replies interrupted by user speech (barge-in)", registry=registry,
        )
        self.speculative_replies = Counter(
            "arbi_audio_speculative_replies",
            "Replies started at a pause of the user's speech, before the end of the turn: kept (the pause "
            "ended the turn), resumed (the user spoke again: discarded) or dropped (another client message, or speech too short for a turn)",
            ["outcome"], registry=registry,
        )
        self.voice_to_reply = Histogram(
            "arbi_audio_voice_to_reply_seconds",
            "From the end of the user's speech (turn detector) to the first reply audio sent",
            buckets=LATENCY_BUCKETS_S, registry=registry,
        )
        self.recognition = Histogram(
            "arbi_audio_recognition_seconds", "Speech recognition time per call (partial, final, Transcribe)",
            buckets=LATENCY_BUCKETS_S, registry=registry,
        )
        self.synthesis = Histogram(
            "arbi_audio_synthesis_seconds", "Speech synthesis time per sentence or clause",
            buckets=LATENCY_BUCKETS_S, registry=registry,
        )
