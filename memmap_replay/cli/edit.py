"""``edit VERB ...``: edits of a dataset, one sub-command per verb. ``edit merge OUT FOLDER...`` and
``edit split FOLDER --into NAME=FRACTION ... --out DIR`` make new stores (``memmap_replay.merge``,
``memmap_replay.split``); the edits in place (``edit delete|trim|relabel|add-field|compact FOLDER ...``) are in
``edit_inplace.py``."""

from __future__ import annotations

import argparse
import sys
from typing import Callable

from . import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from .checksum import _add_common, _fail, _reported, _show_progress
from .edit_inplace import EXAMPLES, VERBS_HELP, add_verbs

_EXIT_CODES = f"""exit codes:
  {EXIT_OK}  done
  {EXIT_PROBLEMS}  a source is damaged, or a writer evicted episodes while they were copied (nothing was written)
  {EXIT_USAGE}  usage error: a path is not a store, the schemas differ, an output folder holds files"""

_NEW_STORES = """\
Each new store is built in a hidden folder beside its target and moved in when complete: killed at any
instant, a target is absent or complete (a hidden folder a killed run left is removed by the next run).
The sources are opened read-only and left as they are. Episodes are copied whole (steps, end, final
observation, meta values, the links between segments of a long episode); compressed fields are copied
frame by frame without decoding. The card is copied (merged) with a provenance record of the edit, and
checksums are written when the sources had them."""

_EDIT_HELP = f"""\
Edit a dataset. Verbs that make new stores:
  merge      several stores into one
  split      one store into several, at fractions of its episodes or by a meta field

{_NEW_STORES}

{VERBS_HELP}

Run '%(prog)s VERB --help' for a verb's options.

examples:
  %(prog)s merge merged run_a run_b
  %(prog)s split run --into train=0.9 --into val=0.1 --seed 0 --out splits
{EXAMPLES}"""

_MERGE_HELP = f"""\
Merge stores into the new store OUT: every episode of each FOLDER, in the order given. The stores must have
the same fields (names, dtypes, shapes), or pass --fields common for the fields every store has alike. OUT
is sized to the data unless --max-episodes/--max-steps/--max-timesteps/--circular leave room for more.

{_NEW_STORES}

{_EXIT_CODES}

examples:
  %(prog)s merged run_a run_b
  %(prog)s merged run_a run_b --fields common --json
  %(prog)s online run_a --max-episodes 10000 --circular   # then add online episodes"""

_SPLIT_HELP = f"""\
Split the store FOLDER into new stores under --out DIR (DIR/NAME for each output), by whole episodes:
  --into NAME=FRACTION ... --seed N   shuffled with the seed, each output its fraction of the episodes
                                      (rounded so that every episode goes to exactly one output)
  --by META_FIELD                     one output per value (DIR/META_FIELD-VALUE), or with
                                      --into VALUE=NAME ... the outputs of the values

Rows are copied (an output holds a subset of the rows, so its files cannot be links of the source's), with
copy_file_range where the kernel allows (a reflink on btrfs/XFS): the report says which happened.

{_NEW_STORES}

{_EXIT_CODES}

examples:
  %(prog)s run --into train=0.9 --into val=0.1 --seed 0 --out splits
  %(prog)s run --by task_id --out per_task
  %(prog)s run --by task_id --into 0=train --into 1=train --into 2=val --out splits"""


def add(commands) -> None:
    parser = commands.add_parser("edit", help="edit a dataset: merge, split, delete, trim, relabel, add-field, "
                                 "compact", description=_EDIT_HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(title="verbs", metavar="VERB")
    merge = verbs.add_parser("merge", help="merge stores into one new store", description=_MERGE_HELP,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    merge.add_argument("out", metavar="OUT", help="the new store's folder (absent or empty)")
    merge.add_argument("folders", metavar="FOLDER", nargs="+", help="a store to merge; several, in order")
    merge.add_argument("--fields", choices=("same", "common"), default="same",
                       help="same: the stores must have the same fields (default); common: the fields all have alike")
    for name in ("max-episodes", "max-steps", "max-timesteps"):
        merge.add_argument(f"--{name}", type=int, metavar="N", help=f"{name.replace('-', '_')} of the new store "
                           f"(default: sized to the data)")
    merge.add_argument("--circular", action="store_true", help="make the new store a ring")
    _add_common(merge)
    merge.set_defaults(run=run_edit_merge)
    split = verbs.add_parser("split", help="split a store into new stores", description=_SPLIT_HELP,
                             formatter_class=argparse.RawDescriptionHelpFormatter)
    split.add_argument("folder", metavar="FOLDER", help="the store to split (the folder holding meta.json)")
    split.add_argument("--into", action="append", metavar="NAME=FRACTION", type=_pair,
                       help="an output and its fraction (or with --by, VALUE=NAME); repeat for each")
    split.add_argument("--out", required=True, metavar="DIR", help="the folder to hold the outputs (DIR/NAME)")
    split.add_argument("--seed", type=int, metavar="N", help="the shuffle's seed (a split at fractions)")
    split.add_argument("--by", metavar="META_FIELD", help="split by this meta field's value")
    _add_common(split)
    split.set_defaults(run=run_edit_split)
    add_verbs(verbs)
    parser.set_defaults(run=_usage(parser))


def _usage(parser: argparse.ArgumentParser) -> Callable[[argparse.Namespace], int]:
    def run_edit(args: argparse.Namespace) -> int:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    return run_edit


def _pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key or not value:
        raise argparse.ArgumentTypeError(f"must be NAME=FRACTION (or VALUE=NAME with --by), e.g. train=0.9 "
                                         f"(got {text!r})")
    return key, value


def run_edit_merge(args: argparse.Namespace) -> int:
    from ..sharing.merging import merge

    return _run(args, lambda: merge(args.out, *args.folders, fields=args.fields, progress=_show_progress(args),
                                    max_episodes=args.max_episodes, max_steps=args.max_steps,
                                    max_timesteps=args.max_timesteps, circular=args.circular), store=False)


def run_edit_split(args: argparse.Namespace) -> int:
    from ..sharing.splitting import split

    into: dict | None = None
    if args.by is None:
        fractions: dict[str, float] = {}
        for name, text in args.into or []:
            try:
                fractions[name] = float(text)
            except ValueError:
                return _fail(args, f"--into {name}={text}: the fraction must be a number such as 0.9", EXIT_USAGE)
        into = fractions
    elif args.into:
        into = {value: name for value, name in args.into}
    return _run(args, lambda: split(args.folder, into, out=args.out, seed=args.seed, by=args.by,
                                    progress=_show_progress(args)), store=True)


def _run(args: argparse.Namespace, edit: Callable, *, store: bool) -> int:
    return _reported(args, edit, folder_is_store=store)  # schemas that differ: 2; a ring evicting what is copied: 1
