"""``unpack ARCHIVE FOLDER``: unpack a ``pack`` archive safely (see ``memmap_replay.pack``)."""

from __future__ import annotations

import argparse
import json
import re

from ..sharing.pack import DEFAULT_MAX_BYTES, unpack
from . import EXIT_OK
from .checksum import _SHARE_EXIT_CODES, _add_common, _guarded, _show_progress

_UNPACK_HELP = f"""\
Unpack an archive written by `pack` into FOLDER, trusting nothing in it: only plain files and folders
of a store's layout under one top folder are accepted (no absolute paths, no '..', no links, no
devices, no other files, no duplicates however spelled, sizes within what meta.json allows). Sizes are
checked before any data is read: before meta.json only checksums.sha256, card.json and README.md may come
(as `pack` writes them), and a sparse member counts with its real size. Everything is extracted into a
temporary folder beside FOLDER, checked against the archive's checksums.sha256 and by `verify`, and only then
renamed to FOLDER: a refused or interrupted unpack leaves nothing behind. Sparse files stay sparse.

FOLDER must not exist or be empty; --overwrite replaces a store there (and nothing else).

{_SHARE_EXIT_CODES}

examples:
  %(prog)s hopper-expert-v0.tar.gz datasets/hopper-expert-v0
  %(prog)s big.tar.xz big_store --max-size 2T"""

_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def _size(text: str) -> int:
    match = re.fullmatch(r"(\d+)([KMGT]?)B?", text.strip().upper())
    if not match or int(match.group(1)) < 1:
        raise argparse.ArgumentTypeError(f"must be a size such as 500M, 20G or 2T (got {text!r})")
    return int(match.group(1)) * _UNITS[match.group(2)]


def add(commands) -> None:
    parser = commands.add_parser("unpack", help="unpack a pack archive safely into a folder", description=_UNPACK_HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("archive", metavar="ARCHIVE", help="the archive written by `pack`")
    parser.add_argument("folder", metavar="FOLDER", help="the folder to create (must not exist, or be empty)")
    parser.add_argument("--overwrite", action="store_true", help="replace the store at FOLDER")
    parser.add_argument("--max-size", type=_size, default=DEFAULT_MAX_BYTES, metavar="SIZE",
                        help="refuse an archive that unpacks to more than SIZE (default 1T)")
    _add_common(parser)
    parser.set_defaults(run=run_unpack)


def run_unpack(args: argparse.Namespace) -> int:
    def action() -> int:
        summary = unpack(args.archive, args.folder, progress=_show_progress(args), overwrite=args.overwrite,
                         max_bytes=args.max_size)
        if args.json:
            print(json.dumps({"archive": args.archive, "folder": str(summary.folder), "ok": True,
                              "files": summary.files,
                              "bytes": summary.bytes, "disk_bytes": summary.disk_bytes}, indent=2))
        else:
            print(f"unpacked {summary.files} files ({summary.bytes:,} bytes, {summary.disk_bytes:,} on disk) from "
                  f"{args.archive} into {summary.folder}; checksums and verify passed")
        return EXIT_OK
    return _guarded(args, action, folder_is_store=False)
