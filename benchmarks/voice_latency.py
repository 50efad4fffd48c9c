"""Benchmark: voice-to-voice latency of AudioService.Converse, SmolLM2 on the CPU, spoken questions
streamed in real time like a microphone.

For each utterance (a question spoken by espeak-ng, in a fresh session) it measures, on the client's
clock, from the end of the user's speech (the last loud sample sent) to the first reply audio byte, and
its parts: the VAD hangover (to SpeechStopped), recognition (to the final transcript), the LLM's time to
first text (to the first ResponseTextDelta) and the first synthesis (to the first ResponseAudio), itself
cut in two: the first speakable piece (to the text delta that completed the piece the first audio speaks)
and its synthesis (to the first ResponseAudio). Then the playback stall: how long a client playing the
reply as it arrives waits for audio within its first STALL_WINDOW_S seconds, the price of a short first piece.
Then barge-in: a second question spoken while the reply plays, from its onset to the interrupted
ResponseDone (wall clock), and the server's reaction on the input timeline.

    python -m benchmarks.voice_latency --out bench-results/voice_latency.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from datetime import date
from pathlib import Path

import grpc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from arbi_client.arbi.v1 import audio_service_pb2_grpc as pb_grpc  # noqa: E402
from arbi_client.arbi.v1 import audio_types_pb2 as audio_pb  # noqa: E402
from arbi_grpc.config import EngineConfig  # noqa: E402
from arbi_grpc.models.model_cache import DEFAULT_MODEL, resolve_model  # noqa: E402
from arbi_grpc.server import GrpcServer  # noqa: E402
from arbi_grpc.served_model import build_served_model  # noqa: E402
from arbi_grpc.server_config import ServerConfig  # noqa: E402
from tests.e2e.audio_helpers import (  # noqa: E402
    LiveAudio,
    config,
    leading_silence_ms,
    silence,
    spoken,
    trailing_silence_ms,
)

QUESTIONS = [f"What is the capital of {country}?" for country in (
    "France", "Germany", "Japan", "England", "Russia", "China", "Egypt", "Canada", "Spain", "Italy")] + [
    "How many legs does a spider have?", "What colour is the sky?", "Who wrote Romeo and Juliet?",
    "What is the largest ocean?", "How many days are in a week?", "What do bees make?",
    "What is the boiling point of water?", "Name a fruit that is yellow.", "What planet do we live on?",
    "How many hours are in a day?"]
PARTS = ("vad_hangover", "recognition", "llm_first_text", "first_synthesis", "first_piece_text",
         "piece_synthesis", "voice_to_voice", "playback_stall")
STALL_WINDOW_S = 3.0  # reply audio over which playback stalls are counted


def _percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(fraction * (len(ordered) - 1))))]


def one_utterance(stub: pb_grpc.AudioServiceStub, question: str) -> dict[str, float]:
    """The latency parts of one spoken question, in seconds."""
    speech = spoken(question)
    trailing_ms = trailing_silence_ms(speech)
    live = LiveAudio(config(16_000))
    live.say(silence(300), mark="start")
    live.say(speech, mark="speech")
    seen: dict[str, float] = {}
    deltas: list[tuple[float, str]] = []
    chunks: list[tuple[float, float]] = []  # (arrival, seconds of audio) of the reply's audio chunks
    for event in stub.Converse(iter(live), timeout=120):
        kind = event.WhichOneof("event")
        if kind == "input_transcript" and not event.input_transcript.is_final:
            continue
        seen.setdefault(kind, time.monotonic())
        if kind == "session_created":
            bytes_per_s = 2 * event.session_created.config.output_format.sample_rate_hz
        if kind == "response_text_delta":
            deltas.append((time.monotonic(), event.response_text_delta.delta))
        if kind == "response_audio":
            if not chunks:
                piece = event.response_audio.text
            chunks.append((time.monotonic(), len(event.response_audio.audio) / bytes_per_s))
        if kind == "response_done" or sum(seconds for _, seconds in chunks) >= STALL_WINDOW_S:
            live.close()
            break
    speech_end_ms = live.marks["speech"] + 1000 * len(speech) / 32_000 - trailing_ms
    speech_end_s = live.started + speech_end_ms / 1000
    piece_ready = _piece_complete_at(deltas, piece)
    return {
        "vad_hangover": seen["speech_stopped"] - speech_end_s,
        "recognition": seen["input_transcript"] - seen["speech_stopped"],
        "llm_first_text": seen["response_text_delta"] - seen["input_transcript"],
        "first_synthesis": seen["response_audio"] - seen["response_text_delta"],
        "first_piece_text": piece_ready - seen["response_text_delta"],
        "piece_synthesis": seen["response_audio"] - piece_ready,
        "voice_to_voice": seen["response_audio"] - speech_end_s,
        "playback_stall": _stall(chunks),
        "first_piece_chars": len(piece),
    }


def _stall(chunks: list[tuple[float, float]]) -> float:
    """Seconds a client playing each chunk on arrival (or when the one before ends) waits for audio."""
    stall, playing_until = 0.0, chunks[0][0]
    for arrived, seconds in chunks:
        stall += max(0.0, arrived - playing_until)
        playing_until = max(arrived, playing_until) + seconds
    return stall


def _piece_complete_at(deltas: list[tuple[float, str]], piece: str) -> float:
    """When the text of the first spoken piece was complete: the first delta that went beyond it (the
    splitter cuts at the whitespace after a break), else the last delta (the piece was the whole reply)."""
    text = ""
    for arrived, delta in deltas:
        text += delta
        if len(text.lstrip()) > len(piece):
            return arrived
    return deltas[-1][0]


def one_barge_in(stub: pb_grpc.AudioServiceStub) -> dict[str, float]:
    """Wall-clock and input-timeline reaction to speech over a playing reply, in seconds."""
    live = LiveAudio(config(16_000))
    live.say(silence(300) + spoken("Tell me a story about a dragon."))
    barge = silence(200) + spoken("What is the capital of France?")
    onset_ms = leading_silence_ms(barge)
    asked = interrupted = None
    for event in stub.Converse(iter(live), timeout=120):
        kind = event.WhichOneof("event")
        if kind == "response_audio" and asked is None:
            asked = True
            live.say(barge, mark="barge")
        if kind == "speech_started" and asked:
            detected_ms = event.speech_started.audio_start_ms
        if kind == "response_done" and event.response_done.status == audio_pb.RESPONSE_STATUS_INTERRUPTED:
            interrupted = time.monotonic()
            reaction_input_ms = event.response_done.interrupted_at_input_ms - detected_ms
            live.close()
            break
    onset_s = live.started + (live.marks["barge"] + onset_ms) / 1000
    return {"wall_reaction": interrupted - onset_s, "input_timeline_reaction": reaction_input_ms / 1000,
            "vad_onset_delay": (detected_ms - live.marks["barge"] - onset_ms) / 1000}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--utterances", type=int, default=20)
    parser.add_argument("--barge-ins", type=int, default=3)
    parser.add_argument("--cpu-weights", default="float", choices=("float", "int4", "int8"),
                        help="the engine's CPU weights (EngineConfig.cpu_weights)")
    parser.add_argument("--out", type=Path, default=Path("bench-results/voice_latency.json"))
    args = parser.parse_args()
    load_before = os.getloadavg()
    model = resolve_model(DEFAULT_MODEL)
    served = build_served_model(EngineConfig(model=str(model.directory), kv_cache_memory_mib=256,
                                                cpu_weights=args.cpu_weights))
    server = GrpcServer(served, config=ServerConfig(port=0, audio_preload=True)).start()
    channel = grpc.insecure_channel(server.target)
    stub = pb_grpc.AudioServiceStub(channel)
    try:
        one_utterance(stub, "Hello there.")  # warm-up: first recognition and synthesis
        runs = [one_utterance(stub, QUESTIONS[i % len(QUESTIONS)]) for i in range(args.utterances)]
        barge_ins = [one_barge_in(stub) for _ in range(args.barge_ins)]
        speculative = {outcome: server.metrics.registry.get_sample_value(
            "arbi_audio_speculative_replies_total", {"outcome": outcome}) or 0.0
            for outcome in ("kept", "resumed", "dropped")}
    finally:
        channel.close()
        server.stop()
    load_after = os.getloadavg()
    table = {part: {"p50_ms": 1000 * statistics.median([run[part] for run in runs]),
                    "p95_ms": 1000 * _percentile([run[part] for run in runs], 0.95)} for part in PARTS}
    barge = {part: {"p50_ms": 1000 * statistics.median([run[part] for run in barge_ins]),
                    "max_ms": 1000 * max(run[part] for run in barge_ins)} for part in barge_ins[0]}
    print(f"voice-to-voice over {len(runs)} utterances (SmolLM2-135M, {args.cpu_weights} weights, CPU, "
          f"{platform.processor() or 'cpu'})")
    print(f"load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f}, on {os.cpu_count()} cores")
    print(f"{'part':<24}{'p50 ms':>10}{'p95 ms':>10}")
    for part, figures in table.items():
        print(f"{part:<24}{figures['p50_ms']:>10.0f}{figures['p95_ms']:>10.0f}")
    print(f"first piece: median {statistics.median(run['first_piece_chars'] for run in runs):.0f} characters")
    print("speculative replies (warm-up and barge-in runs included): "
          + ", ".join(f"{outcome} {count:.0f}" for outcome, count in speculative.items()))
    print(f"barge-in over {len(barge_ins)} runs")
    print(f"{'part':<24}{'p50 ms':>10}{'max ms':>10}")
    for part, figures in barge.items():
        print(f"{part:<24}{figures['p50_ms']:>10.0f}{figures['max_ms']:>10.0f}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "date": date.today().isoformat(), "machine": platform.platform(), "utterances": len(runs),
        "cpu_weights": args.cpu_weights,
        "cpu_count": os.cpu_count(), "load_average_before": load_before, "load_average_after": load_after,
        "parts": table, "barge_in": barge, "speculative_replies": speculative, "runs": runs, "barge_in_runs": barge_ins,
    }, indent=2))
    print(f"results: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
