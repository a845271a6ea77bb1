"""``frames FOLDER FIELD OUT.png`` and ``video FOLDER FIELD OUT.mp4|gif``: look at an image field
(see ``memmap_replay.frames``)."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import CorruptStoreError, NotAFolderError, ReplayError, StoreNotFoundError, UnsupportedFormatError
from ..sharing.frames import LAYOUTS, STACK_MODES, contact_sheet, write_video
from . import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, not_a_store, positive_arg

_EXIT_CODES = f"""exit codes:
  {EXIT_OK}  written
  {EXIT_PROBLEMS}  the store is damaged (run 'verify FOLDER' for the list), or a ring writer evicted the episode
     while it was read (run again)
  {EXIT_USAGE}  usage error: not a store, an unknown or non-image field, an episode out of range, an output path
     that cannot be written, or a missing package (pip install 'memmap-replay[video]')"""

_IMAGES = """\
An image field is a step field of shape (H, W), (H, W, C) or (C, H, W) with C in 1, 3, 4, or a frame
stack (k, H, W), (k, H, W, C) or (k, C, H, W); the layout is guessed from the shape (a last axis of 1,
3 or 4 is channels, else a first axis of 1 or 3, else the first axis is a stack: (4, 84, 84) is four
frames) and --layout overrides it. A stack shows its newest frame, or all side by side with --stack
tile. uint8 values are shown as they are, bool as black/white, floats as [0, 1] when no value shown
is above 1, else as [0, 255]; small frames are enlarged to at least 64 pixels (--scale).
Episodes are numbered as get_all_data() returns them: 0 the oldest live episode, -1 the newest."""

_FRAMES_HELP = f"""\
Draw a contact sheet of an image field: a PNG grid of frames, each episode starting a new row, each
frame labelled 'ep E t T' (episode, step), its final observation (when stored) 'ep E final'. By default
every episode shows --columns frames (8) in one row, from its first step to its last, the last frame
being its final observation when one is stored (a shorter episode shows all of its rows); --every N
shows steps 0, N, 2N, ..., then the last step and the final observation, wrapping after --columns frames.
Without --episodes: every episode, or 16 spread from the oldest to the newest when there are more.
Writes OUT (replaced atomically); reads the store without locking it (a writer may keep appending).

{_IMAGES}

{_EXIT_CODES}

examples:
  %(prog)s replay_data obs sheet.png
  %(prog)s replay_data obs sheet.png --episodes 0,5,-1 --every 10
  %(prog)s replay_data obs sheet.png --episodes 0:8 --columns 12 --stack tile"""

_VIDEO_HELP = f"""\
Write one episode of an image field as a video: OUT.mp4 (H.264, needs imageio-ffmpeg; odd sizes are
padded by one black pixel) or OUT.gif (pillow; looping). Every step is a frame, then the episode's
final observation when one is stored. The episode is read in chunks, so memory stays
small for long episodes. Writes OUT (replaced atomically); reads the store without locking it.

{_IMAGES}

{_EXIT_CODES}

examples:
  %(prog)s replay_data obs episode.mp4                 # the oldest episode, 30 fps
  %(prog)s replay_data obs last.gif --episode -1 --fps 15
  %(prog)s replay_data pixels run.mp4 --episode 3 --layout CHW --scale 4"""


def _episode_list(text: str) -> list:
    """'0,5,-1' or '0:8' or '::10,-1': indices and Python slices (stop excluded)."""
    items: list[int | slice] = []
    try:
        for part in text.split(","):
            if ":" in part:
                bounds = [int(b) if b.strip() else None for b in part.split(":")]
                if len(bounds) > 3 or bounds[2:] == [0]:
                    raise ValueError(part)
                items.append(slice(*bounds))
            else:
                items.append(int(part))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be episode indices and ranges separated by commas, e.g. 0,5,-1 or 0:8 or ::10 "
            f"(got {text!r})") from None
    return items


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("folder", metavar="FOLDER", help="the store's folder (the one holding meta.json)")
    parser.add_argument("field", metavar="FIELD", help="the image field (a step field)")
    parser.add_argument("--layout", choices=LAYOUTS, help="how the field's axes are read (default: from its shape)")
    parser.add_argument("--stack", choices=STACK_MODES, default="last",
                        help="a frame stack shows its newest frame (last) or all of them side by side (tile)")
    parser.add_argument("--scale", type=positive_arg, metavar="N", help="enlarge each frame this many times "
                                                                        "(default: to 64 pixels)")
    parser.add_argument("--json", action="store_true", help="print what was written as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def add(commands) -> None:
    frames = commands.add_parser("frames", help="draw a contact sheet (PNG) of an image field",
                                 description=_FRAMES_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_common(frames)
    frames.add_argument("out", metavar="OUT.png", help="the image to write (.png, or .jpg)")
    frames.add_argument("--episodes", type=_episode_list, metavar="LIST",
                        help="which episodes: e.g. 0,5,-1 or 0:8 (default: all)")
    frames.add_argument("--every", type=positive_arg, metavar="N", help="show steps 0, N, 2N, ... of each episode (and "
                                                                        "its last step and final observation)")
    frames.add_argument("--columns", type=positive_arg, default=8, metavar="N", help="frames per row (default 8)")
    frames.add_argument("--no-labels", action="store_true", help="no 'ep E t T' label above each frame")
    frames.set_defaults(run=run_frames)
    video = commands.add_parser("video", help="write one episode of an image field as an mp4 or GIF",
                                description=_VIDEO_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    _add_common(video)
    video.add_argument("out", metavar="OUT.mp4|gif", help="the video to write")
    video.add_argument("--episode", type=int, default=0, metavar="I", help="which episode: 0 the oldest "
                                                                           "(default), -1 the newest")
    video.add_argument("--fps", type=float, default=30.0, metavar="N", help="frames per second (default 30)")
    video.set_defaults(run=run_video)


def run_frames(args: argparse.Namespace) -> int:
    return _run(args, lambda progress: contact_sheet(
        args.folder, args.field, out=args.out, episodes=args.episodes, every=args.every, columns=args.columns,
        layout=args.layout, stack=args.stack, scale=args.scale, labels=not args.no_labels, progress=progress))


def run_video(args: argparse.Namespace) -> int:
    return _run(args, lambda progress: write_video(
        args.folder, args.field, args.out, episode=args.episode, fps=args.fps, layout=args.layout,
        stack=args.stack, scale=args.scale, progress=progress))


def _run(args: argparse.Namespace, make) -> int:
    """Make the file; the library's errors become one line on stderr and an exit code."""
    try:
        written = make(not args.quiet and sys.stderr.isatty())
    except (StoreNotFoundError, NotAFolderError) as error:
        return not_a_store(args, str(error))
    except (CorruptStoreError, UnsupportedFormatError) as error:
        return _fail(args, error, EXIT_PROBLEMS)
    except ReplayError as error:
        return _fail(args, error, EXIT_PROBLEMS if isinstance(error, LookupError) else EXIT_USAGE)
    except OSError as error:  # writing the output failed (disk full, ...)
        return _fail(args, f"cannot write {args.out}: {error.strerror or error}", EXIT_USAGE)
    if args.json:
        print(json.dumps(written.to_json(), indent=2))
    else:
        count = len(written.episodes)
        what = f"episode {written.episodes[0]}" if written.fps else f"{count} episode{'s' * (count != 1)}"
        rate = f" at {written.fps:g} fps" if written.fps else ""
        print(f"wrote {written.path}: {what}, {written.frames} frames{rate}, {written.width} x {written.height} pixels")
    return EXIT_OK


def _fail(args: argparse.Namespace, error, code: int) -> int:
    print(f"{args.prog}: error: {error}", file=sys.stderr)
    return code
