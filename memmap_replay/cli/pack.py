"""``pack FOLDER ARCHIVE``: write a store into one archive to share (see ``memmap_replay.pack``)."""

from __future__ import annotations

import argparse
import json

from ..sharing.pack import SUFFIXES, pack
from . import EXIT_OK
from .checksum import _SHARE_EXIT_CODES, _add_common, _guarded, _show_progress

_PACK_HELP = f"""\
Write a store into one archive to share it: a tar file holding the store's files under one top folder
(named after FOLDER), with checksums.sha256 first so that `unpack` (or `sha256sum -c`) can check every
byte. The suffix of ARCHIVE chooses the compression: {', '.join(SUFFIXES)} (zstd needs Python 3.14+).

The store must pass `verify` (and match its checksums.sha256, if it has one); pack writes
checksums.sha256 into FOLDER when it has none or it is not up to date. It holds the writer lock while it
reads, so no writer may be writing. Files in FOLDER that are not the store's are left out (and listed).
The archive is written under a temporary name and renamed at the end: a failed pack leaves nothing.

{_SHARE_EXIT_CODES}

examples:
  %(prog)s replay_data replay_data.tar.gz
  %(prog)s replay_data /mnt/share/hopper-expert-v0.tar.xz --overwrite"""


def add(commands) -> None:
    parser = commands.add_parser("pack", help="write a store into one archive (.tar, .tar.gz, .tar.xz)",
                                 description=_PACK_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", metavar="FOLDER", help="the store's folder (the one holding meta.json)")
    parser.add_argument("archive", metavar="ARCHIVE", help="the archive to write, e.g. data.tar.gz")
    parser.add_argument("--overwrite", action="store_true", help="replace ARCHIVE if it exists")
    _add_common(parser)
    parser.set_defaults(run=run_pack)


def run_pack(args: argparse.Namespace) -> int:
    def action() -> int:
        summary = pack(args.folder, args.archive, progress=_show_progress(args), overwrite=args.overwrite)
        if args.json:
            print(json.dumps({"folder": args.folder, "ok": True, "archive": str(summary.archive),
                              "files": summary.files, "bytes": summary.bytes, "archive_bytes": summary.archive_bytes,
                              "left_out": summary.left_out}, indent=2))
            return EXIT_OK
        print(f"packed {summary.files} files ({summary.bytes:,} bytes) of {args.folder} into {summary.archive} "
              f"({summary.archive_bytes:,} bytes)")
        if summary.left_out:
            print(f"left out (not the store's files): {', '.join(summary.left_out)}")
        return EXIT_OK
    return _guarded(args, action)
