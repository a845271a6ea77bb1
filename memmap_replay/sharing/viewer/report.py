"""A static report of a store: one self-contained HTML file to attach to a paper or an issue.

``report(folder, "report.html", episodes=12, frames=8)`` writes what the viewer's overview shows (the card,
counts, the end mix, return and length over episode order and their histograms, per-field statistics) and
``episodes`` episodes spread from the oldest to the newest, each a row of the episodes table with
``frames`` thumbnails of an image field (its first step, its last, its final observation when stored:
``frames.sheet_steps``). Everything is inside the file: the CSS and scripts of the viewer's page
(``assets/``), the data as JSON, the thumbnails as ``data:`` PNGs; it opens from disk, offline.

The JSON sits in a ``<script type="application/json">`` with ``<``, ``>`` and ``&`` written as JSON escapes,
so no string of the store (a card saying ``</script>``) can end it; the page draws it with ``textContent``.
"""

from __future__ import annotations

import base64
import html
import json
import os
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ..._version import __version__
from ...core.options import integer
from ...errors import OptionError
from ..checksums import _write_atomic, check_new_path
from ..frames import sheet_steps
from .api import StoreApi
from .server import asset

__all__ = ["report", "ReportWritten"]

_SCRIPTS = ("base.js", "plots.js", "overview.js", "report.js")
_JSON_ESCAPES = {ord("<"): "\\u003c", ord(">"): "\\u003e", ord("&"): "\\u0026"}


class ReportWritten:
    """What ``report`` wrote: its path, the ids of the episodes shown, the image field and its size."""

    def __init__(self, path: Path, episodes: list[int], field: str | None, nbytes: int):
        self.path, self.episodes, self.field, self.nbytes = path, episodes, field, nbytes

    def __repr__(self) -> str:
        return f"ReportWritten({str(self.path)!r}, episodes={self.episodes}, field={self.field!r}, {self.nbytes} bytes)"


def report(folder: str | os.PathLike, out: str | os.PathLike, *, episodes: int = 12, frames: int = 8,
           field: str | None = None) -> ReportWritten:
    """Write the static report of the store at ``folder`` to ``out`` (.html); see the module docstring.
    ``field``: the image field shown (default: the first one; a store without one gets no thumbnails)."""
    path = Path(out)
    if path.suffix.lower() not in (".html", ".htm"):
        raise OptionError(f"a report is written to a file ending in .html (got {str(path)!r})")
    if not path.parent.is_dir():
        raise OptionError(f"the report {path} must be in an existing folder ({path.parent} is not one)")
    check_new_path(path, "the report (out)")
    count, frames = integer(episodes, "episodes", low=1), integer(frames, "frames", low=1, high=64)
    api = StoreApi(folder)
    try:
        data = _data(api, count, frames, field)
    finally:
        api.close()
    page = _page(data)
    _write_atomic(path, page)
    return ReportWritten(path, [episode["row"][0] for episode in data["episodes"]], data["field"], len(page))


def _data(api: StoreApi, count: int, frames: int, field: str | None) -> dict:
    overview, stats = api.overview(), api.stats()
    images = [item["name"] for item in overview["fields"] if item["kind"] == "image"]
    if field is not None and field not in images:
        raise OptionError(f"field must be one of the image fields {images} (got {field!r})")
    field = field if field is not None else (images[0] if images else None)
    total = overview["episodes"]
    positions = sorted(set(np.linspace(0, total - 1, min(count, total)).round().astype(int).tolist())) if total else []
    shown = []
    for position in positions:
        row = api.episodes(offset=position, limit=1)["rows"][0]
        episode = api.episode(row[0]) if field is not None else None
        thumbs = []
        if episode is not None and field is not None:  # (an episode is read for a field)
            for step in sheet_steps(episode["length"], episode["final"], columns=frames).tolist():
                png = api.frame(field, row[0], step)
                label = "final" if step == episode["length"] else f"t {step}"
                thumbs.append({"src": "data:image/png;base64," + base64.b64encode(png).decode("ascii"), "label": label})
        shown.append({"row": row, "frames": thumbs})
    # the folder's name only: a report is shared, the path of the machine that made it is nobody's business
    where, name = str(api.folder.resolve()), api.folder.resolve().name
    overview["folder"] = name
    if overview.get("card_error"):
        overview["card_error"] = overview["card_error"].replace(where, name).replace(str(api.folder), name)
    made = f"made by memmap-replay {__version__} on {datetime.now(timezone.utc):%Y-%m-%d %H:%M} UTC"
    return {"overview": overview, "stats": stats, "columns": overview["columns"],
            "episodes": shown, "field": field, "made": made}


def _page(data: dict) -> bytes:
    # "</" is "<\/" to JavaScript (in a string, a regex or a comment), and can then never end the script
    scripts = "\n".join(asset(name).decode("utf-8") for name in _SCRIPTS).replace("</", "<\\/")
    payload = json.dumps(data, allow_nan=False, separators=(",", ":")).translate(_JSON_ESCAPES)
    title = html.escape(_title(data))
    text = f"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title} - memmap-replay report</title>
<style>
{asset("viewer.css").decode("utf-8")}
</style>
</head>
<body class="report">
<header class="top"><span>memmap-replay report</span> <span id="store-title"></span>
<span id="live" class="live"></span></header>
<div id="error" class="banner" hidden></div>
<main id="overview-view">
  <section id="card" class="card"></section>
  <section id="counts" class="counts"></section>
  <section class="plots" id="overview-plots"></section>
  <section id="episodes"><h2>Episodes</h2><p id="table-count" class="muted"></p>
    <table id="episodes-table" class="grid"><thead></thead><tbody></tbody></table></section>
  <section id="stats"><h2>Field statistics</h2><table id="stats-table" class="grid"></table></section>
  <p id="made" class="muted"></p>
</main>
<script type="application/json" id="report-data">{payload}</script>
<script>
{scripts}
</script>
</body>
</html>
"""
    return text.encode("utf-8")


def _title(data: dict) -> str:
    card: Any = data["overview"].get("card") or {}
    return card.get("name") or data["overview"]["folder"]
