"""State history in the console: the run page's checkpoint list and state-edit form, the
"state at checkpoint k" page (``GET /runs/{run_id}/at/{seq}``) with its fork form, and
the two writes (``POST /runs/{run_id}/fork``, ``POST /runs/{run_id}/edit``).

Everything goes through the facade (``state_history``, ``fetch_run_at``, ``fork_run``,
``update_state``), so a patch is checked exactly as the API checks it: a refused fork or
edit draws its form again with the facade's reasons and the typed text kept, and nothing
is written. The console only reads the form: the patch must be a JSON object (the facade
decides which fields it may change), the checkpoint a whole number.

A checkpoint retention removed, or one whose state can no longer be folded back
(``readable`` false), is listed as pruned, with no link.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from docket import errors
from docket.records import FORKED_FROM_KEY, RunInfo, RunStatus
from docket.ui import live as live_pages
from docket.values import JSONValue

if TYPE_CHECKING:
    from docket.ui.app import Console

__all__ = [
    "EditForm",
    "ForkForm",
    "edit",
    "fork",
    "routes",
    "run_page_context",
    "state_at",
]

#: Checkpoints listed on the run page at a time.
HISTORY_PAGE: Final = 20
_MAX_PATCH_CHARS: Final = 1_000_000


class ForkForm:
    """What the fork form shows: the typed text and the refusal, if any."""

    def __init__(self, patch: str = "", new_id: str = "", error: str | None = None) -> None:
        self.patch = patch
        self.new_id = new_id
        self.error = error


class EditForm:
    """What the edit form shows: the typed text and the refusal, if any."""

    def __init__(self, patch: str = "", reason: str = "", error: str | None = None) -> None:
        self.patch = patch
        self.reason = reason
        self.error = error


def _query(tenant: str | None, **extra: str) -> str:
    query = {"tenant": tenant} if tenant else {}
    query.update(extra)
    return "?" + urlencode(query) if query else ""


def _at_url(run_id: str, seq: int, tenant: str | None) -> str:
    from docket.ui.app import segment

    return f"/runs/{segment(run_id)}/at/{seq}{_query(tenant)}"


def _patch(text: str) -> tuple[dict[str, JSONValue] | None, str | None]:
    """The form's patch (``None`` when left empty), or why it cannot be read."""
    stripped = text.strip()
    if not stripped:
        return None, None
    if len(stripped) > _MAX_PATCH_CHARS:
        return None, f"the patch is over {_MAX_PATCH_CHARS} characters"
    try:
        value = json.loads(stripped)
    except ValueError as exc:
        return None, f"the patch is not valid JSON: {exc.args[0] if exc.args else exc}"
    if not isinstance(value, dict):
        return None, 'the patch must be a JSON object of field -> value, e.g. {"note": "x"}'
    return value, None


def _refusal(exc: errors.DocketError) -> str:
    reasons = [str(r) for r in getattr(exc, "reasons", ()) or ()]
    return "; ".join(reasons) if reasons else exc.message


def can_edit(info: RunInfo) -> bool:
    """Whether the edit form is offered: a waiting or failed run, or a poisoned one (no
    worker holds it). The facade still decides."""
    status = info.run.status
    return status in (RunStatus.WAITING, RunStatus.FAILED) or info.poisoned


async def run_page_context(
    console: Console, request: Request, info: RunInfo, tenant: str | None
) -> dict[str, Any]:
    """The run page's history card (a page of checkpoints) and the edit form's state."""
    from docket.ui.app import _Refused

    run = info.run
    wanted = request.query_params.get("history_after")
    if wanted is not None and not wanted.isdigit():
        raise _Refused(400, f"bad history_after {wanted!r}")
    after = int(wanted) if wanted is not None else max(0, run.checkpoint_seq - HISTORY_PAGE)
    history_problem: str | None = None
    try:
        page = await console.docket.state_history(
            run.id, after=after, limit=HISTORY_PAGE, tenant_id=tenant
        )
    except errors.Unsupported as exc:
        history_problem = exc.message
        page = None
    earlier = later = None
    if page is not None:
        first = page.checkpoints[0].checkpoint_seq if page.checkpoints else page.latest + 1
        if after > 0 and first > 1:
            earlier = console._run_url(
                run.id, tenant, history_after=str(max(0, after - HISTORY_PAGE))
            )
            earlier += "#history"
        if page.has_more:
            later = console._run_url(run.id, tenant, history_after=str(page.next_after))
            later += "#history"
    forked = run.metadata.get(FORKED_FROM_KEY)
    forked_from = None
    source = forked.get("run_id") if isinstance(forked, dict) else None
    if isinstance(forked, dict) and isinstance(source, str):
        seq = forked.get("checkpoint_seq")
        link = _at_url(source, seq, tenant) if isinstance(seq, int) else None
        forked_from = (source, seq, link)
    return {
        "history": page,
        "history_problem": history_problem,
        "history_paged": wanted is not None,  # a page the live refresh must not move
        "history_earlier": earlier,
        "history_later": later,
        "at_link": lambda seq: _at_url(run.id, seq, tenant),
        "can_edit": can_edit(info),
        "forked_from": forked_from,
        "live_url": _live_url(run.id, tenant, run.event_seq),
        "page_url": console._run_url(run.id, tenant),
    }


def _live_url(run_id: str, tenant: str | None, after: int) -> str:
    from docket.ui.app import segment

    return f"/runs/{segment(run_id)}/live{_query(tenant, after=str(after))}"


async def state_at(console: Console, request: Request) -> Response:
    """The state of a run as committed at one checkpoint, with the fork form."""
    from docket.ui.app import _path_id, _Refused

    run_id = _path_id(request, "run_id")
    raw = request.path_params["seq"]
    if not raw.isdigit() or len(raw) > 18:
        raise _Refused(400, f"bad checkpoint {raw!r}: a checkpoint seq (a whole number)")
    return await _state_at_page(console, request, run_id, int(raw), ForkForm(), status=200)


async def _state_at_page(
    console: Console,
    request: Request,
    run_id: str,
    seq: int,
    form: ForkForm,
    *,
    status: int,
) -> Response:
    from docket.ui.app import _Refused, segment

    tenant = console._tenant(request, needed=True)
    try:
        snapshot = await console.docket.fetch_run_at(run_id, seq, tenant_id=tenant)
    except errors.NotFound as exc:
        if exc.details.get("pruned") is True:  # it existed: retention removed its history
            raise _Refused(410, exc.message) from None
        raise
    except errors.InvalidOptions as exc:
        raise _Refused(400, exc.message) from None
    run = await console.docket.fetch_run(run_id, tenant_id=tenant)
    return console.render(
        request,
        "run_at.html",
        status=status,
        snap=snapshot,
        run=run,
        tenant=tenant,
        form=form,
        run_link=console._run_url(run_id, tenant),
        previous=_at_url(run_id, seq - 1, tenant) if seq > 1 else None,
        following=_at_url(run_id, seq + 1, tenant) if seq < run.checkpoint_seq else None,
        fork_action=f"/runs/{segment(run_id)}/fork{_query(tenant)}",
        refresh=False,
    )


async def fork(console: Console, request: Request) -> Response:
    """Fork the run at the form's checkpoint (patch and new id optional)."""
    from docket.ui.app import _path_id, _Refused

    run_id = _path_id(request, "run_id")
    tenant = console._tenant(request, needed=True)
    data = await request.form()
    at_text, patch_text, id_text = (data.get(k) for k in ("at", "patch", "new_id"))
    if not isinstance(at_text, str) or not at_text.strip().isdigit():
        raise _Refused(400, "a fork needs the checkpoint it starts from (a whole number)")
    at = int(at_text.strip())
    form = ForkForm(
        patch=patch_text if isinstance(patch_text, str) else "",
        new_id=id_text.strip() if isinstance(id_text, str) else "",
    )
    patch, problem = _patch(form.patch)
    if problem is not None:
        form.error = problem
        return await _state_at_page(console, request, run_id, at, form, status=422)
    try:
        new = await console.docket.fork_run(
            run_id, at=at, new_run_id=form.new_id or None, patch=patch, tenant_id=tenant
        )
    except (errors.NotFound, errors.InvalidTenant) as exc:
        raise _Refused(404 if isinstance(exc, errors.NotFound) else 400, exc.message) from None
    except errors.DocketError as exc:  # the patch, a taken id: shown on the form
        form.error = _refusal(exc)
        code = 422 if isinstance(exc, errors.InvalidInput | errors.InvalidOptions) else 409
        return await _state_at_page(console, request, run_id, at, form, status=code)
    return RedirectResponse(console._run_url(new.id, tenant, notice="forked"), 303)


async def edit(console: Console, request: Request) -> Response:
    """Replace state fields of a waiting, failed or poisoned run (patch and reason)."""
    from docket.ui.app import _path_id, _Refused

    run_id = _path_id(request, "run_id")
    tenant = console._tenant(request, needed=True)
    data = await request.form()
    patch_text, reason_text = data.get("patch"), data.get("reason")
    form = EditForm(
        patch=patch_text if isinstance(patch_text, str) else "",
        reason=reason_text if isinstance(reason_text, str) else "",
    )
    patch, problem = _patch(form.patch)
    if problem is None and patch is None:
        problem = "a patch is needed: a JSON object of field -> new value"
    if problem is None:
        try:
            await console.docket.update_state(
                run_id, patch, reason=form.reason.strip() or None, tenant_id=tenant
            )
        except (errors.NotFound, errors.InvalidTenant) as exc:
            raise _Refused(404 if isinstance(exc, errors.NotFound) else 400, exc.message) from None
        except errors.DocketError as exc:
            problem = _refusal(exc)  # the patch or reason, or a run that cannot be edited
            code = 422 if isinstance(exc, errors.InvalidInput | errors.InvalidOptions) else 409
        else:
            return RedirectResponse(console._run_url(run_id, tenant, notice="edited"), 303)
    else:
        code = 422
    form.error = problem
    return await console._run_page(request, run_id, {}, status=code, extra={"edit_form": form})


def routes(console: Console) -> list[Route]:
    """The live stream, the state-at page, fork and edit, guarded like every page."""

    def bound(page: Callable[[Console, Request], Awaitable[Response]]) -> Any:
        async def handler(request: Request) -> Response:
            return await page(console, request)

        return handler

    guard = console.guard
    return [
        Route("/runs/{run_id}/live", guard(bound(live_pages.live))),
        Route("/runs/{run_id}/at/{seq}", guard(bound(state_at))),
        Route("/runs/{run_id}/fork", guard(bound(fork), mutating=True), methods=["POST"]),
        Route("/runs/{run_id}/edit", guard(bound(edit), mutating=True), methods=["POST"]),
    ]
