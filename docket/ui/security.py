"""Access token and cross-site request checks for the console.

- **Token.** When the console has a token, every page needs it: a browser signs in once
  (the login form, or ``?token=...`` on any page) and then carries it in an HttpOnly,
  SameSite=Strict cookie. Comparisons are constant-time.
- **Cross-site requests.** Every POST must come from the console's own pages: the
  browser's ``Sec-Fetch-Site`` (when sent) must say ``same-origin``, an ``Origin`` (when
  sent) must be the console's own, and a double-submit token must match — a random value
  the console keeps in a cookie and also writes into every form it draws.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Final

from starlette.requests import Request
from starlette.responses import Response

__all__ = [
    "CSRF_COOKIE",
    "CSRF_FIELD",
    "TOKEN_COOKIE",
    "cross_site_problem",
    "csrf_value",
    "remember_csrf",
    "token_matches",
]

TOKEN_COOKIE: Final = "docket_ui_token"
CSRF_COOKIE: Final = "docket_ui_csrf"
CSRF_FIELD: Final = "csrf"
_NEW_CSRF: Final = "docket_ui.new_csrf"


def token_matches(expected: str | None, given: str | None) -> bool:
    """Whether ``given`` is the configured token (always true when none is configured)."""
    if expected is None:
        return True
    if not given:
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


def csrf_value(request: Request) -> str:
    """This browser's double-submit value; a new one is made (and later set as a cookie by
    :func:`remember_csrf`) when the browser has none yet."""
    current = request.cookies.get(CSRF_COOKIE)
    if current and len(current) >= 32:
        return current
    fresh: str | None = getattr(request.state, "new_csrf", None)
    if fresh is None:
        fresh = secrets.token_urlsafe(32)
        request.state.new_csrf = fresh
    return fresh


def remember_csrf(request: Request, response: Response) -> None:
    fresh: str | None = getattr(request.state, "new_csrf", None)
    if fresh is not None:
        response.set_cookie(
            CSRF_COOKIE, fresh, httponly=True, samesite="strict", path="/", max_age=86_400 * 30
        )


def _own_origin(request: Request) -> str:
    host = request.headers.get("host", "")
    return f"{request.url.scheme}://{host}"


def cross_site_problem(request: Request, submitted: str | None) -> str | None:
    """Why this POST may not be from the console's own page, or ``None`` when it is."""
    fetch_site = request.headers.get("sec-fetch-site")
    if fetch_site is not None and fetch_site not in ("same-origin", "none"):
        return f"cross-site request refused (Sec-Fetch-Site: {fetch_site})"
    origin = request.headers.get("origin")
    if origin is not None and origin != _own_origin(request):
        return f"cross-origin request refused (Origin: {origin})"
    cookie = request.cookies.get(CSRF_COOKIE)
    if not cookie or not submitted:
        return "the form's anti-forgery token is missing: reload the page and try again"
    if not hmac.compare_digest(cookie.encode(), submitted.encode()):
        return "the form's anti-forgery token does not match: reload the page and try again"
    return None
