"""The console's Schedules page: the list (id, graph, cron, time zone, next tick, paused)
and its pause, resume and trigger buttons, all through the :class:`Docket` facade.

Handlers take the :class:`~docket.ui.app.Console` they serve; ``create_app`` routes them
(``/schedules``, ``/schedules/{schedule_id}/pause|resume|trigger``, POST-only).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from docket import errors

if TYPE_CHECKING:
    from docket.ui.app import Console

__all__ = ["pause", "resume", "schedules", "trigger"]

_LIMIT = 500  # one page: a deployment with more schedules than this lists them by CLI


async def schedules(console: Console, request: Request) -> Response:
    from docket.ui.app import _Refused

    tenant = console._tenant(request, needed=False)
    every = console.tenanted and tenant is None
    try:
        page = await console.docket.list_schedules(
            limit=_LIMIT, tenant_id=tenant, all_tenants=every
        )
    except errors.Unsupported as exc:
        raise _Refused(404, exc.message) from None
    return console.render(
        request,
        "schedules.html",
        schedules=list(page.schedules),
        more=page.has_more,
        tenant=tenant,
        refresh=False,
    )


def _back(tenant: str | None, notice: str) -> RedirectResponse:
    query = {"notice": notice}
    if tenant:
        query["tenant"] = tenant
    return RedirectResponse("/schedules?" + urlencode(query), status_code=303)


async def pause(console: Console, request: Request) -> Response:
    from docket.ui.app import _path_id

    schedule_id = _path_id(request, "schedule_id")
    tenant = console._tenant(request, needed=True)
    await console.docket.pause_schedule(schedule_id, tenant_id=tenant)
    return _back(tenant, "schedule_paused")


async def resume(console: Console, request: Request) -> Response:
    from docket.ui.app import _path_id

    schedule_id = _path_id(request, "schedule_id")
    tenant = console._tenant(request, needed=True)
    await console.docket.resume_schedule(schedule_id, tenant_id=tenant)
    return _back(tenant, "schedule_resumed")


async def trigger(console: Console, request: Request) -> Response:
    from docket.ui.app import _path_id, _Refused

    schedule_id = _path_id(request, "schedule_id")
    tenant = console._tenant(request, needed=True)
    try:
        run = await console.docket.trigger_schedule(schedule_id, tenant_id=tenant)
    except (errors.InvalidInput, errors.InvalidGraph) as exc:
        raise _Refused(409, exc.message) from None
    return RedirectResponse(console._run_url(run.id, tenant, notice="triggered"), 303)
