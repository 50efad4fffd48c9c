"""`arbi-serve ps` and `arbi-serve stop`: the servers and gateways `arbi-serve run` started, found through
their `server-<port>.pid` and `gateway-<port>.pid` files in the run directory (see `paths.py`).

A pid file whose process is gone, or now runs another program, is stale: `ps` shows it as exited, `stop`
removes it without signalling anything. `stop` asks for a graceful shutdown (SIGINT), then SIGTERM, then
SIGKILL, each after a grace period. Processes are identified through /proc (Linux).
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from arbi_grpc.commands.paths import run_state_dir
from arbi_grpc.commands.table import print_table
from arbi_grpc.errors import NotFoundError

_POLL_S = 0.1


@dataclass(frozen=True)
class InstanceKind:
    """What `run` starts: the pid file prefix, the arguments its command line always has, and the flag
    whose value `ps` shows."""

    name: str
    markers: tuple[str, ...]
    shown_flag: str


SERVER = InstanceKind("server", ("arbi_grpc", "serve"), "--model")
GATEWAY = InstanceKind("gateway", ("arbi_gateway",), "--upstream")
KINDS = (SERVER, GATEWAY)


@dataclass(frozen=True)
class Instance:
    """A process `run` started: its kind, port and pid, and whether that pid still runs it."""

    kind: InstanceKind
    port: int
    pid: int
    pid_file: Path
    command: tuple[str, ...]

    @property
    def alive(self) -> bool:
        return _runs(self.kind, self.command)

    @property
    def log_file(self) -> Path:
        return self.pid_file.with_suffix(".log")

    @property
    def shown(self) -> str:
        """The model of a server, the upstream of a gateway."""
        command, flag = self.command, self.kind.shown_flag
        return next((command[i + 1] for i in range(len(command) - 1) if command[i] == flag), "(default)")


def add_parser(commands: argparse._SubParsersAction) -> None:
    ps = commands.add_parser("ps", help="list the servers and gateways `arbi-serve run` started")
    ps.set_defaults(handler=_ps)
    stop = commands.add_parser("stop", help="stop servers and gateways `arbi-serve run` started")
    stop.add_argument("ports", nargs="*", type=int, metavar="PORT", help="ports of the processes to stop")
    stop.add_argument("--all", action="store_true", help="stop everything `arbi-serve run` started")
    stop.add_argument("--grace-s", type=float, default=10.0, help="wait per signal before the next (default 10)")
    stop.set_defaults(handler=_stop)


def find_instances() -> list[Instance]:
    """Every pid file in the run directory, by port."""
    directory = run_state_dir()
    instances = []
    for kind in KINDS:
        for pid_file in sorted(directory.glob(f"{kind.name}-*.pid")) if directory.is_dir() else []:
            port_text = pid_file.stem[len(kind.name) + 1:]
            pid_text = pid_file.read_text().strip()
            if port_text.isdigit() and pid_text.isdigit():
                instances.append(Instance(kind, int(port_text), int(pid_text), pid_file, _command_line(int(pid_text))))
    return sorted(instances, key=lambda instance: (instance.port, instance.kind.name))


def _ps(args: argparse.Namespace) -> int:
    rows = []
    for instance in find_instances():
        started = datetime.datetime.fromtimestamp(instance.pid_file.stat().st_mtime).isoformat(timespec="seconds")
        rows.append((instance.kind.name, instance.port, instance.pid, _status(instance), started, instance.shown,
                     instance.log_file))
    if rows:
        print_table(("KIND", "PORT", "PID", "STATUS", "STARTED", "MODEL/UPSTREAM", "LOG"), rows)
    else:
        print(f"nothing started by `arbi-serve run` is recorded (pid files in {run_state_dir()})")
    return 0


def _status(instance: Instance) -> str:
    if not instance.alive:
        return "exited"
    if instance.kind is SERVER:
        from arbi_grpc.chat_client import is_serving

        return "serving" if is_serving(f"127.0.0.1:{instance.port}") else "not ready"
    with socket.socket() as probe:
        probe.settimeout(1.0)
        return "listening" if probe.connect_ex(("127.0.0.1", instance.port)) == 0 else "not ready"


def _stop(args: argparse.Namespace) -> int:
    instances = find_instances()
    if args.all:
        chosen = instances
    elif args.ports:
        missing = sorted(set(args.ports) - {instance.port for instance in instances})
        if missing:
            raise NotFoundError(f"nothing started by `arbi-serve run` on port(s) {', '.join(map(str, missing))} "
                                f"(pid files in {run_state_dir()})")
        chosen = [instance for instance in instances if instance.port in args.ports]
    else:
        raise NotFoundError("name the PORT of what to stop, or pass --all (see `arbi-serve ps`)")
    for instance in chosen:
        outcome = stop_instance(instance, args.grace_s) if instance.alive else "had already exited"
        instance.pid_file.unlink(missing_ok=True)
        print(f"{instance.kind.name} on port {instance.port} (pid {instance.pid}): {outcome}")
    return 0


def stop_instance(instance: Instance, grace_s: float) -> str:
    """Signals the process until it exits; says which signal ended it."""
    for signal_number in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        try:
            os.kill(instance.pid, signal_number)
        except ProcessLookupError:
            return "stopped"
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline:
            if not _runs(instance.kind, _command_line(instance.pid)):
                return f"stopped ({signal.Signals(signal_number).name})"
            time.sleep(_POLL_S)
    return "still running after SIGKILL"


def _command_line(pid: int) -> tuple[str, ...]:
    """The process's arguments; empty when it is gone or a zombie (or /proc is absent)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, IndexError):
        return ()
    if state == "Z":
        return ()
    return tuple(part.decode(errors="replace") for part in raw.split(b"\0") if part)


def _runs(kind: InstanceKind, command: tuple[str, ...]) -> bool:
    """True when `command` is what `run` starts for `kind` (`python -m arbi_grpc serve ...`,
    `python -m arbi_gateway ...`)."""
    return all(marker in command for marker in kind.markers)
