"""The data directory's services: opens the database and stores under `ServerConfig.data_dir`, registers
FileService and BatchService on a server, and once it serves, starts the batch runner (resuming the batches
a previous process left unfinished) with a channel to the server's own GenerateService.

The runner reaches the server over a Unix socket of its own in a private (0700) directory, plaintext whatever
the public port's TLS, so batches run the same with TLS or mTLS on; its calls still carry the in-process
credential."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import grpc
from arbi_client.arbi.v1 import batch_service_pb2_grpc, file_service_pb2_grpc

from arbi_grpc.batches.batch_lines import LineRunner
from arbi_grpc.batches.batch_runner import BatchRunner
from arbi_grpc.batches.batch_store import BatchStore
from arbi_grpc.batches.database import Database
from arbi_grpc.batches.file_store import FileStore
from arbi_grpc.config import MIB
from arbi_grpc.models.model_cache import default_cache_root
from arbi_grpc.server_config import ServerConfig
from arbi_grpc.servicers.batches import BatchServicer
from arbi_grpc.servicers.files import FileServicer

DATABASE_NAME, FILES_DIR_NAME = "arbi.sqlite3", "files"


def data_directory(config: ServerConfig) -> Path:
    return Path(config.data_dir).expanduser() if config.data_dir else default_cache_root().parent / "data"


class DataServices:
    def __init__(self, config: ServerConfig) -> None:
        directory = data_directory(config)
        directory.mkdir(parents=True, exist_ok=True)
        self._config = config
        self.database = Database(directory / DATABASE_NAME)
        self.files = FileStore(self.database, directory / FILES_DIR_NAME)
        self.batches = BatchStore(self.database)
        self.runner: BatchRunner | None = None
        self._channel: grpc.aio.Channel | None = None
        self._socket_directory: str | None = None

    def register(self, server: grpc.aio.Server, runner_token: str) -> None:
        """Adds both services to `server`, and the runner's private Unix socket; batch lines go to its
        GenerateService with the server's in-process `runner_token`."""
        self._socket_directory = tempfile.mkdtemp(prefix="arbi-batches-")
        runner_target = f"unix:{self._socket_directory}/runner.sock"
        if not server.add_insecure_port(runner_target):
            raise OSError(f"cannot bind the batch runner's socket {runner_target}")
        self._channel = grpc.aio.insecure_channel(runner_target, options=self._config.grpc_options())
        metadata = (("authorization", f"Bearer {runner_token}"),)
        self.runner = BatchRunner(self.batches, self.files, LineRunner(self._channel, metadata),
                                  self._config.max_batch_lines_in_flight)
        file_service_pb2_grpc.add_FileServiceServicer_to_server(
            FileServicer(self.files, self._config.max_file_mib * MIB), server)
        batch_service_pb2_grpc.add_BatchServiceServicer_to_server(BatchServicer(self.batches, self.runner), server)

    def set_serving(self, serving: bool) -> None:
        """Lets batch lines start (a model can admit them) or holds them back (none resident, a drain)."""
        if self.runner is not None:
            (self.runner.serving.set if serving else self.runner.serving.clear)()

    def resume(self) -> None:
        """Starts the batches a previous process left unfinished (call on the server's loop)."""
        self.runner.resume()

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.stop()
        if self._channel is not None:
            await self._channel.close()
        if self._socket_directory is not None:
            shutil.rmtree(self._socket_directory)
        self.database.close()
