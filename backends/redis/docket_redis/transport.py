"""Sending commands and scripts to one Redis, or to the right node of a Redis Cluster.

The driver's high-level clients retry and re-route by themselves, which is what most
applications want and exactly what a transition must not get blindly: a script re-sent
after a lost connection may run twice, and the caller must learn that the first
attempt's outcome is unknown. So this module drives connections itself:

1. take a connection for the slot of the script's first key and connect it — a failure
   here means **nothing was sent** (:func:`~docket_redis.errors.not_sent`);
2. send the command and read the answer — a connection failure or timeout here is
   **ambiguous** (:func:`~docket_redis.errors.ambiguous`);
3. an error *reply* is classified by :func:`~docket_redis.errors.reply_error` (``BUSY``,
   ``LOADING`` … mean the server refused to run it).

Scripts go out as ``EVALSHA``; a ``NOSCRIPT`` reply (the server restarted, failed over,
or someone ran ``SCRIPT FLUSH``) means the script did not run, so the same call is sent
again as ``EVAL`` with the body, which also caches it for the next ``EVALSHA``.

Several scripts can go out together (:meth:`Transport.eval_many`, for group commit): the
calls for one node are written as one pipeline on one connection and their replies read
in order. Each call still gets its own answer, with the same classification as alone; a
connection lost part-way makes every call not yet answered ambiguous.

On a cluster, a ``MOVED`` reply (the command was not run) refreshes the slot map and
sends the command again, a few times at most; ``ASK`` (a slot being migrated) and
``TRYAGAIN`` are answered ``Retryable``.
"""

from __future__ import annotations

import abc
import asyncio
import hashlib
import re
import time
from collections.abc import Awaitable, Callable, Sequence
from importlib import resources
from typing import Any, Final, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import attrs
from redis import exceptions as rx
from redis.asyncio import Redis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from docket_redis.errors import (
    PermanentStoreError,
    StoreError,
    ambiguous,
    not_sent,
    reply_error,
)

Arg = str | bytes | int
_TRANSPORT_ERRORS: Final = (rx.ConnectionError, rx.TimeoutError, OSError, asyncio.TimeoutError)
_MOVED_RETRIES: Final = 3

SCRIPT_NAMES: Final = (
    "initialize",
    "commit",
    "claim_peek",
    "claim_take",
    "refresh",
    "release",
    "abandon",
    "retry_poisoned",
    "save_graph",
    "list_runs",
    "list_events",
    "latest_event",
    "register",
    "read_run",
    "set_layout",
    "schedule_write",
    "schedule_read",
    "prune_events",
    "prune_peek",
    "prune_runs",
    "unlock",
    "backfill",
    "queue_set",
    "queue_acquire",
    "queue_renew",
    "queue_release",
    "queue_list",
    "queue_depth",
    "admit",
    "admit_finish",
    "admit_promote",
    "admit_drop",
    "admit_read",
    "admit_find",
)
#: How a script takes in a shared piece of Lua (``lua/<lib>.lua``): a line of its own.
_INCLUDE: Final = re.compile(rb"^-- #include (\w+)\n", re.MULTILINE)


@attrs.frozen
class Script:
    """One Lua script shipped with the package (``docket_redis/lua/<name>.lua``)."""

    name: str
    body: bytes
    sha: str

    @classmethod
    def load(cls, name: str) -> Script:
        """The script's text, each ``-- #include <lib>`` line replaced by that file's."""
        folder = resources.files("docket_redis").joinpath("lua")
        body = folder.joinpath(f"{name}.lua").read_bytes()
        body = _INCLUDE.sub(lambda m: folder.joinpath(f"{m[1].decode()}.lua").read_bytes(), body)
        return cls(name=name, body=body, sha=hashlib.sha1(body).hexdigest())


def load_scripts() -> dict[str, Script]:
    return {name: Script.load(name) for name in SCRIPT_NAMES}


async def _untyped(method: Any, *args: Any) -> Any:
    """Await a driver method that carries no annotations (keeps mypy --strict quiet)."""
    return await method(*args)


def _listening(options: dict[str, Any]) -> dict[str, Any]:
    """A subscriber waits for messages indefinitely: no read timeout applies to it."""
    return {**options, "socket_timeout": None}


def _listening_url(url: str) -> str:
    """``url`` without a ``socket_timeout`` (query options override keyword options)."""
    parts = urlsplit(url)
    query = [(k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True)]
    kept = [(k, v) for k, v in query if k != "socket_timeout"]
    return urlunsplit(parts._replace(query=urlencode(kept)))


def no_retry() -> Retry:
    """The driver must never re-send on its own (see the module docstring)."""
    return Retry(NoBackoff(), 0)


def pack(commands: Sequence[Sequence[Arg]]) -> bytes:
    """The RESP bytes of ``commands`` (what the driver's packer makes, in one join).

    A commit's script call has some fifty arguments; the driver encodes and concatenates
    them one by one, which showed up as a few percent of a worker's CPU.
    """
    out: list[bytes] = []
    for args in commands:
        out.append(b"*%d\r\n" % len(args))
        for arg in args:
            if isinstance(arg, str):
                data = arg.encode()
            elif isinstance(arg, bytes):
                data = arg
            elif isinstance(arg, int) and not isinstance(arg, bool):
                data = b"%d" % arg
            else:
                raise TypeError(f"cannot send {type(arg).__name__} to Redis")
            out += (b"$%d\r\n" % len(data), data, b"\r\n")
    return b"".join(out)


def cancel_requests() -> int:
    """How many times the current task was asked to stop (``Task.cancelling``)."""
    task = asyncio.current_task()
    return 0 if task is None else task.cancelling()


def keep_cancel(since: int) -> None:
    """Raise ``CancelledError`` if the task was asked to stop since ``since``
    (:func:`cancel_requests` then). The driver can swallow a cancellation that lands in
    one of its own waits (Python 3.11's ``wait_for`` race, e.g. while it connects), and
    the task would run on as if never cancelled: a stream or a listener that cannot be
    stopped. Checked once a command is over, so a cancel is never lost in here."""
    if cancel_requests() > since:
        raise asyncio.CancelledError


#: How long a command waits for a pooled connection to come free before it is not sent.
ROOM_WAIT = 10.0


_C = TypeVar("_C")


async def _ready(make: Callable[[], _C]) -> _C:
    return make()


async def _with_room(acquire: Callable[[], Awaitable[_C]]) -> _C:
    """A pooled connection, waiting (up to :data:`ROOM_WAIT`) while the pool is at its
    limit: redis-py refuses at once (``MaxConnectionsError``), which under a burst of
    callers (a hundred streams re-reading after one commit) would fail commands that
    only had to queue."""
    delay = 0.001
    deadline = time.monotonic() + ROOM_WAIT
    while True:
        try:
            return await acquire()
        except rx.MaxConnectionsError:
            if time.monotonic() >= deadline:
                raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)


class Transport(abc.ABC):
    """Where commands go. Subclasses say how a connection for a key is found."""

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    @abc.abstractmethod
    async def _acquire(self, key: str) -> tuple[AbstractConnection, Any]:
        raise NotImplementedError

    @abc.abstractmethod
    async def _release(self, connection: AbstractConnection, owner: Any) -> None:
        raise NotImplementedError

    async def _refresh(self) -> bool:
        """Reload the slot map after ``MOVED``; ``False`` where there is none."""
        return False

    def _node_of(self, key: str) -> object:
        """Which node serves ``key`` (calls for one node share a pipeline)."""
        return None

    @abc.abstractmethod
    async def each_primary(self, *args: Arg) -> list[tuple[str, Any]]:
        """Send one command to every primary: ``(node name, reply or StoreError)``."""
        raise NotImplementedError

    @abc.abstractmethod
    def subscriber(self) -> Redis:
        """A plain client on one node, for pub/sub (classic pub/sub spans a cluster)."""
        raise NotImplementedError

    async def _send(self, key: str, args: Sequence[Arg]) -> Any:
        try:
            connection, owner = await self._acquire(key)
        except rx.AuthenticationError as exc:
            raise PermanentStoreError(f"redis authentication failed: {exc}") from exc
        except (*_TRANSPORT_ERRORS, rx.RedisError, rx.RedisClusterException) as exc:
            raise not_sent(exc) from exc  # e.g. a slot no node serves (a cluster change)
        try:
            try:
                await connection.send_packed_command(pack([args]))
            except _TRANSPORT_ERRORS as exc:
                await connection.disconnect()
                raise ambiguous(exc) from exc
            try:
                return await connection.read_response()
            except rx.ResponseError:
                raise
            except (*_TRANSPORT_ERRORS, rx.InvalidResponse) as exc:
                # two error *replies* the driver raises as connection errors: the server
                # answered, so the command did not run
                if isinstance(exc, rx.BusyLoadingError):
                    raise reply_error(exc) from exc
                if isinstance(exc, rx.AuthenticationError):
                    raise PermanentStoreError(f"redis authentication failed: {exc}") from exc
                await connection.disconnect()
                raise ambiguous(exc) from exc
        except BaseException as exc:
            if not isinstance(exc, StoreError | rx.ResponseError):
                # cancelled mid-command: an answer may still be on the wire
                await connection.disconnect()
            raise
        finally:
            await self._release(connection, owner)

    async def _routed(self, key: str, args: Sequence[Arg]) -> Any:
        since = cancel_requests()
        try:
            for attempt in range(_MOVED_RETRIES + 1):
                try:
                    return await self._send(key, args)
                except rx.MovedError as exc:
                    if attempt == _MOVED_RETRIES or not await self._refresh():
                        raise reply_error(exc) from exc
            raise AssertionError("unreachable")  # pragma: no cover
        finally:
            keep_cancel(since)

    async def command(self, key: str, *args: Arg) -> Any:
        """One command routed by ``key``; error replies raise a :class:`StoreError`."""
        try:
            return await self._routed(key, args)
        except rx.ResponseError as exc:
            raise reply_error(exc) from exc

    async def eval(self, script: Script, keys: Sequence[str], args: Sequence[Arg]) -> Any:
        """Run ``script`` on the node of ``keys[0]`` (``EVALSHA``, ``EVAL`` on NOSCRIPT)."""
        call: list[Arg] = [len(keys), *keys, *args]
        try:
            try:
                return await self._routed(keys[0], ["EVALSHA", script.sha, *call])
            except rx.NoScriptError:
                return await self._routed(keys[0], ["EVAL", script.body, *call])
        except rx.ResponseError as exc:
            raise reply_error(exc) from exc

    async def eval_many(
        self, script: Script, calls: Sequence[tuple[Sequence[str], Sequence[Arg]]]
    ) -> list[Any]:
        """Run ``script`` once per ``(keys, args)``: each reply, or the :class:`StoreError`
        that call met, in order. One pipeline per node; see the module's docs."""
        await self.start()
        by_node: dict[object, list[int]] = {}
        for index, (keys, _) in enumerate(calls):
            by_node.setdefault(self._node_of(keys[0]), []).append(index)
        answers: list[Any] = [None] * len(calls)
        groups = list(by_node.values())
        since = cancel_requests()
        try:
            done = await asyncio.gather(
                *(self._pipelined(script, [calls[i] for i in group]) for group in groups)
            )
        finally:
            keep_cancel(since)
        for group, replies in zip(groups, done, strict=True):
            for index, reply in zip(group, replies, strict=True):
                answers[index] = reply
        for index, reply in enumerate(answers):
            if isinstance(reply, rx.NoScriptError | rx.MovedError):
                try:  # not run: send it alone (EVAL on NOSCRIPT, re-routed on MOVED)
                    answers[index] = await self.eval(script, *calls[index])
                except StoreError as exc:
                    answers[index] = exc
            elif isinstance(reply, rx.ResponseError):
                answers[index] = reply_error(reply)
        return answers

    async def _pipelined(
        self, script: Script, calls: Sequence[tuple[Sequence[str], Sequence[Arg]]]
    ) -> list[Any]:
        """The calls for one node on one connection; ``ResponseError`` replies are returned."""
        try:
            connection, owner = await self._acquire(calls[0][0][0])
        except rx.AuthenticationError as exc:
            return [PermanentStoreError(f"redis authentication failed: {exc}")] * len(calls)
        except (*_TRANSPORT_ERRORS, rx.RedisError, rx.RedisClusterException) as exc:
            return [not_sent(exc)] * len(calls)
        replies: list[Any] = []
        try:
            try:
                packed = pack(
                    [("EVALSHA", script.sha, len(keys), *keys, *args) for keys, args in calls]
                )
                await connection.send_packed_command(packed)
            except _TRANSPORT_ERRORS as exc:
                await connection.disconnect()
                return [ambiguous(exc)] * len(calls)
            for _ in calls:
                try:
                    replies.append(await connection.read_response())
                except rx.ResponseError as exc:
                    replies.append(exc)
                except rx.BusyLoadingError as exc:  # an error reply the driver raises oddly
                    replies.append(reply_error(exc))
                except rx.AuthenticationError as exc:
                    replies.append(PermanentStoreError(f"redis authentication failed: {exc}"))
                except (*_TRANSPORT_ERRORS, rx.InvalidResponse) as exc:
                    await connection.disconnect()
                    lost = ambiguous(exc)
                    return replies + [lost] * (len(calls) - len(replies))
        except BaseException:
            # cancelled mid-pipeline: answers may still be on the wire
            await connection.disconnect()
            raise
        finally:
            await self._release(connection, owner)
        return replies


class SingleTransport(Transport):
    """One Redis server (or a Sentinel-less primary): one connection pool."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self._url = url
        self._options = options
        self._client: Redis = Redis.from_url(url, retry=no_retry(), **options)

    async def close(self) -> None:
        await self._client.aclose()

    async def _acquire(self, key: str) -> tuple[AbstractConnection, Any]:
        pool = self._client.connection_pool
        return await _with_room(lambda: _untyped(pool.get_connection)), pool

    async def _release(self, connection: AbstractConnection, owner: Any) -> None:
        await owner.release(connection)

    async def each_primary(self, *args: Arg) -> list[tuple[str, Any]]:
        kwargs = self._client.connection_pool.connection_kwargs
        name = f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
        try:
            return [(name, await self.command("", *args))]
        except StoreError as exc:
            return [(name, exc)]

    def subscriber(self) -> Redis:
        return Redis.from_url(
            _listening_url(self._url), retry=no_retry(), **_listening(self._options)
        )


class ClusterTransport(Transport):
    """A Redis Cluster: each command goes to the primary that serves its key's slot."""

    def __init__(self, url: str, options: dict[str, Any]) -> None:
        self._url = url
        self._options = options
        self._cluster = RedisCluster.from_url(url, retry=no_retry(), **options)
        self._started = False

    async def start(self) -> None:
        if not self._started:
            try:
                await self._cluster.initialize()
            except (*_TRANSPORT_ERRORS, rx.RedisError, rx.RedisClusterException) as exc:
                raise not_sent(exc) from exc
            self._started = True

    async def close(self) -> None:
        await self._cluster.aclose()
        self._started = False

    async def _acquire(self, key: str) -> tuple[AbstractConnection, Any]:
        await self.start()
        node = self._cluster.get_node_from_key(key)
        if node is None:
            raise rx.ConnectionError(f"no node serves the slot of {key!r}")
        connection = await _with_room(lambda: _ready(node.acquire_connection))
        try:
            await _untyped(connection.connect)
        except BaseException:
            node.release(connection)
            raise
        return connection, node

    async def _release(self, connection: AbstractConnection, owner: Any) -> None:
        node: ClusterNode = owner
        node.release(connection)  # type: ignore[arg-type]  # it came from this node

    def _node_of(self, key: str) -> object:
        node = self._cluster.get_node_from_key(key)
        return None if node is None else node.name

    async def _refresh(self) -> bool:
        try:
            await self._cluster.nodes_manager.initialize()
        except (*_TRANSPORT_ERRORS, rx.RedisError):
            return False
        return True

    async def each_primary(self, *args: Arg) -> list[tuple[str, Any]]:
        await self.start()
        out: list[tuple[str, Any]] = []
        for node in self._cluster.get_primaries():
            try:
                connection = node.acquire_connection()
                try:
                    await _untyped(connection.connect)
                    await connection.send_command(*args)
                    out.append((node.name, await connection.read_response()))
                finally:
                    node.release(connection)
            except rx.ResponseError as exc:
                out.append((node.name, reply_error(exc)))
            except (*_TRANSPORT_ERRORS, rx.RedisError, rx.RedisClusterException) as exc:
                out.append((node.name, not_sent(exc)))
        return out

    def subscriber(self) -> Redis:
        # the node named in the URL; classic PUBLISH reaches every node of a cluster
        return Redis.from_url(
            _listening_url(self._url), retry=no_retry(), **_listening(self._options)
        )


__all__ = [
    "SCRIPT_NAMES",
    "ClusterTransport",
    "Script",
    "SingleTransport",
    "Transport",
    "cancel_requests",
    "keep_cancel",
    "load_scripts",
    "no_retry",
]
