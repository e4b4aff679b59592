"""The ``docket`` command line.

Graph documents (no backend needed)::

    docket graph check FILE.json      diagnostics (exit 1 on errors, 0 with warnings only);
                                      --app checks against the app's node registry
    docket graph hash FILE.json       the graph hash of the effective document
    docket graph render FILE.json --format mermaid|dot

Against a backend (``--backend URL`` or ``DOCKET_BACKEND``; ``--app module:attr`` uses an
application's :class:`~docket.Docket` — its backend, node registry and tenant mode)::

    docket graph publish FILE.json    compile and store; prints the graph reference
    docket graph list [GRAPH]         a graph's versions (or the graphs runs use)
    docket runs start GRAPH [--input JSON] [--run-id ID]
    docket runs list|show|events|watch|cancel|retry|resolve|send
    docket runs history|show-at|fork|edit     state history (docs/history.md)
    docket schedules create|list|show|pause|resume|delete|trigger    cron schedules
    docket queues list|set-limit|set-rate|pause|resume     named queues' limits
    docket worker --app module:attr [--concurrency N] [--processes N] [--ui-port N]
                  [--prune-events-after DUR] [--prune-runs-after DUR] [--prune-every DUR]
    docket ui [--host 127.0.0.1] [--port 8787] [--token T] [--worker]   the web console
    docket migrate [--sql]            upgrade the store's schema (or print its DDL)
    docket backup DEST                a consistent copy of a SQLite database
    docket prune --events-older-than 7d --runs-older-than 30d   retention
    docket backends                   installed backends (and the chosen one's capabilities)

Output is a human-readable table or text; ``--json`` prints JSON for scripts. Exit codes:
0 success, 1 a refused request, a store that cannot be reached or a document with errors
(the typed error is one ``docket: ...`` line on stderr, then its reasons), 2 usage, file
or configuration errors (a SQLite file that ``runs``/``graph list`` would have to create is
one), 141 when the reader of stdout went away (``docket ... | head``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence

from docket.cli._admin import _add_admin_commands
from docket.cli._common import _Failed, load_app
from docket.cli._graphs import _add_graph_commands
from docket.cli._history import add_history_commands
from docket.cli._output import error_explanation, one_line
from docket.cli._queues import add_queue_commands
from docket.cli._runs import _add_run_commands
from docket.cli._schedules import _add_schedule_commands
from docket.cli._ui import _add_ui_command
from docket.cli._worker import _add_worker_command
from docket.contract.errors import StoreError
from docket.errors import DocketError, from_contract

__all__ = ["load_app", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="docket", description="docket workflow engine")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_graph_commands(commands)
    _add_run_commands(commands)
    add_history_commands(commands)  # under ``runs``, and ``prune``
    _add_schedule_commands(commands)
    add_queue_commands(commands)
    _add_worker_command(commands)
    _add_admin_commands(commands)
    _add_ui_command(commands)
    args = parser.parse_args(argv)
    try:
        code: int = args.run(args)
        sys.stdout.flush()  # a reader that went away shows here, not in the exit flush
    except _Failed as failed:
        return failed.code
    except DocketError as exc:
        _print_error(args, exc)
        return 1
    except StoreError as exc:  # the store could not be opened or reached
        _print_error(args, from_contract(exc.outcome))
        return 1
    except BrokenPipeError:
        return _reader_gone()
    except KeyboardInterrupt:
        return 130
    return code


def _print_error(args: argparse.Namespace, exc: DocketError) -> None:
    if getattr(args, "json", False):
        print(json.dumps({"error": exc.to_dict()}, ensure_ascii=False), file=sys.stderr)
    else:
        print(f"docket: {one_line(str(exc))}", file=sys.stderr)
        for line in error_explanation(exc):
            print(f"  {line}", file=sys.stderr)


def _reader_gone() -> int:
    """``docket ... | head``: the reader closed the pipe. Stop quietly with the status of
    a command killed by SIGPIPE; stdout now points at /dev/null so that the interpreter's
    final flush does not fail again."""
    with contextlib.suppress(OSError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    return 128 + signal.SIGPIPE
