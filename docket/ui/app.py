"""The console's Starlette application: server-rendered pages over the :class:`Docket` facade.

Every read and write goes through the facade (no backend or SQL access of its own), so
the console sees exactly what the API sees and refuses what the API refuses. Writes are
POST-only, checked against cross-site forgery, and need the access token when one is set
(see :mod:`docket.ui.security`).

Ids are arbitrary text (``a/b?c#d`` is a valid run id), so every id put in a URL path is
one percent-encoded segment (:func:`segment`), and routing happens on the path as sent,
still encoded (:class:`_EncodedPaths`): an escaped ``/`` stays inside its segment, and
each handler decodes the ids it reads (:func:`_path_id`).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final
from urllib.parse import quote, unquote, unquote_to_bytes, urlencode

from starlette.applications import Starlette
from starlette.datastructures import URL
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates
from starlette.types import ASGIApp, Receive, Scope, Send

from docket import errors
from docket.core.children import ParentLink
from docket.core.family import ChildInfo
from docket.facade import Docket
from docket.graph.model import Graph
from docket.graph.render import to_mermaid
from docket.mapitems import read_map_progress
from docket.records import (
    DURABLE_STATUSES,
    Event,
    GraphRef,
    GraphVersionCursor,
    InterruptState,
    InterruptStatus,
    RunCursor,
    RunInfo,
    RunStatus,
    RunSummary,
)
from docket.runtime.worker import Worker
from docket.ui import history as history_pages
from docket.ui import queues as queue_pages
from docket.ui import schedules as schedule_pages
from docket.ui.forms import FormField, fields_for, parse_resolution
from docket.ui.graphview import render_svg, states_from_events
from docket.ui.security import (
    CSRF_FIELD,
    TOKEN_COOKIE,
    cross_site_problem,
    csrf_value,
    remember_csrf,
    token_matches,
)
from docket.values import from_micros, to_micros

__all__ = ["create_app", "segment"]

_HERE: Final = Path(__file__).parent
PAGE_SIZE: Final = 25
EVENT_PAGE: Final = 50
VERSION_PAGE: Final = 50
_STATE_EVENTS: Final = 5000  # events read to mark done nodes on the drawing
_STATUS_ORDER: Final = ("running", "waiting", "done", "failed", "cancelled")
# the only notices a redirect may ask for: a link cannot make the page say anything else
_NOTICES: Final = {
    "resolved": "Run resolved.",
    "cancelled": "Run cancelled.",
    "retried": "Run retried.",
    "sent": "Message sent.",
    "schedule_paused": "Schedule paused.",
    "schedule_resumed": "Schedule resumed.",
    "triggered": "Run started by hand from its schedule.",
    "forked": "Run forked: this is the new run.",
    "edited": "State edited.",
    **queue_pages.NOTICES,
}
_SECURITY_HEADERS: Final = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
}

Handler = Callable[[Request], Awaitable[Response]]


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


# Browsers and HTTP clients drop "." and ".." path segments (escaped or not) before
# sending, so those two ids get a literal ";" appended — a character segment() otherwise
# always escapes, so the mark is unambiguous; _EncodedPaths strips it.
_DOT_MARK: Final = ";"


def segment(text: str) -> str:
    """``text`` as one URL path segment: every character but ``A-Za-z0-9_.-~`` escaped."""
    escaped = quote(text, safe="")
    return escaped + _DOT_MARK if escaped in (".", "..") else escaped


def _canonical_segment(raw: bytes) -> str:
    if raw in (b".;", b"..;"):
        raw = raw[:-1]
    return quote(unquote_to_bytes(raw), safe="")


def _path_id(request: Request, name: str) -> str:
    """A path parameter as the id it encodes (routing left it percent-encoded)."""
    try:
        return unquote(request.path_params[name], errors="strict")
    except UnicodeDecodeError:
        raise _Refused(400, f"the address's {name} is not UTF-8 text") from None


class _EncodedPaths:
    """Route on the path as the client sent it, each segment re-encoded the one way
    :func:`segment` does, so ``/runs/a%2Fb`` is run ``a/b`` and not a route miss."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            raw = scope.get("raw_path")
            # without raw_path (optional in ASGI) an escaped "/" is lost; the rest still works
            parts = raw.split(b"/") if raw else scope["path"].encode("utf-8").split(b"/")
            scope = dict(scope)
            scope["path"] = "/".join(_canonical_segment(p) for p in parts)
        await self.app(scope, receive, send)


def _when(moment: datetime | None) -> str:
    return "—" if moment is None else moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _ago(moment: datetime | None) -> str:
    if moment is None:
        return ""
    seconds = int((datetime.now(UTC) - moment).total_seconds())
    if seconds < 0:
        seconds = -seconds
        suffix = "from now"
    else:
        suffix = "ago"
    if seconds < 60:
        return f"{seconds}s {suffix}"
    if seconds < 3600:
        return f"{seconds // 60}m {suffix}"
    if seconds < 86_400:
        return f"{seconds // 3600}h {seconds % 3600 // 60}m {suffix}"
    return f"{seconds // 86_400}d {suffix}"


def _duration(start: datetime, end: datetime | None) -> str:
    if end is None:
        return ""
    seconds = (end - start).total_seconds()
    if seconds < 1:
        return f"{seconds * 1000:.0f} ms"
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.1f} min"


def _pretty(value: object) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True, default=str)


def _short(value: object, limit: int = 90) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _cursor_text(cursor: RunCursor) -> str:
    return f"{to_micros(cursor.started_at)}~{cursor.run_id}"


def _cursor(text: str | None) -> RunCursor | None:
    if not text:
        return None
    micros, sep, run_id = text.partition("~")
    if not sep or not micros.isdigit():
        raise _Refused(400, f"bad page cursor {text!r}")
    return RunCursor(from_micros(int(micros)), run_id)


def _moment(text: str | None, name: str) -> datetime | None:
    """A ``datetime-local`` form value (read as UTC) or an ISO timestamp."""
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        raise _Refused(400, f"{name}: not a date and time: {text!r}") from None
    return parsed.replace(tzinfo=UTC) if parsed.tzinfo is None else parsed.astimezone(UTC)


class Console:
    """The request handlers, bound to one :class:`Docket`."""

    def __init__(self, docket: Docket, token: str | None, title: str) -> None:
        self.docket = docket
        self.token = token
        self.title = title
        self.templates = Jinja2Templates(directory=str(_HERE / "templates"))
        env = self.templates.env
        env.filters["when"] = _when
        env.filters["ago"] = _ago
        env.filters["pretty"] = _pretty
        env.filters["short"] = _short
        env.filters["segment"] = segment
        env.globals["duration"] = _duration

    # -- plumbing ---------------------------------------------------------------------------

    @property
    def tenanted(self) -> bool:
        return self.docket.tenant_mode == "required"

    def _tenant(self, request: Request, *, needed: bool) -> str | None:
        """The tenant a request acts as (``None`` in a tenantless docket)."""
        if not self.tenanted:
            return None
        tenant = request.query_params.get("tenant") or None
        if needed and tenant is None:
            raise _Refused(400, "this docket is multi-tenant: pick a tenant (?tenant=ID)")
        return tenant

    def render(
        self, request: Request, template: str, status: int = 200, **context: Any
    ) -> Response:
        context.update(
            title=self.title,
            csrf=csrf_value(request),
            csrf_field=CSRF_FIELD,
            tenanted=self.tenanted,
            signed_in=self.token is not None
            and token_matches(self.token, request.cookies.get(TOKEN_COOKIE)),
            notice=_NOTICES.get(request.query_params.get("notice", "")),
        )
        response = self.templates.TemplateResponse(request, template, context, status_code=status)
        remember_csrf(request, response)
        response.headers.update(_SECURITY_HEADERS)
        return response

    def refuse(self, request: Request, status: int, message: str) -> Response:
        return self.render(request, "error.html", status=status, message=message, code=status)

    def guard(self, handler: Handler, *, mutating: bool = False) -> Handler:
        """Wrap a handler with the token check, the cross-site checks (for POSTs) and the
        mapping of refusals and facade errors to pages."""

        async def guarded(request: Request) -> Response:
            if self.token is not None:
                given = request.query_params.get("token")
                if given is not None and request.method == "GET":
                    if not token_matches(self.token, given):
                        return self.refuse(request, 403, "wrong access token")
                    query = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
                    target = request.url.path + ("?" + urlencode(query) if query else "")
                    response = RedirectResponse(target, status_code=303)
                    _set_token_cookie(response, given)
                    return response
                if not token_matches(self.token, request.cookies.get(TOKEN_COOKIE)):
                    if request.method == "GET":
                        target = "/login?" + urlencode({"next": str(_relative(request.url))})
                        return RedirectResponse(target, status_code=303)
                    return self.refuse(request, 403, "sign in with the console's access token")
            try:
                if mutating:
                    form = await request.form()
                    submitted = form.get(CSRF_FIELD)
                    problem = cross_site_problem(
                        request, submitted if isinstance(submitted, str) else None
                    )
                    if problem is not None:
                        return self.refuse(request, 403, problem)
                return await handler(request)
            except _Refused as refused:
                return self.refuse(request, refused.status, refused.message)
            except errors.NotFound as exc:
                return self.refuse(request, 404, exc.message)
            except (errors.InvalidOptions, errors.InvalidTenant) as exc:
                return self.refuse(request, 400, exc.message)
            except (errors.InactiveRun, errors.AlreadyResolved, errors.Conflict) as exc:
                return self.refuse(request, 409, exc.message)
            except errors.DocketError as exc:  # e.g. StaleCheckpoint after every retry
                return self.refuse(request, 503, str(exc))

        return guarded

    # -- sign-in ----------------------------------------------------------------------------

    async def login(self, request: Request) -> Response:
        target = _safe_next(request.query_params.get("next"))
        if self.token is None:
            return RedirectResponse(target, status_code=303)
        if request.method == "GET":
            return self.render(request, "login.html", next=target, error=None)
        form = await request.form()
        submitted = form.get(CSRF_FIELD)
        problem = cross_site_problem(request, submitted if isinstance(submitted, str) else None)
        if problem is not None:
            return self.refuse(request, 403, problem)
        given = form.get("token")
        target = _safe_next(str(form.get("next") or "/"))
        if not isinstance(given, str) or not token_matches(self.token, given):
            return self.render(
                request, "login.html", status=403, next=target, error="wrong access token"
            )
        response = RedirectResponse(target, status_code=303)
        _set_token_cookie(response, given)
        return response

    async def logout(self, request: Request) -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(TOKEN_COOKIE, path="/")
        return response

    # -- runs -------------------------------------------------------------------------------

    async def runs(self, request: Request) -> Response:
        params = request.query_params
        status = params.get("status") or None
        if status is not None and status not in {s.value for s in DURABLE_STATUSES}:
            raise _Refused(400, f"unknown status {status!r}")
        graph_id = params.get("graph") or None
        tenant = self._tenant(request, needed=False)
        after = _moment(params.get("created_after"), "created after")
        before_time = _moment(params.get("created_before"), "created before")
        cursor = _cursor(params.get("before"))
        if cursor is None and before_time is not None:
            cursor = RunCursor(before_time, "")  # keyset position just before that moment
        page = await self.docket.list_runs(
            limit=PAGE_SIZE,
            before=cursor,
            status=status,
            graph_id=graph_id,
            tenant_id=tenant,
            all_tenants=self.tenanted and tenant is None,
        )
        runs: list[RunSummary] = list(page.runs)
        has_more = page.has_more
        if after is not None:
            kept = [r for r in runs if r.started_at >= after]
            has_more = has_more and len(kept) == len(runs)
            runs = kept
        filters = {
            "status": status or "",
            "graph": graph_id or "",
            "tenant": tenant or "",
            "created_after": params.get("created_after", ""),
            "created_before": params.get("created_before", ""),
        }
        kept_filters = {k: v for k, v in filters.items() if v}
        older = None
        if has_more and page.next_before is not None:
            older = "/runs?" + urlencode({**kept_filters, "before": _cursor_text(page.next_before)})
        tabs = [
            ("all", "/runs?" + urlencode({k: v for k, v in kept_filters.items() if k != "status"}))
        ]
        for name in _STATUS_ORDER:
            tabs.append((name, "/runs?" + urlencode({**kept_filters, "status": name})))
        return self.render(
            request,
            "runs.html",
            runs=runs,
            filters=filters,
            statuses=_STATUS_ORDER,
            tabs=tabs,
            older=older,
            paged=cursor is not None and params.get("before") is not None,
            newest="/runs?" + urlencode(kept_filters),
            any_filter=bool(kept_filters),
        )

    def _run_url(self, run_id: str, tenant: str | None, **extra: str) -> str:
        query = {"tenant": tenant} if tenant else {}
        query.update(extra)
        return f"/runs/{segment(run_id)}" + ("?" + urlencode(query) if query else "")

    async def run(self, request: Request) -> Response:
        return await self._run_page(request, _path_id(request, "run_id"), {}, status=200)

    async def _run_page(
        self,
        request: Request,
        run_id: str,
        forms: dict[str, tuple[list[FormField], str | None]],
        *,
        status: int,
        error: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> Response:
        tenant = self._tenant(request, needed=True)
        info: RunInfo = await self.docket.inspect_run(run_id, tenant_id=tenant)
        extra = {
            "edit_form": history_pages.EditForm(),
            **await history_pages.run_page_context(self, request, info, tenant),
            **(extra or {}),
        }
        run = info.run
        graph: Graph | None = None
        graph_problem: str | None = None
        try:
            graph = await self.docket.fetch_graph(
                GraphRef(run.graph_id, run.graph_hash), tenant_id=tenant
            )
        except (errors.NotFound, errors.CorruptData) as exc:
            graph_problem = exc.message
        every: list[Event] = []
        after = 0
        while len(every) < _STATE_EVENTS:
            chunk = await self.docket.list_events(
                run_id, after_seq=after, limit=1000, tenant_id=tenant
            )
            every.extend(chunk.events)
            if not chunk.has_more:
                break
            after = chunk.next_after_seq
        svg = render_svg(graph, states_from_events(run, every)) if graph is not None else None
        maps = await read_map_progress(self.docket, run, tenant_id=tenant, graph=graph)

        latest = run.event_seq
        shown_after = request.query_params.get("events_after")
        if shown_after is not None:
            if not shown_after.isdigit():
                raise _Refused(400, f"bad events_after {shown_after!r}")
            start = int(shown_after)
        else:
            start = max(0, latest - EVENT_PAGE)
        page = await self.docket.list_events(
            run_id, after_seq=start, limit=EVENT_PAGE, tenant_id=tenant
        )
        earlier = None
        if page.events and (page.oldest_available_seq or 1) < page.events[0].seq:
            earlier = self._run_url(
                run_id,
                tenant,
                events_after=str(max(0, page.events[0].seq - 1 - EVENT_PAGE)),
            )
        later = None
        if page.has_more:
            later = self._run_url(run_id, tenant, events_after=str(page.next_after_seq))

        interrupts = []
        for interrupt in run.interrupts.values():
            if interrupt.status is not InterruptStatus.OPEN:
                continue
            fields, form_error = forms.get(interrupt.id, (fields_for(interrupt.schema), None))
            interrupts.append((interrupt, fields, form_error))
        children = await self.docket.children(run_id, tenant_id=tenant)
        child_questions = _child_questions(children, forms)
        fields_shown: dict[str, object] = {}
        if graph is not None:
            for field_id in graph.fields:  # inputs are shown as the run's input
                channel = run.channels.get(f"state:{field_id}")
                if channel is not None and channel.version > 0:
                    fields_shown[field_id] = channel.value
        return self.render(
            request,
            "run.html",
            status=status,
            info=info,
            run=run,
            tenant=tenant,
            svg=svg,
            graph_problem=graph_problem,
            events=page.events,
            earlier=earlier,
            later=later,
            latest_link=self._run_url(run_id, tenant) + "#timeline",
            interrupts=interrupts,
            state=fields_shown,
            maps=maps,
            error=error,
            can_cancel=run.status in (RunStatus.RUNNING, RunStatus.WAITING),
            # the page updates itself live (static/live.js); without scripts it reloads
            # while running, unless a child asks a person (a reload would wipe the form)
            refresh=False,
            noscript_refresh=run.status is RunStatus.RUNNING
            and not info.poisoned
            and not any(c.open_interrupts for c in children),
            live=later is None and shown_after is None,
            action=lambda *what: (
                f"/runs/{segment(run_id)}/"
                + "/".join(segment(w) for w in what)
                + ("?" + urlencode({"tenant": tenant}) if tenant else "")
            ),
            children=children,
            child_questions=child_questions,
            parent=ParentLink.of(run),
            run_link=lambda ident: self._run_url(ident, tenant),
            child_action=lambda ident, interrupt_id: (
                f"/runs/{segment(ident)}/interrupts/{segment(interrupt_id)}"
                + ("?" + urlencode({"tenant": tenant}) if tenant else "")
            ),
            **extra,
        )

    async def cancel(self, request: Request) -> Response:
        run_id = _path_id(request, "run_id")
        tenant = self._tenant(request, needed=True)
        await self.docket.cancel_run(run_id, tenant_id=tenant)
        return RedirectResponse(self._run_url(run_id, tenant, notice="cancelled"), 303)

    async def retry(self, request: Request) -> Response:
        """Retry a failed run (reopened, the form's optional ``reason`` recorded) or a
        poisoned one (made due again)."""
        run_id = _path_id(request, "run_id")
        tenant = self._tenant(request, needed=True)
        given = (await request.form()).get("reason")
        reason = given.strip() if isinstance(given, str) and given.strip() else None
        try:
            await self.docket.retry_run(run_id, reason=reason, tenant_id=tenant)
        except (errors.NotRetryable, errors.Unsupported) as exc:
            raise _Refused(409, exc.message) from None
        except errors.InvalidInput as exc:
            raise _Refused(400, exc.message) from None
        return RedirectResponse(self._run_url(run_id, tenant, notice="retried"), 303)

    async def resolve(self, request: Request) -> Response:
        run_id = _path_id(request, "run_id")
        interrupt_id = _path_id(request, "interrupt_id")
        tenant = self._tenant(request, needed=True)
        run = await self.docket.fetch_run(run_id, tenant_id=tenant)
        interrupt = run.interrupts.get(interrupt_id)
        if interrupt is None or interrupt.status is not InterruptStatus.OPEN:
            raise _Refused(409, f"interrupt {interrupt_id!r} is not open on run {run_id!r}")
        raw = await request.form()
        form = {k: v for k, v in raw.items() if isinstance(v, str)}
        # answered from the parent's page (children.html): its errors and redirect go there
        link = ParentLink.of(run)
        back = link.run_id if link is not None and form.get("back") == link.run_id else None
        page, key = (back, _child_key(run_id, interrupt_id)) if back else (run_id, interrupt_id)
        answer, filled = parse_resolution(interrupt.schema, form)
        if not answer.ok:
            general = answer.errors.get("")
            return await self._run_page(
                request,
                page,
                {key: (filled, general or "the answer was not accepted: see below")},
                status=422,
            )
        try:
            await self.docket.resolve_interrupt(
                run_id, interrupt_id, answer.value, tenant_id=tenant
            )
        except errors.InvalidInput as exc:
            message = "; ".join(exc.reasons) or exc.message
            return await self._run_page(request, page, {key: (filled, message)}, status=422)
        return RedirectResponse(self._run_url(page, tenant, notice="resolved"), 303)

    async def send(self, request: Request) -> Response:
        """Send a message (the run page's form): JSON payload, or the text as a string."""
        run_id = _path_id(request, "run_id")
        tenant = self._tenant(request, needed=True)
        form = await request.form()
        topic, text, key = (form.get(name) for name in ("topic", "payload", "key"))
        if not isinstance(topic, str) or not topic.strip():
            raise _Refused(400, "a message needs a topic")
        raw = text.strip() if isinstance(text, str) else ""
        try:
            payload: object = json.loads(raw) if raw else None
        except ValueError:
            payload = raw
        idempotency = key.strip() if isinstance(key, str) and key.strip() else None
        try:
            await self.docket.send(
                run_id, topic.strip(), payload, idempotency_key=idempotency, tenant_id=tenant
            )
        except errors.InvalidInput as exc:
            raise _Refused(422, "; ".join(exc.reasons) or exc.message) from None
        except (errors.InactiveRun, errors.Unsupported) as exc:
            raise _Refused(409, exc.message) from None
        return RedirectResponse(self._run_url(run_id, tenant, notice="sent"), 303)

    # -- graphs -----------------------------------------------------------------------------

    async def graphs(self, request: Request) -> Response:
        tenant = self._tenant(request, needed=False)
        wanted = request.query_params.get("graph")
        if wanted:
            query = {"tenant": tenant} if tenant else {}
            suffix = "?" + urlencode(query) if query else ""
            return RedirectResponse(f"/graphs/{segment(wanted)}{suffix}", 303)
        # the store has no list of graph ids: offer the ones recent runs used
        recent = await self.docket.list_runs(
            limit=500, tenant_id=tenant, all_tenants=self.tenanted and tenant is None
        )
        seen: dict[tuple[str, str | None], RunSummary] = {}
        counts: dict[tuple[str, str | None], int] = {}
        for summary in recent.runs:
            key = (summary.graph_id, summary.tenant_id)
            seen.setdefault(key, summary)
            counts[key] = counts.get(key, 0) + 1
        rows = [
            (key, seen[key], counts[key]) for key in sorted(seen, key=lambda k: (k[0], k[1] or ""))
        ]
        return self.render(request, "graphs.html", rows=rows, tenant=tenant)

    async def graph(self, request: Request) -> Response:
        graph_id = _path_id(request, "graph_id")
        tenant = self._tenant(request, needed=True)
        before = None
        cursor = request.query_params.get("versions_before")
        if cursor:
            micros, sep, graph_hash = cursor.partition("~")
            if not sep or not micros.isdigit() or not graph_hash:
                raise _Refused(400, f"bad page cursor {cursor!r}")
            before = GraphVersionCursor(from_micros(int(micros)), graph_hash)
        page = await self.docket.list_graph_versions(
            graph_id, limit=VERSION_PAGE, before=before, tenant_id=tenant
        )
        if not page.versions and before is None:
            raise _Refused(404, f"no published versions of graph {graph_id!r}")
        newest = page.versions[0].ref.graph_hash if page.versions else ""
        chosen = _path_id(request, "graph_hash") if "graph_hash" in request.path_params else ""
        chosen = chosen or newest
        if not chosen:
            raise _Refused(404, f"no older versions of graph {graph_id!r}")
        older = None
        if page.has_more and page.next_before is not None:
            query = {"tenant": tenant} if tenant else {}
            query["versions_before"] = (
                f"{to_micros(page.next_before.published_at)}~{page.next_before.graph_hash}"
            )
            older = f"/graphs/{segment(graph_id)}/{segment(chosen)}?" + urlencode(query)
        graph = await self.docket.fetch_graph(GraphRef(graph_id, chosen), tenant_id=tenant)
        return self.render(
            request,
            "graph.html",
            graph=graph,
            graph_hash=chosen,
            versions=page.versions,
            older_versions=older,
            first_page=before is None,
            svg=render_svg(graph, {}),
            mermaid=to_mermaid(graph),
            tenant=tenant,
            tenant_query=("?" + urlencode({"tenant": tenant})) if tenant else "",
        )


def _child_questions(
    children: tuple[ChildInfo, ...], forms: dict[str, tuple[list[FormField], str | None]]
) -> list[tuple[ChildInfo, list[tuple[InterruptState, list[FormField], str | None]]]]:
    """Per child (aligned with ``children``), its open interrupts with their forms."""
    out = []
    for child in children:
        asked = []
        for interrupt in child.open_interrupts:
            blank = (fields_for(interrupt.schema), None)
            fields, error = forms.get(_child_key(child.child_run_id, interrupt.id), blank)
            asked.append((interrupt, fields, error))
        out.append((child, asked))
    return out


def _child_key(child_run_id: str, interrupt_id: str) -> str:
    """The ``forms`` key of a child's interrupt on its parent's page (ids hold no NUL, so
    it never equals one of the page's own interrupt ids)."""
    return f"{child_run_id}\x00{interrupt_id}"


def _relative(url: URL) -> str:
    return url.path + (f"?{url.query}" if url.query else "")


def _safe_next(target: str | None) -> str:
    """Only same-site paths: a login must not bounce the browser elsewhere."""
    if not target or not target.startswith("/") or target.startswith("//"):
        return "/runs"
    return target


def _set_token_cookie(response: Response, token: str) -> None:
    response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict", path="/")


def schedule_routes(console: Console) -> list[Route]:
    """The Schedules page and its buttons (docket/ui/schedules.py)."""
    guard = console.guard

    def bound(page: Callable[[Console, Request], Awaitable[Response]]) -> Handler:
        async def handler(request: Request) -> Response:
            return await page(console, request)

        return handler

    return [
        Route("/schedules", guard(bound(schedule_pages.schedules))),
        *(
            Route(
                f"/schedules/{{schedule_id}}/{name}",
                guard(bound(getattr(schedule_pages, name)), mutating=True),
                methods=["POST"],
            )
            for name in ("pause", "resume", "trigger")
        ),
    ]


def create_app(
    docket: Docket,
    *,
    token: str | None = None,
    open_docket: bool = False,
    run_worker: bool = False,
    title: str = "docket",
) -> Starlette:
    """The console over ``docket``.

    ``token``: when set, every page needs it (see :mod:`docket.ui.security`).
    ``open_docket``: open the Docket when the app starts and close it when it stops (for
    ``docket ui``; leave it False when the Docket is already open on the serving loop).
    ``run_worker``: also run a worker of this Docket while the app is up.
    """
    if token is not None and (not isinstance(token, str) or not token):
        raise errors.InvalidOptions("token must be a non-empty string (or None for no token)")
    console = Console(docket, token, title)

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> AsyncIterator[None]:
        if open_docket:
            await docket.open()
        worker: Worker | None = None
        if run_worker:
            worker = docket.worker(name="ui-worker")
            worker.start()
        try:
            yield
        finally:
            if worker is not None:
                await worker.stop()
            if open_docket:
                await docket.close()

    async def home(_request: Request) -> Response:
        return RedirectResponse("/runs", status_code=303)

    async def healthz(_request: Request) -> Response:
        return HTMLResponse("ok")

    guard = console.guard
    routes = [
        Route("/", guard(home)),
        Route("/healthz", healthz),
        Route("/login", console.login, methods=["GET", "POST"]),
        Route("/logout", guard(console.logout, mutating=True), methods=["POST"]),
        Route("/runs", guard(console.runs)),
        Route("/runs/{run_id}", guard(console.run)),
        Route("/runs/{run_id}/cancel", guard(console.cancel, mutating=True), methods=["POST"]),
        Route("/runs/{run_id}/retry", guard(console.retry, mutating=True), methods=["POST"]),
        Route(
            "/runs/{run_id}/interrupts/{interrupt_id}",
            guard(console.resolve, mutating=True),
            methods=["POST"],
        ),
        Route("/runs/{run_id}/messages", guard(console.send, mutating=True), methods=["POST"]),
        Route("/graphs", guard(console.graphs)),
        Route("/graphs/{graph_id}", guard(console.graph)),
        Route("/graphs/{graph_id}/{graph_hash}", guard(console.graph)),
        *schedule_routes(console),
        *history_pages.routes(console),
        *queue_pages.routes(console),
        Mount("/static", StaticFiles(directory=str(_HERE / "static")), name="static"),
    ]
    return Starlette(routes=routes, lifespan=lifespan, middleware=[Middleware(_EncodedPaths)])
