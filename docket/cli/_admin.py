"""``docket migrate``, ``docket backup`` and ``docket backends``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from docket.cli._common import (
    _backend_url,
    _connection_options,
    _fail,
    _raw_backend,
    _run,
)
from docket.cli._output import (
    _emit,
    _table,
)
from docket.contract.capabilities import BackendContractError, negotiate
from docket.contract.registry import UnknownBackend, available, from_url
from docket.values import JSONValue


def _add_admin_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    migrate = commands.add_parser("migrate", help="upgrade the store's schema to this release")
    _connection_options(migrate, tenant=False)
    migrate.add_argument("--sql", action="store_true", help="print the schema's DDL instead")
    migrate.set_defaults(run=_migrate)

    backup = commands.add_parser("backup", help="copy a consistent snapshot (SQLite)")
    _connection_options(backup, tenant=False)
    backup.add_argument("destination", type=Path, metavar="DEST")
    backup.set_defaults(run=_backup)

    backends = commands.add_parser("backends", help="installed backends and capabilities")
    backends.add_argument("--backend", metavar="URL", default=None, help="also negotiate this")
    backends.add_argument("--json", action="store_true")
    backends.set_defaults(run=_backends, app=None)


def _migrate(args: argparse.Namespace) -> int:
    backend = _raw_backend(args)
    schema_versions = getattr(backend, "schema_versions", None)
    migrate = getattr(backend, "migrate", None)
    schema_sql = getattr(backend, "schema_sql", None)
    if not (callable(schema_versions) and callable(migrate) and callable(schema_sql)):
        raise _fail(f"{backend!r} has no versioned schema to migrate", code=1)
    if args.sql:
        sys.stdout.write(str(schema_sql()))
        return 0

    async def go() -> tuple[object, object]:
        try:
            result = await migrate()
        finally:
            await backend.close()
        assert isinstance(result, tuple) and len(result) == 2
        return result[0], result[1]

    try:
        found, current = _run(go())
    except (ValueError, OSError) as exc:
        raise _fail(str(exc), code=1) from None
    except Exception as exc:  # the store's own errors (schema too new, unreadable file)
        raise _fail(f"migration failed: {exc}", code=1) from None
    if args.json:
        _emit({"from_version": _json_int(found), "to_version": _json_int(current)})
    elif found == current:
        print(f"{backend!r}: schema is current (version {current})")
    else:
        print(f"{backend!r}: migrated schema from version {found or 'none'} to {current}")
    return 0


def _json_int(value: object) -> JSONValue:
    return value if isinstance(value, int) else None


def _backup(args: argparse.Namespace) -> int:
    backend = _raw_backend(args)
    copy = getattr(backend, "backup", None)
    if not callable(copy):
        raise _fail(f"{backend!r} cannot make backups; use the database's own tools", code=1)

    async def go() -> None:
        try:
            await backend.open()
            await copy(args.destination)
        finally:
            await backend.close()

    try:
        _run(go())
    except (ValueError, OSError) as exc:
        raise _fail(str(exc), code=1) from None
    except Exception as exc:
        raise _fail(f"backup failed: {exc}", code=1) from None
    destination = str(args.destination.resolve())
    if args.json:
        _emit({"backup": destination})
    else:
        print(f"backed up {backend!r} to {destination}")
    return 0


def _backends(args: argparse.Namespace) -> int:
    factories = available()
    report: dict[str, JSONValue] = {
        "installed": [
            {"name": f.name, "schemes": list(f.schemes), "description": f.description}
            for f in sorted(factories.values(), key=lambda f: f.name)
        ]
    }
    url = _backend_url(args)
    if url is not None:
        try:
            backend = from_url(url)
            caps = negotiate(backend)
        except (UnknownBackend, ValueError, TypeError, BackendContractError) as exc:
            raise _fail(f"{url}: {exc}", code=1) from None
        limits = caps.limits
        report["backend"] = {
            "url": url,
            "name": caps.name,
            "contract_version": caps.contract_version,
            "transitions_version": caps.transitions_version,
            "features": list[JSONValue](sorted(caps.features)),
            "limits": {
                "max_events_per_transition": limits.max_events_per_transition,
                "max_event_bytes": limits.max_event_bytes,
                "max_run_bytes": limits.max_run_bytes,
                "max_graph_bytes": limits.max_graph_bytes,
                "max_id_bytes": limits.max_id_bytes,
            },
            "migratable": callable(getattr(backend, "migrate", None)),
            "backup": callable(getattr(backend, "backup", None)),
        }
    if args.json:
        _emit(report)
        return 0
    rows = [
        [f.name, ", ".join(s + "://" for s in f.schemes), f.description]
        for f in sorted(factories.values(), key=lambda f: f.name)
    ]
    _table(("BACKEND", "SCHEMES", "DESCRIPTION"), rows)
    chosen = report.get("backend")
    if isinstance(chosen, dict):
        print()
        for key in ("url", "name", "contract_version", "transitions_version"):
            print(f"{key:<26} {chosen[key]}")
        features = chosen["features"]
        assert isinstance(features, list)
        print(f"{'features':<26} {', '.join(str(f) for f in features) or '-'}")
        chosen_limits = chosen["limits"]
        assert isinstance(chosen_limits, dict)
        for key, value in chosen_limits.items():
            print(f"{key:<26} {value}")
        print(f"{'migrate / backup':<26} {chosen['migratable']} / {chosen['backup']}")
    return 0
