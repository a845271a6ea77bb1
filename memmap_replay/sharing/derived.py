"""Derived fields: ``ReplayBuffer.add_field`` (computed over the live episodes a block at a time, written into a new
file, committed at once: ``core/derive.py``) and its ready-made functions ``returns_to_go`` and
``discounted_return``.

A function given to ``add_field`` takes one ``Episode`` (holding the fields it ``reads``) and returns its values:
``(T, *shape)`` for a step field, ``(*shape)`` for a per-episode one. ``returns_to_go(gamma=1.0)`` is the sum of the
rewards from each step to the episode's end (Decision Transformer's return-to-go; with ``gamma`` < 1 the discounted
return from each step); ``discounted_return(gamma)`` is one value per episode, the discounted return from its first
step. Both sum the rewards stored: a truncated episode's are not bootstrapped.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from ..core.convert import as_array, coerce
from ..core.derive import NewField
from ..core.episodes import Episode, EpisodeList
from ..core.progress import progress_bar
from ..core.options import check_names, choice, positive_int, short
from ..core.schema import FieldSpec, parse_field
from ..errors import InvalidDataError, OptionError

if TYPE_CHECKING:
    from ..core.store import EpisodeStore

__all__ = ["EpisodeFunction", "returns_to_go", "discounted_return", "add_field"]

PER = ("step", "episode")


class EpisodeFunction:
    """A function of an episode for ``add_field``, with the fields it ``reads`` and whether it gives a value ``per``
    step or per episode (so ``add_field(name, function)`` needs neither)."""

    def __init__(self, function: Callable[[Episode], np.ndarray], *, reads: Sequence[str], per: str, name: str):
        self.function, self.reads, self.per, self.name = function, tuple(reads), per, name

    def __call__(self, episode: Episode) -> np.ndarray:
        return self.function(episode)

    def __repr__(self) -> str:
        return self.name


def _discounted_sums(rewards: np.ndarray, gamma: float) -> np.ndarray:
    """G_t = r_t + gamma * G_{t+1} along axis 0, in float64: log2(T) vector steps (a doubling scan), no loop per
    step."""
    sums = np.array(rewards, dtype=np.float64)
    if gamma == 1.0:
        return np.cumsum(sums[::-1], axis=0)[::-1]
    factor, shift = float(gamma), 1
    while shift < len(sums):
        sums[:-shift] = sums[:-shift] + factor * sums[shift:]
        factor, shift = factor * factor, shift * 2
    return sums


def _gamma(gamma: Any) -> float:
    if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or not 0.0 <= gamma <= 1.0:
        raise OptionError(f"gamma must be a number in [0, 1] (got {short(gamma)})")
    return float(gamma)


def returns_to_go(reward: str = "reward", *, gamma: float = 1.0, dtype: Any = "float32") -> EpisodeFunction:
    """Per step: the sum of ``reward`` from that step to the episode's end, discounted by ``gamma`` (1: the
    return-to-go of Decision Transformer). ``buffer.add_field("return_to_go", returns_to_go())``."""
    gamma, out = _gamma(gamma), np.dtype(dtype)
    def compute(episode: Episode) -> np.ndarray:
        return _discounted_sums(episode[reward], gamma).astype(out)
    return EpisodeFunction(compute, reads=(reward,), per="step", name=f"returns_to_go({reward!r}, gamma={gamma})")


def discounted_return(reward: str = "reward", *, gamma: float = 0.99, dtype: Any = "float32") -> EpisodeFunction:
    """Per episode: the discounted return from its first step, sum of gamma**t * reward[t].
    ``buffer.add_field("discounted_return", discounted_return(gamma=0.99))``."""
    gamma, out = _gamma(gamma), np.dtype(dtype)
    def compute(episode: Episode) -> np.ndarray:
        return _discounted_sums(episode[reward], gamma)[0].astype(out)
    return EpisodeFunction(compute, reads=(reward,), per="episode",
                           name=f"discounted_return({reward!r}, gamma={gamma})")


def add_field(store: EpisodeStore, name: str, values: Any, *, per: str | None, dtype: Any, default: Any,
              reads: Any, block: int, progress: bool) -> FieldSpec:
    """``ReplayBuffer.add_field`` on a writer's store (see there)."""
    function = values if callable(values) else None
    per = choice(per if per is not None else getattr(function, "per", "step"), "per", PER)
    block = positive_int(block, "block")
    episodes = EpisodeList(store, fields=_reads(store, function, reads), meta_fields=())
    table, count = episodes.table, len(episodes)
    if function is None:
        array = as_array(values, f"add_field {name!r} values")
        expected = int(table.length.sum()) if per == "step" else count
        if array.ndim < 1 or len(array) != expected:
            raise InvalidDataError(
                f"add_field({name!r}, array, per={per!r}) takes one row per {'step' if per == 'step' else 'episode'} "
                f"of the live episodes, oldest first ({expected} rows, in the order of buffer.episode_ids) (got shape "
                f"{array.shape}); or pass a function of an Episode")
        spec = _spec(name, array[:1], dtype, default, per)
        bounds = np.r_[0, np.cumsum(table.length)] if per == "step" else np.arange(count + 1)
        def values_of(first: int, stop: int) -> list[np.ndarray]:
            rows = coerce(spec, array[bounds[first]:bounds[stop]], (int(bounds[stop] - bounds[first]),),
                          kind="added field")
            return np.split(rows, bounds[first + 1:stop] - bounds[first]) if per == "step" else list(rows)
    else:
        first_values = _checked(name, function(episodes[0]), per, len(episodes[0]) if count else 0) if count else None
        if first_values is None:
            raise InvalidDataError(f"add_field({name!r}, function) needs at least one live episode to learn the "
                                   f"values' dtype and shape from; store episodes first")
        spec = _spec(name, first_values[None] if per == "episode" else first_values, dtype, default, per)
        def values_of(first: int, stop: int) -> list[np.ndarray]:
            out = []
            for position in range(first, stop):
                episode = episodes[position]
                value = _checked(name, function(episode), per, len(episode))
                lead = (len(episode),) if per == "step" else ()
                out.append(coerce(spec, value, lead, kind="added field"))
            return out
    return _write(store, spec, per, table, values_of, block, progress)


def _write(store: EpisodeStore, spec: FieldSpec, per: str, table: Any, values_of: Callable[[int, int], list],
           block: int, progress: bool) -> FieldSpec:
    new = NewField(store, spec, per)
    try:
        with progress_bar(len(table), f"add_field {spec.name}", progress, unit="episode", leave=True) as bar:
            for first in range(0, len(table), block):
                stop = min(first + block, len(table))
                new.write(table.select(np.arange(first, stop)), values_of(first, stop))
                bar.update(stop - first)
        new.commit()
    except BaseException:
        new.discard()
        raise
    return spec


def _reads(store: EpisodeStore, function: Any, reads: Any) -> tuple[str, ...]:
    if function is None:
        return ()
    if reads is None:
        reads = getattr(function, "reads", None)
    return tuple(store.schema.fields) if reads is None else check_names(reads, store.schema.fields, "field")


def _checked(name: str, value: Any, per: str, length: int) -> np.ndarray:
    array = as_array(value, f"add_field {name!r} function's value")
    if per == "step" and (array.ndim < 1 or len(array) != length):
        raise InvalidDataError(f"add_field({name!r}, function, per='step'): the function must return one row per "
                               f"step of the episode ({length} rows) (got shape {array.shape}); per='episode' takes "
                               f"one value per episode")
    return array


def _spec(name: str, sample: np.ndarray, dtype: Any, default: Any, per: str) -> FieldSpec:
    """The new field's spec: the dtype given or the values', their row shape, the default."""
    info: dict[str, Any] = {"dtype": np.dtype(dtype).name if dtype is not None else sample.dtype.name,
                            "shape": list(sample.shape[1:])}
    if default is not None:
        info["default"] = default
    return parse_field(name, info, kind="field" if per == "step" else "meta field")
