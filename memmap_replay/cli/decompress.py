"""``decompress FOLDER``: store compressed step fields raw again, in place or into a new folder (see
``memmap_replay.decompress_fields``)."""

from __future__ import annotations

import argparse

from .checksum import _SHARE_EXIT_CODES, _show_progress
from .compress import _REWRITE, add_rewrite_options, run_rewrite

_DECOMPRESS_HELP = f"""\
Store compressed step fields raw again: one plain .npy file per field, which any numpy reads (and a
memmap_replay older than format 2.0 opens, once no field is compressed). By default every compressed
field; --field chooses.

{_REWRITE}

{_SHARE_EXIT_CODES}

examples:
  %(prog)s replay_data
  %(prog)s replay_data --field image --out replay_data_raw"""


def add(commands) -> None:
    parser = commands.add_parser("decompress", help="store compressed step fields raw again, in place or into a new "
                                 "folder", description=_DECOMPRESS_HELP,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    add_rewrite_options(parser, "store raw (default: every compressed field)")
    parser.set_defaults(run=run_decompress)


def run_decompress(args: argparse.Namespace) -> int:
    from ..sharing.recode import decompress_fields

    return run_rewrite(args, lambda: decompress_fields(args.folder, args.fields, out=args.out,
                                                       progress=_show_progress(args)))
