"""Test support: a throwaway PostgreSQL server on 127.0.0.1, in a temporary directory.

::

    from docket_postgres.testing import ThrowawayPostgres

    with ThrowawayPostgres() as server:            # or: async with ThrowawayPostgres() ...
        url = server.url(schema="app")             # postgresql://postgres@127.0.0.1:PORT/docket?schema=app
        ...

``initdb`` and ``pg_ctl`` come from ``/usr/lib/postgresql/<version>/bin`` (the newest
version found), from ``$DOCKET_PG_BIN``, or from ``PATH``. The server listens on
127.0.0.1 only, on a free port, with trust authentication for local connections, its
data in a fresh temporary directory that is removed when it stops. It is tuned for tests,
not for keeping data: ``fsync``, ``synchronous_commit`` and ``full_page_writes`` are off.

PostgreSQL refuses to run as root, so when this process is root the server runs as the
``postgres`` operating-system user (created by Debian's ``postgresql`` package), through
``runuser`` or ``setpriv``; the temporary directory is handed to that user.

:func:`database_clock_backend` is a factory for the contract kit that builds backends
on the database clock (it takes no ``clock=``), reading the server URL from
``$DOCKET_POSTGRES_TEST_URL``.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import glob
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import psycopg
from psycopg import sql

if TYPE_CHECKING:
    from docket.contract import Limits
    from docket_postgres.backend import PostgresBackend

DATABASE = "docket"
SUPERUSER = "postgres"
URL_ENV = "DOCKET_POSTGRES_TEST_URL"

_SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "fsync": "off",
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "max_connections": "300",
    "shared_buffers": "'64MB'",
    "max_locks_per_transaction": "256",
    "log_min_messages": "'warning'",
    "log_statement": "'none'",
    "logging_collector": "off",
}


class ServerError(RuntimeError):
    """The throwaway server could not be started (the message says why)."""


def find_bin_dir() -> Path:
    """Where ``initdb`` and ``pg_ctl`` live."""
    configured = os.environ.get("DOCKET_PG_BIN")
    if configured:
        path = Path(configured)
        if (path / "initdb").exists():
            return path
        raise ServerError(f"DOCKET_PG_BIN={configured} has no initdb")
    candidates = glob.glob("/usr/lib/postgresql/*/bin/initdb")

    def version(path: str) -> tuple[int, ...]:
        match = re.search(r"/postgresql/([\d.]+)/", path)
        return tuple(int(p) for p in match.group(1).split(".")) if match else (0,)

    if candidates:
        return Path(max(candidates, key=version)).parent
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    raise ServerError(
        "no PostgreSQL server binaries (initdb, pg_ctl) found; install Debian's postgresql "
        "package (scripts/ensure-services does) or set DOCKET_PG_BIN"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _run_as_prefix() -> tuple[list[str], str | None]:
    """The command prefix that drops root to the ``postgres`` user, and that user."""
    if os.geteuid() != 0:
        return [], None
    try:
        pwd.getpwnam(SUPERUSER)
    except KeyError:
        raise ServerError(
            "running as root, but there is no 'postgres' OS user to run the server as; "
            "install Debian's postgresql package (it creates the user)"
        ) from None
    if shutil.which("runuser"):
        return ["runuser", "-u", SUPERUSER, "--"], SUPERUSER
    if shutil.which("setpriv"):
        return [
            "setpriv",
            f"--reuid={SUPERUSER}",
            f"--regid={SUPERUSER}",
            "--init-groups",
            "--",
        ], SUPERUSER
    raise ServerError("running as root, but neither runuser nor setpriv is available")


class ThrowawayPostgres:
    """A PostgreSQL server for one test session: start, use, stop (and delete).

    Works as a context manager (``with``) and as an async one (``async with``, which
    starts and stops the server in a worker thread so the event loop is not blocked).
    """

    def __init__(
        self,
        *,
        database: str = DATABASE,
        start_timeout: float = 60.0,
        settings: dict[str, str] | None = None,
    ) -> None:
        self.database = database
        self.start_timeout = start_timeout
        # overrides of the test tuning, e.g. {"synchronous_commit": "on"} for a server
        # that must keep every acknowledged commit through a crash of its own processes
        self.settings = {**_SETTINGS, **(settings or {})}
        self.port = 0
        self.host = "127.0.0.1"
        self.user = SUPERUSER
        self._root: Path | None = None
        self._bin: Path | None = None
        self._prefix: list[str] = []

    # -- addresses -----------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._root is not None

    @property
    def data_dir(self) -> Path:
        if self._root is None:
            raise ServerError("the server is not running")
        return self._root / "data"

    def conninfo(self, database: str | None = None) -> str:
        """A libpq URL without docket's options."""
        if not self.running:
            raise ServerError("the server is not running")
        return (
            f"postgresql://{self.user}@{self.host}:{self.port}/{quote(database or self.database)}"
        )

    def url(self, schema: str | None = None, database: str | None = None, **params: str) -> str:
        """A ``postgresql://`` URL for docket, with ``?schema=`` and other options."""
        query = dict(params)
        if schema is not None:
            query["schema"] = schema
        base = self.conninfo(database)
        if not query:
            return base
        return base + "?" + "&".join(f"{k}={v}" for k, v in query.items())

    # -- lifecycle -------------------------------------------------------------------------------

    def _run(self, *command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        assert self._bin is not None
        full = [*self._prefix, str(self._bin / command[0]), *command[1:]]
        done = subprocess.run(full, capture_output=True, text=True, check=False, timeout=120)
        if check and done.returncode != 0:
            raise ServerError(
                f"{command[0]} failed ({done.returncode}): {done.stderr.strip() or done.stdout}"
            )
        return done

    def start(self) -> ThrowawayPostgres:
        if self.running:
            return self
        self._bin = find_bin_dir()
        self._prefix, owner = _run_as_prefix()
        root = Path(tempfile.mkdtemp(prefix="docket-pg-"))
        self._root = root
        atexit.register(self.stop)
        try:
            if owner is not None:
                record = pwd.getpwnam(owner)
                os.chown(root, record.pw_uid, record.pw_gid)
            self._run(
                "initdb",
                "-D",
                str(root / "data"),
                "-U",
                SUPERUSER,
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--no-locale",
                "--no-sync",
            )
            last = ""
            for _ in range(5):  # a free port can be taken before the server binds it
                self.port = free_port()
                with open(root / "data" / "postgresql.auto.conf", "a") as conf:
                    conf.write(f"port = {self.port}\n")
                    conf.write(f"unix_socket_directories = '{root}'\n")
                    for key, value in self.settings.items():
                        conf.write(f"{key} = {value}\n")
                done = self._pg_ctl_start(root)
                if done.returncode == 0:
                    break
                last = self._log_tail()
            else:
                raise ServerError(f"the server did not start: {last}")
            self._create_database()
        except BaseException:
            self.stop()
            raise
        return self

    def _pg_ctl_start(self, root: Path) -> subprocess.CompletedProcess[str]:
        return self._run(
            "pg_ctl",
            "-D",
            str(root / "data"),
            "-l",
            str(root / "server.log"),
            "-w",
            "-t",
            str(int(self.start_timeout)),
            "start",
            check=False,
        )

    def stop_server(self, *, mode: str = "immediate") -> None:
        """Stop the server process but keep its data directory and port, for
        :meth:`start_server`. ``mode`` is pg_ctl's: ``immediate`` is a crash (recovery
        from the WAL at the next start), ``fast`` a clean shutdown."""
        if mode not in ("smart", "fast", "immediate"):
            raise ValueError(f"mode must be smart, fast or immediate, got {mode!r}")
        root = self._root
        if root is None:
            raise ServerError("the server is not running")
        self._run("pg_ctl", "-D", str(root / "data"), "-m", mode, "-w", "stop")

    def start_server(self) -> None:
        """Start the server stopped by :meth:`stop_server` again, same data, same port."""
        root = self._root
        if root is None:
            raise ServerError("the server was never started (or was removed)")
        done = self._pg_ctl_start(root)
        if done.returncode != 0:
            raise ServerError(f"the server did not start again: {self._log_tail()}")

    def restart(self, *, mode: str = "immediate", down_for: float = 0.0) -> None:
        """Stop the server (see :meth:`stop_server`), wait ``down_for`` seconds, start it
        again on the same port with the same data directory."""
        self.stop_server(mode=mode)
        if down_for > 0:
            time.sleep(down_for)
        self.start_server()

    def _log_tail(self) -> str:
        assert self._root is not None
        try:
            return (self._root / "server.log").read_text()[-2000:]
        except OSError:
            return "(no server log)"

    def _create_database(self) -> None:
        with psycopg.connect(self.conninfo("postgres"), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.database}"'.encode())

    def stop(self) -> None:
        root, self._root = self._root, None
        if root is None:
            return
        with contextlib.suppress(Exception):
            atexit.unregister(self.stop)
        if (root / "data" / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self._run("pg_ctl", "-D", str(root / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        return self.start()

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> ThrowawayPostgres:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)


async def connect(url: str) -> psycopg.AsyncConnection[Any]:
    """A plain autocommit connection (for poking at the database from a test)."""
    conn: psycopg.AsyncConnection[Any] = await psycopg.AsyncConnection.connect(url, autocommit=True)
    return conn


async def schema_catalog(url: str, schema: str) -> list[tuple[Any, ...]]:
    """What PostgreSQL knows about a schema's objects (relations, constraints, indexes,
    functions, triggers, columns), with the schema name blanked out: two stores hold the
    same objects when their catalogs compare equal (the upgrade tests)."""
    conn = await connect(url)
    try:
        found: list[tuple[Any, ...]] = []
        for query in (
            "SELECT c.relname, c.relkind, c.relnatts FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %(s)s",
            "SELECT t.relname, k.conname, replace(pg_get_constraintdef(k.oid), %(s)s, '@') "
            "FROM pg_constraint k JOIN pg_class t ON t.oid = k.conrelid "
            "JOIN pg_namespace n ON n.oid = t.relnamespace WHERE n.nspname = %(s)s",
            "SELECT indexname, replace(indexdef, %(s)s, '@') FROM pg_indexes "
            "WHERE schemaname = %(s)s",
            "SELECT p.proname, md5(replace(p.prosrc, n.nspname, '@')), p.proconfig, p.prorows "
            "FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = %(s)s",
            "SELECT t.tgname, replace(pg_get_triggerdef(t.oid), %(s)s, '@') FROM pg_trigger t "
            "JOIN pg_class c ON c.oid = t.tgrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %(s)s AND NOT t.tgisinternal",
            # column order and defaults: the added seq column must match a fresh store's
            "SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), "
            "a.attnotnull, pg_get_expr(d.adbin, d.adrelid) FROM pg_attribute a "
            "JOIN pg_class c ON c.oid = a.attrelid "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
            "WHERE n.nspname = %(s)s AND c.relkind = 'r' AND a.attnum > 0 "
            "AND NOT a.attisdropped",
        ):
            cur = await conn.execute(query, {"s": schema})
            found.extend(sorted(await cur.fetchall(), key=repr))
        return found
    finally:
        await conn.close()


async def hold_slot(url: str, schema: str, queue: str, holder: str, ttl: timedelta) -> None:
    """A slot of ``queue`` held by ``holder`` until ``ttl`` from now, written as any
    release's ``acquire_slots`` leaves one (the upgrade tests seed older stores with it:
    this release's ``acquire_slots`` needs the current schema's functions)."""
    conn = await connect(url)
    try:
        await conn.execute(
            sql.SQL(
                "INSERT INTO {}.queue_slots (queue, holder, expires_at) "
                "VALUES (%s, %s, clock_timestamp() + %s)"
            ).format(sql.Identifier(schema)),
            (queue, holder.encode(), ttl),
        )
    finally:
        await conn.close()


async def open_backend(url: str, schema: str, **options: Any) -> PostgresBackend:
    """A :class:`~docket_postgres.PostgresBackend` on ``schema``, opened."""
    from docket_postgres.backend import PostgresBackend

    backend = PostgresBackend(url, schema=schema, **options)
    await backend.open()
    return backend


def database_clock_backend(namespace: str, limits: Limits | None = None) -> PostgresBackend:
    """A kit factory: a backend on the database's own clock, one schema per case.

    For ``pytest --pyargs docket_contract_tests --docket-backend-factory
    docket_postgres.testing:database_clock_backend`` with ``$DOCKET_POSTGRES_TEST_URL``
    naming the server (a URL without ``schema``). It does not take ``clock=``, so the
    kit runs on ``clock_timestamp()``.
    """
    from docket_postgres.backend import PostgresBackend

    url = os.environ.get(URL_ENV)
    if not url:
        raise RuntimeError(f"set {URL_ENV} to the PostgreSQL URL the kit should use")
    return PostgresBackend.from_url(url, schema=f"kitdb_{namespace}", limits=limits)


__all__ = [
    "DATABASE",
    "URL_ENV",
    "ServerError",
    "ThrowawayPostgres",
    "connect",
    "database_clock_backend",
    "find_bin_dir",
    "free_port",
    "hold_slot",
    "open_backend",
    "schema_catalog",
]
