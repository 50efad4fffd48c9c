"""The serving benchmark's load: fixed-length random prompts, their arrival plan (a concurrency or a Poisson
request rate), client processes that stream them from a server over gRPC (`Generate`) or through the gateway
(REST `/v1/completions`, streamed as server-sent events, one HTTP connection per request), and the statistics of
what came back.

Prompts are fresh random token ids on every run (a seed drawn from the OS unless one is given), so prefix-cache
hits cannot flatter a figure. Each client process sends its share of the requests from threads, one stream
each, and records for every request when it was sent, when its first and last tokens arrived and how many
tokens it got. All processes start at one instant of the machine's monotonic clock. Imports no torch.
"""

from __future__ import annotations

import http.client
import json
import math
import random
import secrets
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from multiprocessing import get_context

import grpc

from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_client.arbi.v1 import generation_types_pb2 as types_pb

START_DELAY_S = 2.0  # time for every client process to connect before the common start
PATHS = ("grpc", "gateway")  # how the clients reach the server: its gRPC port, or the gateway's HTTP one


@dataclass(frozen=True)
class LoadPlan:
    """`prompts` (token ids), each to get `output_len` tokens; `arrival_offsets_s[i]` is when request i may be sent
    after the start; with `concurrency` > 0 at most that many are in flight (a closed loop)."""

    prompts: list[list[int]]
    output_len: int
    arrival_offsets_s: list[float]
    concurrency: int

    @property
    def num_output_tokens(self) -> int:
        return self.output_len * len(self.prompts)

    def share(self, index: int, num_shares: int) -> LoadPlan:
        """The requests of client process `index` of `num_shares`: every num_shares-th one, with its part of the
        concurrency."""
        concurrency = 0
        if self.concurrency:
            concurrency = self.concurrency // num_shares + (index < self.concurrency % num_shares)
        return LoadPlan(self.prompts[index::num_shares], self.output_len, self.arrival_offsets_s[index::num_shares],
                        concurrency)


def make_plan(count: int, prompt_len: int, output_len: int, vocab_size: int, *, concurrency: int = 0,
              rate_per_s: float = math.inf, seed: int | None = None) -> LoadPlan:
    """`count` prompts of `prompt_len` random ids below `vocab_size`; all may start at once (a closed loop of
    `concurrency` when > 0), or they arrive as a Poisson process of `rate_per_s` (the first at once)."""
    if concurrency < 0 or count <= 0 or prompt_len <= 0 or output_len <= 0:
        raise ValueError(f"count, prompt and output lengths must be > 0 and concurrency >= 0, got "
                         f"{count}, {prompt_len}, {output_len}, {concurrency}")
    generator = random.Random(secrets.randbits(64) if seed is None else seed)
    prompts = [[generator.randrange(vocab_size) for _ in range(prompt_len)] for _ in range(count)]
    if math.isinf(rate_per_s):
        offsets = [0.0] * count
    else:
        gaps = [0.0] + [generator.expovariate(rate_per_s) for _ in range(count - 1)]
        offsets = [sum(gaps[: i + 1]) for i in range(count)]
    return LoadPlan(prompts, output_len, offsets, concurrency)


@dataclass(frozen=True)
class RequestTiming:
    """Monotonic seconds a request was sent, got its first and its last token; tokens it got; its error if any."""

    sent_s: float
    first_token_s: float
    finished_s: float
    num_tokens: int
    error: str = ""


def _stream_one(stub: pb_grpc.GenerateServiceStub, prompt: list[int], output_len: int) -> RequestTiming:
    request = pb.GenerateRequest(
        token_ids=types_pb.TokenIds(ids=prompt),
        sampling=types_pb.SamplingParameters(temperature=0.0),
        stopping=types_pb.StoppingCriteria(max_output_tokens=output_len, ignore_eos=True),
    )
    sent = time.monotonic()
    first, count = 0.0, 0
    try:
        for response in stub.Generate(request, timeout=3600):
            if response.tokens and not count:
                first = time.monotonic()
            count += len(response.tokens)
    except grpc.RpcError as error:
        return RequestTiming(sent, first, time.monotonic(), count, f"{error.code().name}: {error.details()}")
    return RequestTiming(sent, first, time.monotonic(), count)


def _stream_one_http(url: str, prompt: list[int], output_len: int) -> RequestTiming:
    """One streamed completion through the gateway at `url` (http://host:port): the first token is the first
    chunk with a choice (the gateway sends one for the first upstream response, which carries the first token),
    the count is the final usage chunk's."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    body = json.dumps({"model": "", "prompt": prompt, "temperature": 0, "max_tokens": output_len,
                       "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}})
    connection = http.client.HTTPConnection(host, int(port), timeout=3600)
    sent = time.monotonic()
    first, count, error = 0.0, 0, ""
    try:
        connection.request("POST", "/v1/completions", body, {"content-type": "application/json"})
        response = connection.getresponse()
        if response.status != 200:
            return RequestTiming(sent, first, time.monotonic(), 0, f"HTTP {response.status}: {response.read()[:300]!r}")
        for line in response:
            if not line.startswith(b"data: {"):
                continue
            event = json.loads(line[6:])
            if "error" in event:
                error = f"stream error: {event['error']}"
            elif event.get("choices") and not first:
                first = time.monotonic()
            elif event.get("usage"):
                count = event["usage"]["completion_tokens"]
    except (OSError, http.client.HTTPException) as failure:
        return RequestTiming(sent, first, time.monotonic(), count, f"{type(failure).__name__}: {failure}")
    finally:
        connection.close()
    return RequestTiming(sent, first, time.monotonic(), count, error)


def run_share(target: str, plan: LoadPlan, start_at: float, path: str = "grpc") -> list[RequestTiming]:
    """Sends `plan`'s requests from threads (one process's share), from `start_at`: to the server's gRPC address
    `target`, or with `path` "gateway" to the gateway at the URL `target`."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {', '.join(PATHS)}, got {path!r}")
    channel = None
    stream: Callable[[list[int], int], RequestTiming] = partial(_stream_one_http, target)
    if path == "grpc":
        channel = grpc.insecure_channel(target, options=[("grpc.max_receive_message_length", 64 << 20)])
        grpc.channel_ready_future(channel).result(timeout=60)
        stream = partial(_stream_one, pb_grpc.GenerateServiceStub(channel))
    in_flight = threading.Semaphore(plan.concurrency or len(plan.prompts))

    def send(index: int) -> RequestTiming:
        time.sleep(max(0.0, start_at + plan.arrival_offsets_s[index] - time.monotonic()))
        with in_flight:
            return stream(plan.prompts[index], plan.output_len)

    workers = plan.concurrency or len(plan.prompts)
    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        timings = list(pool.map(send, range(len(plan.prompts))))
    if channel is not None:
        channel.close()
    return timings


def drive(target: str, plan: LoadPlan, num_processes: int, path: str = "grpc") -> tuple[list[RequestTiming], float]:
    """Runs `plan` against `target` (see `run_share`) from `num_processes` client processes; the timings and the
    start instant."""
    num_processes = max(1, min(num_processes, len(plan.prompts)))
    start_at = time.monotonic() + START_DELAY_S
    with ProcessPoolExecutor(num_processes, mp_context=get_context("spawn")) as pool:
        futures = [pool.submit(run_share, target, plan.share(i, num_processes), start_at, path)
                   for i in range(num_processes)]
        return [timing for future in futures for timing in future.result()], start_at


@dataclass(frozen=True)
class LoadStats:
    requests: int
    failed: int
    seconds: float
    output_tokens_per_s: float
    ttft_p50_ms: float
    ttft_p99_ms: float
    tpot_p50_ms: float
    tpot_p99_ms: float


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile (NaN for no values)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def summarize(timings: list[RequestTiming], start_s: float) -> LoadStats:
    """Output tok/s over the span from the start to the last token; TTFT from each request's send; TPOT over the
    tokens after the first of each request that got more than one."""
    done = [t for t in timings if not t.error]
    seconds = max((t.finished_s for t in timings), default=start_s) - start_s
    ttfts = [(t.first_token_s - t.sent_s) * 1e3 for t in done if t.num_tokens]
    tpots = [(t.finished_s - t.first_token_s) * 1e3 / (t.num_tokens - 1) for t in done if t.num_tokens > 1]
    tokens = sum(t.num_tokens for t in done)
    return LoadStats(len(timings), len(timings) - len(done), seconds, tokens / seconds if seconds > 0 else 0.0,
                     percentile(ttfts, 0.5), percentile(ttfts, 0.99), percentile(tpots, 0.5), percentile(tpots, 0.99))
