"""The blocking client: GenerateService, AudioService and AdminService calls with typed arguments and results.

`token` is sent on generate calls (when the server requires one), `admin_token` on admin calls. Errors
are `grpc.RpcError`; `grpc_status.rpc_status.from_call(error)` gives the `google.rpc.Status` with its
ErrorInfo / BadRequest details.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence

import grpc
from google.protobuf import field_mask_pb2

from arbi_client.arbi.v1 import admin_service_pb2 as admin_pb
from arbi_client.arbi.v1 import admin_service_pb2_grpc as admin_grpc
from arbi_client.arbi.v1 import admin_types_pb2 as admin_types
from arbi_client.arbi.v1 import audio_service_pb2 as audio_pb
from arbi_client.arbi.v1 import audio_service_pb2_grpc as audio_grpc
from arbi_client.arbi.v1 import generate_service_pb2 as pb
from arbi_client.arbi.v1 import generate_service_pb2_grpc as pb_grpc
from arbi_client.audio import converse_requests
from arbi_client.channel_options import CHANNEL_OPTIONS
from arbi_client.requests import Messages, bearer, chat_input, chat_request
from arbi_client.tls import PLAINTEXT, ChannelTls, open_channel


class ArbiClient:
    """A channel to one server; use as a context manager or call `close()`."""

    def __init__(self, target: str, *, token: str | None = None, admin_token: str | None = None,
                 channel: grpc.Channel | None = None, tls: ChannelTls = PLAINTEXT) -> None:
        self._channel = channel or open_channel(target, tls, CHANNEL_OPTIONS)
        self._generate = pb_grpc.GenerateServiceStub(self._channel)
        self._admin = admin_grpc.AdminServiceStub(self._channel)
        self._audio = audio_grpc.AudioServiceStub(self._channel)
        self._token = bearer(token)
        self._admin_token = bearer(admin_token)

    def __enter__(self) -> ArbiClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    # -- GenerateService ---------------------------------------------------------------------------

    def generate(self, request: pb.GenerateRequest, timeout_s: float | None = None
                 ) -> Iterator[pb.GenerateResponse]:
        """The response stream of one generation."""
        return self._generate.Generate(request, timeout=timeout_s, metadata=self._token)

    def stream_chat(self, messages: Messages, *, model: str = "", max_output_tokens: int | None = None,
                    temperature: float | None = None, seed: int | None = None) -> Iterator[str]:
        """The assistant's reply text to `messages`, piece by piece as it is generated."""
        request = chat_request(messages, model=model, max_output_tokens=max_output_tokens,
                               temperature=temperature, seed=seed)
        for response in self.generate(request):
            if response.text:
                yield response.text

    def session(self, requests: Iterable[pb.SessionRequest]) -> Iterator[pb.SessionResponse]:
        """A Session stream: sends `requests` (starts and cancels) and yields the server's messages."""
        return self._generate.Session(iter(requests), metadata=self._token)

    def tokenize(self, prompt: str | None = None, *, messages: Messages | None = None,
                 model: str = "") -> list[int]:
        """Token ids of raw text, or of chat messages through the chat template."""
        request = pb.TokenizeRequest(model=model, prompt=prompt) if messages is None else \
            pb.TokenizeRequest(model=model, chat=chat_input(messages))
        return list(self._generate.Tokenize(request, metadata=self._token).token_ids)

    def detokenize(self, token_ids: Sequence[int], *, skip_special_tokens: bool = False,
                   model: str = "") -> str:
        request = pb.DetokenizeRequest(model=model, token_ids=token_ids,
                                       skip_special_tokens=skip_special_tokens)
        return self._generate.Detokenize(request, metadata=self._token).text

    def count_tokens(self, prompt: str | None = None, *, messages: Messages | None = None,
                     model: str = "") -> pb.CountTokensResponse:
        request = pb.CountTokensRequest(model=model, prompt=prompt) if messages is None else \
            pb.CountTokensRequest(model=model, chat=chat_input(messages))
        return self._generate.CountTokens(request, metadata=self._token)

    def list_served_models(self) -> list[admin_types.ModelInfo]:
        """The models this server generates with (the resident one, or none)."""
        return list(self._generate.ListServedModels(pb.ListServedModelsRequest(), metadata=self._token).models)

    # -- AudioService ------------------------------------------------------------------------------

    def converse(self, config: audio_pb.ConverseConfig, requests: Iterable[audio_pb.ConverseRequest],
                 timeout_s: float | None = None) -> Iterator[audio_pb.ConverseResponse]:
        """A spoken conversation: sends `config`, then `requests` (audio chunks, e.g. from
        `arbi_client.audio.audio_requests`, text and controls), and yields the server's events."""
        return self._audio.Converse(converse_requests(config, requests), timeout=timeout_s,
                                    metadata=self._token)

    def transcribe(self, audio: bytes, *, language: str = "") -> str:
        """The text of a WAV file's speech."""
        request = audio_pb.TranscribeRequest(audio=audio, language=language)
        return self._audio.Transcribe(request, metadata=self._token).text

    def synthesize(self, text: str, *, voice: str = "", sample_rate_hz: int = 24_000) -> Iterator[bytes]:
        """The speech of `text` as PCM16 mono chunks, sentence by sentence as synthesized."""
        request = audio_pb.SynthesizeRequest(text=text, voice=voice)
        request.output_format.sample_rate_hz = sample_rate_hz
        for response in self._audio.Synthesize(request, metadata=self._token):
            yield response.audio

    # -- AdminService ------------------------------------------------------------------------------

    def get_server_info(self) -> admin_pb.GetServerInfoResponse:
        return self._admin.GetServerInfo(admin_pb.GetServerInfoRequest(), metadata=self._admin_token)

    def check_liveness(self) -> admin_pb.CheckLivenessResponse:
        return self._admin.CheckLiveness(admin_pb.CheckLivenessRequest(), metadata=self._admin_token)

    def check_readiness(self) -> admin_pb.CheckReadinessResponse:
        return self._admin.CheckReadiness(admin_pb.CheckReadinessRequest(), metadata=self._admin_token)

    def list_models(self) -> list[admin_types.AvailableModel]:
        return list(self._admin.ListModels(admin_pb.ListModelsRequest(), metadata=self._admin_token).models)

    def load_model(self, model: str) -> admin_types.ModelInfo:
        return self._admin.LoadModel(admin_pb.LoadModelRequest(model=model), metadata=self._admin_token).model

    def unload_model(self, drain_timeout_ms: int = 0, model: str = "") -> admin_pb.UnloadModelResponse:
        """Unloads the resident model `model` (empty: the default chat model)."""
        request = admin_pb.UnloadModelRequest(drain_timeout_ms=drain_timeout_ms, model=model)
        return self._admin.UnloadModel(request, metadata=self._admin_token)

    def switch_model(self, model: str, drain_timeout_ms: int = 0,
                     replace_model: str = "") -> admin_pb.SwitchModelResponse:
        """Replaces the resident chat model `replace_model` (empty: the default) with `model`."""
        request = admin_pb.SwitchModelRequest(model=model, drain_timeout_ms=drain_timeout_ms,
                                              replace_model=replace_model)
        return self._admin.SwitchModel(request, metadata=self._admin_token)

    def get_memory_report(self, model: str = "") -> admin_pb.GetMemoryReportResponse:
        """The KV pool and weights of the chat model `model` (empty: the default), and every resident model."""
        return self._admin.GetMemoryReport(admin_pb.GetMemoryReportRequest(model=model), metadata=self._admin_token)

    def list_running_requests(self) -> list[admin_types.RunningRequest]:
        request = admin_pb.ListRunningRequestsRequest()
        return list(self._admin.ListRunningRequests(request, metadata=self._admin_token).requests)

    def cancel_running_request(self, request_id: str) -> None:
        request = admin_pb.CancelRunningRequestRequest(request_id=request_id)
        self._admin.CancelRunningRequest(request, metadata=self._admin_token)

    def get_runtime_config(self) -> admin_types.RuntimeConfig:
        request = admin_pb.GetRuntimeConfigRequest()
        return self._admin.GetRuntimeConfig(request, metadata=self._admin_token).config

    def update_runtime_config(self, **changes: int) -> admin_types.RuntimeConfig:
        """Changes the named settings (e.g. `max_step_tokens=256`); returns the settings in force."""
        request = admin_pb.UpdateRuntimeConfigRequest(
            config=admin_types.RuntimeConfig(**changes), update_mask=field_mask_pb2.FieldMask(paths=changes)
        )
        return self._admin.UpdateRuntimeConfig(request, metadata=self._admin_token).config

    def drain_server(self, timeout_ms: int = 0) -> int:
        """Stops admitting; returns how many requests were still in flight after up to `timeout_ms`."""
        request = admin_pb.DrainServerRequest(timeout_ms=timeout_ms)
        return self._admin.DrainServer(request, metadata=self._admin_token).remaining_request_count

    def resume_server(self) -> None:
        self._admin.ResumeServer(admin_pb.ResumeServerRequest(), metadata=self._admin_token)
