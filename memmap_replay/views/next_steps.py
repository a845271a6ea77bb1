"""The next states of the sequence views (windows, trajectories): ``next_fields`` as ``next_<field>``.

At each step t of a sequence, ``next_<field>`` is the field at the next state t + 1: the next step's row, at
an episode's last step the row of its stored final observation (``final`` in the episode table; other fields
hold their defaults there), zeros where the episode has none, and zeros at padded steps (as the fields). The
rows are read in the view's gather, so the check against the writer (``views.snapshot``) covers them, and a
ring evicts the final row with its episode (``core.placement``: an episode's rows run to start + length +
final), so reading it adds no eviction hazard. ``output="torchrl"`` builds its ``("next", <obs>)`` from them
(``views.torchrl_layout``).

A field read both now and next (``obs`` and ``next_obs``) is read once: the L + 1 rows of each sequence into
one (B, L + 1, ...) array of batch output memory (``views.pool``), ``<field>`` its ``[:, :L]`` and
``next_<field>`` its ``[:, 1:]``, two views that share L - 1 steps (``obs[:, 1:]`` is ``next_obs[:, :-1]``;
change one in place only after a ``.clone()``). Where the two would differ at a shared step (a padded step
after an episode's stored final observation, a padded default), where the view has a ``transform`` (which
may change the batch in place) and where gathers write into a DataLoader worker's shared-memory slot (whose
packing wants contiguous tensors), a raw field takes two gathers straight into the output memory instead and
a compressed field two copies of its one decoded read: the same values either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

import numpy as np
import torch

from ..core.options import check_names
from ..core.store import EpisodeStore
from .gather import take
from .pool import OUTPUTS

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
        length = table.length[episode][:, None]
        # the episode's last row, relative to its first: its last step's, or its final observation's
        reach = length - 1 + table.final[episode][:, None]
        # rows of steps 0 .. L (the step after the last too), clipped to the episode's rows (final row included)
        ahead = np.concatenate((steps, steps[:, -1:] + 1), axis=1)
        rows = table.start[episode][:, None] + np.minimum(ahead, reach)
        stored = steps < reach  # the next state (row step + 1) was stored, so the step is a real one too
        span = steps.shape[1]
        now = then = None
        batch = {}
        for name in dict.fromkeys((*self.fields, *self.next_fields)):
            source = self._map(name)
            both = name in self.fields and name in self.next_fields
            shared = both and self._shareable(name, keep, stored, fill)
            raw = isinstance(source, np.ndarray)
            current: np.ndarray | None
            following: np.ndarray | None
            if shared or (both and not raw):  # one read of rows 0 .. L (a compressed field: each row decoded once)
                values = (OUTPUTS.take(source, rows) if shared else
                          take(source, rows, np.empty(rows.shape + source.shape[1:], source.dtype)))
                current, following = values[:, :span], values[:, 1:]
                if not shared:
                    current, following = values[:, :span].copy(), values[:, 1:].copy()
            else:
                if now is None or then is None:
                    now, then = np.ascontiguousarray(rows[:, :span]), np.ascontiguousarray(rows[:, 1:])
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
                        following[steps >= length] = fill[name]
                batch[f"next_{name}"] = torch.from_numpy(following)
        return batch

    def _shareable(self, name: str, keep: np.ndarray | None, stored: np.ndarray, fill: Mapping[str, Any]) -> bool:
        """Whether ``<name>`` and ``next_<name>`` can be two views of one (B, L + 1, ...) read: they agree at
        every step they share (step t + 1 of the field is step t of the next field: kept there exactly where
        the next state was stored, zeros at both otherwise), no transform may change one in place, and the
        gathers write into the process's own memory (not a worker's slot, whose packing copies views)."""
        if name in fill or getattr(self, "transform", None) is not None or OUTPUTS.target is not None:
            return False
        head = stored[:, :-1]
        return bool(head.all()) if keep is None else bool(np.array_equal(head, keep[:, 1:]))
