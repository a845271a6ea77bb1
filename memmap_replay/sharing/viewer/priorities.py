"""The priorities a prioritized sampler persisted in the store (``priorities/<name>.npy``, see
``samplers.priority_files``), per step of one episode, for the viewer's episode plots.

Read-only and bounded like every read of the folder: the spec file through ``folderio.read_json``, the
arrays through ``read_stored_priorities`` (read-only maps, checked sizes); only the episode's rows are
read. A name whose files are missing, damaged or of another size is left out, as the sampler itself would
start it afresh; a slot whose owner is another episode (priorities of an evicted one) shows nothing.
"""

from __future__ import annotations

import numpy as np

from ...core import folderio
from ...core.format import PRIORITIES_DIR
from ...errors import ReplayError
from ...samplers.priority_files import read_stored_priorities

__all__ = ["episode_priorities"]

_MAX_NAMES = 16


def episode_priorities(store, *, episode_id: int, slot: int, start: int, length: int) -> dict[str, np.ndarray]:
    """Sampler name -> the raw priority of each of the episode's ``length`` rows (float64)."""
    directory = store.folder / PRIORITIES_DIR
    if directory.is_symlink() or not directory.is_dir():
        return {}
    capacity, found = store.capacity, {}
    for spec_path in sorted(directory.glob("*.json"))[:_MAX_NAMES]:
        name = spec_path.stem
        try:
            spec = folderio.read_json(store.folder, spec_path)
            stored = read_stored_priorities(store.folder, name, capacity.max_steps + 1, capacity.max_episodes, spec)
        except ReplayError:  # damaged, a link, a special file: as if there were none
            continue
        if stored is None or not 0 <= slot < len(stored[1]) or int(stored[1][slot]) != episode_id:
            continue
        found[name] = np.array(stored[0][start:start + length])
    return found
