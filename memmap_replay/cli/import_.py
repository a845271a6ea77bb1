"""``import SOURCE FOLDER``: a Minari dataset, a D4RL-style file or a memmap-replay-buffer 0.2.x buffer as a new
store (see ``memmap_replay.interop``)."""

from __future__ import annotations

import argparse
import json
import re
import sys

from ..errors import NotAFolderError, OptionError, ReplayError, SchemaError, StoreNotFoundError
from . import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE
from .checksum import _fail

_IMPORT_HELP = """\
Import a dataset of another format into a new store folder, episode by episode (memory stays bounded
whatever the dataset's size). Values are copied exactly: nothing is cast or re-encoded.

Formats (--from; guessed when not given: a folder holding metadata.pkl, or an .h5/.hdf5 file with
metadata.pkl beside it, is memmap-replay-buffer; another .hdf5/.h5/.npz file is d4rl; a folder holding
metadata.json or a name like NAMESPACE/NAME-vN is minari):
  minari  a local Minari dataset: its id (looked up in --datasets-path, else $MINARI_DATASETS_PATH,
          else ~/.minari/datasets; nothing is ever downloaded) or its folder. The last of the T + 1
          observations of an episode becomes the store's final row; terminations/truncations become
          its end; Dict/Tuple spaces become one field per leaf (observation__KEY, ...).
  d4rl    flat arrays in .hdf5 or .npz: observations, actions, rewards, terminals, timeouts and optional
          next_observations, infos/*, metadata/*; split into episodes at terminals|timeouts (steps
          after the last flag become a partial episode with an unspecified end).
  memmap-replay-buffer
          a folder written by memmap-replay-buffer 0.2.x's ReplayBuffer (metadata.pkl and .npy files),
          or the data.h5 of its ReplayBufferH5PY (or that file's folder): its committed episodes,
          oldest first, value for value, with their meta fields; the config (a pickle) is read as
          plain data only, never run. The episode left open (no advance_episode) is left out, or
          kept with --open-episode keep. The store gets the buffer's own max_episodes,
          max_timesteps and circular unless the options below say otherwise.

What it writes: FOLDER (built beside it under a hidden name and moved into place when complete, so an
interrupted import leaves FOLDER as it was) with card.json and README.md: the source's metadata (env
spec, spaces, author, reference scores, ...) and a provenance record of this import.

exit codes:
  0  imported
  1  the source is damaged or cannot be represented (e.g. mismatched lengths, non-numeric data)
  2  usage error: unknown format, SOURCE not found, FOLDER already holds data (use --overwrite),
     a missing optional package (pip install 'memmap-replay[io]')

examples:
  %(prog)s cartpole/expert-v0 cartpole_store
  %(prog)s ~/.minari/datasets/mujoco/hopper/expert-v0 hopper_store --from minari
  %(prog)s hopper-medium-v2.hdf5 hopper_store
  %(prog)s data.npz store --next-observations field --overwrite
  %(prog)s data.npz store --json | jq .episodes
  %(prog)s hopper-medium-v2.hdf5 hopper_store --max-episodes 5000 --circular   # then add online episodes
  %(prog)s old_replay_data replay_store      # a memmap-replay-buffer 0.2.x folder"""

_USAGE_ERRORS = (SchemaError, OptionError, StoreNotFoundError, NotAFolderError, FileExistsError, ImportError)

# the library's keywords that are flags of import/export, as the command line spells them
_FLAGS = {"observation": "--observation", "action": "--action", "reward": "--reward", "overwrite": "--overwrite",
          "missing_final": "--missing-final", "next_observations": "--next-observations", "chunk_mb": "--chunk-mb",
          "compression": "--compression", "datasets_path": "--datasets-path", "infos": "--infos",
          "open_episode": "--open-episode", "lossy": "--lossy"}
_KEYWORD = re.compile(r"\b(%s)=(?:'([\w-]+)'((?: \([^)]*\))?)(?: or '([\w-]+)')?|(NAME|True|False)\b)?"
                      % "|".join(_FLAGS))


def cli_words(message: str) -> str:
    """A library message as the command line speaks: ``pass observation=NAME`` becomes ``pass --observation
    FIELD``, ``missing_final='repeat' or 'zeros'`` becomes ``--missing-final repeat or zeros``,
    ``infos=False`` ``--no-infos``, ``overwrite=True`` ``--overwrite``; a message that starts with a
    keyword (``chunk_mb must be ...``) starts with its flag."""
    def flag_of(match: re.Match) -> str:
        name, choice, note, other, value = match.groups()
        flag = _FLAGS[name]
        if choice is not None:
            return f"{flag} {choice}{note}" + (f" or {other}" if other else "")
        if value == "NAME":
            return f"{flag} FIELD"
        if value == "False" and name == "infos":
            return "--no-infos"
        return flag  # overwrite=True, or a keyword named alone ("pass observation=, action= and reward=")

    message = _KEYWORD.sub(flag_of, message).replace("--overwrite (--overwrite)", "--overwrite")
    first = message.split(" ", 1)[0]
    return _FLAGS[first] + message[len(first):] if first in _FLAGS and first != "infos" else message


def add(commands) -> None:
    parser = commands.add_parser("import", help="import a Minari dataset, a D4RL .hdf5/.npz file or a "
                                 "memmap-replay-buffer folder into a new store",
                                 description=_IMPORT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", metavar="SOURCE", help="a Minari dataset id or folder, a .hdf5/.h5/.npz file, or "
                        "a memmap-replay-buffer folder")
    parser.add_argument("folder", metavar="FOLDER", help="the new store's folder (absent or empty)")
    _shared_options(parser, "--from", "the source's format", "replace FOLDER if it already holds a store",
                    "leave infos out")
    parser.add_argument("--next-observations", choices=("auto", "final", "field", "drop"), default="auto",
                        help="d4rl: final rows when next_observations are the next rows (auto, final), the field "
                             "next_observation (field), or leave them out (drop); default auto")
    parser.add_argument("--chunk-mb", type=float, default=64, help="d4rl: rows read at a time, in MB (default 64)")
    parser.add_argument("--open-episode", choices=("skip", "keep"), default="skip",
                        help="memmap-replay-buffer: leave out the episode left open (default), or keep it")
    room = parser.add_argument_group("room for episodes stored after the import (default: sized to the dataset, "
                                     "or a memmap-replay-buffer's own; `grow` raises it later)")
    room.add_argument("--max-episodes", type=int, metavar="N", help="episode slots (at least the dataset's episodes)")
    room.add_argument("--max-steps", type=int, metavar="N",
                      help="rows (default with --max-episodes: room for the added episodes at their longest)")
    room.add_argument("--max-timesteps", type=int, metavar="N", help="the longest episode (at least the dataset's)")
    room.add_argument("--circular", action=argparse.BooleanOptionalAction, default=None,
                      help="a ring: once full, the oldest episodes are evicted (--no-circular: a memmap-replay-buffer "
                           "ring imported as a store that fills up)")
    parser.set_defaults(run=run_import)


def _shared_options(parser: argparse.ArgumentParser, format_flag: str, format_help: str, overwrite_help: str,
                   infos_help: str) -> None:
    """The options import and export share: the format, --overwrite, --datasets-path, --no-infos, --json, --quiet."""
    parser.add_argument(format_flag, dest="format", choices=("minari", "d4rl", "memmap-replay-buffer"),
                        help=f"{format_help} (default: guessed)")
    parser.add_argument("--overwrite", action="store_true", help=overwrite_help)
    parser.add_argument("--datasets-path", metavar="DIR", help="minari: where local datasets live")
    parser.add_argument("--no-infos", dest="infos", action="store_false", help=infos_help)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def run_import(args: argparse.Namespace) -> int:
    from ..interop import guess_format, import_d4rl, import_memmap_replay_buffer, import_minari

    kind = args.format or guess_format(args.source)
    if kind is None:
        return _fail(args, f"cannot tell the format of {args.source}: pass --from minari, --from d4rl or --from "
                           f"memmap-replay-buffer", EXIT_USAGE)
    progress = not args.quiet and sys.stderr.isatty()
    room = {key: getattr(args, key) for key in ("max_episodes", "max_steps", "max_timesteps", "circular")}
    try:
        if kind == "memmap-replay-buffer":
            report = import_memmap_replay_buffer(args.source, args.folder, open_episode=args.open_episode,
                                                 overwrite=args.overwrite, progress=progress, **room)
        elif kind == "minari":
            report = import_minari(args.source, args.folder, datasets_path=args.datasets_path, infos=args.infos,
                                   overwrite=args.overwrite, progress=progress, **room)
        else:
            report = import_d4rl(args.source, args.folder, next_observations=args.next_observations,
                                 infos=args.infos, overwrite=args.overwrite, chunk_mb=args.chunk_mb, progress=progress,
                                 **room)
    except _USAGE_ERRORS as error:
        return _fail(args, cli_words(str(error)), EXIT_USAGE)
    except (ReplayError, OSError) as error:
        return _fail(args, cli_words(str(error)), EXIT_PROBLEMS)
    print(json.dumps(report.to_json(), indent=2) if args.json else report)
    return EXIT_OK
