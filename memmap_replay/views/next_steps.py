"""The next states of the sequence views (windows, trajectories): ``next_fields`` as ``next_<field>``.

At each step t of a sequence, ``next_<field>`` is the field at the next state t + 1: the next step's row, at
an episode's last step the row of its stored final observation (``final`` in the episode table; other fields
hold their defaults there), zeros where the episode has none, and zeros at padded steps (as the fields). The
rows are read in the view's gather, so the check against the writer (``views.snapshot``) covers them, and a
ring evicts the final row with its episode (``core.placement``: an episode's rows run to start + length +
final), so reading it adds no eviction hazard. ``output="torchrl"`` builds its ``("next", <obs>)`` from them
(``views.torchrl_layout``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import torch

from ..core.options import check_names
from ..core.store import EpisodeStore
from .gather import take

__all__ = ["NextSteps"]

class NextSteps:
    """``next_fields`` of the sequence views: ``next_<field>`` (B, L, ...) at each step's next state t + 1."""

    if TYPE_CHECKING:  # the view's (StoreView)
        fields: tuple[str, ...]
        table: Any

        def values_of(self, name: str, rows: np.ndarray) -> np.ndarray: ...
        def _map(self, name: str) -> Any: ...

    next_fields: tuple[str, ...] = ()

    def setup_next(self, store: EpisodeStore, next_fields: Any) -> None:
        self.next_fields = () if next_fields is None else check_names(next_fields, store.schema.fields, "field")

    def read_fields(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys((*self.fields, *self.next_fields)))

    def next_outputs(self) -> list[str]:
        return [f"next_{name}" for name in self.next_fields]

    def read_steps(self, episode: np.ndarray, steps: np.ndarray, keep: np.ndarray | None,
                   fill: Mapping[str, Any]) -> dict[str, torch.Tensor]:
        """The fields at (B, L) ``steps`` of the episodes at table positions ``episode`` (``keep``: the real
        steps, None: all; ``fill`` per field elsewhere, else 0) and ``next_<field>`` of ``next_fields`` at
        steps + 1: the next row, the final observation's row after an episode's last step, zeros where the
        episode has none (the final row is the episode's: a ring evicts it with the episode)."""
        table = self.table
        length, final = table.length[episode][:, None], table.final[episode][:, None]
        inside = steps < length
        # rows of steps 0 .. L (the step after the last too), clipped to the episode's rows (final row included)
        ahead = np.concatenate((steps, steps[:, -1:] + 1), axis=1)
        rows = table.start[episode][:, None] + np.minimum(ahead, length - 1 + final)
        stored = inside & ((steps + 1 < length) | final)  # the next state was stored
        span = steps.shape[1]
        now, then = np.ascontiguousarray(rows[:, :span]), np.ascontiguousarray(rows[:, 1:])
        batch = {}
        for name in dict.fromkeys((*self.fields, *self.next_fields)):
            source = self._map(name)
            both = name in self.fields and name in self.next_fields
            if both and not isinstance(source, np.ndarray):  # a compressed field: each row decoded once
                values = take(source, rows, np.empty(rows.shape + source.shape[1:], source.dtype))
                current, following = values[:, :span].copy(), values[:, 1:].copy()
            else:
                current = self.values_of(name, now) if name in self.fields else None
                following = self.values_of(name, then) if name in self.next_fields else None
            if current is not None:
                if keep is not None and not keep.all():
                    current[~keep] = fill.get(name, 0)
                batch[name] = torch.from_numpy(current)
            if following is not None:
                if not stored.all():
                    following[~stored] = 0
                    if name in fill:
                        following[~inside] = fill[name]
                batch[f"next_{name}"] = torch.from_numpy(following)
        return batch
