"""The gRPC server's configuration: address, transport limits, session bounds, drains and credentials.

One frozen dataclass validated at construction; `config_flags` derives the `serve` flags and `ARBI_*`
environment overrides from it, as for EngineConfig. Token values are left out of the repr so they never
reach a log line.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import grpc

from arbi_grpc.config import MIB, setting
from arbi_grpc.errors import InvalidArgumentError

ADMIN_TOKEN_FILE_NAME = "admin-token"
# Streams beyond the engine's admission capacity kept for health, admin and tokenizer calls.
STREAM_HEADROOM = 64
MAX_GENERATION_ID_CHARS = 128


def _secret(help: str) -> str:  # noqa: A002 (mirrors argparse's name)
    """A string setting kept out of the dataclass repr."""
    return field(default="", repr=False, metadata={"help": help})


@dataclass(frozen=True)
class ServerConfig:
    """How the gRPC server listens, what it bounds, and which credentials it accepts."""

    host: str = setting("127.0.0.1", "address to bind")
    port: int = setting(50051, "gRPC port (0 picks a free one)")
    max_message_mib: int = setting(16, "largest message sent or received, in MiB")
    max_concurrent_streams: int = setting(
        0, "most concurrent RPC streams on one HTTP/2 connection (0: the engine's max_running_requests, or the most "
           f"an auto one may become, + max_waiting_requests + {STREAM_HEADROOM}, so a flood on one connection reaches "
           "admission and is refused with RESOURCE_EXHAUSTED rather than by HTTP/2)"
    )
    keepalive_time_ms: int = setting(60_000, "interval of keepalive pings on idle connections, in ms")
    keepalive_timeout_ms: int = setting(20_000, "wait for a keepalive ping's acknowledgement, in ms")
    min_client_ping_interval_ms: int = setting(
        10_000, "shortest interval between client keepalive pings the server tolerates, in ms"
    )
    max_session_generations: int = setting(64, "most live generations on one Session stream")
    drain_timeout_ms: int = setting(
        30_000, "how long requests in flight may finish during a model unload or switch, and after SIGTERM or "
                "SIGINT before the server exits, in ms"
    )
    model_load_wait_ms: int = setting(
        30_000, "how long a request for a model (chat or embedding) that is still loading waits for it before it "
                "fails UNAVAILABLE, in ms (0: at once)"
    )
    generate_token: str = _secret(
        "bearer token GenerateService calls must carry (empty: generate calls are open)"
    )
    admin_token: str = _secret(
        "bearer token AdminService calls must carry (empty: read or mint the admin token file)"
    )
    admin_token_file: str = setting(
        "", f"file holding the admin token, minted (mode 0600) when missing "
            f"(empty: $ARBI_CACHE_DIR/{ADMIN_TOKEN_FILE_NAME})"
    )
    api_keys_file: str = setting(
        "", "JSON lines of per-caller API keys ({\"key\" or \"sha256\", \"tenant\", \"admin\"}) others may not read; a "
            "key's calls run as its tenant whatever the request's tenant field says; re-read when it changes "
            "(empty: no keys)"
    )
    tls_cert_file: str = setting("", "PEM certificate (chain) the server presents; with --tls-key-file the server "
                                     "serves TLS only (empty: plaintext)")
    tls_key_file: str = setting("", "PEM private key of --tls-cert-file")
    tls_client_ca_file: str = setting(
        "", "PEM CA whose client certificates the server requires (mTLS); calls without one are refused "
            "(empty: no client certificate asked)"
    )

    model_roots: str = setting(
        "", "directories admin LoadModel and SwitchModel may read model paths from, separated by ':' "
            "(symlinks out and '..' are refused; empty: the model cache); model names always resolve in the cache"
    )

    audio: bool = setting(
        True, "serve AudioService; its models' host memory is reserved in the boot budget (off: not served, "
              "nothing reserved)"
    )
    audio_preload: bool = setting(
        False, "load the audio models (VAD, recognizer, voice) at boot instead of on the first AudioService call"
    )

    embedding_models: str = setting(
        "", "comma-separated embedding models served by EmbeddingService beside the generate model: "
            "all-MiniLM-L6-v2 or BertModel directories (empty: none)"
    )
    data_dir: str = setting(
        "", "directory of FileService's files and BatchService's batches (SQLite metadata, content on disk); "
            "they survive restarts and unfinished batches resume (empty: $ARBI_CACHE_DIR/data)"
    )
    max_file_mib: int = setting(512, "largest file FileService accepts, in MiB (larger: RESOURCE_EXHAUSTED)")
    max_batch_lines_in_flight: int = setting(
        2, "batch lines of all batches running at once; they run at batch priority behind interactive requests"
    )

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise InvalidArgumentError("port", f"must be in [0, 65535], got {self.port}")
        if not self.host:
            raise InvalidArgumentError("host", "must not be empty")
        if not 0 < self.max_message_mib < 2048:
            raise InvalidArgumentError("max_message_mib", f"must be in [1, 2047], got {self.max_message_mib}")
        if self.max_concurrent_streams < 0:
            raise InvalidArgumentError("max_concurrent_streams",
                                       f"must be >= 0 (0: derived from the engine), got {self.max_concurrent_streams}")
        positive = {
            "keepalive_time_ms": self.keepalive_time_ms,
            "keepalive_timeout_ms": self.keepalive_timeout_ms,
            "min_client_ping_interval_ms": self.min_client_ping_interval_ms,
            "max_session_generations": self.max_session_generations,
            "max_file_mib": self.max_file_mib,
            "max_batch_lines_in_flight": self.max_batch_lines_in_flight,
        }
        for name, value in positive.items():
            if value <= 0:
                raise InvalidArgumentError(name, f"must be > 0, got {value}")
        if self.audio_preload and not self.audio:
            raise InvalidArgumentError("audio_preload", "preloads AudioService's models, which --no-audio turns off")
        if self.drain_timeout_ms < 0:
            raise InvalidArgumentError("drain_timeout_ms", f"must be >= 0, got {self.drain_timeout_ms}")
        if self.model_load_wait_ms < 0:
            raise InvalidArgumentError("model_load_wait_ms", f"must be >= 0, got {self.model_load_wait_ms}")
        for name in ("generate_token", "admin_token"):
            token = getattr(self, name)
            if token and (len(token) < 16 or not token.isprintable() or " " in token):
                raise InvalidArgumentError(
                    name, "must be at least 16 printable characters without spaces when set"
                )
        if bool(self.tls_cert_file) != bool(self.tls_key_file):
            raise InvalidArgumentError("tls_cert_file", "a TLS certificate and its key go together: set both "
                                                        "--tls-cert-file and --tls-key-file")
        if self.tls_client_ca_file and not self.tls_cert_file:
            raise InvalidArgumentError("tls_client_ca_file", "client certificates are checked over TLS only: set "
                                                             "--tls-cert-file and --tls-key-file too")
        if self.generate_token and self.generate_token == self.admin_token:
            raise InvalidArgumentError("generate_token", "must differ from admin_token")

    def with_stream_limit_for(self, max_running_requests: int, max_waiting_requests: int) -> ServerConfig:
        """This config with `max_concurrent_streams` 0 resolved against the engine's admission capacity."""
        if self.max_concurrent_streams:
            return self
        return replace(self, max_concurrent_streams=max_running_requests + max_waiting_requests + STREAM_HEADROOM)

    @property
    def embedding_model_specs(self) -> tuple[str, ...]:
        return tuple(spec.strip() for spec in self.embedding_models.split(",") if spec.strip())

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    @property
    def max_message_bytes(self) -> int:
        return self.max_message_mib * MIB

    def server_credentials(self) -> grpc.ServerCredentials | None:
        """TLS credentials from the PEM files (requiring client certificates when a client CA is set), or None
        for plaintext. A file that cannot be read is an InvalidArgumentError naming its flag."""
        if not self.tls_cert_file:
            return None
        files = {name: getattr(self, name) for name in ("tls_cert_file", "tls_key_file", "tls_client_ca_file")}
        pem = {name: _read_pem(name, path) for name, path in files.items() if path}
        return grpc.ssl_server_credentials(
            [(pem["tls_key_file"], pem["tls_cert_file"])], root_certificates=pem.get("tls_client_ca_file"),
            require_client_auth="tls_client_ca_file" in pem,
        )

    def grpc_options(self) -> list[tuple[str, int]]:
        """The grpc channel arguments that enforce these limits."""
        return [
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", self.max_message_bytes),
            ("grpc.max_concurrent_streams", self.max_concurrent_streams),
            ("grpc.keepalive_time_ms", self.keepalive_time_ms),
            ("grpc.keepalive_timeout_ms", self.keepalive_timeout_ms),
            ("grpc.keepalive_permit_without_calls", 1),
            ("grpc.http2.min_ping_interval_without_data_ms", self.min_client_ping_interval_ms),
            ("grpc.http2.min_recv_ping_interval_without_data_ms", self.min_client_ping_interval_ms),
            ("grpc.http2.max_pings_without_data", 0),
        ]


def _read_pem(name: str, path: str) -> bytes:
    try:
        return Path(path).expanduser().read_bytes()
    except OSError as error:
        raise InvalidArgumentError(name, f"cannot read {path}: {error.strerror}") from None
