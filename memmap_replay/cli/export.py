"""``export FOLDER TARGET``: a store as a local Minari dataset, a D4RL-style file or a memmap-replay-buffer 0.2.x
folder (see ``memmap_replay.interop``)."""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import NotAFolderError, ReplayError, StoreNotFoundError
from . import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, not_a_store
from .checksum import _fail
from .import_ import _USAGE_ERRORS, _shared_options, cli_words

_EXPORT_HELP = """\
Export a store to another format, episode by episode (memory stays bounded whatever the store's size).
Values are copied exactly; the store's card (with a provenance record of this export) goes into the
target's metadata, and importing the target back restores it.

Formats (--to; guessed when not given: a TARGET ending in .hdf5/.h5/.npz is d4rl, anything else a
Minari dataset id):
  minari  a local Minari dataset TARGET (NAMESPACE/NAME-vN) under --datasets-path, else
          $MINARI_DATASETS_PATH, else ~/.minari/datasets, readable by minari.load_dataset (hdf5, images
          not JPEG-encoded). Observations are the field 'observation' (or observation__* for a Dict or
          Tuple space, or --observation) plus each episode's final row (--missing-final for episodes
          without one); other step fields become infos, meta fields episode attributes.
  d4rl    a .hdf5 or .npz file: observations, actions, rewards, terminals, timeouts (each episode's end
          marked on its last step), next_observations when the store has them, infos/*, metadata/*.
  memmap-replay-buffer   (never guessed: pass --to memmap-replay-buffer)
          a folder TARGET in memmap-replay-buffer 0.2.x's ReplayBuffer layout (metadata.pkl, one
          .npy per field, padded to max_timesteps), which its ReplayBuffer.from_folder opens. Fields
          must be int32, float32, bool or uint8; end codes and final rows have no place there and
          are refused unless --lossy leaves them out.

What it writes: TARGET only (written under a hidden name beside it and moved into place when complete).
The store is opened read-only.

exit codes:
  0  exported
  1  the store is damaged, or an episode cannot be written (e.g. no final observation for minari)
  2  usage error: FOLDER is not a store, TARGET exists (use --overwrite), a field named by an option is
     missing, a missing optional package (pip install 'memmap-replay[io]')

examples:
  %(prog)s cartpole_store cartpole/mine-v0
  %(prog)s replay_data replay/images-v0 --observation image --action action --missing-final repeat
  %(prog)s hopper_store hopper.hdf5 --compression gzip
  %(prog)s hopper_store hopper.npz --json | jq .steps
  %(prog)s replay_store old_format_folder --to memmap-replay-buffer"""


def add(commands) -> None:
    parser = commands.add_parser("export", help="export a store as a Minari dataset, a D4RL .hdf5/.npz file or a "
                                 "memmap-replay-buffer folder",
                                 description=_EXPORT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", metavar="FOLDER", help="the store's folder (the one holding meta.json)")
    parser.add_argument("target", metavar="TARGET", help="a Minari dataset id, or a .hdf5/.h5/.npz file")
    _shared_options(parser, "--to", "the target's format", "replace TARGET if it exists",
                    "leave the other step fields out")
    parser.add_argument("--observation", nargs="+", metavar="FIELD", help="the observation field(s) (default: "
                        "observation, or observation__*); several make a Dict space (minari)")
    parser.add_argument("--action", nargs="+", metavar="FIELD", help="the action field(s) (default: action)")
    parser.add_argument("--reward", default="reward", metavar="FIELD", help="the reward field (default: reward)")
    parser.add_argument("--missing-final", choices=("error", "repeat", "zeros"), default="error",
                        help="minari: an episode without a final observation is an error (default), or gets its "
                             "last observation repeated, or zeros")
    parser.add_argument("--next-observations", choices=("auto", "require", "drop"), default="auto",
                        help="d4rl: write next_observations when the store has them (auto), insist (require), "
                             "or never (drop)")
    parser.add_argument("--compression", choices=("gzip",), help="d4rl: compress the arrays")
    parser.add_argument("--lossy", action="store_true", help="memmap-replay-buffer: leave out end codes and final "
                        "rows (refused otherwise)")
    parser.set_defaults(run=run_export)


def _one_or_list(names):
    return None if names is None else names[0] if len(names) == 1 else names


def run_export(args: argparse.Namespace) -> int:
    from ..interop import export_d4rl, export_memmap_replay_buffer, export_minari
    from ..interop.columns import SUFFIXES

    from ..interop.common import read_store

    try:
        read_store(args.folder).close()
    except (StoreNotFoundError, NotAFolderError) as error:
        return not_a_store(args, str(error))
    except ReplayError as error:  # damaged
        return _fail(args, str(error), EXIT_PROBLEMS)
    kind = args.format or ("d4rl" if any(args.target.lower().endswith(suffix) for suffix in SUFFIXES) else "minari")
    progress = not args.quiet and sys.stderr.isatty()
    options = dict(observation=_one_or_list(args.observation), action=_one_or_list(args.action), reward=args.reward,
                   infos=args.infos, overwrite=args.overwrite, progress=progress)
    try:
        if kind == "memmap-replay-buffer":
            report = export_memmap_replay_buffer(args.folder, args.target, lossy=args.lossy, overwrite=args.overwrite,
                                                 progress=progress)
        elif kind == "minari":
            report = export_minari(args.folder, args.target, datasets_path=args.datasets_path,
                                   missing_final=args.missing_final, **options)
        else:
            report = export_d4rl(args.folder, args.target, next_observations=args.next_observations,
                                 compression=args.compression, **options)
    except _USAGE_ERRORS as error:
        return _fail(args, cli_words(str(error)), EXIT_USAGE)
    except (ReplayError, OSError) as error:
        return _fail(args, cli_words(str(error)), EXIT_PROBLEMS)
    print(json.dumps(report.to_json(), indent=2) if args.json else report)
    return EXIT_OK

