"""The docket contract kit as a pytest plugin (entry point ``pytest11: docket_contract``).

Run the kit against a backend::

    pytest --pyargs docket_contract_tests --docket-backend memory://
    pytest --pyargs docket_contract_tests --docket-backend 'sqlite:///tmp/{namespace}.db'
    pytest --pyargs docket_contract_tests --docket-backend-factory my_pkg.testing:make_backend

``{namespace}`` in the URL is replaced by a fresh name per case, so a database backend
can give every case an empty store. A factory is called with the keyword arguments it
accepts among ``clock`` (a :class:`~docket.clock.ManualClock`), ``limits`` and
``namespace``. Every case must start from an empty store.

The kit's own cases are collected only when a backend is given; otherwise they are left
out of collection (and the header says why), so the plugin costs nothing in other runs.
Cases are ``async def``: the plugin runs each in a fresh event loop, opening the backend
before and closing it after. Each case carries ``@pytest.mark.docket_invariant(ID)``;
the id is part of the node id (``test_x[ID]``), of every assertion message and of the
JUnit properties, and a failing case's report ends with a link to the id's row in the
invariant catalogue (``docs/invariants.md#ID``). ``--docket-invariant ID`` (repeatable,
comma-separated) selects cases.

Cases of an optional feature (``notify``, ``durable``, ``durable.fsync``, ``prune``,
``reopen_failed``, ``child_runs``, ``timers``, ``messages``, ``schedules``, ``streams``,
``queues``, ``admission``) check it when the backend declares it and nothing otherwise; the terminal
summary says, per feature, whether it was declared and how its cases went. The durability cases open
the same store again: the same URL and ``{namespace}``, or the factory called again with
the same ``namespace=`` (docs/kit-promises.md).
"""

from __future__ import annotations

import asyncio
import importlib
import inspect
import itertools
import os
import secrets
from collections.abc import Callable, Coroutine, Generator
from pathlib import Path
from typing import Any

import pytest

from docket.clock import ManualClock
from docket.contract import Backend, Feature, RunListQuery
from docket.records import SYSTEM
from docket_contract_tests.kit import CLOCK_START, FEATURES_SEEN, Kit, Subject, catalogue_link

KIT_DIR = Path(__file__).resolve().parent
MARKER = "docket_invariant"
CASE_TIMEOUT = 60.0
_counter = itertools.count(1)
_FAILED_IDS: set[str] = set()  # invariant ids with a failing case, for the feature summary


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("docket", "docket contract kit")
    group.addoption(
        "--docket-backend",
        metavar="URL",
        default=None,
        help="backend URL to run the contract kit against; '{namespace}' is replaced by a "
        "fresh name per case",
    )
    group.addoption(
        "--docket-backend-factory",
        metavar="MODULE:CALLABLE",
        default=None,
        help="a callable returning a docket Backend (called with the keywords it accepts "
        "among clock=, limits=, namespace=)",
    )
    group.addoption(
        "--docket-rounds",
        metavar="N",
        type=int,
        default=50,
        help="repetitions of every concurrency case, each with fresh runs (default 50)",
    )
    group.addoption(
        "--docket-invariant",
        metavar="ID",
        action="append",
        default=[],
        help="run only the cases of these invariant ids (repeatable, comma-separated)",
    )


def pytest_configure(config: pytest.Config) -> None:
    FEATURES_SEEN.clear()
    _FAILED_IDS.clear()
    config.addinivalue_line(
        "markers", f"{MARKER}(id): the docket contract invariant a kit case checks"
    )


def _configured(config: pytest.Config) -> bool:
    return bool(
        config.getoption("docket_backend", None) or config.getoption("docket_backend_factory", None)
    )


def pytest_report_header(config: pytest.Config) -> str | None:
    url = config.getoption("docket_backend", None)
    factory = config.getoption("docket_backend_factory", None)
    if url and factory:
        raise pytest.UsageError("give either --docket-backend or --docket-backend-factory")
    if url or factory:
        return (
            f"docket contract kit: backend {url or factory}, "
            f"rounds {config.getoption('docket_rounds')}"
        )
    return None


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Leave the kit's cases out unless a backend to run them against was given."""
    if _configured(config):
        return None
    try:
        inside = collection_path.resolve().is_relative_to(KIT_DIR)
    except OSError:
        return None
    if inside and collection_path.name.startswith("test_"):
        return True
    return None


def pytest_collection_finish(session: pytest.Session) -> None:
    config = session.config
    if _configured(config) or not _asked_for_kit(config):
        return
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_line(
            "docket contract kit: no backend given (--docket-backend URL or "
            "--docket-backend-factory MODULE:CALLABLE); its cases were not collected",
            yellow=True,
        )


def _asked_for_kit(config: pytest.Config) -> bool:
    return any("docket_contract_tests" in str(arg) for arg in config.args)


# -- invariant ids: node ids, selection, reports ----------------------------------------------


def _invariant_of(node: pytest.Item | pytest.Metafunc | Any) -> str | None:
    if isinstance(node, pytest.Metafunc):
        marks = [m for m in node.definition.iter_markers(MARKER)]
    else:
        marks = list(node.iter_markers(MARKER))
    if not marks:
        return None
    ident = marks[0].args[0] if marks[0].args else marks[0].kwargs.get("id")
    if not isinstance(ident, str) or not ident:
        raise pytest.UsageError(f"@{MARKER} needs an id string ({node})")
    return ident


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Put the invariant id into every kit case's node id: ``test_x[ID]``/``test_x[ID-p]``."""
    ident = _invariant_of(metafunc)
    if ident is not None and "docket_invariant_id" in metafunc.fixturenames:
        metafunc.parametrize("docket_invariant_id", [ident], ids=[ident])


def pytest_collection_modifyitems(
    session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
) -> None:
    wanted = {
        part.strip()
        for option in config.getoption("docket_invariant", None) or []
        for part in str(option).split(",")
        if part.strip()
    }
    keep: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        ident = _invariant_of(item)
        if ident is not None:
            item.user_properties.append(("docket_invariant", ident))
        if wanted and ident is not None and ident not in wanted:
            dropped.append(item)
        else:
            keep.append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    ident = _invariant_of(item)
    if ident is not None and report.failed:
        # every failure, whatever raised it, points at the rule it broke
        report.sections.append(("docket invariant", f"{ident}: see {catalogue_link(ident)}"))
    return report


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        ident = dict(report.user_properties).get("docket_invariant")
        if ident:
            _FAILED_IDS.add(str(ident))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    """Say, per optional feature, whether the backend declared it and how its cases went."""
    if not _configured(config) or not FEATURES_SEEN:
        return
    terminalreporter.section("docket contract kit: optional features")
    for feature in sorted({str(f) for f in Feature} | set(FEATURES_SEEN)):
        seen = FEATURES_SEEN.get(feature)
        if seen is None:
            terminalreporter.write_line(f"{feature}: no kit case ran for it")
            continue
        ids = ", ".join(sorted(seen))
        if not any(seen.values()):
            terminalreporter.write_line(f"{feature}: not declared (not checked; cases {ids})")
            continue
        failed = sorted(set(seen) & _FAILED_IDS)
        verdict = f"FAILED by {', '.join(failed)}" if failed else "passed"
        terminalreporter.write_line(f"{feature}: declared, {verdict} (cases {ids})")


# -- the subject ------------------------------------------------------------------------------


def _load_factory(spec: str) -> Callable[..., Backend]:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise pytest.UsageError(f"--docket-backend-factory wants MODULE:CALLABLE, got {spec!r}")
    target: Any = importlib.import_module(module_name)
    for part in attr.split("."):
        target = getattr(target, part)
    if not callable(target):
        raise pytest.UsageError(f"{spec} is not callable")
    return target  # type: ignore[no-any-return]  # user-supplied callable


def _accepted(func: Callable[..., object], options: dict[str, object]) -> dict[str, object]:
    try:
        params = inspect.signature(func).parameters
    except (TypeError, ValueError):
        return {}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(options)
    return {k: v for k, v in options.items() if k in params}


def _builder(config: pytest.Config) -> Callable[[str, dict[str, object]], Backend | None]:
    url = config.getoption("docket_backend", None)
    spec = config.getoption("docket_backend_factory", None)
    if spec:
        factory = _load_factory(spec)

        def from_factory(namespace: str, options: dict[str, object]) -> Backend | None:
            given = _accepted(factory, {**options, "namespace": namespace})
            if any(k not in given for k in options):
                return None
            return factory(**given)

        return from_factory

    from docket.contract.registry import from_url

    def from_url_(namespace: str, options: dict[str, object]) -> Backend | None:
        target = str(url).replace("{namespace}", namespace)
        try:
            return from_url(target, **options)
        except (TypeError, ValueError):
            if not options:
                raise
            return None

    return from_url_


def _new_namespace() -> str:
    return f"k{next(_counter)}{secrets.token_hex(3)}"


@pytest.fixture
def docket_invariant_id() -> str:
    """The invariant id of the current case (parametrized by the plugin)."""
    return ""


@pytest.fixture
def docket_subject(request: pytest.FixtureRequest) -> Subject:
    """The backend under test for one case (opened/closed around the case by the plugin)."""
    config = request.config
    if not _configured(config):
        raise pytest.UsageError("docket_subject needs --docket-backend or --docket-backend-factory")
    build = _builder(config)
    namespace = _new_namespace()
    clock = ManualClock(CLOCK_START)
    backend = build(namespace, {"clock": clock})
    managed: ManualClock | None = clock
    if backend is None:
        backend = build(namespace, {})
        managed = None
    if backend is None:
        raise pytest.UsageError("the backend factory returned None")

    def make(**options: object) -> Backend | None:
        extra = {"clock": managed, **options} if managed is not None else dict(options)
        return build(_new_namespace(), extra)

    def reopen() -> Backend | None:
        return build(namespace, {"clock": managed} if managed is not None else {})

    url = config.getoption("docket_backend", None)
    source = (
        ("url", str(url).replace("{namespace}", namespace))
        if url
        else ("factory", str(config.getoption("docket_backend_factory")))
    )
    return Subject(
        backend=backend,
        namespace=namespace,
        clock=managed,
        make=make,
        rounds=max(1, int(config.getoption("docket_rounds"))),
        reopen=reopen,
        source=source,
    )


@pytest.fixture
def docket_kit(docket_subject: Subject, docket_invariant_id: str) -> Kit:
    """The per-case context (subject, t0, invariant id, assertion helpers)."""
    return Kit(docket_subject, docket_invariant_id)


# -- the runner: async cases without pytest-asyncio ---------------------------------------------


async def _drive(subject: Subject, case: Coroutine[Any, Any, object]) -> None:
    backend = subject.backend
    try:
        await backend.open()
    except BaseException:
        case.close()
        raise
    try:
        subject.t0 = await backend.now()
        if subject.clock is not None and subject.clock() != subject.t0:
            subject.clock = None  # the backend ignored the injected clock: it keeps its own
        stray = await backend.runs.list_runs(SYSTEM, RunListQuery(limit=1))
        if stray.runs:
            case.close()
            raise pytest.UsageError(
                f"the store is not empty at the start of a case (found run "
                f"{stray.runs[0].id!r}); give every case a fresh store, e.g. with a "
                "'{namespace}' placeholder in --docket-backend"
            )
        await asyncio.wait_for(case, CASE_TIMEOUT)
    finally:
        for extra in reversed(subject.extra):
            await extra.close()
        await backend.close()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    if _invariant_of(pyfuncitem) is None or not inspect.iscoroutinefunction(pyfuncitem.obj):
        return None
    names = inspect.signature(pyfuncitem.obj).parameters
    kwargs = {name: pyfuncitem.funcargs[name] for name in names}
    subject = pyfuncitem.funcargs.get("docket_subject")
    if not isinstance(subject, Subject):
        raise pytest.UsageError(f"{pyfuncitem.nodeid}: kit cases must use docket_kit/subject")
    asyncio.run(
        _drive(subject, pyfuncitem.obj(**kwargs)), debug=bool(os.environ.get("DOCKET_KIT_DEBUG"))
    )
    return True
