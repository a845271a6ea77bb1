"""``verify FOLDER``: check a store folder for damage (see ``memmap_replay.verify``)."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import NotAFolderError, StoreNotFoundError
from ..sharing.verify import verify
from . import _EXIT_CODES, EXIT_OK, EXIT_PROBLEMS, not_a_store

_VERIFY_HELP = f"""\
Check a store folder against its meta.json and the on-disk format, without trusting either.

What is checked: meta.json (present, valid JSON, format name and major version, schema, capacity and
counters); every file of the layout (steps/, meta/, episodes/) is present, is a plain .npy (no
pickled objects) with the dtype, row shape and row count meta.json says, and is as long as its
header declares; the live episode table (each live slot holds its episode id, start, length, end
code and final flag in range, rows within the stored rows, no two live episodes on the same row,
write_head after the newest episode); the optional priorities/ files; stats/running.npz's members
(names and sizes the schema allows, read from the zip directory and .npy headers, never inflated).
Every entry of the folder is examined without being opened: a link leading out of the folder (or
dangling, or looping), a FIFO, device or socket, a file over its size cap (JSON files and
checksums.sha256 4 MiB, stats/running.npz 64 MiB) is a problem, since the library refuses it; so
are a link that stays inside the folder and a hard link shared with another file, which readers
accept but a writer refuses. Such entries outside the store's layout are warnings (the library
ignores them). Step data is not read, unless the folder has a checksums.sha256 (written by
`checksum` or `pack`): then every file it lists is read and hashed, and a file that differs from
it, is missing, or is not listed is reported.
--checksums also reports a missing checksums.sha256; --no-checksums skips them (fast).

A problem is damage (readers refuse the store, or plain numpy cannot read a file). A warning is
harmless: a stray file, a meta.json.tmp left by a crash, a damaged priorities/ file (sampler state,
which a prioritized sampler starts afresh), a priorities/ file that differs from its checksum, an
unreadable stats/running.npz (rebuilt from the live episodes). A folder verify calls OK is one the
library will neither read outside of, write outside of, nor block on.

{_EXIT_CODES}

examples:
  %(prog)s replay_data
  %(prog)s replay_data --json | jq .problems
  %(prog)s downloaded_data --checksums"""


def add(commands) -> None:
    parser = commands.add_parser("verify", help="check a store folder for damage", description=_VERIFY_HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", metavar="FOLDER", help="the store's folder (the one holding meta.json)")
    parser.add_argument("--json", action="store_true",
                        help="print the report as JSON: folder, ok, is_store, problems, warnings, checked")
    sums = parser.add_mutually_exclusive_group()
    sums.add_argument("--checksums", dest="checksums", action="store_const", const=True, default=None,
                      help="check checksums.sha256, and report it as a problem if there is none")
    sums.add_argument("--no-checksums", dest="checksums", action="store_const", const=False,
                      help="skip checksums.sha256 (no step data is read but the frames of compressed fields, "
                           "which are decoded)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar while files are hashed")
    parser.set_defaults(run=run_verify)


def run_verify(args: argparse.Namespace) -> int:
    try:
        report = verify(args.folder, checksums=args.checksums, progress=not args.quiet and sys.stderr.isatty())
    except (StoreNotFoundError, NotAFolderError) as error:
        return not_a_store(args, str(error))
    if not report.is_store:
        return not_a_store(args, f"{args.folder} is not a memmap_replay store: it holds no meta.json, steps/, "
                                 f"meta/ or episodes/")
    print(json.dumps(report.to_json(), indent=2) if args.json else report)
    return EXIT_OK if report.ok else EXIT_PROBLEMS
