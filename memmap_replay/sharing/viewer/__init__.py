"""A browser viewer of a store: ``memmap_replay.view(folder)`` or ``memmap-replay view FOLDER``.

A local, read-only web server over the store (``server``) answers a page shipped in the package
(``assets/``: HTML, CSS and hand-made SVG plots in plain JavaScript; nothing from the network) with JSON
and PNG frames (``api``, ``table``, ``pictures``). The page shows the card, counts, the end mix, return and
length over episode order and their histograms, per-field statistics, a paged episodes table (sorted and
filtered by the server, so 100,000 episodes stay fast), and each episode's frames with a timeline, its
small fields plotted per step with a cursor that follows the frames. It follows a writer: new episodes
appear without a reload. Frames need pillow: ``pip install 'memmap-replay[video]'``.

``report(folder, "report.html")`` writes the overview and a few episodes with thumbnails as one static,
self-contained HTML file (``report``), for a paper or an issue.
"""

from __future__ import annotations

import os
import webbrowser

from ...core.checks import locate
from .api import StoreApi
from .report import ReportWritten, report
from .server import ViewerServer

__all__ = ["view", "report", "ReportWritten", "ViewerServer", "StoreApi"]


def view(folder: str | os.PathLike, *, port: int = 0, host: str = "127.0.0.1", open_browser: bool = False,
         block: bool = True, quiet: bool = True, allow_hosts: tuple[str, ...] = ()) -> ViewerServer:
    """Serve a viewer of the store at ``folder`` on ``host:port`` (port 0: a free one); ``server.url`` is the
    page. ``block=True`` serves until Ctrl-C, then closes; ``block=False`` serves from a background thread
    and returns the server at once: ``server.close()`` stops it (it is also a context manager).
    ``open_browser`` opens the page in the default browser. A folder holding no store raises
    ``StoreNotFoundError`` here; a damaged store is served as an error page saying what is wrong.
    A request naming another site in its ``Host`` header is refused (DNS rebinding): the server answers its
    address, loopback names, IP addresses, this machine's name when ``host`` is every address (0.0.0.0), and
    the names in ``allow_hosts`` (e.g. a name other machines reach this one by)."""
    locate(folder, "r")  # no store there: said now, not in the browser
    server = ViewerServer(StoreApi(folder), host, port, quiet=quiet, allow_hosts=tuple(allow_hosts))
    if open_browser:
        webbrowser.open(server.url)
    if not block:
        return server.start()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
        server.api.close()
    return server
