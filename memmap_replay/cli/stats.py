"""``stats FOLDER [FIELD ...]``: field statistics for normalization (see ``memmap_replay.sharing.stats``)."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np

from ..errors import OptionError
from ..sharing.stats import FieldStats, RunningStats, StoreStats, compression_summary, compute_stats, ratio_text
from ..core.store import EpisodeStore
from ..core.progress import progress_bar
from . import EXIT_OK
from .checksum import _guarded, _show_progress
from .info import _READ_EXIT_CODES, _columns, _episode_lines, _figure, _human_bytes, _json_safe, _read_store

_SHOW_ALL = 16    # a field of up to this many elements shows them all; a larger one shows:
_HEAD, _TAIL = 8, 2  # its first and last few, then one row over all of its elements

_STATS_HELP = f"""\
Print the statistics of step fields, per element: count, mean, std (population), min, max, and
--quantiles on request; also the live episodes' length and return (the sum of a scalar 'reward' or
'rewards' field). An image field (uint8 (C, H, W) or (H, W, C), C in 1, 3, 4) shows one row per
channel; another field of more than {_SHOW_ALL} elements shows its first {_HEAD} and last {_TAIL} elements; both
end with a row 'all' over every element. --json gives every element (and an image's 'channels').

--stats-json FILE also writes LeRobot's meta/stats.json to FILE (outside the store's folder): per
field mean, std, min, max and count, an image's per channel as (C, 1, 1) or (1, 1, C), in the stored
units (0-255 for uint8 images). Without FIELD it covers every bool, int and float step field, reading
the untracked ones (images) from the live episodes.

Without FIELD: the fields tracked as episodes commit (bool, int and float fields of at most 1024
numbers a row); their running statistics are saved in stats/running.npz, so this reads no step data
(only episodes committed since the last save). They count every episode ever committed, which in a
circular store includes evicted ones; --recompute reads the live episodes instead (and covers every
numeric field when no FIELD is named). Naming an untracked FIELD (an image), or --quantiles, reads
its rows from the live episodes, with a progress bar on a terminal (--quiet hides it).

A compressed field's rows are decoded as they are read; its codec and measured ratio (the raw bytes of
the live rows over their encoded bytes, read from its index) are shown too.

The store is opened read-only (no writer lock: this works while a writer writes) and nothing is
written.

{_READ_EXIT_CODES}

examples:
  %(prog)s replay_data
  %(prog)s replay_data obs reward --quantiles 0.05,0.5,0.95
  %(prog)s replay_data image --recompute --quiet
  %(prog)s replay_data --json | jq '.fields.obs.mean'
  %(prog)s replay_data --stats-json stats.json --quiet"""


def _quantile_list(text: str) -> list[float]:
    """'0.05,0.5,0.95' -> [0.05, 0.5, 0.95], each in [0, 1]."""
    try:
        values = [float(part) for part in text.split(",")]
    except ValueError:
        values = []
    if not values or not all(0.0 <= value <= 1.0 for value in values):  # NaN fails too
        raise argparse.ArgumentTypeError(f"must be numbers in [0, 1] separated by commas, e.g. 0.05,0.5,0.95 "
                                         f"(got {text!r})")
    return list(dict.fromkeys(values))


def add(commands) -> None:
    parser = commands.add_parser("stats", help="print field statistics (mean, std, min, max, quantiles)",
                                 description=_STATS_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", metavar="FOLDER", help="the store's folder (the one holding meta.json)")
    parser.add_argument("fields", nargs="*", metavar="FIELD", help="step fields to show (default: the tracked ones)")
    parser.add_argument("--quantiles", type=_quantile_list, metavar="Q,Q,...",
                        help="also exact quantiles over the live episodes, e.g. 0.05,0.5,0.95 (reads the rows)")
    parser.add_argument("--recompute", action="store_true",
                        help="compute from the live episodes instead of the running statistics (reads the rows)")
    parser.add_argument("--json", action="store_true",
                        help="print the statistics as JSON: fields (every element), episodes, episodes_counted")
    parser.add_argument("--stats-json", metavar="FILE",
                        help="also write LeRobot's stats.json to FILE (every numeric field when no FIELD is named)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(run=run_stats)


def run_stats(args: argparse.Namespace) -> int:
    return _guarded(args, lambda: _stats_action(args))


def _stats_action(args: argparse.Namespace) -> int:
    with _read_store(args.folder) as store:
        wanted = _step_fields(store, args.fields)
        if args.stats_json is not None and not wanted:
            wanted = [name for name, spec in store.schema.fields.items() if spec.dtype.kind in "biuf"]
        result, untracked = _gather(store, wanted, args.quantiles, args.recompute, _show_progress(args))
        compression = compression_summary(store)
    written = None if args.stats_json is None else result.write_lerobot(args.stats_json)
    if args.json:
        print(json.dumps(_json_safe({"folder": args.folder, "ok": True, "recomputed": args.recompute,
                                    **result.to_dict(), "not_shown": untracked, "compression": compression,
                                    **({"stats_json": str(written)} if written else {})}), indent=2))
    else:
        print(_render(args.folder, store, result, untracked, args.recompute, args.quantiles or [], compression))
        if written is not None:
            images = ", ".join(name for name, value in result.fields.items() if value.channels is not None)
            print(f"wrote {written} (LeRobot's stats.json: {len(result.fields)} field"
                  f"{'s' * (len(result.fields) != 1)}{f'; per channel: {images}' if images else ''})")
    return EXIT_OK


def _step_fields(store: EpisodeStore, names: list[str]) -> list[str]:
    """The FIELD arguments, checked: step fields with bool, int or float values (in order, once each)."""
    schema = store.schema
    for name in names:
        if name in schema.fields:
            if schema.fields[name].dtype.kind not in "biuf":
                raise OptionError(f"field {name!r} has dtype {schema.fields[name].dtype}: statistics are kept "
                                       f"for bool, int and float fields")
            continue
        what = " is a meta field (one value per episode);" if name in schema.meta_fields else " is not a field:"
        raise OptionError(f"{name!r}{what} statistics cover step fields; the store's are "
                               f"{', '.join(schema.fields)}")
    return list(dict.fromkeys(names))


def _gather(store: EpisodeStore, names: list[str], quantiles: list[float] | None, recompute: bool,
           progress: bool) -> tuple[StoreStats, list[str]]:
    """The statistics ``buffer.stats()`` gives, one field at a time where rows are read, so that a progress
    bar (bytes read) can follow; and the numeric fields not shown (untracked, not named)."""
    schema, table = store.schema, store.live_table()
    if recompute:
        running = RunningStats.fresh(schema, store.meta.store_id)  # not used: everything is read
        catch_up = 0
    else:
        running = RunningStats.load(store.folder, schema, store.meta.store_id)
        catch_up = int(table.length[table.ids >= running.covers].sum())
    numeric = [name for name, spec in schema.fields.items() if spec.dtype.kind in "biuf"]
    wanted = names or (numeric if recompute else list(running.moments))
    untracked = [] if names else [name for name in numeric if name not in wanted]
    reads = [name for name in wanted if recompute or quantiles or name not in running.moments]
    steps = int(table.length.sum())
    row_bytes = {name: spec.row_nbytes for name, spec in schema.fields.items()}
    passes = lambda name: (recompute or name not in running.moments) + bool(quantiles)  # noqa: E731
    total = catch_up * sum(row_bytes[name] for name in running.moments) \
        + steps * sum(passes(name) * row_bytes[name] for name in reads)
    with progress_bar(total, "stats", bool(progress and total), unit="B") as bar:
        if catch_up:
            bar.set_postfix_str("running statistics: the newest episodes")
            running.catch_up(store)
            bar.update(catch_up * sum(row_bytes[name] for name in running.moments))
        result = compute_stats(store, running, fields=[name for name in wanted if name not in reads],
                               recompute=recompute)
        for name in reads:
            bar.set_postfix_str(name)
            part = compute_stats(store, running, fields=[name], quantiles=quantiles, recompute=recompute)
            result.fields[name] = part.fields[name]
            bar.update(steps * passes(name) * row_bytes[name])
    result.fields = {name: result.fields[name] for name in wanted}
    return result, untracked


# ---- text ----------------------------------------------------------------------------------------------


def _render(folder: str, store: EpisodeStore, result: StoreStats, untracked: list[str], recompute: bool,
           quantiles: list[float], compression: dict | None = None) -> str:
    episodes = result.episodes
    live = episodes["count"]
    if recompute:
        source = f"computed from the {live:,} live episodes"
    else:
        source = f"running statistics of {result.episodes_counted:,} committed episodes"
        if result.episodes_counted != live:
            source += " (evicted ones included; --recompute for the live episodes only)"
    lines = [f"{folder}: {live:,} live episode{'s' * (live != 1)}, {episodes['steps']:,} steps; {source}"]
    packed = [["compressed", f"{name}: {part['codec']}, {ratio_text(part['ratio'])} smaller ({_human_bytes(raw)} "
                             f"of live rows in {_human_bytes(part['encoded_bytes'])})"]
              for name, part in (compression or {}).items() for raw in [part["raw_bytes"]]]
    lines += _columns(_episode_lines(episodes) + packed, indent="  ")
    if result.fields:
        header = ["field", "count", "mean", "std", "min", "max", *(f"q{q:g}" for q in quantiles)]
        rows = [header]
        for name, stats in result.fields.items():
            rows += _field_rows(name, store.schema.fields[name].shape, stats, quantiles)
        lines += [""] + _columns(rows, right=set(range(1, len(header))))
    else:
        lines.append("no fields to show")
    if untracked:
        lines.append(f"not shown (not tracked; name them to read them from the live episodes): {', '.join(untracked)}")
    return "\n".join(lines)


def _field_rows(name: str, shape: tuple[int, ...], stats: FieldStats, quantiles: list[float]) -> list[list[str]]:
    """One row per element shown: all of them for a small field, else the first and last few and 'all'."""
    size = math.prod(shape)
    flat = {key: np.asarray(getattr(stats, key), dtype=np.float64).reshape(size)
            for key in ("mean", "std", "min", "max")}
    qs = [np.asarray(stats.quantiles[q], dtype=np.float64).reshape(size) for q in quantiles]

    def row(label: str, i: int) -> list[str]:
        return [label, _figure(stats.count), *(_figure(flat[key][i]) for key in ("mean", "std", "min", "max")),
                *(_figure(q[i]) for q in qs)]

    def label(i: int) -> str:
        return name if not shape else f"{name}[{','.join(map(str, np.unravel_index(i, shape)))}]"

    if stats.channels is not None:  # an image: one row per channel, then 'all'
        channels = stats.channels
        rows = [[f"{name}[channel={c}]", _figure(channels.count),
                 *(_figure(float(getattr(channels, key)[c])) for key in ("mean", "std", "min", "max")),
                 *("-" for _ in qs)] for c in range(len(channels.mean))]
    elif size <= _SHOW_ALL:
        return [row(label(i), i) for i in range(size)]
    else:
        rows = [row(label(i), i) for i in range(_HEAD)]
        rows.append([f"  ... {size - _HEAD - _TAIL:,} more (--json lists every element)"])
        rows += [row(label(i), i) for i in range(size - _TAIL, size)]
    rows.append([f"{name}[all]", _figure(stats.count * size), *map(_figure, _pooled(flat)), *("-" for _ in qs)])
    return rows


def _pooled(flat: dict) -> tuple[float, float, float, float]:
    """mean, std, min, max over every element together (each element has the same count)."""
    if not np.isfinite(flat["mean"]).any():
        return (math.nan,) * 4
    mean = float(np.mean(flat["mean"]))
    std = math.sqrt(float(np.mean(np.square(flat["std"]) + np.square(flat["mean"] - mean))))
    return mean, std, float(np.min(flat["min"])), float(np.max(flat["max"]))
