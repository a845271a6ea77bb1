"""``info FOLDER``: a store at a glance (card, format, schema, capacity, counts, sizes, episodes).

Also here, shared with ``stats``: ``_read_store`` (a folder opened read-only, closed after), and the
text helpers ``_figure``, ``_human_bytes``, ``_columns`` and ``_json_safe``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from collections.abc import Set
from typing import Any, Iterator

import numpy as np

from ..core import folderio
from ..core import format as fmt
from ..sharing.card import read_card
from ..sharing.checksums import MANIFEST, store_files
from ..errors import CorruptStoreError, ReadOnlyError, ReplayError, StoreIOError
from ..sharing.stats import RUNNING_FILE, compression_summary, episode_summary, ratio_text
from ..core.store import EpisodeStore
from . import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from .checksum import _guarded

_READ_EXIT_CODES = f"""exit codes:
  {EXIT_OK}  done
  {EXIT_PROBLEMS}  the store is damaged (a file is truncated or missing, meta.json is broken); run 'verify FOLDER'
     for the list
  {EXIT_USAGE}  usage error, or the path is not a store (does not exist, is a file, holds no meta.json)"""

_INFO_HELP = f"""\
Show what a store holds, at a glance: its dataset card's name and description (if it has a card),
the format version, the schema (each field's dtype, shape and default, and the meta fields; a
compressed field's codec and measured ratio, the raw bytes of its live rows over their encoded
bytes), the capacity (max_episodes, max_timesteps, max_steps, circular), the counts (live episodes,
steps, the first live and the next episode id), how the episodes ended, their length and return
(the sum of a scalar 'reward' or 'rewards' field), the size on disk of each field and in all (on
disk: the blocks used; apparent: what the file sizes say, which includes the unwritten, sparse rows;
a compressed field's two files, steps/<field>.frames.npy and .index.npy, together), and whether the
folder has a checksums.sha256, a card.json and saved running statistics.

It opens the store read-only (no writer lock: it works while a writer writes) and reads no step data
but the reward column and a compressed field's index (no frame is decoded). `stats FOLDER` shows the
fields' statistics; `verify FOLDER` checks for damage.

{_READ_EXIT_CODES}

examples:
  %(prog)s replay_data
  %(prog)s replay_data --json | jq .counts
  %(prog)s replay_data --json | jq '.sizes.total.disk'
  %(prog)s replay_data --json | jq '.compression.image.ratio'"""


def add(commands) -> None:
    parser = commands.add_parser("info", help="show a store at a glance: schema, capacity, counts, sizes",
                                 description=_INFO_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", metavar="FOLDER", help="the store's folder (the one holding meta.json)")
    parser.add_argument("--json", action="store_true", help="print everything as one JSON object")
    parser.set_defaults(run=run_info)


def run_info(args: argparse.Namespace) -> int:
    return _guarded(args, lambda: _info_action(args))


def _info_action(args: argparse.Namespace) -> int:
    with _read_store(args.folder) as store:
        report = _describe(store)
    if args.json:
        print(json.dumps(_json_safe(report), indent=2, ensure_ascii=False))
    else:
        print(_render(report))
    if report.get("card_error"):
        print(f"{args.prog}: warning: {report['card_error']}", file=sys.stderr)
    return EXIT_OK


# ---- shared with stats ---------------------------------------------------------------------------------


@contextmanager
def _read_store(folder: str) -> Iterator[EpisodeStore]:
    """The store at ``folder`` opened read-only (no writer lock), closed after."""
    store = EpisodeStore.open(folder, "r")
    try:
        yield store
    finally:
        store.close()


def _figure(value: Any) -> str:
    """A number for people: 6 significant digits, '-' for none or NaN."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return f"{int(value):,}"
    return f"{float(value):.6g}"


def _human_bytes(count: int) -> str:
    """1536 -> '1.5 KiB' (binary units, as du -h)."""
    size, unit = float(count), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            break
        size /= 1024
    return f"{int(size)} B" if unit == "B" else f"{size:.3g} {unit}" if size < 1000 else f"{size:.0f} {unit}"


def _columns(rows: list[list[str]], right: Set[int] = frozenset(), indent: str = "") -> list[str]:
    """Rows of cells as aligned lines (columns in ``right`` are right-aligned); a row of one cell is a note
    that spans the columns (it does not widen the first)."""
    table = [row for row in rows if len(row) > 1] or [[""]]
    widths = [max(len(row[i]) for row in table if i < len(row)) for i in range(max(map(len, table)))]
    return [indent + ("  ".join(cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
                                for i, cell in enumerate(row)) if len(row) > 1 else "".join(row)).rstrip()
            for row in rows]


def _json_safe(value: Any) -> Any:
    """NaN and infinities as null (JSON has neither), numpy scalars as Python numbers."""
    if isinstance(value, dict):
        return {key: _json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(item) for item in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _summary_text(values: dict | None) -> str:
    if not values or values.get("mean") is None:
        return "-"
    return "  ".join(f"{key} {_figure(values[key])}" for key in ("min", "mean", "max", "std"))


def _episode_lines(episodes: dict) -> list[list[str]]:
    """The 'length' and 'return' rows of an episode summary (from ``buffer.stats().episodes``)."""
    rows = [["length", _summary_text(episodes["length"])]]
    if "return" in episodes:
        rows.append(["return", f"{_summary_text(episodes['return'])}  (sum of {episodes['return_field']})"])
    return rows


# ---- what info shows -----------------------------------------------------------------------------------


def _describe(store: EpisodeStore) -> dict:
    """Everything info prints, as a JSON-able dict; reads the episode table and the reward column only."""
    folder, meta = store.folder, store.meta
    card, card_error = None, None
    try:
        card = read_card(folder)
    except (CorruptStoreError, StoreIOError,
            ReadOnlyError) as error:  # the user's words, not the data: say so, show the rest
        card_error = str(error)
    table = store.live_table()
    state = meta.state
    episodes = episode_summary(store)
    episodes["ends"] = {name or "unspecified": int(np.count_nonzero(table.end == fmt.END_CODES[name]))
                        for name in ("terminated", "truncated", None)}
    episodes["with_final_observation"] = int(np.count_nonzero(table.final))
    priorities = folder / fmt.PRIORITIES_DIR
    samplers = sorted(path.stem for path in priorities.glob("*.npy") if not path.stem.endswith(".owner")) \
        if priorities.is_dir() else []
    return {
        "folder": str(folder), "ok": True, "is_store": True,
        "name": card.name if card else None, "description": card.description if card else None,
        "format": fmt.FORMAT_NAME, "version": _format_version(folder), "store_id": meta.store_id,
        "schema": meta.schema.to_json(),
        "capacity": {"max_episodes": meta.capacity.max_episodes, "max_timesteps": meta.capacity.max_timesteps,
                     "max_steps": meta.capacity.max_steps, "circular": meta.capacity.circular},
        "counts": {"episodes": store.num_episodes, "steps": int(table.length.sum()),
                   "first_episode": state.first_episode, "next_episode": state.next_episode,
                   "removed": state.removed, "rows": state.rows, "commits": state.commits},
        "episodes": episodes,
        "sizes": _sizes(store),
        "compression": compression_summary(store),
        "files": {"checksums": (folder / MANIFEST).is_file(), "card": (folder / "card.json").is_file(),
                  "stats": (folder / fmt.STATS_DIR / RUNNING_FILE).is_file()},
        "samplers": samplers,
        **({"card_error": card_error} if card_error else {}),
    }


def _format_version(folder: Path) -> str | None:
    """meta.json's "version" (the store object keeps only what it parsed)."""
    try:  # bounded, a regular file inside the folder (folderio): never a FIFO, never /dev/zero
        return str(folderio.read_json(folder, folder / fmt.META_FILE)["version"])
    except (ReplayError, OSError, KeyError, TypeError):  # replaced or damaged since it was opened
        return None


def _usage(path: Path) -> dict:
    """{"disk": bytes of the blocks used, "apparent": the file size}; zeros for a file that went away."""
    try:
        info = os.stat(path)
    except OSError:
        return {"disk": 0, "apparent": 0}
    blocks = getattr(info, "st_blocks", None)  # not on every platform: then the apparent size
    return {"disk": info.st_size if blocks is None else blocks * 512, "apparent": info.st_size}


def _add_up(usages: list[dict]) -> dict:
    return {"disk": sum(u["disk"] for u in usages), "apparent": sum(u["apparent"] for u in usages)}


def _sizes(store: EpisodeStore) -> dict:
    """Per step field and meta field, the episode table, the rest of the store's files, and the total."""
    folder = store.folder
    steps = {name: [part.path for part in getattr(file, "files", (file,))]  # (a compressed field: both files)
             for name, file in store.steps.items()}
    fields = {name: _add_up([_usage(path) for path in paths]) for name, paths in steps.items()}
    metas = {name: _usage(file.path) for name, file in store.metas.items()}
    table = _add_up([_usage(file.path) for file in store.table.values()])
    counted = {path for paths in steps.values() for path in paths} | {
        file.path for file in (*store.metas.values(), *store.table.values())}
    try:
        listed, _ = store_files(folder)
    except OSError:  # a folder changing under us: the rest is best effort
        listed = []
    others = {folder / rel for rel in listed} | {folder / MANIFEST}
    other = _add_up([_usage(path) for path in sorted(others - counted) if path.is_file()])
    return {"fields": fields, "meta_fields": metas, "episode_table": table, "other": other,
            "total": _add_up([*fields.values(), *metas.values(), table, other])}


def _render(report: dict) -> str:
    counts, capacity, episodes, sizes_ = report["counts"], report["capacity"], report["episodes"], report["sizes"]
    title = report["folder"] + (f"  {report['name']}" if report["name"] else "")
    lines = [title]
    if report["description"]:
        lines += ["  " + line for line in report["description"].strip().splitlines()[:6]]
    removed = f", {_figure(counts['removed'])} removed" if counts["removed"] else ""
    ids = (f"ids {_figure(counts['first_episode'])}..{_figure(counts['next_episode'] - 1)}{removed}; the next is "
           f"{_figure(counts['next_episode'])}" if counts["episodes"]
           else f"the next id is {_figure(counts['next_episode'])}")
    ring = "circular: the oldest episodes are evicted" if capacity["circular"] else "not circular: it fills up"
    ends = ", ".join(f"{n:,} {name}" for name, n in episodes["ends"].items() if n) or "-"
    final = episodes["with_final_observation"]
    total = sizes_["total"]
    lines += _columns([
        ["format", f"{report['format']} {report['version'] or '?'} (store id {report['store_id']})"],
        ["capacity", f"{_figure(capacity['max_episodes'])} episodes of up to {_figure(capacity['max_timesteps'])} "
                     f"steps in {_figure(capacity['max_steps'])} rows; {ring}"],
        ["contents", f"{_figure(counts['episodes'])} episode{'s' * (counts['episodes'] != 1)} ({ids}), "
                     f"{_figure(counts['steps'])} steps, {_figure(counts['rows'])} rows allocated"],
        *_episode_lines(episodes),
        ["ends", ends + (f"; {final:,} with a final observation" if final else "")],
        ["size", f"{_human_bytes(total['disk'])} on disk, {_human_bytes(total['apparent'])} apparent"
                 + (" (sparse: rows not written yet use no disk)" if total["apparent"] > total["disk"] else "")],
        ["files", "; ".join(f"{what}: {'yes' if report['files'][key] else 'no'}" for key, what in
                            (("checksums", MANIFEST), ("card", "card.json"),
                             ("stats", f"{fmt.STATS_DIR}/{RUNNING_FILE}")))
                  + (f"; samplers: {', '.join(report['samplers'])}" if report["samplers"] else "")],
    ])
    lines.append("")
    compression = report["compression"]
    codecs = ["codec", "ratio"] if compression else []  # (columns of their own when a field is compressed)
    rows, titles = [["", "dtype", "shape", "default", *codecs, "on disk", "apparent"]], {}
    for group, heading in (("fields", "step fields"), ("meta_fields", "meta fields (one value per episode)")):
        specs = report["schema"][group]
        if specs:
            titles[len(rows)] = heading
        for name, spec in specs.items():
            used = sizes_[group][name]
            default = "zeros" if spec["default"] is None else json.dumps(spec["default"])
            codec = [compression[name]["codec"], ratio_text(compression[name]["ratio"])] if name in compression \
                else ["raw", ""] if codecs and group == "fields" else ["", ""] if codecs else []
            rows.append([f"  {name}", spec["dtype"], str(tuple(spec["shape"])), default, *codec,
                         _human_bytes(used["disk"]), _human_bytes(used["apparent"])])
    for key, what in (("episode_table", "episode table"), ("other", "other files")):
        rows.append([what, "", "", "", *("" for _ in codecs), _human_bytes(sizes_[key]["disk"]),
                     _human_bytes(sizes_[key]["apparent"])])
    sized = len(rows[0]) - 2
    for at, line in enumerate(_columns(rows, right={sized, sized + 1} | ({sized - 1} if codecs else set()))):
        lines += [titles[at]] if at in titles else []
        lines.append(line)
    return "\n".join(lines)
