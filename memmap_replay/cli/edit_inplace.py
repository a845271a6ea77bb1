"""``edit delete|trim|relabel|add-field|compact FOLDER ...``: the edits in place of a store, the verbs of ``edit``
that call ``ReplayBuffer``'s methods of the same names (``sharing/inplace.py``) on the store opened for writing.
``add_verbs(verbs)`` declares them (``edit.py`` calls it); each prints one line saying what it did (``--json``: an
object), and the library's errors become exit codes through ``checksum._reported``."""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from . import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from .checksum import _add_common, _reported, _show_progress
from .info import _human_bytes
from ..errors import OptionError

__all__ = ["add_verbs"]

_IN_PLACE = """\
An edit in place: one crash-safe commit of meta.json (killed at any instant, the store reopens as it was or
edited). It takes the writer lock (no writer may be writing the store); readers see the change at their
next refresh. The card records the edit in its provenance, and a checksums.sha256 that was current is
brought up to date."""

_EXIT_CODES = f"""exit codes:
  {EXIT_OK}  done
  {EXIT_PROBLEMS}  the store is damaged, or has too little room for the edit (nothing was changed)
  {EXIT_USAGE}  usage error: not a store, a writer is writing it, an id that is not live, a field that is not
     the store's, a value that does not fit (nothing was changed)"""

VERBS_HELP = """\
Verbs that edit a store in place:
  delete     remove episodes
  trim       keep a slice of an episode's steps
  relabel    set meta values of episodes
  add-field  add a field computed from the episodes (returns-to-go, discounted return)
  compact    rewrite the live episodes' rows contiguously and free the rest"""

EXAMPLES = """\
  %(prog)s delete run 3 7 10-12
  %(prog)s trim run 5 --stop -10
  %(prog)s relabel run --where task_id=1 --set task_id=2
  %(prog)s add-field run return_to_go --returns-to-go
  %(prog)s compact run"""

_DELETE_HELP = f"""\
Remove the episodes with these ids (as 'info' or buffer.episode_ids list them; A-B: the ids A to B, both
included) from every reader. Their rows stay on disk, unread, until 'compact' frees them.

{_IN_PLACE}

{_EXIT_CODES}

examples:
  %(prog)s run 3 7
  %(prog)s run 10-19 --json"""

_TRIM_HELP = f"""\
Keep steps START:STOP of episode ID, as a Python slice (negative counts from the episode's end: --stop -10
drops the last 10 steps). A cut tail makes the episode truncated, its first cut step becoming the final
observation. The cut rows stay on disk until 'compact' frees them.

{_IN_PLACE}

{_EXIT_CODES}

examples:
  %(prog)s run 5 --stop -10
  %(prog)s run 5 --start 20 --stop 120"""

_RELABEL_HELP = f"""\
Set meta values (--set NAME=VALUE, VALUE as JSON: 2, 0.5, [1, 0]) of the episodes --ids names, or of every
live episode whose meta values equal --where's. With --ids, a list of one value per episode sets each its own.

{_IN_PLACE}

{_EXIT_CODES}

examples:
  %(prog)s run --ids 3 7 --set task_id=2
  %(prog)s run --where task_id=1 --set task_id=2 success=0
  %(prog)s run --ids 3 7 --set task_id=[4,5]"""

_ADD_FIELD_HELP = f"""\
Add the field NAME computed from the live episodes' rewards, written beside the other fields a block of
episodes at a time and added by one commit of meta.json (killed before it, the store is as it was):
  --returns-to-go       a step field: the sum of the rewards from each step to the episode's end (discounted
                        by --gamma, default 1)
  --discounted-return   a meta field: the discounted return from the episode's first step (--gamma, default
                        0.99)
Truncated episodes' sums are not bootstrapped. Existing views and samplers do not see the new field.

{_IN_PLACE}

{_EXIT_CODES}

examples:
  %(prog)s run return_to_go --returns-to-go
  %(prog)s run discounted_return --discounted-return --gamma 0.995 --reward env_reward --dtype float64"""

_COMPACT_HELP = f"""\
Rewrite the rows of the live episodes contiguously from row 0 and free the rest: rows of deleted episodes,
trimmed-off steps, compressed frames no live row uses (their disk blocks go back to the file system).
Episodes keep their ids. Episodes move in rounds through the free rows after the last one, each round
committed: killed at any instant, every episode is whole, and running compact again finishes. A store
with too few free rows after its last episode for its longest episode to move (or for an eighth of the
rows to move) has max_steps grown first, by the rows missing (the files stay sparse there); the line
says so. Not for rings (they reuse the rows of removed episodes as they wrap).

{_EXIT_CODES}

examples:
  %(prog)s run
  %(prog)s run --json"""


@dataclass(frozen=True)
class _Done:
    """What an edit did: the line printed, and the object ``--json`` prints."""

    line: str
    data: dict

    def __str__(self) -> str:
        return self.line

    def to_json(self) -> dict:
        return self.data


def add_verbs(verbs: Any) -> None:
    """Declare the in-place verbs on ``edit``'s sub-parsers."""
    delete = _verb(verbs, "delete", "remove episodes", _DELETE_HELP, run_edit_delete)
    delete.add_argument("ids", metavar="ID", nargs="+", type=_ids, help="an episode id, or A-B for the ids A to B")
    trim = _verb(verbs, "trim", "keep a slice of an episode's steps", _TRIM_HELP, run_edit_trim)
    trim.add_argument("id", metavar="ID", type=int, help="the episode's id")
    trim.add_argument("--start", type=int, metavar="N", help="the first step kept (default 0; negative: from the end)")
    trim.add_argument("--stop", type=int, metavar="N", help="the step after the last kept (default: the episode's "
                      "length; negative: from the end)")
    relabel = _verb(verbs, "relabel", "set meta values of episodes", _RELABEL_HELP, run_edit_relabel)
    which = relabel.add_mutually_exclusive_group(required=True)
    which.add_argument("--ids", nargs="+", type=int, metavar="ID", help="the episodes' ids")
    which.add_argument("--where", nargs="+", metavar="NAME=VALUE", help="every live episode with these meta values")
    relabel.add_argument("--set", nargs="+", required=True, metavar="NAME=VALUE", dest="assignments",
                         help="a meta field and its value (JSON)")
    add_field = _verb(verbs, "add-field", "add a field computed from the episodes (returns-to-go, ...)",
                      _ADD_FIELD_HELP, run_edit_add_field)
    add_field.add_argument("name", metavar="NAME", help="the new field's name")
    kind = add_field.add_mutually_exclusive_group(required=True)
    kind.add_argument("--returns-to-go", dest="kind", action="store_const", const="returns_to_go",
                      help="per step: the (discounted) sum of the rewards to the episode's end")
    kind.add_argument("--discounted-return", dest="kind", action="store_const", const="discounted_return",
                      help="per episode: the discounted return from its first step")
    add_field.add_argument("--reward", default="reward", metavar="FIELD", help="the reward field (default reward)")
    add_field.add_argument("--gamma", type=float, metavar="G", help="the discount in [0, 1] (default 1 for "
                           "--returns-to-go, 0.99 for --discounted-return)")
    add_field.add_argument("--dtype", type=_dtype, default="float32", metavar="D",
                           help="the new field's dtype (default float32)")
    _verb(verbs, "compact", "free the rows of deleted episodes and trimmed steps", _COMPACT_HELP, run_edit_compact)


def _verb(verbs: Any, name: str, short: str, description: str, run: Callable) -> argparse.ArgumentParser:
    parser = verbs.add_parser(name, help=short, description=description,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", metavar="FOLDER", help="the store's folder (the one holding meta.json)")
    _add_common(parser)
    parser.set_defaults(run=run)
    return parser


def _ids(text: str) -> list[int]:
    """An argparse type: an episode id, or ``A-B``, the ids A to B (both included)."""
    match = re.fullmatch(r"(\d+)(?:-(\d+))?", text.strip())
    if match is None or (match[2] is not None and int(match[2]) < int(match[1])):
        raise argparse.ArgumentTypeError(f"must be an episode id (a whole number such as 7) or A-B with A <= B for "
                                         f"the ids A to B, both included, such as 3-7 (got {text!r})")
    first = int(match[1])
    return list(range(first, int(match[2] or first) + 1))


def _dtype(text: str) -> str:
    """An argparse type: a numpy dtype's name."""
    try:
        return np.dtype(text).name
    except TypeError:
        raise argparse.ArgumentTypeError(f"must be a numpy dtype such as float32 or float64 (got {text!r})") from None


def _assignments(texts: list[str], option: str) -> dict[str, Any]:
    """``NAME=VALUE`` pairs, each VALUE JSON; an ``OptionError`` naming the pair that is not."""
    values: dict[str, Any] = {}
    for text in texts:
        name, equals, value = text.partition("=")
        try:
            if not equals or not name:
                raise ValueError
            values[name] = json.loads(value)
        except (ValueError, RecursionError):
            raise OptionError(f"{option} takes NAME=VALUE with VALUE a JSON number or list, such as task_id=2 or "
                              f"goal=[0.5,1] (got {text!r})") from None
    return values


def _edit(args: argparse.Namespace, change: Callable[[Any], _Done]) -> int:
    """Open the store for writing, make the change, close it; the report or the error as the exit code."""
    def call() -> _Done:
        from ..buffer import ReplayBuffer  # noqa: PLC0415 - imported when the verb runs

        with ReplayBuffer.from_folder(args.folder) as buffer:
            return change(buffer)
    return _reported(args, call)


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def run_edit_delete(args: argparse.Namespace) -> int:
    def change(buffer: Any) -> _Done:
        count = buffer.delete_episodes([value for ids in args.ids for value in ids])
        live = len(buffer.episode_ids)
        return _Done(f"deleted {_plural(count, 'episode')} from {args.folder} ({live} live now)",
                     {"folder": args.folder, "deleted": count, "live": live})
    return _edit(args, change)


def run_edit_trim(args: argparse.Namespace) -> int:
    def change(buffer: Any) -> _Done:
        table = buffer.episode_store.live_table()
        before = table.length[table.ids == args.id]
        length = buffer.trim(args.id, start=args.start, stop=args.stop)  # (an id not live: refused here)
        was = int(before[0])
        first, last, _ = slice(args.start, args.stop).indices(was)
        truncated = ", truncated" if last < was else ""
        return _Done(f"trimmed episode {args.id} of {args.folder} to its steps {first}:{last} ({length} of {was} steps "
                     f"kept{truncated})", {"folder": args.folder, "episode": args.id, "steps": [first, last],
                                           "length_before": was, "length": length})
    return _edit(args, change)


def run_edit_relabel(args: argparse.Namespace) -> int:
    def change(buffer: Any) -> _Done:
        meta = _assignments(args.assignments, "--set")
        target: Any = _assignments(args.where, "--where") if args.where else args.ids
        count = buffer.relabel(target, **meta)
        chosen = (" where " + ", ".join(args.where)) if args.where else ""
        return _Done(f"relabeled {_plural(count, 'episode')} of {args.folder}{chosen}: {', '.join(args.assignments)}",
                     {"folder": args.folder, "relabeled": count, "values": meta,
                      **({"where": target} if args.where else {"ids": args.ids})})
    return _edit(args, change)


def run_edit_add_field(args: argparse.Namespace) -> int:
    from ..sharing.derived import discounted_return, returns_to_go

    def change(buffer: Any) -> _Done:
        make = returns_to_go if args.kind == "returns_to_go" else discounted_return
        options = {"dtype": args.dtype, **({"gamma": args.gamma} if args.gamma is not None else {})}
        function = make(args.reward, **options)
        spec = buffer.add_field(args.name, function, progress=_show_progress(args))
        episodes = len(buffer.episode_ids)
        kind = "step field" if function.per == "step" else "meta field"
        shape = f", shape {tuple(spec.shape)}" if spec.shape else ""
        return _Done(f"added the {kind} {args.name} ({spec.dtype.name}{shape}) to {args.folder}: {function!r} of "
                     f"{_plural(episodes, 'episode')}", {"folder": args.folder, "field": args.name, "per": function.per,
                                                         "dtype": spec.dtype.name, "shape": list(spec.shape),
                                                         "values": repr(function), "episodes": episodes})
    return _edit(args, change)


def run_edit_compact(args: argparse.Namespace) -> int:
    def change(buffer: Any) -> _Done:
        report = buffer.compact(progress=_show_progress(args))
        rows = report.rows_before - report.rows_after
        grown = (f"; max_steps grown from {report.max_steps[0]} to {report.max_steps[1]} to move them"
                 if report.max_steps else "")
        return _Done(f"compacted {args.folder}: rows {report.rows_before} -> {report.rows_after} ({rows} freed), "
                     f"{_plural(report.moved_episodes, 'episode')} moved, {_human_bytes(report.freed_bytes)} of disk "
                     f"freed{grown}", {"folder": args.folder, "moved_episodes": report.moved_episodes,
                                       "copied_rows": report.copied_rows, "rows_before": report.rows_before,
                                       "rows_after": report.rows_after, "freed_bytes": report.freed_bytes,
                                       "commits": report.commits, "max_steps": report.max_steps})
    return _edit(args, change)
