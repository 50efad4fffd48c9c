"""The asyncio client: the calls of `ArbiClient` as coroutines and async iterators (grpc.aio)."""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Sequence

import grpc
from google.protobuf import field_mask_pb2

from arbi_client.arbi.v1 import admin_service_pb2 as admin_pb
from arbi_client.arbi.v1 import admin_service_pb2_grpc as admin_grpc
from arbi_client.arbi.v1 import admin_types_pb2 as admin_types
from arbi_client.arbi.v1 import audio_service_pb2 as audio_pb
from arbi_client.arbi.v1 import audio_service_pb2_grpc as audio_grpc
from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_client.channel_options import CHANNEL_OPTIONS
from arbi_client.requests import Messages, bearer, chat_input, chat_request
from arbi_client.tls import PLAINTEXT, ChannelTls, open_aio_channel


class AsyncArbiClient:
    """A grpc.aio channel to one server; use as an async context manager or await `close()`."""

    def __init__(self, target: str, *, token: str | None = None, admin_token: str | None = None,
                 channel: grpc.aio.Channel | None = None, tls: ChannelTls = PLAINTEXT) -> None:
        self._channel = channel or open_aio_channel(target, tls, CHANNEL_OPTIONS)
        self._generate = pb_grpc.GenerateServiceStub(self._channel)
        self._admin = admin_grpc.AdminServiceStub(self._channel)
        self._audio = audio_grpc.AudioServiceStub(self._channel)
        self._token = bearer(token)
        self._admin_token = bearer(admin_token)

    async def __aenter__(self) -> AsyncArbiClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._channel.close()

    # -- GenerateService ---------------------------------------------------------------------------

    def generate(self, request: pb.GenerateRequest, timeout_s: float | None = None
                 ) -> AsyncIterator[pb.GenerateResponse]:
        """The response stream of one generation."""
        return self._generate.Generate(request, timeout=timeout_s, metadata=self._token)

    async def stream_chat(self, messages: Messages, *, model: str = "", max_output_tokens: int | None = None,
                          temperature: float | None = None, seed: int | None = None) -> AsyncIterator[str]:
        """The assistant's reply text to `messages`, piece by piece as it is generated."""
        request = chat_request(messages, model=model, max_output_tokens=max_output_tokens,
                               temperature=temperature, seed=seed)
        async for response in self.generate(request):
            if response.text:
                yield response.text

    def session(self, requests: AsyncIterable[pb.SessionRequest] | None = None
                ) -> grpc.aio.StreamStreamCall:
        """A Session stream: pass an async iterable of requests, or `write()` them on the returned call
        (then `done_writing()`); read the server's messages with `async for` or `read()`."""
        return self._generate.Session(requests, metadata=self._token)

    async def tokenize(self, prompt: str | None = None, *, messages: Messages | None = None,
                       model: str = "") -> list[int]:
        request = pb.TokenizeRequest(model=model, prompt=prompt) if messages is None else \
            pb.TokenizeRequest(model=model, chat=chat_input(messages))
        return list((await self._generate.Tokenize(request, metadata=self._token)).token_ids)

    async def detokenize(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False,
                         model: str = "") -> str:
        request = pb.DetokenizeRequest(model=model, token_ids=token_ids,
                                       skip_special_tokens=skip_special_tokens)
        return (await self._generate.Detokenize(request, metadata=self._token)).text

    async def count_tokens(self, prompt: str | None = None, *, messages: Messages | None = None,
                           model: str = "") -> pb.CountTokensResponse:
        request = pb.CountTokensRequest(model=model, prompt=prompt) if messages is None else \
            pb.CountTokensRequest(model=model, chat=chat_input(messages))
        return await self._generate.CountTokens(request, metadata=self._token)

    # -- AudioService ------------------------------------------------------------------------------

    def converse(self, config: audio_pb.ConverseConfig, requests: AsyncIterable[audio_pb.ConverseRequest],
                 timeout_s: float | None = None) -> AsyncIterator[audio_pb.ConverseResponse]:
        """A spoken conversation: sends `config`, then `requests` (audio chunks from a microphone, text and
        controls, as they come), and yields the server's events as they arrive."""
        return self._audio.Converse(_after_config(config, requests), timeout=timeout_s, metadata=self._token)

    async def transcribe(self, audio: bytes, *, language: str = "") -> str:
        """The text of a WAV file's speech."""
        request = audio_pb.TranscribeRequest(audio=audio, language=language)
        return (await self._audio.Transcribe(request, metadata=self._token)).text

    async def synthesize(self, text: str, *, voice: str = "", sample_rate_hz: int = 24_000
                         ) -> AsyncIterator[bytes]:
        """The speech of `text` as PCM16 mono chunks, sentence by sentence as synthesized."""
        request = audio_pb.SynthesizeRequest(text=text, voice=voice)
        request.output_format.sample_rate_hz = sample_rate_hz
        async for response in self._audio.Synthesize(request, metadata=self._token):
            yield response.audio

    # -- GenerateService: models and tokens ---------------------------------------------------------

    async def list_served_models(self) -> list[admin_types.ModelInfo]:
        """The models this server generates with (the resident one, or none)."""
        response = await self._generate.ListServedModels(pb.ListServedModelsRequest(), metadata=self._token)
        return list(response.models)

    # -- AdminService ------------------------------------------------------------------------------

    async def get_server_info(self) -> admin_pb.GetServerInfoResponse:
        return await self._admin.GetServerInfo(admin_pb.GetServerInfoRequest(), metadata=self._admin_token)

    async def check_liveness(self) -> admin_pb.CheckLivenessResponse:
        return await self._admin.CheckLiveness(admin_pb.CheckLivenessRequest(), metadata=self._admin_token)

    async def check_readiness(self) -> admin_pb.CheckReadinessResponse:
        return await self._admin.CheckReadiness(admin_pb.CheckReadinessRequest(), metadata=self._admin_token)

    async def list_models(self) -> list[admin_types.AvailableModel]:
        response = await self._admin.ListModels(admin_pb.ListModelsRequest(), metadata=self._admin_token)
        return list(response.models)

    async def load_model(self, model: str) -> admin_types.ModelInfo:
        request = admin_pb.LoadModelRequest(model=model)
        return (await self._admin.LoadModel(request, metadata=self._admin_token)).model

    async def unload_model(self, drain_timeout_ms: int = 0, model: str = "") -> admin_pb.UnloadModelResponse:
        """Unloads the resident model `model` (empty: the default chat model)."""
        request = admin_pb.UnloadModelRequest(drain_timeout_ms=drain_timeout_ms, model=model)
        return await self._admin.UnloadModel(request, metadata=self._admin_token)

    async def switch_model(self, model: str, drain_timeout_ms: int = 0,
                     replace_model: str = "") -> admin_pb.SwitchModelResponse:
        """Replaces the resident chat model `replace_model` (empty: the default) with `model`."""
        request = admin_pb.SwitchModelRequest(model=model, drain_timeout_ms=drain_timeout_ms,
                                              replace_model=replace_model)
        return await self._admin.SwitchModel(request, metadata=self._admin_token)

    async def get_memory_report(self, model: str = "") -> admin_pb.GetMemoryReportResponse:
        request = admin_pb.GetMemoryReportRequest(model=model)
        return await self._admin.GetMemoryReport(request, metadata=self._admin_token)

    async def list_running_requests(self) -> list[admin_types.RunningRequest]:
        request = admin_pb.ListRunningRequestsRequest()
        return list((await self._admin.ListRunningRequests(request, metadata=self._admin_token)).requests)

    async def cancel_running_request(self, request_id: str) -> None:
        request = admin_pb.CancelRunningRequestRequest(request_id=request_id)
        await self._admin.CancelRunningRequest(request, metadata=self._admin_token)

    async def get_runtime_config(self) -> admin_types.RuntimeConfig:
        request = admin_pb.GetRuntimeConfigRequest()
        return (await self._admin.GetRuntimeConfig(request, metadata=self._admin_token)).config

    async def update_runtime_config(self, **changes: int) -> admin_types.RuntimeConfig:
        """Changes the named settings (e.g. `max_step_tokens=256`); returns the settings in force."""
        request = admin_pb.UpdateRuntimeConfigRequest(
            config=admin_types.RuntimeConfig(**changes), update_mask=field_mask_pb2.FieldMask(paths=changes)
        )
        return (await self._admin.UpdateRuntimeConfig(request, metadata=self._admin_token)).config

    async def drain_server(self, timeout_ms: int = 0) -> int:
        """Stops admitting; returns how many requests were still in flight after up to `timeout_ms`."""
        request = admin_pb.DrainServerRequest(timeout_ms=timeout_ms)
        return (await self._admin.DrainServer(request, metadata=self._admin_token)).remaining_request_count

    async def resume_server(self) -> None:
        await self._admin.ResumeServer(admin_pb.ResumeServerRequest(), metadata=self._admin_token)


async def _after_config(config: audio_pb.ConverseConfig, requests: AsyncIterable[audio_pb.ConverseRequest]
                        ) -> AsyncIterator[audio_pb.ConverseRequest]:
    yield audio_pb.ConverseRequest(config=config)
    async for request in requests:
        yield request
