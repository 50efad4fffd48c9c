// Holds one spoken conversation with an arbi-serve server over AudioService.Converse (a bidirectional
// stream). It sends the session's config (server VAD), then a WAV file in 20 ms chunks at the pace of
// playback (all at once with --fast), then silence at that pace, like an open microphone, so the server's
// VAD hears the turn end. Each server event is printed as one line of JSON. The reply audio goes to a WAV
// file instead of a loudspeaker, so each chunk counts as played once it is written, and the example
// reports that to the server. Once the reply is done, the example closes its side and the server ends the
// stream.
//
// Usage: node dist/src/converse.js [--fast] HOST:PORT QUESTION.wav REPLY.wav
// QUESTION.wav is mono 16-bit PCM at 16000 or 24000 Hz; REPLY.wav is written at 24000 Hz.
// ARBI_GENERATE_TOKEN is sent with the call when the server requires one.

import { readFileSync, writeFileSync } from "node:fs";
import { setTimeout as sleep } from "node:timers/promises";

import { type ClientDuplexStream, credentials, Metadata, type ServiceError } from "@grpc/grpc-js";

import { AudioServiceClient, type ConverseRequest, type ConverseResponse } from "../gen/arbi/v1/audio_service";
import { AudioEncoding, type AudioFormat, responseStatusToJSON } from "../gen/arbi/v1/audio_types";
import { type Pcm16, readWav, wavBytes } from "./wav";

const CHUNK_MS = 20;
const INPUT_RATES_HZ = [16_000, 24_000];
const REPLY_RATE_HZ = 24_000;
const DEADLINE_MS = 240_000;
const USAGE = "usage: node dist/src/converse.js [--fast] HOST:PORT QUESTION.wav REPLY.wav";

type Converse = ClientDuplexStream<ConverseRequest, ConverseResponse>;

function pcm16(sampleRateHz: number): AudioFormat {
  return { encoding: AudioEncoding.AUDIO_ENCODING_PCM16, sampleRateHz };
}

function bearer(token: string): Metadata {
  const metadata = new Metadata();
  if (token !== "") {
    metadata.set("authorization", `Bearer ${token}`);
  }
  return metadata;
}

type Send = (request: Partial<ConverseRequest>) => Promise<void>;

/** A `send` for the call: writes one request, waiting while the stream's buffer is full (until the call ends). */
function sender(stream: Converse): Send {
  const callEnded = new Promise<void>((resolve) => stream.once("status", () => resolve()));
  return async (request) => {
    if (!stream.write(request)) {
      await Promise.race([new Promise((resolve) => stream.once("drain", resolve)), callEnded]);
    }
  };
}

/**
 * Streams the question, then silence, in CHUNK_MS chunks until `stopped()`; then closes the client's side.
 * Chunks go out at the pace of playback on the input timeline, except the question's with `fast`.
 */
async function streamMicrophone(stream: Converse, send: Send, question: Pcm16, fast: boolean, stopped: () => boolean) {
  const chunkBytes = (2 * question.sampleRateHz * CHUNK_MS) / 1000;
  const silence = Buffer.alloc(chunkBytes);
  let timelineStart = performance.now(); // wall-clock time of input timeline 0, for pacing
  for (let offset = 0, sentMs = 0; !stopped(); offset += chunkBytes, sentMs += CHUNK_MS) {
    const inQuestion = offset < question.samples.length;
    if (fast && inQuestion) {
      timelineStart = performance.now() - sentMs;
    } else {
      await sleep(Math.max(0, timelineStart + sentMs - performance.now()));
    }
    if (stopped()) {
      break;
    }
    const chunk = inQuestion ? question.samples.subarray(offset, offset + chunkBytes) : silence;
    await send({ audio: Buffer.concat([chunk, silence.subarray(chunk.length)]) });
  }
  stream.end();
}

/** The event's type (the proto field name) and its key fields, for one JSON line. */
function describe(event: ConverseResponse): Record<string, unknown> {
  if (event.sessionCreated) {
    return { type: "session_created", session_id: event.sessionCreated.sessionId };
  }
  if (event.sessionUpdated) {
    return { type: "session_updated" };
  }
  if (event.speechStarted) {
    const { itemId, audioStartMs } = event.speechStarted;
    return { type: "speech_started", item_id: itemId, audio_start_ms: audioStartMs };
  }
  if (event.speechStopped) {
    const { itemId, audioEndMs } = event.speechStopped;
    return { type: "speech_stopped", item_id: itemId, audio_end_ms: audioEndMs };
  }
  if (event.inputCommitted) {
    const { itemId, audioDurationMs } = event.inputCommitted;
    return { type: "input_committed", item_id: itemId, audio_duration_ms: audioDurationMs };
  }
  if (event.inputTranscript) {
    const { itemId, text, isFinal } = event.inputTranscript;
    return { type: "input_transcript", item_id: itemId, text, is_final: isFinal };
  }
  if (event.responseCreated) {
    const { responseId, itemId } = event.responseCreated;
    return { type: "response_created", response_id: responseId, item_id: itemId };
  }
  if (event.responseTextDelta) {
    const { responseId, delta } = event.responseTextDelta;
    return { type: "response_text_delta", response_id: responseId, delta };
  }
  if (event.responseAudio) {
    const { responseId, audio, text, startMs } = event.responseAudio;
    return { type: "response_audio", response_id: responseId, start_ms: startMs, audio_bytes: audio.length, text };
  }
  if (event.responseDone) {
    const done = event.responseDone;
    return {
      type: "response_done",
      response_id: done.responseId,
      status: responseStatusToJSON(done.status),
      text: done.text,
      audio_sent_ms: done.audioSentMs,
      output_token_count: done.usage?.outputTokenCount ?? 0,
      ...(done.error !== undefined && { error: { code: done.error.code, message: done.error.message } }),
    };
  }
  if (event.error) {
    return { type: "error", code: event.error.code, message: event.error.message };
  }
  return { type: "unknown" };
}

/** Runs the conversation; returns the reply audio once the server has ended the stream. */
async function converse(client: AudioServiceClient, question: Pcm16, fast: boolean): Promise<Buffer> {
  const stream = client.converse(bearer(process.env.ARBI_GENERATE_TOKEN ?? ""), { deadline: Date.now() + DEADLINE_MS });
  const send = sender(stream);
  await send({
    config: {
      model: "",
      inputFormat: pcm16(question.sampleRateHz),
      outputFormat: pcm16(REPLY_RATE_HZ),
      voice: "",
      instructions: "",
      turnDetection: { serverVad: {} },
      sampling: undefined,
      stopping: undefined,
    },
  });
  let replyDone = false;
  let streamOver = false;
  const microphone = streamMicrophone(stream, send, question, fast, () => replyDone || streamOver);
  const reply: Buffer[] = [];
  try {
    for await (const event of stream as AsyncIterable<ConverseResponse>) {
      process.stdout.write(`${JSON.stringify(describe(event))}\n`);
      if (event.responseAudio) {
        const { responseId, audio, startMs } = event.responseAudio;
        reply.push(audio);
        const playedMs = startMs + Math.floor(audio.length / ((2 * REPLY_RATE_HZ) / 1000));
        await send({ playback: { responseId, playedMs } });
      }
      replyDone ||= event.responseDone !== undefined;
    }
  } finally {
    streamOver = true;
    await microphone;
  }
  if (!replyDone) {
    throw new Error("the server ended the stream without a reply");
  }
  return Buffer.concat(reply);
}

async function main(argv: string[]): Promise<number> {
  const fast = argv.includes("--fast");
  const positional = argv.filter((argument) => argument !== "--fast");
  if (positional.length !== 3) {
    console.error(USAGE);
    return 2;
  }
  const [target, questionPath, replyPath] = positional;
  let question: Pcm16;
  try {
    question = readWav(readFileSync(questionPath));
  } catch (error) {
    console.error(`error: ${questionPath}: ${(error as Error).message}`);
    return 2;
  }
  if (!INPUT_RATES_HZ.includes(question.sampleRateHz)) {
    console.error(`error: ${questionPath} is at ${question.sampleRateHz} Hz; need 16000 or 24000 (sox IN -r 16000 OUT.wav)`);
    return 2;
  }
  const client = new AudioServiceClient(target, credentials.createInsecure());
  try {
    const reply = await converse(client, question, fast);
    writeFileSync(replyPath, wavBytes({ samples: reply, sampleRateHz: REPLY_RATE_HZ }));
    console.error(`reply audio: ${replyPath} (${Math.round(reply.length / ((2 * REPLY_RATE_HZ) / 1000))} ms)`);
    return 0;
  } catch (error) {
    const status = error as Partial<ServiceError>;
    console.error(status.code !== undefined ? `error: code ${status.code}: ${status.details}` : `error: ${status.message}`);
    return 1;
  } finally {
    client.close();
  }
}

main(process.argv.slice(2)).then((code) => {
  process.exitCode = code;
});
