"""The audio pipeline's Prometheus metrics, registered in the server's process registry.

Turns and interruptions are counted; the voice-to-voice latency (end of the user's speech, as the turn
detector saw it, to the first reply audio sent) and the recognition and synthesis time are histograms.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

from arbi_grpc.observability.metrics import LATENCY_BUCKETS_S


class AudioMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.turns = Counter(
            "arbi_audio_turns", "User turns committed on Converse streams, by how they ended",
            ["detection"], registry=registry,
        )
        self.interruptions = Counter(
            "arbi_audio_interruptions", "Replies interrupted by user speech (barge-in)", registry=registry,
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
