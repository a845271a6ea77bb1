"""``compress FOLDER``: store step fields compressed, in place or into a new folder (see
``memmap_replay.compress_fields``). Also here, shared with ``decompress``: the options and the run."""

from __future__ import annotations

import argparse
from typing import Callable

from .checksum import _SHARE_EXIT_CODES, _add_common, _reported, _show_progress

_REWRITE = """\
A crash-safe rewrite: in place (the default), the new files are written beside the old ones and meta.json,
replaced atomically, switches to them; the old files go after. Killed at any instant, the store reopens as
it was or as rewritten, every episode whole (files a killed run left are removed by the next run; `verify`
lists them until then). It takes the writer lock (no writer may be writing), and readers that have the
store open must open it again (it gets a new store id). With --out NEW, a new store is built beside NEW
and moved onto it when complete; FOLDER is opened read-only and left as it is.

Values never change: every row decodes to the same bytes. Episodes keep their ids and rows, a ring its
state; the other fields, the meta fields and the card stay (the card gets a provenance record)."""

_COMPRESS_HELP = f"""\
Store step fields compressed: each row one zstd frame (lossless), read back at memory speed. Image
fields shrink tens to hundreds of times (Atari frames: 40x to 500x). By default every step field of two
or more dimensions per row (images, frame stacks); --field chooses.

{_REWRITE}

Changing the level of a field compressed already needs --out (or decompress, then compress again).

{_SHARE_EXIT_CODES}

examples:
  %(prog)s replay_data
  %(prog)s replay_data --field image --level 9
  %(prog)s replay_data --out replay_data_small --level 19 --json"""


def add(commands) -> None:
    parser = commands.add_parser("compress", help="store step fields compressed (zstd), in place or into a new "
                                 "folder", description=_COMPRESS_HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_rewrite_options(parser, "compress (default: every field of 2 or more dimensions per row)")
    parser.add_argument("--codec", default="zstd", choices=("zstd",), help="the codec (default zstd)")
    parser.add_argument("--level", type=int, metavar="N", help="the compression level: 1 fast .. 19 small, up to 22 "
                        "(default 3)")
    parser.set_defaults(run=run_compress)


def add_rewrite_options(parser: argparse.ArgumentParser, fields_help: str) -> None:
    parser.add_argument("folder", metavar="FOLDER", help="the store's folder (the one holding meta.json)")
    parser.add_argument("--field", dest="fields", action="append", metavar="FIELD",
                        help=f"a step field to {fields_help}; repeat for several")
    parser.add_argument("--out", metavar="NEW", help="write the rewritten store into the new folder NEW (absent or "
                        "empty) and leave FOLDER as it is")
    _add_common(parser)


def run_compress(args: argparse.Namespace) -> int:
    from ..sharing.recode import compress_fields

    return run_rewrite(args, lambda: compress_fields(args.folder, args.fields, codec=args.codec, level=args.level,
                                                     out=args.out, progress=_show_progress(args)))


def run_rewrite(args: argparse.Namespace, rewrite: Callable) -> int:
    return _reported(args, rewrite)  # a bad level or no zstandard: 2; a ring evicting what --out copies: 1
