"""The viewer's web server: the page, its scripts and the JSON and PNG answers of ``StoreApi``.

Why the standard library's ``http.server`` (a ``ThreadingHTTPServer``) and no framework: the viewer is a
local, read-only tool with a dozen GET routes; the standard library serves them with no dependency to
install, audit or keep up with, and a thread per request is plenty for one person's browser (frames
are small PNGs encoded in milliseconds). What a framework would add (routing, templates) is a few lines
here; what it would cost is a dependency in every install. The page is static files shipped in the
package (``assets/``): the browser fetches the data as JSON and builds the page with ``textContent``.

Safety (a store may come from a stranger; the server may be reached by any page the browser opens):

- GET and HEAD only; any other method gets 405.
- No path is ever taken from a request: assets are a fixed table of names, data is named by episode ids,
  field and column names that ``StoreApi`` checks against the store.
- Bound to 127.0.0.1 unless told otherwise. A request whose ``Host`` is not a loopback name (``localhost``,
  ``127.0.0.1``, ``[::1]``, with any port or none: a browser through ``ssh -L 8080:127.0.0.1:PORT`` sends
  ``localhost:8080``), nor the server's port with the bound address, an IP address, this machine's name (when
  bound to every address) or a name the user allowed (``allow_hosts``, ``--allow-host``) is refused (DNS
  rebinding: a page of another site that resolves its name to this machine names that site).
- Every answer says ``Content-Security-Policy: default-src 'self'`` (no inline script, nothing from
  elsewhere: a ``<script>`` in a card could not run even if it reached the page as HTML, which it does not)
  and ``X-Content-Type-Options: nosniff``; the error page escapes its message.
- A damaged store, a bad request or a bug gives an error page (or a JSON ``error``), never a traceback.
"""

from __future__ import annotations

import hashlib
import html
import ipaddress
import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from typing import Any, Callable
from urllib.parse import parse_qs, urlsplit

from ...errors import (CorruptStoreError, IndexRangeError, MissingExtraError, OptionError, ReplayError,
                       SampleExpiredError, StoreIOError, UnsupportedFormatError)
from .api import FrameTooLargeError, StoreApi

__all__ = ["ViewerServer", "ViewerHandler"]

_ASSETS = {"/": ("index.html", "text/html; charset=utf-8"),
           "/static/viewer.css": ("viewer.css", "text/css; charset=utf-8"),
           "/static/base.js": ("base.js", "text/javascript; charset=utf-8"),
           "/static/plots.js": ("plots.js", "text/javascript; charset=utf-8"),
           "/static/overview.js": ("overview.js", "text/javascript; charset=utf-8"),
           "/static/table.js": ("table.js", "text/javascript; charset=utf-8"),
           "/static/episode.js": ("episode.js", "text/javascript; charset=utf-8"),
           "/static/viewer.js": ("viewer.js", "text/javascript; charset=utf-8")}
_SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; "
                               "frame-ancestors 'none'; form-action 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cross-Origin-Resource-Policy": "same-origin",
}
_DAMAGED = (CorruptStoreError, UnsupportedFormatError, StoreIOError)


def asset(name: str) -> bytes:
    """A file of the page shipped in the package (``assets/``)."""
    # (one name per joinpath: Python 3.10's zip-file Traversable takes one)
    return resources.files(__package__).joinpath("assets").joinpath(name).read_bytes()


class ViewerServer(ThreadingHTTPServer):
    """A server over one store; ``url`` is where the page is; ``close()`` stops it and closes the store."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, api: StoreApi, host: str = "127.0.0.1", port: int = 0, *, quiet: bool = True,
                 allow_hosts: tuple[str, ...] = ()):
        self.api, self.quiet = api, quiet
        self._thread: threading.Thread | None = None
        if ":" in host:  # an IPv6 address such as ::1
            self.address_family = socket.AF_INET6
        super().__init__((host, port), ViewerHandler)
        self.host, self.port = host, self.server_address[1]
        name = f"[{host}]" if ":" in host else host
        self.url = f"http://{name}:{self.port}/"
        # the Host header a request may name (DNS rebinding: a page of another site reaching this server names
        # that site): this machine's loopback names, the bound address, an IP address (no site can rebind it),
        # this machine's names if bound to every address, and the names the caller allows (``allow_hosts``)
        names = {"127.0.0.1", "localhost", "[::1]", name, *(_bracket(h.lower()) for h in allow_hosts)}
        if host in ("0.0.0.0", "::", ""):
            names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
        self.allowed_hosts = {f"{h}:{self.port}" for h in names}

    def start(self) -> "ViewerServer":
        """Serve from a background thread (daemon: it ends with the program)."""
        served = self._served = threading.Event()

        def serve() -> None:
            try:
                self.serve_forever(poll_interval=0.1)
            finally:
                served.set()

        self._thread = threading.Thread(target=serve, name="memmap-replay-viewer", daemon=True)
        self._thread.start()
        return self

    def wait(self) -> None:
        """Until the background thread stops serving (``close`` from another thread), or Ctrl-C. (An event, not
        ``join``: Python 3.11's ``join`` interrupted by Ctrl-C can release the lock of a thread still running.)"""
        while self._thread is not None and not self._served.wait(0.5):
            pass

    def close(self) -> None:
        if self._thread is not None:
            self.shutdown()
            self._thread.join()
            self._thread = None
        self.server_close()
        self.api.close()

    def __enter__(self) -> "ViewerServer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def handle_error(self, request, client_address) -> None:
        """A browser that went away mid-answer (a cancelled frame) is normal: no traceback for it."""
        error = sys.exc_info()[1]
        if isinstance(error, (ConnectionError, TimeoutError)):
            return
        print(f"memmap-replay view: error answering {client_address}: {type(error).__name__}: {error}", file=sys.stderr)

    def __repr__(self) -> str:
        return f"ViewerServer({self.url!r}, folder={str(self.api.folder)!r})"


class ViewerHandler(BaseHTTPRequestHandler):
    server: ViewerServer
    server_version = "memmap-replay-viewer"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 (the name http.server calls)
        self._answer(head=False)

    def do_HEAD(self) -> None:  # noqa: N802
        self._answer(head=True)

    def _refuse_method(self) -> None:
        self._send(405, "text/html; charset=utf-8", _error_page(405, "The viewer is read-only: it answers GET only."),
                   extra={"Allow": "GET, HEAD"})

    do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = _refuse_method  # noqa: N815

    def log_message(self, format: str, *args) -> None:  # noqa: A002 (http.server's signature)
        if not self.server.quiet:
            super().log_message(format, *args)

    # ---- dispatch ------------------------------------------------------------------------------------

    def _answer(self, *, head: bool) -> None:
        self._head = head
        if not self._host_allowed(self.headers.get("Host", "")):
            self._send(403, "text/html; charset=utf-8", _error_page(403, "This server answers requests for "
                       f"{self.server.url} only (the Host header names another site; 'memmap-replay view "
                       f"--allow-host NAME' allows a name)."))
            return
        parts = urlsplit(self.path)
        query = {key: values[-1] for key, values in parse_qs(parts.query, keep_blank_values=True).items()}
        filters = tuple(value for value in parse_qs(parts.query).get("filter", []) if value.strip())
        route = _ROUTES.get(parts.path)
        try:
            if parts.path in _ASSETS:
                if parts.path == "/":
                    self.server.api.state()  # a store that cannot be read gets the error page, not a blank one
                name, kind = _ASSETS[parts.path]
                self._send_tagged(kind, asset(name), "")
            elif route is not None:
                route(self, query, filters)
            elif parts.path == "/favicon.ico":
                self._send(204, "image/x-icon", b"")
            else:
                self._fail(404, "There is no such page here: the viewer's pages are / and its #/episode/ID views.")
        except ReplayError as error:
            self._fail(_status(error), str(error))
        except Exception as error:  # a bug, or data nobody foresaw: said in one line, never a traceback
            self.server.handle_error(self.request, self.client_address)
            self._fail(500, f"the viewer failed to answer ({type(error).__name__}: {error}); please report it")

    def _host_allowed(self, header: str) -> bool:
        header = header.strip().lower()
        if header in self.server.allowed_hosts or _loopback_name(header):
            return True
        address, _, port = header.rpartition(":")
        if port != str(self.server.port):
            return False
        try:  # an IP address (v4, or v6 in brackets) with the server's port: no DNS name to rebind
            ipaddress.ip_address(address[1:-1] if address.startswith("[") and address.endswith("]") else address)
        except ValueError:
            return False
        return not (":" in address and not address.startswith("["))

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """http.server's own errors (414 a URL too long, 501 an unknown method, 400 a malformed request) as the
        viewer's error page, with the same security headers as every answer."""
        self.close_connection = True
        text = message or explain or self.responses.get(code, ("Error",))[0]
        self._send(code, "text/html; charset=utf-8", _error_page(code, text), extra={"Connection": "close"})

    def _fail(self, status: int, message: str) -> None:
        if self.path.startswith("/api/"):
            self._send(status, "application/json", json.dumps({"error": message, "status": status}).encode())
        else:
            self._send(status, "text/html; charset=utf-8", _error_page(status, message))

    def _send_tagged(self, kind: str, body: bytes, identity: str) -> None:
        """An answer the browser may keep but must check again each time (``no-cache``): its ETag is the store's
        identity and a hash of the bytes, so a folder overwritten by another store (or a newer viewer's
        scripts on the same port) is never shown from the browser's cache; an unchanged one is a 304."""
        tag = f'"{identity}-{hashlib.blake2b(body, digest_size=12).hexdigest()}"'
        if tag in (value.strip() for value in self.headers.get("If-None-Match", "").split(",")):
            self._send(304, kind, b"", cache=True, extra={"ETag": tag})
        else:
            self._send(200, kind, body, cache=True, extra={"ETag": tag})

    def _send(self, status: int, kind: str, body: bytes, *, cache: bool = False, extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-cache" if cache else "no-store")
        for key, value in {**_SECURITY_HEADERS, **(extra or {})}.items():
            self.send_header(key, value)
        self.end_headers()
        if not getattr(self, "_head", False):
            self.wfile.write(body)

    def _json(self, value) -> None:
        self._send(200, "application/json", json.dumps(value, allow_nan=False, separators=(",", ":")).encode())

    # ---- routes --------------------------------------------------------------------------------------

    def _state(self, query: dict, filters: tuple) -> None:
        self._json(self.server.api.state())

    def _overview(self, query: dict, filters: tuple) -> None:
        self._json(self.server.api.overview())

    def _stats(self, query: dict, filters: tuple) -> None:
        self._json(self.server.api.stats())

    def _episodes(self, query: dict, filters: tuple) -> None:
        self._json(self.server.api.episodes(
            offset=_int(query, "offset", 0), limit=_int(query, "limit", 50), sort=query.get("sort", "id"),
            descending=query.get("order", "asc") == "desc", filters=filters))

    def _episode(self, query: dict, filters: tuple) -> None:
        self._json(self.server.api.episode(_int(query, "id")))

    def _frame(self, query: dict, filters: tuple) -> None:
        api = self.server.api
        store = api.store_id()
        if query.get("store", store) != store:
            raise SampleExpiredError("this frame's store was replaced by a new store in the same folder (overwritten); "
                                     "reload the page")
        data = api.frame(query.get("field", ""), _int(query, "id"), _int(query, "t"), query.get("stack", "last"))
        self._send_tagged("image/png", data, store)


_ROUTES: dict[str, Callable] = {"/api/state": ViewerHandler._state, "/api/overview": ViewerHandler._overview,
                                "/api/stats": ViewerHandler._stats, "/api/episodes": ViewerHandler._episodes,
                                "/api/episode": ViewerHandler._episode, "/api/frame": ViewerHandler._frame}


_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")


def _loopback_name(header: str) -> bool:
    """A Host header naming this machine's loopback (``localhost``, ``127.0.0.1``, ``[::1]``) with any port or
    none: what a browser sends through a tunnel (``ssh -L 8080:127.0.0.1:PORT`` gives ``localhost:8080``). No
    other site can be reached by these names, so they cannot carry a DNS-rebinding request."""
    if header in _LOOPBACK_NAMES:
        return True
    name, _, port = header.rpartition(":")
    return name in _LOOPBACK_NAMES and port.isascii() and port.isdigit()


def _bracket(host: str) -> str:
    """An IPv6 address as a Host header writes it ([::1]); any other name as it is."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def _int(query: dict, name: str, default: int | None = None) -> int:
    text: Any = query.get(name)  # a str, or absent (None): int() refuses anything else
    if text is None and default is not None:
        return default
    try:
        value = int(text)
    except (TypeError, ValueError):
        shown = text[:40] if isinstance(text, str) else text
        raise OptionError(f"query parameter {name!r} must be a whole number (got {shown!r})") from None
    if not -(1 << 62) <= value < 1 << 62:  # (numpy's int64 would overflow: a 500)
        raise OptionError(f"query parameter {name!r} is out of range (got {text[:40]!r})")
    return value


def _status(error: ReplayError) -> int:
    if isinstance(error, FrameTooLargeError):
        return 413
    if isinstance(error, SampleExpiredError):
        return 410
    if isinstance(error, IndexRangeError):
        return 404
    if isinstance(error, MissingExtraError):
        return 501
    if isinstance(error, _DAMAGED) or isinstance(error, OSError):
        return 503
    return 400


def _error_page(status: int, message: str) -> bytes:
    reason = {400: "Bad request", 403: "Forbidden", 404: "Not found", 405: "Method not allowed", 410: "Gone",
              413: "Too large", 414: "URL too long",
              501: "Not available", 503: "The store cannot be read"}.get(status, "Error")
    text = (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{status} {reason} - memmap-replay view"
            f"</title><link rel=stylesheet href=/static/viewer.css></head><body class=error-page><main>"
            f"<h1>{status} {html.escape(reason)}</h1><p id=error-message>{html.escape(message)}</p>"
            f"<p><a href=/>Back to the store</a></p></main></body></html>")
    return text.encode("utf-8")
