"""The command line: ``python -m memmap_replay COMMAND ...``, or the ``memmap-replay`` console script.

Each command is a function ``add_<command>(subparsers)`` that declares its arguments and sets
``run``, a function of the parsed arguments returning the exit code; ``COMMANDS`` lists them, so a new
command is one more function and one more entry.
"""

from __future__ import annotations

import argparse
import json
import sys

from . import __version__
from .errors import NotAFolderError, StoreNotFoundError
from .format import FORMAT_VERSION
from .verify import verify

__all__ = ["main", "EXIT_OK", "EXIT_PROBLEMS", "EXIT_USAGE"]

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2

EXIT_CODES = f"""exit codes:
  {EXIT_OK}  the folder is a healthy store (warnings may be printed)
  {EXIT_PROBLEMS}  problems found: the store is damaged
  {EXIT_USAGE}  usage error, or the path is not a store (does not exist, is a file, holds no store files)"""

VERIFY_HELP = f"""\
Check a store folder against its meta.json and the on-disk format, without trusting either.

What is checked: meta.json (present, valid JSON, format name and major version, schema, capacity and
counters); every file of the layout (steps/, meta/, episodes/) is present, is a plain .npy (no
pickled objects) with the dtype, row shape and row count meta.json says, and is as long as its
header declares; the live episode table (each live slot holds its episode id, start, length, end
code and final flag in range, rows within the stored rows, no two live episodes on the same row,
write_head after the newest episode); the optional priorities/ files. Step data is not read.

A problem is damage (readers refuse the store, or plain numpy cannot read a file). A warning is
harmless: a stray file, a meta.json.tmp left by a crash, a damaged priorities/ file (sampler state,
which a prioritized sampler starts afresh).

{EXIT_CODES}

examples:
  %(prog)s replay_data
  %(prog)s replay_data --json | jq .problems"""


def add_verify(commands) -> None:
    parser = commands.add_parser("verify", help="check a store folder for damage", description=VERIFY_HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", metavar="FOLDER", help="the store's folder (the one holding meta.json)")
    parser.add_argument("--json", action="store_true",
                        help="print the report as JSON: folder, ok, is_store, problems, warnings, checked")
    parser.set_defaults(run=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    try:
        report = verify(args.folder)
    except (StoreNotFoundError, NotAFolderError) as error:
        return not_a_store(args, str(error))
    if not report.is_store:
        return not_a_store(args, f"{args.folder} is not a memmap_replay store: it holds no meta.json, steps/, "
                                 f"meta/ or episodes/")
    print(json.dumps(report.to_json(), indent=2) if args.json else report)
    return EXIT_OK if report.ok else EXIT_PROBLEMS


def not_a_store(args: argparse.Namespace, message: str) -> int:
    if args.json:
        print(json.dumps({"folder": args.folder, "ok": False, "is_store": False, "error": message}, indent=2))
    print(f"{args.prog}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


COMMANDS = (add_verify,)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog or "memmap-replay",
        description="Tools for memmap_replay store folders (a store is a folder of .npy files and meta.json).",
        epilog=f"Run '%(prog)s COMMAND --help' for a command's options.\n\n{EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__} (format {FORMAT_VERSION})")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    for add in COMMANDS:
        add(commands)
    return parser


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run a command; returns the exit code (argparse itself exits with 2 on a usage error)."""
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    args.prog = f"{parser.prog} {args.run.__name__.removeprefix('run_')}"
    return args.run(args)
