"""Importing other dataset formats into stores and exporting stores to them, episode by episode.

- ``import_minari(dataset, folder)`` / ``export_minari(folder, dataset_id)``: local Minari datasets
  (never downloaded), see ``memmap_replay.interop.minari`` and ``minari_export``.
- ``import_d4rl(path, folder)`` / ``export_d4rl(folder, path)``: D4RL-style flat arrays in ``.hdf5`` or
  ``.npz`` files, see ``memmap_replay.interop.d4rl``.
- ``import_memmap_replay_buffer(source, folder)`` / ``export_memmap_replay_buffer(buffer_or_folder, folder)``:
  the folders (and ``ReplayBufferH5PY`` files) of memmap-replay-buffer 0.2.x, the package this one descends
  from, see ``memmap_replay.interop.mrb`` and ``mrb_export``.

Every function returns a ``Transfer`` report. An import builds the new store in a hidden folder beside
``folder`` and moves it into place only when complete (an existing store is replaced only with
``overwrite=True``), records the source with ``card.add_provenance`` and the source's metadata in the
card; an export writes the same way and puts the store's card into the target's metadata. Values are
never cast or re-encoded. Field naming is shared by all formats: see ``memmap_replay.interop.common``.
The optional packages (minari, gymnasium, h5py) are imported only when a function needs them.
"""

from .common import TargetExistsError, Transfer
from .d4rl import export_d4rl, import_d4rl
from .minari import import_minari, minari_root
from .minari_export import export_minari
from .mrb import import_memmap_replay_buffer, is_mrb_source
from .mrb_export import export_memmap_replay_buffer

__all__ = ["import_minari", "export_minari", "import_d4rl", "export_d4rl", "import_memmap_replay_buffer",
           "export_memmap_replay_buffer", "minari_root", "Transfer", "TargetExistsError", "guess_format"]

_FORMATS = ("minari", "d4rl", "memmap-replay-buffer")


def guess_format(source) -> str | None:
    """'memmap-replay-buffer' for a folder holding metadata.pkl (or an .h5/.hdf5 file with one beside it),
    'd4rl' for another .hdf5/.h5/.npz path, 'minari' for a folder holding metadata.json (or
    data/metadata.json) or a name like a Minari dataset id, None when it cannot tell."""
    from pathlib import Path

    from .columns import SUFFIXES
    from .minari import DATASET_ID

    path = Path(str(source))
    if is_mrb_source(path):
        return "memmap-replay-buffer"
    if path.suffix.lower() in SUFFIXES:
        return "d4rl"
    if (path / "metadata.json").is_file() or (path / "data" / "metadata.json").is_file():
        return "minari"
    if DATASET_ID.fullmatch(str(source)):
        return "minari"
    return None
