"""AudioService.Converse on the real server with SmolLM2: a spoken question streamed in real time is
answered in text and speech, barge-in interrupts a playing reply and frees the engine at once, silence and
noise take no turn, and concurrent sessions keep their own conversations."""

from __future__ import annotations

import sys
import threading


from arbi_client.arbi.v1 import audio_service_pb2 as pb
from arbi_client.arbi.v1 import audio_types_pb2 as audio_pb
from tests.conftest import wait_for_idle_pool
from tests.e2e.audio_helpers import (
    LiveAudio,
    config,
    leading_silence_ms,
    noise,
    of_kind,
    replies_of,
    silence,
    spoken,
)
from tests.e2e.test_audio_transcribe import words

BARGE_IN_BOUND_MS = 300
QUESTION = "What is the capital of France?"


def converse(stub, live: LiveAudio, on_event=None, replies_wanted: int = 1) -> list[pb.ConverseResponse]:
    """Runs a session until `replies_wanted` replies are done, then closes the client's side."""
    events = []
    done_count = 0
    for event in stub.Converse(iter(live), timeout=240):
        events.append(event)
        if on_event is not None:
            on_event(event)
        if event.WhichOneof("event") == "response_done":
            done_count += 1
            if done_count == replies_wanted:
                live.close()
    return events


def metric(server, name: str, labels: dict[str, str] | None = None) -> float:
    return server.metrics.registry.get_sample_value(name, labels or {}) or 0.0


def test_spoken_question_is_answered_in_text_and_speech(audio_stub, served_smollm2) -> None:
    turns_before = metric(served_smollm2, "arbi_audio_turns_total", {"detection": "server_vad"})
    replies_before = metric(served_smollm2, "arbi_audio_voice_to_reply_seconds_count")
    live = LiveAudio(config(24_000, output_format=audio_pb.AudioFormat(sample_rate_hz=16_000)))
    live.say(silence(300, 24_000) + spoken(QUESTION, 24_000))
    events = converse(audio_stub, live)
    kinds = [event.WhichOneof("event") for event in events]
    assert kinds[0] == "session_created"
    assert kinds.index("speech_started") < kinds.index("speech_stopped") < kinds.index("input_committed")
    started, stopped = of_kind(events, "speech_started")[0], of_kind(events, "speech_stopped")[0]
    assert 200 <= started.audio_start_ms < stopped.audio_end_ms
    final = [t for t in of_kind(events, "input_transcript") if t.is_final]
    assert len(final) == 1 and {"capital", "france"} <= set(words(final[0].text))
    (reply,) = replies_of(events)
    assert reply.done.status == audio_pb.RESPONSE_STATUS_COMPLETED
    assert "Paris" in reply.text and reply.done.text == reply.text
    assert reply.done.usage.output_token_count > 0
    assert reply.done.audio_sent_ms == len(reply.audio) // 32  # 16 kHz PCM16: 32 bytes a ms
    back = audio_stub.Transcribe(pb.TranscribeRequest(audio=reply.audio, format=audio_pb.AudioFormat(
        encoding=audio_pb.AUDIO_ENCODING_PCM16, sample_rate_hz=16_000)))
    assert "paris" in words(back.text)
    assert metric(served_smollm2, "arbi_audio_turns_total", {"detection": "server_vad"}) == turns_before + 1
    assert metric(served_smollm2, "arbi_audio_voice_to_reply_seconds_count") == replies_before + 1
    assert metric(served_smollm2, "arbi_audio_recognition_seconds_count") >= 1
    assert metric(served_smollm2, "arbi_audio_synthesis_seconds_count") >= 1
    wait_for_idle_pool(served_smollm2.served.engine)


def test_barge_in_interrupts_the_playing_reply(audio_stub, served_smollm2) -> None:
    """The second question, spoken while the first reply plays, interrupts it within the bound on the
    input timeline; the engine request is gone at once and the next reply answers the second question."""
    live = LiveAudio(config(16_000))
    live.say(silence(300) + spoken("Tell me a story about a dragon."))
    second_question = silence(200) + spoken(QUESTION)
    engine = served_smollm2.served.engine
    freed_after_interrupt = []

    def on_event(event: pb.ConverseResponse) -> None:
        kind = event.WhichOneof("event")
        if kind == "response_audio" and not live.marks and "asked" not in freed_after_interrupt:
            freed_after_interrupt.append("asked")
            live.say(second_question, mark="second")
        if kind == "response_done" and event.response_done.status == audio_pb.RESPONSE_STATUS_INTERRUPTED:
            # The second question is still being spoken, so only the interrupted reply could hold blocks.
            wait_for_idle_pool(engine, timeout_s=1.0)
            freed_after_interrupt.append("freed")

    events = converse(audio_stub, live, on_event, replies_wanted=2)
    first, second = replies_of(events)
    assert first.done.status == audio_pb.RESPONSE_STATUS_INTERRUPTED
    assert second.done.status == audio_pb.RESPONSE_STATUS_COMPLETED
    assert "Paris" in second.text
    detected = of_kind(events, "speech_started")[1].audio_start_ms
    vad_delay_ms = detected - (live.marks["second"] + leading_silence_ms(second_question))
    reaction_ms = first.done.interrupted_at_input_ms - detected
    print(f"barge-in: VAD onset delay {vad_delay_ms:.0f} ms, reaction {reaction_ms} ms on the input timeline",
          file=sys.stderr)
    assert 0 <= reaction_ms <= BARGE_IN_BOUND_MS
    assert -100 <= vad_delay_ms <= 200
    # The history keeps what was played: a prefix of the generated text, never more.
    assert first.done.audio_played_ms <= first.done.audio_sent_ms
    assert first.text.replace(" ", "").startswith(first.done.text.replace(" ", ""))
    assert freed_after_interrupt == ["asked", "freed"]
    assert metric(served_smollm2, "arbi_audio_interruptions_total") >= 1
    wait_for_idle_pool(engine)


def test_silence_and_noise_take_no_turn(audio_stub) -> None:
    live = LiveAudio(config(16_000), realtime=False)
    live.say(silence(1500) + noise(2000, level=0.02) + noise(1000, level=0.1, seed=1) + silence(800))
    live.close()
    events = list(audio_stub.Converse(iter(live), timeout=60))
    kinds = {event.WhichOneof("event") for event in events}
    assert kinds == {"session_created"}


def test_four_concurrent_sessions_get_their_own_answers(audio_stub, served_smollm2) -> None:
    questions = {"France": "Paris", "Germany": "Berlin", "Japan": "Tokyo", "England": "London"}
    results: dict[str, list[pb.ConverseResponse]] = {}

    def session(country: str) -> None:
        live = LiveAudio(config(16_000), realtime=False)
        live.say(silence(300) + spoken(f"What is the capital of {country}?") + silence(700))
        live.close()
        results[country] = list(audio_stub.Converse(iter(live), timeout=240))

    threads = [threading.Thread(target=session, args=(country,)) for country in questions]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for country, capital in questions.items():
        (reply,) = replies_of(results[country])
        final = [t.text for t in of_kind(results[country], "input_transcript") if t.is_final]
        assert country.lower() in words(final[0]), final
        assert capital in reply.text, (country, reply.text)
    wait_for_idle_pool(served_smollm2.served.engine)
