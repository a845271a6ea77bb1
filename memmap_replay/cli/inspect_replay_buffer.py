"""``inspect-replay-buffer FOLDER``: memmap-replay-buffer 0.2.3's command, with its flags: videos (and
contact sheets) of episodes of image fields. Also ``memmap_replay.inspect_replay_buffer(argv)``, which
behaves as 0.2.3's ``video.main(argv)`` (a usage error exits through argparse, code 2).

Its ``--serve`` (a local video page) is not provided: this project's viewer (``memmap-replay view FOLDER``) replaces it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..compat.video import episode_frames, frames_to_sheet, image_fields, trajectory_to_video
from ..core.extras import require_extra
from ..core.store import EpisodeStore
from ..errors import ReplayError
from . import EXIT_OK, EXIT_USAGE

__all__ = ["inspect_replay_buffer", "add"]

_DESCRIPTION = """\
Render episodes of image fields stored in a replay buffer to videos (and optionally contact sheets),
as memmap-replay-buffer 0.2.3's inspect-replay-buffer does. Episodes are buffer rows (slots). With
several fields, each field's name goes before the suffix: out.image.mp4, out.wrist.mp4.
The local video page of 0.2.3 (--serve) is replaced by 'memmap-replay view FOLDER', the viewer.
For labelled contact sheets, frame stacks and long episodes see 'memmap-replay frames' and 'memmap-replay video'.
Needs imageio (pip install 'memmap-replay[video]'); .mp4 needs imageio-ffmpeg."""

_SERVE = ("--serve is not provided: memmap-replay-buffer's local video page is replaced by the viewer, "
          "'memmap-replay view FOLDER'; drop --serve to write the videos")


class _Usage(Exception):
    """A usage error: the message for argparse's ``error`` (or the subcommand's stderr line)."""


def _episodes(text: str) -> list[int]:
    try:
        episodes = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid episode list {text!r}: expected comma-delimited episode indices, "
                                         f"e.g. 0,3,5") from None
    if not episodes:
        raise argparse.ArgumentTypeError(f"invalid episode list {text!r}: expected at least one episode index")
    return episodes


def _fields(text: str) -> list[str]:
    fields = [part.strip() for part in text.split(",") if part.strip()]
    if not fields:
        raise argparse.ArgumentTypeError(f"invalid field list {text!r}: expected at least one field "
                                         f"name, e.g. image,wrist")
    return fields


def _arguments(parser: argparse.ArgumentParser) -> None:
    """0.2.3's flags, with its defaults."""
    parser.add_argument("folder", help="replay buffer folder (a memmap-replay store)")
    parser.add_argument("-e", "--episode", type=_episodes, default=[0],
                        help="comma-delimited episode(s) (buffer rows) to render, e.g. 0,3,5 (default 0)")
    parser.add_argument("-f", "--field", type=_fields, default=None,
                        help="comma-delimited image field name(s); all image-like fields if omitted")
    parser.add_argument("--fps", type=int, default=30, help="frames per second (default 30)")
    parser.add_argument("-o", "--output", default=None,
                        help="output video path; with several fields each name goes before the suffix, e.g. "
                             "out.image.mp4; default <folder>-episode-<n>.mp4 in the current folder")
    parser.add_argument("--scale", type=int, default=1, help="downsample frames by an integer factor")
    parser.add_argument("--sheet", default=None, help="also write a contact sheet of frames to this png path")
    parser.add_argument("--rows", type=int, default=2, help="contact sheet rows (default 2)")
    parser.add_argument("--columns", type=int, default=5, help="contact sheet columns (default 5)")
    parser.add_argument("--serve", type=int, nargs="?", const=8000, default=None,
                        help="not provided: replaced by the viewer, 'memmap-replay view FOLDER'")
    parser.add_argument("--no-browser", action="store_true", help="accepted for compatibility (goes with --serve)")


def _field_path(base: Path, field: str, several: bool) -> Path:
    return base.with_name(f"{base.stem}.{field}{base.suffix}") if several else base


def _inspect(args: argparse.Namespace) -> None:
    """Write the videos (and sheets), printing a line per file; ``_Usage`` for what 0.2.3 called a usage error."""
    if args.serve is not None:
        raise _Usage(_SERVE)
    for flag_name in ("fps", "scale", "rows", "columns"):
        if getattr(args, flag_name) < 1:
            raise _Usage(f"--{flag_name} must be at least 1 (got {getattr(args, flag_name)})")
    try:
        store = EpisodeStore.open(args.folder, "r")
    except ReplayError as error:
        hint = (" (a memmap-replay-buffer folder: convert it first with 'memmap-replay import')"
                if any((Path(args.folder) / name).exists() for name in ("data.h5", "metadata.pkl")) else "")
        raise _Usage(f"{error}{hint}") from None
    try:
        fields = args.field or image_fields(store)
        if not fields:
            raise _Usage("no image-like field found: pass --field explicitly")
        frames = {field: episode_frames(store, args.episode, field) for field in fields}
    except ReplayError as error:
        raise _Usage(str(error)) from None
    finally:
        store.close()
    if args.scale > 1:
        frames = {field: rows[:, ::args.scale, ::args.scale] for field, rows in frames.items()}
    several = len(fields) > 1
    if args.output:
        base = Path(args.output)
    else:
        base = Path(f"{Path(args.folder).resolve().name}-episode-{'-'.join(map(str, args.episode))}.mp4")
    try:
        for field, rows in frames.items():
            path = trajectory_to_video(rows, _field_path(base, field, several), fps=args.fps)
            print(f"wrote {path} ({len(rows)} frames of {rows.shape[1:]} at {args.fps} fps)")
        if args.sheet:
            imageio = require_extra("imageio", "video", "--sheet")
            for field, rows in frames.items():
                path = _field_path(Path(args.sheet), field, several)
                imageio.imwrite(str(path), frames_to_sheet(rows, args.rows, args.columns))
                print(f"wrote {path} ({args.rows}x{args.columns} contact sheet)")
    except ReplayError as error:  # a missing package (the [video] extra)
        raise _Usage(str(error)) from None


def inspect_replay_buffer(argv: list[str] | None = None) -> None:
    """memmap-replay-buffer 0.2.3's ``inspect-replay-buffer`` (its ``video.main``): a usage error, an
    unknown folder, field or episode ends the program through argparse (``SystemExit`` with code 2)."""
    parser = argparse.ArgumentParser(prog="inspect-replay-buffer", description=_DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _arguments(parser)
    args = parser.parse_args(argv)
    try:
        _inspect(args)
    except _Usage as error:
        parser.error(str(error))


def add(commands) -> None:
    parser = commands.add_parser("inspect-replay-buffer", help="videos and contact sheets of episodes "
                                 "(memmap-replay-buffer 0.2.3's command)", description=_DESCRIPTION,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    _arguments(parser)
    parser.set_defaults(run=run_inspect_replay_buffer)


def run_inspect_replay_buffer(args: argparse.Namespace) -> int:
    try:
        _inspect(args)
    except _Usage as error:
        print(f"{args.prog}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK
