"""``grow FOLDER``: raise a store's capacity in place (see ``ReplayBuffer.grow`` and ``core/grow.py``)."""

from __future__ import annotations

import argparse
import json

from ..errors import StoreLockedError
from . import EXIT_OK, EXIT_USAGE
from .checksum import _SHARE_EXIT_CODES, _fail, _guarded

_GROW_HELP = f"""\
Raise the capacity of a store in place, keeping every episode: more episode slots (--max-episodes),
more rows (--max-steps), longer episodes (--max-timesteps), or a ring (--circular: once full, the oldest
episodes are evicted). Values never shrink, and a ring stays a ring. Use it when a store (an imported
dataset, say) must take more episodes: adding to a full store raises BufferFullError.

Crash-safe: the files grow first and meta.json, the commit point, is replaced last; killed at any point,
the store reopens with every committed episode, with the old capacity or the new one. It takes the
writer lock (no writer may be writing). Episode ids stay; their slots may move. A persisting prioritized
sampler starts its priorities afresh when their sizes change.

{_SHARE_EXIT_CODES}

examples:
  %(prog)s hopper_store --max-episodes 10000 --max-steps 2000000
  %(prog)s replay_data --circular --json"""


def add(commands) -> None:
    parser = commands.add_parser("grow", help="raise a store's capacity in place (episodes, rows, or a ring)",
                                 description=_GROW_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", metavar="FOLDER", help="the store's folder (the one holding meta.json)")
    parser.add_argument("--max-episodes", type=int, metavar="N", help="episode slots (default: as stored)")
    parser.add_argument("--max-steps", type=int, metavar="N", help="rows of every step field (default: as stored)")
    parser.add_argument("--max-timesteps", type=int, metavar="N", help="the longest episode (default: as stored)")
    parser.add_argument("--circular", action="store_true", default=None,
                        help="make the store a ring that evicts its oldest episodes when full")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(run=run_grow)


def run_grow(args: argparse.Namespace) -> int:
    from ..buffer import ReplayBuffer

    options = {key: getattr(args, key) for key in ("max_episodes", "max_steps", "max_timesteps", "circular")}
    if all(value is None for value in options.values()):
        return _fail(args, "nothing to grow: pass --max-episodes, --max-steps, --max-timesteps or --circular",
                     EXIT_USAGE)

    def action() -> int:
        with ReplayBuffer.from_folder(args.folder, track_stats=False) as buffer:
            before = _capacity(buffer)
            try:
                buffer.grow(**options)
            except StoreLockedError as error:
                raise StoreLockedError(f"{error}; stop the writer, then grow the store") from None
            after = _capacity(buffer)
        if args.json:
            print(json.dumps({"folder": args.folder, "ok": True, "before": before, "capacity": after}, indent=2))
            return EXIT_OK
        changed = [f"{key} {before[key]} -> {after[key]}" for key in after if after[key] != before[key]]
        print(f"{args.folder}: " + (", ".join(changed) if changed else "already that large; nothing changed"))
        return EXIT_OK
    return _guarded(args, action)


def _capacity(buffer) -> dict:
    return {"max_episodes": buffer.max_episodes, "max_steps": buffer.max_steps,
            "max_timesteps": buffer.max_timesteps, "circular": buffer.circular}
