"""The console's guard: what lets a request in, built the way Jupyter and Syncthing guard
a page on localhost.

- **Host**: only ``127.0.0.1:PORT``, ``localhost:PORT`` or ``[::1]:PORT`` (a page from
  another site that rebinds its own name to 127.0.0.1 sends its name: refused).
- **Token, then cookie**: the URL the console prints carries a token; it is exchanged
  for an HttpOnly, SameSite=Strict cookie and the browser is sent on to the same page
  without it. No cookie, no page: 401, and the body says how to get in, nothing more.
- **Writes**: every request that changes something is a POST with the same-origin
  ``Origin`` and the page's CSRF token; a form another site posts stores nothing.
- **Headers** on every reply: a Content-Security-Policy of ``default-src 'self'`` (no
  inline script or style, nothing from elsewhere, no framing), X-Frame-Options DENY,
  nosniff, no referrer to other sites, no caching; and no CORS header, ever.
"""

from __future__ import annotations

import hmac
import secrets
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none';"
        " object-src 'none'"
    ),
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # No Referer to other sites; same-origin, not no-referrer: with no-referrer a browser
    # sends "Origin: null" on the console's own form posts.
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
    "Cross-Origin-Opener-Policy": "same-origin",
    "Cross-Origin-Resource-Policy": "same-origin",
}
WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass
class Guard:
    """The secrets of one console process: the token in the printed URL, the cookie it is
    exchanged for, and the CSRF token its forms carry."""

    port: int = 0  # known once the socket is bound
    token: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    session: str = field(default_factory=lambda: secrets.token_urlsafe(32))
    csrf: str = field(default_factory=lambda: secrets.token_urlsafe(32))

    @property
    def cookie(self) -> str:
        # Cookies are not kept apart by port: each console's has its own name.
        return f"oryxmem_console_{self.port}"

    @property
    def hosts(self) -> frozenset[str]:
        return frozenset(f"{name}:{self.port}" for name in ("127.0.0.1", "localhost", "[::1]"))

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/?token={self.token}"

    def has_session(self, request: web.Request) -> bool:
        return hmac.compare_digest(request.cookies.get(self.cookie, ""), self.session)

    def csrf_ok(self, sent: str) -> bool:
        return hmac.compare_digest(sent, self.csrf)


GUARD = web.AppKey("guard", Guard)


def refusal(status: int, text: str) -> web.Response:
    """A refusal: plain text, one line, no memory in it."""
    return web.Response(status=status, text=text + "\n", content_type="text/plain")


@web.middleware
async def guarded(request: web.Request, handler: Handler) -> web.StreamResponse:
    guard = request.app[GUARD]
    if request.host not in guard.hosts:
        return refusal(403, f"this console answers only at http://127.0.0.1:{guard.port}/")
    token = request.query.get("token")
    if token is not None:
        return _exchange(request, guard, token)
    if request.path.startswith("/static/"):
        return await handler(request)  # the stylesheet and the script: no memory in them
    if not guard.has_session(request):
        return refusal(401, "open the link `oryxmem console` printed (it signs this browser in)")
    if request.method in WRITE_METHODS:
        problem = await _write_problem(request, guard)
        if problem:
            return refusal(403, problem)
    return await handler(request)


def _exchange(request: web.Request, guard: Guard, token: str) -> web.StreamResponse:
    """The token for the cookie, and on to the same page without the token in its URL
    (nor in the history, nor in a Referer)."""
    if not hmac.compare_digest(token, guard.token):
        return refusal(403, "that token is not this console's; open the link it printed")
    rest = [(k, v) for k, v in request.query.items() if k != "token"]
    target = request.path + ("?" + urllib.parse.urlencode(rest) if rest else "")
    response = web.Response(status=303, headers={"Location": target})
    response.set_cookie(guard.cookie, guard.session, httponly=True, samesite="Strict", path="/")
    return response


async def _write_problem(request: web.Request, guard: Guard) -> str | None:
    """Why a change is refused: not from this console's own pages (the Origin), or without
    the CSRF token its forms carry."""
    origin = request.headers.get("Origin")
    if origin != f"http://{request.host}":
        return "a change must come from this console's own page (Origin)"
    form = await request.post()
    sent = form.get("csrf")
    if not isinstance(sent, str) or not guard.csrf_ok(sent):
        return "a change must carry this console's CSRF token; reload the page"
    return None


async def add_security_headers(request: web.Request, response: web.StreamResponse) -> None:
    """On every reply, refusals and static files too (aiohttp's on_response_prepare)."""
    for name, value in SECURITY_HEADERS.items():
        response.headers[name] = value
