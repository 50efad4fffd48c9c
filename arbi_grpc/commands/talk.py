"""`arbi-serve talk`: speak a WAV file to a running server over AudioService.Converse, print the events,
and write the reply audio to a WAV file.

The file is streamed at the pace of playback (like a microphone), or as fast as the server reads with
`--fast`; the client then closes its side, and the server answers the last turn before it ends the
stream. Needs grpcio alone (the Python client), so it works on a client-only install.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

DEFAULT_URL = "127.0.0.1:50051"
_TOKEN_ENV = "ARBI_GENERATE_TOKEN"
REPLY_RATE_HZ = 24_000


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("talk", help="speak a WAV file to a running server and save its spoken reply",
                                 description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default=DEFAULT_URL, help=f"server address (default {DEFAULT_URL})")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--input", type=Path, help="mono 16-bit PCM WAV at 16000 or 24000 Hz to speak")
    source.add_argument("--mic", action="store_true", help="speak into the microphone instead of a file")
    parser.add_argument("--output", type=Path, required=True, help="WAV file to write the reply audio to")
    parser.add_argument("--json", action="store_true", help="print each event as one line of JSON")
    parser.add_argument("--fast", action="store_true", help="stream the file faster than real time")
    parser.add_argument("--instructions", default="", help="system prompt of the conversation")
    parser.add_argument("--token", default=os.environ.get(_TOKEN_ENV, ""),
                        help=f"the server's generate token, when it requires one (default: ${_TOKEN_ENV})")
    parser.set_defaults(handler=_talk)


def _talk(args: argparse.Namespace) -> int:
    import grpc
    from google.protobuf import json_format

    from arbi_client import ArbiClient
    from arbi_client.arbi.v1 import audio_service_pb2 as audio_pb
    from arbi_client.audio import CONVERSE_INPUT_RATES_HZ, Pcm16, audio_requests, pcm16_format, read_wav, write_wav

    if args.mic:
        raise NotImplementedError("talk --mic: microphone capture is not wired in this build; record a WAV "
                                  "file and pass it with --input")
    question = read_wav(args.input)
    if question.sample_rate_hz not in CONVERSE_INPUT_RATES_HZ:
        print(f"arbi-serve talk: {args.input} is at {question.sample_rate_hz} Hz; need 16000 or 24000 "
              f"(convert with: sox IN -r 16000 OUT.wav)", file=sys.stderr)
        return 2
    config = audio_pb.ConverseConfig(input_format=pcm16_format(question.sample_rate_hz),
                                     output_format=pcm16_format(REPLY_RATE_HZ), instructions=args.instructions)
    reply_audio = bytearray()
    with ArbiClient(args.url, token=args.token or None) as client:
        try:
            for event in client.converse(config, audio_requests(question, realtime=not args.fast)):
                if event.WhichOneof("event") == "response_audio":
                    reply_audio += event.response_audio.audio
                print(json_format.MessageToJson(event, indent=None) if args.json else _line(event), flush=True)
        except grpc.RpcError as error:
            print(f"arbi-serve talk: {error.code().name}: {error.details()}", file=sys.stderr)
            return 1
    write_wav(args.output, Pcm16(bytes(reply_audio), REPLY_RATE_HZ))
    if not args.json:
        print(f"reply audio: {args.output} ({len(reply_audio) // (2 * REPLY_RATE_HZ // 1000)} ms)")
    return 0


def _line(event) -> str:
    """One human-readable line per event (audio chunks by their length)."""
    kind = event.WhichOneof("event")
    body = getattr(event, kind)
    if kind == "response_audio":
        return f"{kind}: {len(body.audio)} bytes at {body.start_ms} ms" + (f" {body.text!r}" if body.text else "")
    if kind == "response_text_delta":
        return f"{kind}: {body.delta!r}"
    if kind == "input_transcript":
        return f"{kind}{' (final)' if body.is_final else ''}: {body.text!r}"
    return f"{kind}: {' '.join(str(body).split())}"
