"""``pfc serve``: a local web page over a search folder (Starlette, uvicorn, Jinja2 templates).

Routes::

    GET /                        the page (search box; the query lives in the URL: /?q=...&system=hybrid)
    GET /api/search?q=&system=&k=   results as JSON (the page uses this; so can scripts)
    GET /api/why?q=&docno=       the single-token view of one result: each query token's similarity to each word
    GET /api/info                what the folder holds
    GET /static/...              the page's script and style sheet (shipped in the package: works offline)

A bad query gets ``400 {"error": "..."}``; an unknown docno ``404``; anything unexpected ``500`` with a short
message (details go to the server's log, never to the page). The searcher is loaded once, before the server
accepts connections; requests run in Starlette's thread pool and the searcher serialises the model work.
Responses carry a strict Content-Security-Policy (scripts and styles from this server only); the page builds
results with DOM text nodes, so passage and query text is never parsed as HTML.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Optional

if TYPE_CHECKING:  # pragma: no cover
    from starlette.applications import Starlette

    from .search import Searcher

HERE = Path(__file__).resolve().parent
LOG = logging.getLogger("pyterrier_fandom_colbert.app")
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'; object-src 'none'")
HEADERS = {"Content-Security-Policy": CSP, "X-Content-Type-Options": "nosniff", "Referrer-Policy": "no-referrer",
           "X-Frame-Options": "DENY"}


def create_app(searcher: "Searcher", *, allowed_hosts: Optional[list] = None) -> "Starlette":
    """The Starlette application serving ``searcher``. ``allowed_hosts``: Host headers accepted (default: any)
    — ``serve`` limits them to loopback names when bound to loopback, against DNS rebinding."""
    from starlette.applications import Starlette
    from starlette.middleware import Middleware
    from starlette.middleware.trustedhost import TrustedHostMiddleware
    from starlette.requests import Request
    from starlette.responses import JSONResponse
    from starlette.routing import Mount, Route
    from starlette.staticfiles import StaticFiles
    from starlette.templating import Jinja2Templates

    from .search import MAX_K, MAX_QUERY_CHARS, SYSTEMS, QueryError

    templates = Jinja2Templates(directory=str(HERE / "templates"))  # autoescapes .html templates
    manifest = searcher.manifest
    info = {"name": manifest.name, "source": manifest.source, "pages": manifest.pages,
            "articles": manifest.articles, "passages": manifest.passages, "tokens": manifest.tokens,
            "systems": list(SYSTEMS), "max_k": MAX_K, "max_query_chars": MAX_QUERY_CHARS}

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
        return searcher.search(params.get("q", ""), system=params.get("system", "hybrid"), k=params.get("k", 10))

    def why(params):
        return searcher.why(params.get("q", ""), params.get("docno", ""))

    def page(request: Request):
        system = request.query_params.get("system", "hybrid")
        return templates.TemplateResponse(request, "index.html", {
            "info": info, "query": request.query_params.get("q", "")[:MAX_QUERY_CHARS * 2],
            "system": system if system in SYSTEMS else "hybrid", "systems": SYSTEMS}, headers=HEADERS)

    routes = [Route("/", page), Route("/api/search", api(search)), Route("/api/why", api(why)),
              Route("/api/info", api(lambda params: info)),
              Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")]
    middleware = [Middleware(TrustedHostMiddleware, allowed_hosts=allowed_hosts)] if allowed_hosts else []
    return Starlette(routes=routes, middleware=middleware)


def loopback_hosts(host: str) -> Optional[list]:
    """Host headers to accept when serving on ``host``: loopback names only, when bound to loopback."""
    return ["127.0.0.1", "localhost"] if host in ("127.0.0.1", "localhost") else None


def make_server(searcher: "Searcher", host: str = "127.0.0.1", port: int = 8000, *, sock=None,
                log_level: str = "warning"):
    """A ``uvicorn.Server`` for ``searcher`` (not yet running). ``sock``: an already bound socket to serve on
    (then ``host``/``port`` are read from it); run it with ``server.run(sockets=[sock])``."""
    import uvicorn

    if sock is not None:
        host, port = sock.getsockname()[:2]
    app = create_app(searcher, allowed_hosts=loopback_hosts(host))
    return uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level, access_log=False))


def serve(searcher: "Searcher", host: str = "127.0.0.1", port: int = 8000, *, log_level: str = "warning") -> None:
    """Serve until interrupted (Ctrl-C)."""
    make_server(searcher, host, port, log_level=log_level).run()
