"""``pfc serve``: a local web page over a search folder (Starlette, uvicorn, Jinja2 templates).

Routes::

    GET /                        the page (search box; the query lives in the URL: /?q=...&system=hybrid)
    GET /api/search?q=&system=&k=   results as JSON (the page uses this; so can scripts)
    GET /api/why?q=&docno=       the single-token view of one result: each query token's similarity to each word
    GET /api/info                what the folder holds
    GET /static/...              the page's script and style sheet (shipped in the package: works offline)

A bad query gets ``400 {"error": "..."}``; an unknown docno ``404``; anything unexpected ``500`` with a short
message (details go to the server's log, never to the page). The searcher is loaded once, before the server
accepts connections; requests run in Starlette's thread pool and the searcher serialises the model work. The
folder may be rebuilt or updated while it is served: the server switches to the new version once it is complete
(:class:`~.live.ServedFolder`). ``/api/info`` names the source by its file name only (no local path).
Responses carry a strict Content-Security-Policy (scripts and styles from this server only); the page builds
results with DOM text nodes, so passage and query text is never parsed as HTML. A query whose bytes are not UTF-8
is a 400 naming the byte, as on the command line.

Slow or stalled clients cannot hold the server: a connection must send its request headers within
:data:`HEADER_TIMEOUT_S` (else it is closed), and at most :data:`MAX_WAITING` connections may be waiting for
their headers at once (a new one closes the one that has waited longest), so thousands of half-sent requests
neither use up the process's open files nor keep other clients waiting (:func:`guarded_protocol`). Bound to
every address (``--host 0.0.0.0``), the server still checks the Host header against DNS rebinding: an IP
address, ``localhost`` or this computer's name (:func:`allowed_hosts`).
"""
from __future__ import annotations

import errno
import ipaddress
import logging
import socket
from collections import OrderedDict
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Union
from urllib.parse import parse_qsl

from ..cli_errors import require_extra

if TYPE_CHECKING:  # pragma: no cover
    from starlette.applications import Starlette

    from .folder import Manifest
    from .live import ServedFolder
    from .search import Searcher

HERE = Path(__file__).resolve().parent
LOG = logging.getLogger("pyterrier_fandom_colbert.app")
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY"}
#: seconds a connection has to send a request's headers, from its opening or the end of its previous answer
HEADER_TIMEOUT_S = 10.0
#: connections that may be waiting for their request headers at once (well under the usual limit of 1,024 open
#: files per process); one more closes the one that has waited longest
MAX_WAITING = 256
#: addresses that bind every interface
WILDCARD_HOSTS = ("0.0.0.0", "::", "")


def shown_source(source: str) -> str:
    """What ``/api/info`` shows of a folder's source: a dump's file name (never the local path it was read from),
    an ir_datasets id as it is.

    >>> shown_source("/home/me/wikis/starwars_pages_current.xml.7z"), shown_source("irds:fandom-qa/sample")
    ('starwars_pages_current.xml.7z', 'irds:fandom-qa/sample')
    """
    if source.startswith("irds:") or source == "records":
        return source
    return Path(source).name


def folder_info(manifest: "Manifest") -> Dict[str, Any]:
    """``/api/info``: the folder's name, source and counts, and the limits of a query."""
    from .queries import MAX_K, MAX_QUERY_CHARS, SYSTEMS

    return {"name": manifest.name, "source": shown_source(manifest.source), "pages": manifest.pages,
            "articles": manifest.articles, "passages": manifest.passages, "tokens": manifest.tokens,
            "systems": list(SYSTEMS), "max_k": MAX_K, "max_query_chars": MAX_QUERY_CHARS}


def create_app(searcher: Union["Searcher", "ServedFolder"], *, allowed_hosts: Optional[list] = None) -> "Starlette":
    """The Starlette application serving ``searcher`` (a :class:`Searcher` is served as a
    :class:`~.live.ServedFolder` of its folder: a rebuilt folder is picked up). ``allowed_hosts``: Host headers
    accepted (default: any) — ``serve`` limits them to loopback names when bound to loopback, against DNS
    rebinding."""
    for module in ("starlette", "jinja2"):
        require_extra(module, "app", "pfc serve")
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles
    from starlette.templating import Jinja2Templates

    from .live import ServedFolder
    from .queries import DEFAULT_K, MAX_QUERY_CHARS, QueryError

    templates = Jinja2Templates(directory=str(HERE / "templates"))  # autoescapes .html templates
    served = searcher if isinstance(searcher, ServedFolder) else ServedFolder(searcher.folder, searcher)

    def error(status: int, message: str) -> JSONResponse:
        return JSONResponse({"error": message}, status_code=status, headers=HEADERS)

    def api(handler):
        """Run ``handler(params)`` (in the thread pool: a plain function) and turn errors into JSON answers."""
        def endpoint(request: Request):
            try:
                return JSONResponse(handler(query_params(request.scope["query_string"])), headers=HEADERS)
            except QueryError as err:
                return error(400, str(err))
            except LookupError as err:
                return error(404, str(err.args[0]) if err.args else "not found")
            except Exception:  # the log gets the traceback, the client a short message
                LOG.exception("request %s failed", request.url.path)
                return error(500, "the search failed on the server; see its log")
        return endpoint

    def search(params):
        return served.call("search", params.get("q", ""), system=params.get("system") or None,
                           k=params.get("k", DEFAULT_K))

    def why(params):
        return served.call("why", params.get("q", ""), params.get("docno", ""))

    def page(request: Request):
        searcher = served.searcher
        system = request.query_params.get("system", searcher.default_system)
        return templates.TemplateResponse(request, "index.html", {
            "info": folder_info(searcher.manifest),
            "query": request.query_params.get("q", "")[:MAX_QUERY_CHARS * 2],
            "system": system if system in searcher.systems else searcher.default_system,
            "systems": searcher.systems, "notice": searcher.notice}, headers=HEADERS)

    routes = [Route("/", page), Route("/api/search", api(search)), Route("/api/why", api(why)),
              Route("/api/info", api(lambda params: folder_info(served.searcher.manifest))),
              Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")]
    middleware = []
    if allowed_hosts and "*ip" in allowed_hosts:
        middleware = [Middleware(HostCheck, names=[h for h in allowed_hosts if h != "*ip"])]
    elif allowed_hosts:
        middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)]
    return Starlette(routes=routes, middleware=middleware)


def query_params(raw: bytes) -> Dict[str, str]:
    """The parameters of a raw query string (the last value of a repeated name), with bytes that are not UTF-8
    kept as lone surrogates, so that :func:`~.queries.check_query` refuses them naming the byte (Starlette's own
    parsing would turn them into U+FFFD and search for that).

    >>> query_params(b"q=caf%C3%A9&k=3"), query_params(b"q=caf%FF")["q"] == "caf" + chr(0xDCFF)
    ({'q': 'café', 'k': '3'}, True)
    """
    return dict(parse_qsl(raw.decode("latin-1"), keep_blank_values=True, encoding="utf-8",
                          errors="surrogateescape"))


def loopback_hosts(host: str) -> Optional[list]:
    """Host headers to accept when serving on ``host``: loopback names only, when bound to loopback."""
    return ["127.0.0.1", "localhost"] if host in ("127.0.0.1", "localhost") else None


def allowed_hosts(host: str) -> Optional[list]:
    """Host headers to accept when serving on ``host``: loopback names when bound to loopback; bound to every
    address, an IP address (``"*ip"``: no DNS rebinding goes through one), ``localhost`` and this computer's
    names; None (any) when bound to one other address."""
    if host in WILDCARD_HOSTS:
        names = {"localhost", socket.gethostname().lower(), socket.getfqdn().lower()}
        return ["*ip", *sorted(n for n in names if n)]
    return loopback_hosts(host)


def exposure_warning(host: str) -> Optional[str]:
    """What ``pfc serve`` warns when ``host`` lets other computers in (None on loopback)."""
    if host in WILDCARD_HOSTS:
        return (f"warning: --host {host or '0.0.0.0'} serves this folder to every computer that can reach this one "
                "(plain HTTP, no password); requests must name this computer by IP address or host name. Use "
                "--host 127.0.0.1 (the default) to keep it on this computer")
    return None


class HostCheck:
    """ASGI middleware: a request whose Host header is not an IP address or one of ``names`` gets a 400 (DNS
    rebinding makes a browser send the attacker's domain name, never an address)."""

    def __init__(self, app: Any, names: list):
        self.app, self.names = app, {n.lower() for n in names}

    def allowed(self, host_header: str) -> bool:
        host = host_header.strip().lower()
        if host.startswith("["):  # [IPv6]:port
            host = host[1:host.find("]")] if "]" in host else host
        elif host.count(":") == 1:
            host = host.split(":", 1)[0]
        try:
            ipaddress.ip_address(host)
            return True
        except ValueError:
            return host in self.names

    async def __call__(self, scope: Dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] in ("http", "websocket"):
            host = next((v.decode("latin-1") for k, v in scope["headers"] if k == b"host"), "")
            if not self.allowed(host):
                from starlette.responses import PlainTextResponse

                await PlainTextResponse("Invalid host header", status_code=400)(scope, receive, send)
                return
        await self.app(scope, receive, send)


def guarded_protocol(header_timeout_s: float = HEADER_TIMEOUT_S, max_waiting: int = MAX_WAITING) -> type:
    """uvicorn's HTTP protocol with a deadline for request headers and a bound on the connections waiting for them
    (module notes). Each call makes a class with its own count of waiting connections (one per server)."""
    from uvicorn.protocols.http.auto import AutoHTTPProtocol

    waiting: "OrderedDict[Any, None]" = OrderedDict()

    class GuardedProtocol(AutoHTTPProtocol):  # type: ignore[misc,valid-type]
        _deadline: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._await_headers()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            if self._mid_request():
                self._stop_waiting()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            if not self.transport.is_closing() and not self._mid_request():  # kept alive: the next request
                self._await_headers()

        def connection_lost(self, exc: Optional[Exception]) -> None:
            self._stop_waiting()
            super().connection_lost(exc)

        def _mid_request(self) -> bool:
            return self.cycle is not None and not self.cycle.response_complete

        def _await_headers(self) -> None:
            self._stop_waiting()
            waiting[self] = None
            while len(waiting) > max_waiting:
                oldest, _ = waiting.popitem(last=False)
                oldest._drop("too many connections are waiting to send their request")
            self._deadline = self.loop.call_later(header_timeout_s, self._drop,
                                                  f"no request headers within {header_timeout_s:g} s")

        def _stop_waiting(self) -> None:
            waiting.pop(self, None)
            if self._deadline is not None:
                self._deadline.cancel()
                self._deadline = None

        def _drop(self, why: str) -> None:
            self._stop_waiting()
            if not self._mid_request() and not self.transport.is_closing():
                LOG.debug("closing a connection from %s: %s", self.client, why)
                self.transport.close()

    return GuardedProtocol


def bind(host: str, port: int) -> socket.socket:
    """A socket bound to ``host``:``port`` for :func:`make_server`, or an ``OSError`` whose message says what to
    do (a port in use, an address this computer does not have, a port that needs privileges)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does: restart without waiting
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        why = {errno.EADDRINUSE: "is in use (another server?); stop it or choose another --port",
               errno.EACCES: "needs administrator rights; choose a --port above 1023",
               errno.EADDRNOTAVAIL: "is not an address of this computer; check --host"}.get(
                   err.errno or 0, f"cannot be served ({err.strerror or err})")
        raise OSError(err.errno, f"{shown} {why}") from None
    sock.set_inheritable(True)
    return sock


def make_server(searcher: Union["Searcher", "ServedFolder"], host: str = "127.0.0.1", port: int = 8000, *,
                sock=None, log_level: str = "warning", header_timeout_s: float = HEADER_TIMEOUT_S,
                max_waiting: int = MAX_WAITING):
    """A ``uvicorn.Server`` for ``searcher`` (not yet running). ``sock``: an already bound socket to serve on
    (then ``host``/``port`` are read from it); run it with ``server.run(sockets=[sock])``. ``header_timeout_s``,
    ``max_waiting``: the guard against stalled clients (:func:`guarded_protocol`)."""
    uvicorn = require_extra("uvicorn", "app", "pfc serve")

    if sock is not None:
        host, port = sock.getsockname()[:2]
    app = create_app(searcher, allowed_hosts=allowed_hosts(host))
    return uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False,
                                         http=guarded_protocol(header_timeout_s, max_waiting)))


def serve(searcher: Union["Searcher", "ServedFolder"], host: str = "127.0.0.1", port: int = 8000, *, sock=None,
          log_level: str = "warning") -> None:
    """Serve until interrupted (Ctrl-C: uvicorn stops, then the interrupt arrives as ``KeyboardInterrupt``).
    ``sock``: an already bound socket (:func:`bind`), so that a busy port is found before anything is loaded."""
    server = make_server(searcher, host, port, sock=sock, log_level=log_level)
    server.run(sockets=[sock] if sock is not None else None)
