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
results with DOM text nodes, so passage and query text is never parsed as HTML.
"""
from __future__ import annotations

import errno
import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, Optional, Union

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
                return JSONResponse(handler(request.query_params), headers=HEADERS)
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
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)] if allowed_hosts else []
    return Starlette(routes=routes, middleware=middleware)


def loopback_hosts(host: str) -> Optional[list]:
    """Host headers to accept when serving on ``host``: loopback names only, when bound to loopback."""
    return ["127.0.0.1", "localhost"] if host in ("127.0.0.1", "localhost") else None


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
                sock=None,
                log_level: str = "warning"):
    """A ``uvicorn.Server`` for ``searcher`` (not yet running). ``sock``: an already bound socket to serve on
    (then ``host``/``port`` are read from it); run it with ``server.run(sockets=[sock])``."""
    uvicorn = require_extra("uvicorn", "app", "pfc serve")

    if sock is not None:
        host, port = sock.getsockname()[:2]
    app = create_app(searcher, allowed_hosts=loopback_hosts(host))
    return uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False))


def serve(searcher: Union["Searcher", "ServedFolder"], host: str = "127.0.0.1", port: int = 8000, *, sock=None,
          log_level: str = "warning") -> None:
    """Serve until interrupted (Ctrl-C: uvicorn stops, then the interrupt arrives as ``KeyboardInterrupt``).
    ``sock``: an already bound socket (:func:`bind`), so that a busy port is found before anything is loaded."""
    server = make_server(searcher, host, port, sock=sock, log_level=log_level)
    server.run(sockets=[sock] if sock is not None else None)
