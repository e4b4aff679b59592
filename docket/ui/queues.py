"""The console's Queues page: every named queue with its depth (due, unclaimed runs),
running (slots held), execution limit, rate and paused flag, its admission limits with
the starts admitted and held under them, and the buttons and forms that change them
(``GET /queues``; ``POST /queues`` adds or changes a queue by name;
``POST /queues/{name}/limits|pause|resume`` act on a listed one). In a limits form a
blank field keeps what is stored and ``none`` removes that limit. ``GET
/queues/{name}/held`` lists a queue's admitted starts and its held ones, in the order
they will be admitted (``Docket.admissions``).

Everything goes through the facade (``queues``, ``configure_queue``, ``pause_queue``,
``resume_queue``), so a value is accepted or refused exactly as the API decides: a refused
form draws the page again with status 422, the reasons beside the form and the typed text
kept, and nothing is written. The console only reads the text (``docket._queue_text``:
``5`` or ``none``, ``20/1s`` or ``none``); queues are namespace-wide, so no tenant is
asked for.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

import attrs
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from docket import errors
from docket._queue_text import format_limit, format_rate, parse_limit, parse_rate
from docket.records import AdmissionView, QueueStatus

if TYPE_CHECKING:
    from docket.ui.app import Console

__all__ = ["LimitsForm", "routes"]

#: The redirect notices this page may ask for (``app._NOTICES`` holds their text).
NOTICES = {
    "queue_paused": "Queue paused: no new claims until it is resumed.",
    "queue_resumed": "Queue resumed.",
    "queue_saved": "Queue limits saved: every worker applies them on its next claim.",
}


@attrs.define
class LimitsForm:
    """A limits form as typed (shown again, with ``error``, when refused)."""

    name: str = ""
    limit: str = ""
    rate: str = ""
    admission: str = ""
    per_tenant: str = ""
    error: str | None = None


def _form_for(status: QueueStatus) -> LimitsForm:
    config = status.config
    return LimitsForm(
        name=config.name,
        limit=format_limit(config.execution_limit),
        rate=format_rate(config.rate),
        admission=format_limit(config.admission_limit),
        per_tenant=format_limit(config.tenant_admission_limit),
    )


def _parse_admission(text: str) -> int | None:
    return parse_limit(text, "admission limit")


def _parse_per_tenant(text: str) -> int | None:
    return parse_limit(text, "per-tenant limit")


async def _page(
    console: Console,
    request: Request,
    *,
    refused: LimitsForm | None = None,
    adding: LimitsForm | None = None,
    status: int = 200,
) -> Response:
    from docket.ui.app import _Refused

    try:
        queues: Sequence[QueueStatus] = await console.docket.queues()
    except errors.Unsupported as exc:
        raise _Refused(404, exc.message) from None
    forms = {s.config.name: _form_for(s) for s in queues}
    if refused is not None:
        forms[refused.name] = refused
    return console.render(
        request,
        "queues.html",
        status=status,
        queues=queues,
        forms=forms,
        rates={s.config.name: format_rate(s.config.rate) for s in queues},
        adding=adding or LimitsForm(),
        refresh=False,
    )


async def queues(console: Console, request: Request) -> Response:
    return await _page(console, request)


def _text(form: Any, field: str) -> str | None:
    value = form.get(field)
    return value if isinstance(value, str) else None


async def _save(console: Console, request: Request, name: str, *, adding: bool) -> Response:
    """Apply a limits form: a blank (or absent) field keeps what is stored, ``none``
    removes that limit."""
    form = await request.form()
    limit_text, rate_text = _text(form, "limit") or "", _text(form, "rate") or ""
    admission_text = _text(form, "admission") or ""
    per_tenant_text = _text(form, "per_tenant") or ""
    typed = LimitsForm(
        name=name,
        limit=limit_text,
        rate=rate_text,
        admission=admission_text,
        per_tenant=per_tenant_text,
    )
    changes: dict[str, Any] = {}  # configure_queue's keywords; the rest stay as stored
    problems: list[str] = []
    parsers: tuple[tuple[str, str, Callable[[str], Any]], ...] = (
        ("execution_limit", limit_text, parse_limit),
        ("rate", rate_text, parse_rate),
        ("admission_limit", admission_text, _parse_admission),
        ("tenant_admission_limit", per_tenant_text, _parse_per_tenant),
    )
    for field, text, parse in parsers:
        if not text.strip():
            continue
        try:
            changes[field] = parse(text)
        except ValueError as exc:
            problems.append(str(exc))
    if not problems:
        try:
            await console.docket.configure_queue(name, **changes)
        except errors.InvalidOptions as exc:
            reasons = exc.details.get("reasons")
            problems = [str(r) for r in reasons] if isinstance(reasons, list) else [exc.message]
        except errors.Unsupported as exc:  # an admission limit on a backend without admission
            problems = [exc.message]
    if problems:
        typed.error = "; ".join(problems)
        if adding:
            return await _page(console, request, adding=typed, status=422)
        return await _page(console, request, refused=typed, status=422)
    return RedirectResponse("/queues?notice=queue_saved", status_code=303)


async def add(console: Console, request: Request) -> Response:
    """The "add or change a queue" form: creates the queue when it is new."""
    name = _text(await request.form(), "name")
    return await _save(console, request, (name or "").strip(), adding=True)


async def limits(console: Console, request: Request) -> Response:
    """A listed queue's limits form (an unknown queue is not found, not created)."""
    from docket.ui.app import _path_id

    name = _path_id(request, "name")
    await console.docket.queue(name)
    return await _save(console, request, name, adding=False)


async def pause(console: Console, request: Request) -> Response:
    from docket.ui.app import _path_id

    await console.docket.pause_queue(_path_id(request, "name"))
    return RedirectResponse("/queues?notice=queue_paused", status_code=303)


async def resume(console: Console, request: Request) -> Response:
    from docket.ui.app import _path_id

    await console.docket.resume_queue(_path_id(request, "name"))
    return RedirectResponse("/queues?notice=queue_resumed", status_code=303)


async def held(console: Console, request: Request) -> Response:
    """A queue's admission ledger: its admitted starts, then its held ones."""
    from docket.ui.app import _path_id, _Refused

    name = _path_id(request, "name")
    try:
        config = await console.docket.queue(name)
        view: AdmissionView = await console.docket.admissions(name)
    except errors.Unsupported as exc:
        raise _Refused(404, exc.message) from None
    return console.render(
        request, "queue_held.html", config=config, view=view, name=name, refresh=False
    )


def routes(console: Console) -> list[Route]:
    """The page and its writes, guarded like every page (writes: POST, anti-forgery)."""

    def bound(page: Callable[[Console, Request], Awaitable[Response]]) -> Any:
        async def handler(request: Request) -> Response:
            return await page(console, request)

        return handler

    guard = console.guard
    return [
        Route("/queues", guard(bound(queues))),
        Route("/queues", guard(bound(add), mutating=True), methods=["POST"]),
        Route("/queues/{name}/held", guard(bound(held))),
        *(
            Route(f"/queues/{{name}}/{action}", guard(bound(page), mutating=True), methods=["POST"])
            for action, page in (("limits", limits), ("pause", pause), ("resume", resume))
        ),
    ]
