"""Speculative replies on the real server with SmolLM2: at a pause of the user's speech the reply starts
held; when the pause ends the turn, the client sees the turn's events and then the reply's, in order; when
the user speaks again first, the held reply is discarded, its engine request freed at once, and the whole
turn is answered; a stream closed in a pause answers the paused turn."""

from __future__ import annotations

import threading
import time

from arbi_client.arbi.v1 import audio_service_pb2 as pb
from arbi_client.arbi.v1 import audio_types_pb2 as audio_pb
from tests.conftest import wait_for_idle_pool
from tests.e2e.audio_helpers import LiveAudio, config, of_kind, replies_of, silence, spoken
from tests.e2e.test_audio_converse import QUESTION, converse, metric
from tests.e2e.test_audio_transcribe import words

LONG_SILENCE_MS = 3000  # the turn's hangover: time enough for the held reply to start on a loaded machine
SPECULATIVE = "arbi_audio_speculative_replies_total"


def long_hangover() -> pb.ConverseConfig:
    return config(16_000, turn_detection=audio_pb.TurnDetection(
        server_vad=audio_pb.ServerVadTurnDetection(silence_duration_ms=LONG_SILENCE_MS)))


def test_a_held_reply_goes_out_after_its_turn_in_order(audio_stub, served_smollm2) -> None:
    kept_before = metric(served_smollm2, SPECULATIVE, {"outcome": "kept"})
    live = LiveAudio(long_hangover())
    live.say(silence(300) + spoken(QUESTION))
    events = converse(audio_stub, live)
    kinds = [event.WhichOneof("event") for event in events]
    final_index = next(index for index, event in enumerate(events)
                       if kinds[index] == "input_transcript" and event.input_transcript.is_final)
    assert (kinds.index("speech_started") < kinds.index("speech_stopped") < kinds.index("input_committed")
            < final_index < kinds.index("response_created") < kinds.index("response_text_delta")
            < kinds.index("response_audio") < kinds.index("response_done"))
    assert metric(served_smollm2, SPECULATIVE, {"outcome": "kept"}) == kept_before + 1
    (reply,) = replies_of(events)
    assert reply.done.status == audio_pb.RESPONSE_STATUS_COMPLETED and "Paris" in reply.text
    # The reply's audio timeline starts when it is released, not when it was synthesized.
    assert of_kind(events, "response_audio")[0].start_ms == 0 and reply.done.audio_sent_ms > 0
    wait_for_idle_pool(served_smollm2.served.engine)


def test_speech_resumed_after_a_pause_discards_the_held_reply(audio_stub, served_smollm2) -> None:
    """The question is spoken once the held reply to its preamble ("Tell me") runs; the held
    request is gone at once, while the question is still being spoken, and the whole turn is answered
    once."""
    engine = served_smollm2.served.engine
    resumed_before = metric(served_smollm2, SPECULATIVE, {"outcome": "resumed"})
    live = LiveAudio(long_hangover())
    live.say(silence(300) + spoken("Tell me"))
    checks: list[str] = []

    def resume_once_the_held_reply_runs() -> None:
        try:
            deadline = time.monotonic() + 30
            while engine.stats().num_running == 0:
                assert time.monotonic() < deadline, "no held reply started at the pause"
                time.sleep(0.005)
            checks.append("held reply running")
            live.say(spoken(QUESTION))
            while metric(served_smollm2, SPECULATIVE, {"outcome": "resumed"}) == resumed_before:
                assert time.monotonic() < deadline, "the held reply was not discarded"
                time.sleep(0.005)
            wait_for_idle_pool(engine, timeout_s=1.0)
            checks.append("freed")
        except BaseException as error:  # noqa: BLE001 - reported by the test's own thread below
            checks.append(f"failed: {error}")

    watcher = threading.Thread(target=resume_once_the_held_reply_runs)
    watcher.start()
    events = converse(audio_stub, live)
    watcher.join()
    assert checks == ["held reply running", "freed"]
    assert len(of_kind(events, "speech_stopped")) == 1
    final = [t for t in of_kind(events, "input_transcript") if t.is_final]
    # One turn of both parts (tiny.en may mishear "France" after the long pause, so only these words).
    assert len(final) == 1 and {"tell", "capital"} <= set(words(final[0].text))
    (reply,) = replies_of(events)
    assert reply.done.status == audio_pb.RESPONSE_STATUS_COMPLETED and reply.text
    wait_for_idle_pool(engine)


def test_closing_the_stream_in_a_pause_answers_the_paused_turn(audio_stub, served_smollm2) -> None:
    """The client closes its side 200 ms into a pause (answered speculatively, not yet a turn): the speech
    is the last turn, answered once, and no speculative request is left behind."""
    turns_before = metric(served_smollm2, "arbi_audio_turns_total", {"detection": "end_of_stream"})
    live = LiveAudio(long_hangover(), realtime=False)
    live.say(silence(300) + spoken(QUESTION) + silence(200))
    live.close()
    events = list(audio_stub.Converse(iter(live), timeout=240))
    assert metric(served_smollm2, "arbi_audio_turns_total", {"detection": "end_of_stream"}) == turns_before + 1
    final = [t for t in of_kind(events, "input_transcript") if t.is_final]
    assert len(final) == 1 and {"capital", "france"} <= set(words(final[0].text))
    (reply,) = replies_of(events)
    assert reply.done.status == audio_pb.RESPONSE_STATUS_COMPLETED and "Paris" in reply.text
    wait_for_idle_pool(served_smollm2.served.engine)
