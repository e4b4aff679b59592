"""Throwaway Redis servers for tests: one server, or a three-master Redis Cluster.

Both run ``redis-server`` (which must be installed; ``scripts/ensure-services``
installs Debian's) as child processes bound to 127.0.0.1 on free ports, in a temporary
directory that is removed afterwards. Nothing here touches a system service.

    with redis_server() as server:                 # no persistence at all
        backend = from_url(server.url + "?prefix=test")

    with redis_server(appendonly=True, appendfsync="always") as server:
        ...                                        # AOF, fsynced before every reply
        server.kill()                              # SIGKILL, as a crash would
        server.start()                             # same directory, same port

    with redis_cluster() as cluster:               # 3 masters, no replicas
        backend = from_url(cluster.url)            # redis+cluster://127.0.0.1:PORT
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import attrs

from docket.contract import ClaimBatch, ClaimPolicy, Lease
from docket.records import GraphRef, GraphVersion, OwnerScope, Run
from docket_redis.backend import RedisBackend

START_TIMEOUT = 15.0


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found is None:
        raise RuntimeError(
            "redis-server is not installed; run scripts/ensure-services "
            "(or apt-get install redis-server)"
        )
    return found


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(*, cluster_bus: bool = False) -> int:
    """A port free on 127.0.0.1 (and ``port + 10000`` too, for a cluster node's bus)."""
    for _ in range(200):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not cluster_bus:
            return port
        if port + 10000 < 65536 and _port_free(port + 10000):
            return port
    raise RuntimeError("no free port found on 127.0.0.1")


def ping(port: int, timeout: float = 0.5) -> str:
    """Send PING over a raw socket; the first reply line (``+PONG``, ``-LOADING …``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        sock.sendall(b"PING\r\n")
        return sock.recv(256).split(b"\r\n", 1)[0].decode(errors="replace")


def command(port: int, *args: str, timeout: float = 5.0) -> str:
    """Run one command through ``redis-cli`` and return its raw output."""
    done = subprocess.run(
        ["redis-cli", "-h", "127.0.0.1", "-p", str(port), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.stdout.strip()


@attrs.define
class RedisServer:
    """One ``redis-server`` child process on 127.0.0.1."""

    port: int
    directory: Path
    settings: tuple[str, ...]
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def log(self) -> Path:
        return self.directory / "redis.log"

    def start(self) -> None:
        """Start (or restart) the server in its directory and wait until it answers PING."""
        if self.process is not None and self.process.poll() is None:
            return
        arguments = [
            redis_server_binary(),
            "--bind",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--dir",
            str(self.directory),
            "--logfile",
            str(self.log),
            "--daemonize",
            "no",
            "--protected-mode",
            "yes",
            *self.settings,
        ]
        self.process = subprocess.Popen(
            arguments, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"redis-server exited at start: {self._tail()}")
            with contextlib.suppress(OSError):
                if ping(self.port) in ("+PONG", "-NOAUTH Authentication required."):
                    return
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"redis-server did not answer within {START_TIMEOUT}s: {self._tail()}")

    def _tail(self) -> str:
        try:
            return self.log.read_text(errors="replace")[-2000:]
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Stop the server (SIGTERM; SIGKILL if it lingers)."""
        process, self.process = self.process, None
        if process is None or process.poll() is not None:
            return
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)

    def kill(self) -> None:
        """SIGKILL the server, as a crash would (nothing is flushed on the way out)."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)

    def restart(self, *, crash: bool = True, down_for: float = 0.0) -> None:
        """Stop the server (SIGKILL when ``crash``, else SIGTERM), wait ``down_for``
        seconds, start it again in the same directory on the same port. Only what its
        AOF holds survives (``redis_server(appendonly=True)``)."""
        if crash:
            self.kill()
        else:
            self.stop()
        if down_for > 0:
            time.sleep(down_for)
        self.start()

    def command(self, *args: str) -> str:
        return command(self.port, *args)


def _persistence(appendonly: bool, appendfsync: str) -> tuple[str, ...]:
    if appendfsync not in ("always", "everysec", "no"):
        raise ValueError(f"appendfsync must be always, everysec or no, got {appendfsync!r}")
    return (
        "--save",
        "",
        "--appendonly",
        "yes" if appendonly else "no",
        "--appendfsync",
        appendfsync,
    )


@contextlib.contextmanager
def redis_server(
    *,
    appendonly: bool = False,
    appendfsync: str = "everysec",
    extra: Sequence[str] = (),
    directory: str | os.PathLike[str] | None = None,
) -> Iterator[RedisServer]:
    """A throwaway ``redis-server``: no RDB snapshots, AOF only if asked.

    ``extra`` adds ``--name value`` settings (e.g. ``("--busy-reply-threshold", "100")``).
    The temporary directory (unless ``directory`` is given) is removed afterwards.
    """
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = stack.enter_context(tempfile.TemporaryDirectory(prefix="docket-redis-"))
        server = RedisServer(
            port=free_port(),
            directory=Path(directory),
            settings=(*_persistence(appendonly, appendfsync), *extra),
        )
        stack.callback(server.stop)
        server.start()
        yield server


@attrs.define
class RedisCluster:
    """A Redis Cluster of throwaway masters on 127.0.0.1 (no replicas)."""

    nodes: list[RedisServer]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def state(self, port: int) -> str:
        for line in command(port, "CLUSTER", "INFO").splitlines():
            if line.startswith("cluster_state:"):
                return line.split(":", 1)[1].strip()
        return "unknown"


@contextlib.contextmanager
def redis_cluster(
    masters: int = 3, *, extra: Sequence[str] = (), timeout: float = 30.0
) -> Iterator[RedisCluster]:
    """A throwaway Redis Cluster: ``masters`` nodes, slots split by ``redis-cli --cluster``.

    Yields once every node reports ``cluster_state:ok``; stops every node afterwards.
    """
    if shutil.which("redis-cli") is None:
        raise RuntimeError("redis-cli is not installed (it comes with redis-server)")
    with contextlib.ExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="docket-cluster-")))
        nodes: list[RedisServer] = []
        for index in range(masters):
            directory = root / f"node{index}"
            directory.mkdir()
            node = RedisServer(
                port=free_port(cluster_bus=True),
                directory=directory,
                settings=(
                    *_persistence(False, "everysec"),
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    str(directory / "nodes.conf"),
                    "--cluster-node-timeout",
                    "5000",
                    *extra,
                ),
            )
            stack.callback(node.stop)
            node.start()
            nodes.append(node)
        created = subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *(f"127.0.0.1:{node.port}" for node in nodes),
                "--cluster-replicas",
                "0",
                "--cluster-yes",
            ],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if created.returncode != 0:
            raise RuntimeError(f"redis-cli --cluster create failed: {created.stdout[-2000:]}")
        cluster = RedisCluster(nodes)
        deadline = time.monotonic() + timeout
        while any(cluster.state(port) != "ok" for port in cluster.ports):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the cluster did not reach cluster_state:ok in {timeout}s")
            time.sleep(0.1)
        yield cluster


# -- helpers for tests that drive a backend on a throwaway server -----------------------------

#: The start of the manual clocks the docket-redis tests use.
T0 = datetime(2026, 7, 15, 12, tzinfo=UTC)


def with_prefix(url: str, prefix: str) -> str:
    """``url`` with a ``prefix=`` query option added."""
    return f"{url}{'&' if '?' in url else '?'}prefix={prefix}"


@contextlib.asynccontextmanager
async def opened(url: str, prefix: str, **options: Any) -> AsyncIterator[RedisBackend]:
    """An opened backend on ``url`` under ``prefix``, closed afterwards."""
    backend = RedisBackend.from_url(with_prefix(url, prefix), **options)
    await backend.open()
    try:
        yield backend
    finally:
        await backend.close()


async def publish_graph(backend: RedisBackend, owner: OwnerScope, name: str = "g") -> GraphRef:
    """Save the contract kit's small graph document ``name`` in ``owner``'s scope."""
    from docket_contract_tests.fixtures import graph_document, graph_ref

    document = graph_document(name)
    ref = graph_ref(document)
    saved = await backend.graphs.save_graph(owner, ref, document)
    if not isinstance(saved, GraphVersion):
        raise AssertionError(f"save_graph answered {saved!r}")
    return ref


async def start_run(
    backend: RedisBackend,
    owner: OwnerScope,
    run_id: str,
    ref: GraphRef,
    *,
    at: datetime = T0,
    wake_at: datetime | None = None,
    events: int = 0,
) -> Run:
    """Initialize a new run (started ``at``, due ``wake_at``) with ``events`` events."""
    from docket_contract_tests.fixtures import events_for, init_proposal, new_run

    run = new_run(run_id, ref, at, event_seq=events)
    result = await backend.transitions.initialize(
        owner, init_proposal(run, wake_at or at), events_for(run, at, range(1, events + 1))
    )
    if result != run:
        raise AssertionError(f"initialize answered {result!r}")
    return run


async def claim_one(
    backend: RedisBackend,
    now: datetime,
    *,
    orphan_ttl: timedelta = timedelta(0),
    max_claim_attempts: int = 3,
) -> Lease:
    """Claim with a demand of one; exactly one lease must come back."""
    batch = await backend.runs.claim_due(
        ClaimPolicy(limit=1, orphan_ttl=orphan_ttl, max_claim_attempts=max_claim_attempts, now=now)
    )
    if not isinstance(batch, ClaimBatch) or len(batch.leases) != 1:
        raise AssertionError(f"claim_due answered {batch!r}")
    return batch.leases[0]


def dump(ports: Iterable[int], prefix: str) -> dict[bytes, Any]:
    """Every key of every owner scope of ``prefix`` on these servers, with its value.

    For checks that a refused operation wrote nothing. The namespace's own bookkeeping
    (``{prefix}:scopes``, ``{prefix}:order``) is left out: ``initialize`` registers its
    scope and takes a listing number before its script runs, whatever the script decides.
    """
    import redis

    from docket_redis.keys import Namespace

    pattern = Namespace(prefix).scope_pattern
    out: dict[bytes, Any] = {}
    for port in ports:
        client = redis.Redis(host="127.0.0.1", port=port)
        try:
            for key in client.scan_iter(match=pattern, count=1000):
                kind = client.type(key)
                value: Any
                if kind == b"hash":
                    value = client.hgetall(key)
                elif kind == b"zset":
                    value = client.zrange(key, 0, -1, withscores=True)
                elif kind == b"set":
                    value = sorted(client.smembers(key))
                else:
                    value = client.dump(key)
                out[key] = (kind, value)
        finally:
            client.close()
    return out


__all__ = [
    "T0",
    "RedisCluster",
    "RedisServer",
    "claim_one",
    "command",
    "dump",
    "free_port",
    "opened",
    "ping",
    "publish_graph",
    "redis_cluster",
    "redis_server",
    "redis_server_binary",
    "start_run",
    "with_prefix",
]
