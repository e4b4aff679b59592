"""Connecting the command line to a backend or an application, and stopping a command."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import sys
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from docket._sync import SyncDocket
from docket.contract.protocols import Backend
from docket.contract.registry import UnknownBackend, from_url
from docket.facade import Docket

ENV_BACKEND = "DOCKET_BACKEND"
ENV_UI_TOKEN = "DOCKET_UI_TOKEN"

_T = TypeVar("_T")


class _Failed(Exception):
    """Stop a command with an exit code (the message is already printed)."""

    def __init__(self, code: int) -> None:
        self.code = code


def _fail(message: str, code: int = 2) -> _Failed:
    print(f"docket: {message}", file=sys.stderr)
    return _Failed(code)


def _connection_options(parser: argparse.ArgumentParser, *, tenant: bool = True) -> None:
    parser.add_argument(
        "--backend",
        metavar="URL",
        default=None,
        help=f"backend URL, e.g. sqlite:///app.db (default: ${ENV_BACKEND})",
    )
    parser.add_argument(
        "--app",
        metavar="MODULE:ATTR",
        default=None,
        help="use an application's Docket (or a factory returning one): its backend, "
        "nodes and tenant mode",
    )
    if tenant:
        parser.add_argument("--tenant", metavar="ID", default=None, help="the tenant to act as")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")


def load_app(spec: str) -> Docket:
    """The :class:`Docket` named by ``module:attr`` (a Docket, a SyncDocket, or a callable
    returning either). The current directory is importable, as for ``python -m``."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise _fail(f"--app expects MODULE:ATTR, got {spec!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        target: object = importlib.import_module(module_name)
    except ImportError as exc:
        raise _fail(f"cannot import {module_name!r}: {exc}") from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise _fail(f"{module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not isinstance(target, Docket | SyncDocket) and callable(target):
        try:
            target = target()
        except Exception as exc:  # the app's own configuration (a missing variable, ...)
            raise _fail(f"{spec} failed: {type(exc).__name__}: {exc}") from None
    if isinstance(target, SyncDocket):
        target = target.docket
    if not isinstance(target, Docket):
        raise _fail(f"{spec} is not a docket.Docket (nor a factory returning one)")
    return target


def _backend_url(args: argparse.Namespace) -> str | None:
    url = args.backend or os.environ.get(ENV_BACKEND)
    return url or None


def _docket(args: argparse.Namespace) -> Docket:
    url = _backend_url(args)
    tenant = getattr(args, "tenant", None)
    if args.app:
        app = load_app(args.app)
        if url is None or args.backend is None:
            return app
        return Docket(url, nodes=app.nodes, tenant_mode=app.tenant_mode, settings=app.settings)
    if url is None:
        raise _fail(f"no backend: pass --backend URL or set {ENV_BACKEND}")
    return Docket(url, tenant_mode="required" if tenant is not None else "none")


def _raw_backend(args: argparse.Namespace) -> Backend:
    url = _backend_url(args)
    if args.app and args.backend is None:
        return load_app(args.app).backend
    if url is None:
        raise _fail(f"no backend: pass --backend URL or set {ENV_BACKEND}")
    try:
        return from_url(url)
    except (UnknownBackend, ValueError, TypeError) as exc:
        raise _fail(str(exc)) from None


def _with_docket(
    args: argparse.Namespace,
    action: Callable[[Docket], Awaitable[_T]],
    *,
    must_exist: bool = False,
) -> _T:
    docket = _docket(args)
    if must_exist:  # commands that only read or change existing runs
        _require_existing_store(docket.backend)

    async def go() -> _T:
        async with docket:
            return await action(docket)

    return _run(go())


def _run(coro: Coroutine[Any, Any, _T]) -> _T:
    return asyncio.run(coro)


def _require_existing_store(backend: Backend) -> None:
    """Refuse to read a file store that does not exist: opening it would create an empty
    database, so a mistyped path would look like a store with no runs."""
    path = getattr(backend, "path", None)  # file backends (SQLite) name their file
    if isinstance(path, str) and not os.path.exists(path):
        raise _fail(
            f"no database at {path}: this command creates none "
            "(check the path; `docket migrate` creates a new store)"
        )
