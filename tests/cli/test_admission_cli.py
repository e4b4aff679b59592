"""``docket queues set-admission|held`` and the admission columns of ``docket queues
list``: through ``docket.cli.main`` in this process over a shared memory backend (its
admission ledger is the reference every backend answers as). Refused input exits
non-zero with its reason and leaves the stored queues as they were."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from docket import SyncDocket
from docket.backends import from_url
from docket.cli import main
from docket.contract.capabilities import Capabilities, Feature
from docket.contract.memory import MemoryBackend
from docket.records import Admission, QueueStatus
from tests.cli import queues_app
from tests.cli.helpers import docket_cli, explain

APP = ["--app", "tests.cli.queues_app:create"]
HEADERS = ["NAME", "LIMIT", "RATE", "PAUSED", "RUNNING", "DEPTH"]


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main([*args[:2], *APP, *args[2:]])
    out, err = capsys.readouterr()
    return code, out, err


def rows_of(out: str) -> list[list[str]]:
    return [line.split() for line in out.splitlines()]


def stored() -> list[QueueStatus]:
    async def read() -> list[QueueStatus]:
        async with queues_app.create() as docket:
            return list(await docket.queues())

    return asyncio.run(read())


def admit(queue: str, run_id: str, tenant: str | None = None, priority: int = 0) -> Admission:
    """One start through the store's admission ledger, as the runtime's ``start_run``
    asks for it (the opaque start is the runtime's; any bytes do here)."""
    found = asyncio.run(
        queues_app.BACKEND.admissions.admit(queue, run_id, tenant, priority, b"start")
    )
    assert isinstance(found, Admission), found
    return found


@pytest.fixture(autouse=True)
def fresh_app() -> None:
    queues_app.reset()


def test_set_admission_and_the_admission_columns_of_list(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = cli(capsys, "queues", "set-admission", "onboarding", "2", "--per-tenant", "1")
    assert code == 0, err
    assert rows_of(out) == [
        [*HEADERS, "ADMISSION", "PER-TENANT", "ADMITTED", "HELD"],
        ["onboarding", "none", "none", "no", "-", "0", "2", "1", "0", "0"],
    ]
    assert admit("onboarding", "r1", "acme") is Admission.ADMITTED
    assert admit("onboarding", "r2", "acme") is Admission.HELD  # acme is at its cap of 1
    assert admit("onboarding", "r3", "zeta") is Admission.ADMITTED
    assert admit("onboarding", "r4", "omni") is Admission.HELD  # the queue is at its cap of 2

    code, out, err = cli(capsys, "queues", "list")
    assert code == 0, err
    assert rows_of(out)[1:] == [
        ["default", "none", "none", "no", "-", "0", "none", "none", "0", "0"],
        ["onboarding", "none", "none", "no", "-", "0", "2", "1", "2", "2"],
    ]
    code, out, err = cli(capsys, "queues", "list", "--json")
    assert code == 0, err
    default, onboarding = json.loads(out)
    assert "admitted" not in default  # a queue without admission lists as it always did
    assert {k: onboarding[k] for k in ("admission_limit", "tenant_admission_limit")} == {
        "admission_limit": 2,
        "tenant_admission_limit": 1,
    }
    assert (onboarding["admitted"], onboarding["held"]) == (2, 2)

    # without --per-tenant the stored per-tenant limit is kept; none removes a limit
    code, out, err = cli(capsys, "queues", "set-admission", "onboarding", "3", "--json")
    assert code == 0, err
    changed: dict[str, Any] = json.loads(out)
    assert (changed["admission_limit"], changed["tenant_admission_limit"]) == (3, 1)
    code, out, err = cli(
        capsys, "queues", "set-admission", "onboarding", "none", "--per-tenant", "none", "--json"
    )
    assert code == 0, err
    changed = json.loads(out)
    # no limit any more, but the ledger still counts what it admitted and held
    assert (changed["admission_limit"], changed["tenant_admission_limit"]) == (None, None)
    assert (changed["admitted"], changed["held"]) == (2, 2)
    assert [s.config.admission_limited for s in stored()] == [False, False]


def test_held_lists_admitted_then_held_starts_in_promotion_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli(capsys, "queues", "set-admission", "onboarding", "1")[0] == 0
    admit("onboarding", "first", "acme")
    admit("onboarding", "low", "zeta", priority=-5)
    admit("onboarding", "urgent", "omni", priority=10)
    admit("onboarding", "plain")  # tenantless

    code, out, err = cli(capsys, "queues", "held", "onboarding")
    assert code == 0, err
    rows = rows_of(out)
    assert rows[0] == ["STATE", "RUN", "TENANT", "PRIORITY", "SINCE"]
    # SINCE is a date and a time: two words
    assert [row[:4] for row in rows[1:]] == [
        ["admitted", "first", "acme", "0"],
        ["held", "urgent", "omni", "10"],
        ["held", "plain", "-", "0"],
        ["held", "low", "zeta", "-5"],
    ]
    assert all(len(row) == 6 for row in rows[1:])

    code, out, err = cli(capsys, "queues", "held", "onboarding", "--json", "--limit", "2")
    assert code == 0, err
    listed = json.loads(out)
    # at most 2 of each: both admitted (one) and held (the first two) are cut at the limit
    assert [(s["state"], s["run_id"], s["tenant"], s["seq"]) for s in listed] == [
        ("admitted", "first", "acme", 1),
        ("held", "urgent", "omni", 3),
        ("held", "plain", None, 4),
    ]
    assert all(s["since"].endswith("Z") for s in listed)

    # a queue with nothing admitted or held lists only the header
    code, out, err = cli(capsys, "queues", "held", "default")
    assert (code, rows_of(out)) == (0, [["STATE", "RUN", "TENANT", "PRIORITY", "SINCE"]]), err


@pytest.mark.parametrize(
    ("args", "code", "reason"),
    [
        (("set-admission", "onboarding", "abc"), 2, "admission limit: expected a whole number"),
        (("set-admission", "onboarding", "1.5"), 2, "admission limit: expected a whole number"),
        (
            ("set-admission", "onboarding", "2", "--per-tenant", "x"),
            2,
            "per-tenant limit: expected a whole number",
        ),
        (
            ("set-admission", "onboarding", "0"),
            1,
            "admission_limit: expected a positive integer or None, got 0",
        ),
        (
            ("set-admission", "onboarding", "2", "--per-tenant", "-1"),
            1,
            "tenant_admission_limit: expected a positive integer or None, got -1",
        ),
        (("set-admission", "bad name", "2"), 1, "queue: expected 1-64 characters"),
        (("held", "nope"), 1, "no queue 'nope'"),
        (("held", "bad/name"), 1, "queue: expected 1-64 characters"),
        (("held", "onboarding", "--limit", "0"), 2, "--limit: expected a positive integer"),
    ],
)
def test_refused_input_exits_non_zero_with_its_reason_and_writes_nothing(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], code: int, reason: str
) -> None:
    assert cli(capsys, "queues", "set-admission", "onboarding", "3", "--per-tenant", "2")[0] == 0
    before = stored()

    got, out, err = cli(capsys, "queues", *args)
    assert (got, out) == (code, ""), err
    assert reason in err
    assert stored() == before


def test_refusals_print_json_errors_for_scripts(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(capsys, "queues", "set-admission", "onboarding", "0", "--json")
    assert code == 1
    error = json.loads(err)["error"]
    assert error["type"] == "invalid_options"
    assert error["details"]["reasons"] == [
        "admission_limit: expected a positive integer or None, got 0"
    ]
    assert [s.config.name for s in stored()] == ["default"]


class _NoAdmission(MemoryBackend):
    """A memory store declaring queues but not admission (a backend written before it)."""

    def capabilities(self) -> Capabilities:
        declared = super().capabilities()
        features = declared.features - {Feature.ADMISSION}
        return Capabilities(limits=declared.limits, features=features, name="no-admission")


def test_a_backend_without_admission_is_refused_with_the_reason(
    capsys: pytest.CaptureFixture[str],
) -> None:
    queues_app.BACKEND = _NoAdmission()
    for args in (("held", "default"), ("set-admission", "onboarding", "2")):
        code, out, err = cli(capsys, "queues", *args)
        assert (code, out) == (1, ""), err
        assert "admission" in err and "does not declare" in err, err
    assert [s.config.name for s in stored()] == ["default"]
    # the list still works there, without the admission columns
    code, out, err = cli(capsys, "queues", "list")
    assert code == 0 and "ADMITTED" not in out, err


SQLITE_ADMITS = Feature.ADMISSION in from_url("sqlite:///never-opened.db").capabilities().features


def test_the_installed_command_against_a_sqlite_file(tmp_path: Path) -> None:
    """The real ``docket`` script, one process per command, sharing a SQLite file whose
    runs were started through the facade (admitted, then held beyond the limit)."""
    db = tmp_path / "app.db"
    env = {"DOCKET_BACKEND": f"sqlite:///{db}"}
    with SyncDocket(f"sqlite:///{db}", nodes=queues_app.NODES) as docket:
        ref = docket.save_graph(queues_app.graph())
    made = docket_cli("queues", "set-admission", "onboarding", "2", env=env)
    if not SQLITE_ADMITS:  # a SQLite store without the admission ledger refuses, writing nothing
        assert made.returncode == 1, explain(made)
        assert "does not declare the admission feature" in made.stderr, explain(made)
        with SyncDocket(f"sqlite:///{db}") as docket:
            assert [s.config.name for s in docket.queues()] == ["default"]
        return
    assert made.returncode == 0, explain(made)
    with SyncDocket(f"sqlite:///{db}", nodes=queues_app.NODES) as docket:
        started = [docket.start_run(ref, run_id=f"o{n}", queue="onboarding") for n in range(3)]
    assert [str(run.status) for run in started] == ["running", "running", "queued"]
    shown = docket_cli("queues", "list", env=env)
    assert shown.returncode == 0, explain(shown)
    assert [line.split() for line in shown.stdout.splitlines()][2] == [
        *("onboarding", "none", "none", "no", "-", "2"),
        *("2", "none", "2", "1"),
    ]
    held = docket_cli("queues", "held", "onboarding", "--json", env=env)
    assert held.returncode == 0, explain(held)
    assert [(s["state"], s["run_id"]) for s in json.loads(held.stdout)] == [
        ("admitted", "o0"),
        ("admitted", "o1"),
        ("held", "o2"),
    ]
