"""``docket ui``: serve the web console."""

from __future__ import annotations

import argparse
import os
import sys

from docket.cli._common import (
    ENV_UI_TOKEN,
    _connection_options,
    _docket,
    _fail,
)


def _add_ui_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    ui = commands.add_parser("ui", help="serve the web console")
    _connection_options(ui, tenant=False)
    ui.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    ui.add_argument("--port", type=int, default=8787, help="port (default 8787)")
    ui.add_argument(
        "--token",
        default=None,
        help=f"access token every page needs (default: ${ENV_UI_TOKEN}; none: open console)",
    )
    ui.add_argument(
        "--worker",
        action="store_true",
        help="also run a worker in this process (needs --app for the node implementations)",
    )
    ui.set_defaults(run=_ui)


def _ui(args: argparse.Namespace) -> int:
    try:
        from docket.ui.serve import serve
    except ImportError as exc:
        raise _fail(f"the console needs the ui extra (pip install 'docket[ui]'): {exc}") from None
    if not 0 < args.port < 65536:
        raise _fail("--port must be 1..65535")
    if args.worker and not args.app:
        raise _fail("--worker needs --app (a worker runs the application's nodes)")
    token = args.token or os.environ.get(ENV_UI_TOKEN) or None
    docket = _docket(args)
    if args.host not in ("127.0.0.1", "localhost", "::1") and token is None:
        print(
            f"docket ui: warning: listening on {args.host} without an access token",
            file=sys.stderr,
        )
    print(f"docket console on http://{args.host}:{args.port}/", file=sys.stderr, flush=True)
    serve(docket, host=args.host, port=args.port, token=token, run_worker=args.worker)
    return 0
