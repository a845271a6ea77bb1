"""MixedSampler: each batch drawn from several sources (samplers, or buffers) at fixed ratios, with exact
per-source counts: offline data and online episodes in one batch (RLPD-style 50/50), demonstrations beside
replay, several tasks at once.

``MixedSampler({source_a: 0.5, source_b: 0.5}, seed=0)`` (or a list of ``(source, ratio)`` pairs). A source
is a sampler (anything with ``sample`` and ``batch``: a uniform, prioritized, sequence or sharded sampler,
over any view) or an object with ``sampler(kind, **options)`` (a ``ReplayBuffer``: it gets a uniform sampler
of single timesteps, seeded from ``seed``). Ratios are numbers >= 0 (they are normalized).

Meta fields: a buffer's sampler returns the meta fields every source has (``meta_fields=None``, the
default), so an imported dataset (with, say, ``also_truncated``) mixes with recorded episodes (with only
``seed``) without a view option; ``meta_fields=[...]`` chooses them (``()``: none). A source that is a
sampler already has its view, made with its own ``meta_fields=`` (and ``fields=``).

Counts: source i gets ``floor(ratio_i * B)`` rows, and the ``B - sum`` rows left over go one each to the
sources with the largest fractional parts; ties go in source order, starting at a source that turns with
each batch (so 0.5/0.5 with an odd B alternates which source gets the extra row). Counts depend only on B
and the number of batches drawn: deterministic, and kept in ``state_dict()``. Each source draws with its
own seeded sampler, so the same seeds give the same batches.

``batch(B)`` concatenates the sources' batches in source order (field by field; numpy arrays or torch
tensors, whatever the sources' views return; uniform sources beside prioritized ones get ``_weight`` 1) and
adds ``_source``: each row's source index (``names`` gives
them names: ``sampler.names[batch['_source']]``). Sources whose batches have other fields, shapes or dtypes
cannot be concatenated: ``batch_by_source(B)`` returns ``{name: batch}`` with the same counts.

Priorities: ``update_priorities(batch, priorities)`` (or ``update_priorities(batch['_key'], priorities,
sources=batch['_source'])``) sends each row's priority to the sampler of the source it came from; rows of
sources that are not prioritized (no ``update_priorities``) are skipped. A key alone does not say its source
(two stores number their steps alike), so the call needs the batch or its ``_source``.

Numpy only: this module never imports torch (a torch batch is concatenated with the torch its tensors come
from).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..core.options import batch_size as batch_size_of, integer, number, seed_option, short
from ..errors import InvalidDataError, OptionError
from .prioritized import as_numpy

__all__ = ["MixedSampler"]


class MixedSampler:
    """Batches of several sources at fixed ratios with exact per-source counts (see the module docstring).

    Parameters
    ----------
    sources : dict or list of (source, ratio) pairs
        Each source is a sampler (``buffer.sampler(...)``) or a buffer (it gets a uniform sampler of single
        timesteps); ratios are numbers >= 0, normalized.
    names : list of str, optional
        A name per source (default ``'0'``, ``'1'``, ...), the keys of ``batch_by_source``.
    seed : int, optional
        Seeds the samplers made for buffer sources (each its own child seed).
    meta_fields : list of str, str or None
        The meta fields of the samplers made for buffer sources. None (the default): the meta fields every
        source has; ``()``: none.

    Examples
    --------
    >>> from memmap_replay import MixedSampler, ReplayBuffer
    >>> offline = ReplayBuffer("offline", 10, 5, {"obs": "float"}, {"task": "int", "score": "float"})
    >>> online = ReplayBuffer("online", 10, 5, {"obs": "float"}, {"task": "int"})
    >>> for buffer in (offline, online):
    ...     _ = buffer.store_episode(obs=[1.0, 2.0, 3.0], task=1)
    >>> mixed = MixedSampler({offline: 0.5, online: 0.5}, names=["offline", "online"], seed=0)
    >>> sorted(mixed.batch(4))  # 'score' is left out: only offline has it
    ['_key', '_source', 'obs', 'task']
    """

    def __init__(self, sources: Any, *, names: Any = None, seed: int | None = None,
                 meta_fields: Sequence[str] | str | None = None):
        pairs = list(sources.items()) if isinstance(sources, Mapping) else sources
        if not isinstance(pairs, (list, tuple)) or not pairs or not all(
                isinstance(pair, tuple) and len(pair) == 2 for pair in pairs):
            raise OptionError(f"sources must be a dict of source -> ratio, or a list of (source, ratio) pairs, with at "
                              f"least one source (got {short(sources)})")
        ratios = np.array([number(ratio, "each ratio", low=0.0) for _, ratio in pairs], dtype=np.float64)
        if ratios.sum() <= 0:
            raise OptionError(f"at least one ratio must be > 0 (got {ratios.tolist()})")
        self.ratios = ratios / ratios.sum()
        self.names = self._names(names, len(pairs))
        self.seed = seed_option(seed)
        children = np.random.SeedSequence(self.seed).spawn(len(pairs)) if self.seed is not None else [None] * len(pairs)
        options = _view_options([source for source, _ in pairs], meta_fields)
        self.samplers = [self._sampler_of(source, child, name, options) for (source, _), child, name
                         in zip(pairs, children, self.names)]
        self.drawn = 0  # batches drawn so far (turns the tie-break)

    @staticmethod
    def _names(names: Any, count: int) -> tuple[str, ...]:
        if names is None:
            return tuple(str(i) for i in range(count))
        if (not isinstance(names, (list, tuple)) or len(names) != count
                or not all(isinstance(name, str) and name for name in names) or len(set(names)) != count):
            raise OptionError(f"names must be {count} distinct non-empty names, one per source (got {short(names)})")
        return tuple(names)

    @staticmethod
    def _sampler_of(source: Any, seed: np.random.SeedSequence | None, name: str, options: dict[str, Any]) -> Any:
        if hasattr(source, "batch") and hasattr(source, "sample"):
            if getattr(source, "draw_ahead", 0):
                raise OptionError(f"source {name!r} draws ahead (draw_ahead={source.draw_ahead}), but a mixed batch "
                                  f"asks each source for a count that changes from batch to batch, so its draws ahead "
                                  f"would be dropped every time; make that sampler with draw_ahead=0")
            return source
        make = getattr(source, "sampler", None)
        if callable(make):
            return make("uniform", seed=None if seed is None else int(seed.generate_state(1, np.uint32)[0]), **options)
        raise OptionError(f"source {name!r} must be a sampler (with sample and batch) or a buffer (with sampler()) "
                          f"(got {short(source)})")

    # ---- counts -----------------------------------------------------------------------------------------------

    def counts(self, batch_size: int) -> np.ndarray:
        """The rows each source gets in the next batch of ``batch_size`` (they sum to it exactly)."""
        batch_size = batch_size_of(batch_size)
        exact = self.ratios * batch_size
        base: np.ndarray = np.floor(exact + 1e-9).astype(np.int64)  # (1/3 * 3 is 0.999...: it is 1)
        left = batch_size - int(base.sum())
        if left > 0:
            n = len(base)
            fraction = np.round(exact - base, 9)
            turn = (np.arange(n) - self.drawn) % n
            order = np.lexsort((turn, -fraction))  # largest fraction first, then the turning source order
            base[order[:left]] += 1
        elif left < 0:  # pragma: no cover - floors never sum above the batch size
            raise AssertionError("counts above the batch size")
        return base

    # ---- drawing ----------------------------------------------------------------------------------------------

    def batch_by_source(self, batch_size: int) -> dict[str, dict[str, Any]]:
        """``{name: that source's batch}`` with the counts of ``counts(batch_size)`` (a source with no row this
        time is left out)."""
        counts = self.counts(batch_size)
        out = {name: sampler.batch(int(count)) for name, sampler, count in zip(self.names, self.samplers, counts)
               if count}
        self.drawn += 1
        return out

    def batch(self, batch_size: int) -> dict[str, Any]:
        """One batch: the sources' batches concatenated in source order, with ``_source`` (each row's source)."""
        parts = self.batch_by_source(batch_size)
        weighted = [part["_weight"] for part in parts.values() if "_weight" in part]
        if weighted:  # uniform draws beside prioritized ones: importance weight 1
            for part in parts.values():
                if "_weight" not in part:
                    rows = len(next(iter(part.values())))
                    part["_weight"] = _like(np.ones(rows, dtype=np.float32), weighted[0])
        first_name, first = next(iter(parts.items()))
        for name, part in parts.items():
            if part.keys() != first.keys():
                raise InvalidDataError(_other_fields(name, part, first_name, first))
        out = {key: _concatenate([part[key] for part in parts.values()], key, list(parts)) for key in first}
        index = {name: i for i, name in enumerate(self.names)}
        source = np.concatenate([np.full(len(next(iter(part.values()))), index[name], dtype=np.int64)
                                 for name, part in parts.items()])
        out["_source"] = _like(source, next(iter(first.values())))
        return out

    def update_priorities(self, keys: Any, priorities: Any, sources: Any = None) -> int:
        """Send each row's priority to the sampler of the source it was drawn from.

        Parameters
        ----------
        keys : dict or array of int
            The mixed batch itself (its ``_key`` and ``_source`` are read), or its ``_key``.
        priorities : array of float
            One priority per row (e.g. ``abs(td_error) + 1e-6``), numpy or torch.
        sources : array of int, optional
            The batch's ``_source``, needed when ``keys`` is not the batch (a key alone does not say which
            store it is from); with a single source it may be left out.

        Returns
        -------
        int
            The updates applied. Rows of sources that are not prioritized (a uniform sampler has no
            ``update_priorities``) are skipped, as are the rows of episodes evicted since the draw.
        """
        if isinstance(keys, Mapping):
            if sources is not None:
                raise OptionError("give sources= only with keys, not with the batch (it holds '_source')")
            missing = [name for name in ("_key", "_source") if name not in keys]
            if missing:
                raise InvalidDataError(f"the batch must hold '_key' and '_source', as MixedSampler.batch() gives "
                                       f"(missing {missing}); pass the mixed batch itself")
            keys, sources = keys["_key"], keys["_source"]
        keys, priorities = as_numpy(keys), as_numpy(priorities)
        if sources is None:
            if len(self.samplers) > 1:
                raise OptionError(f"update_priorities needs each row's source: pass the batch itself "
                                  f"(update_priorities(batch, priorities)) or sources=batch['_source'] "
                                  f"({len(self.samplers)} sources number their keys alike)")
            sources = np.zeros(keys.shape, np.int64)
        sources = as_numpy(sources)
        if keys.ndim != 1 or sources.shape != keys.shape or priorities.shape != keys.shape:
            raise InvalidDataError(f"keys, priorities and sources must be 1-d, one per row (got shapes "
                                   f"{keys.shape}, {priorities.shape} and {sources.shape})")
        if sources.dtype.kind not in "iu" or (len(sources) and not 0 <= sources.min() <= sources.max()
                                                                < len(self.samplers)):
            raise InvalidDataError(f"sources must be a batch's '_source': ints in [0, {len(self.samplers)}) (got "
                                   f"{short(sources.tolist())})")
        applied = 0
        for index, sampler in enumerate(self.samplers):
            update = getattr(sampler, "update_priorities", None)
            rows = sources == index
            if callable(update) and rows.any():
                applied += int(update(keys[rows], priorities[rows]) or 0)
        return applied

    def refresh(self) -> bool:
        """Refresh every source's sampler; True if any changed."""
        return any([sampler.refresh() for sampler in self.samplers])

    # ---- state ------------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"drawn": self.drawn, "sources": [sampler.state_dict() for sampler in self.samplers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if not isinstance(state, dict) or set(state) != {"drawn", "sources"}:
            raise InvalidDataError(f"a MixedSampler state_dict must hold 'drawn' and 'sources' (got {short(state)})")
        drawn = integer(state["drawn"], "'drawn'", error=InvalidDataError)
        sources = state["sources"]
        if not isinstance(sources, list) or len(sources) != len(self.samplers):
            raise InvalidDataError(f"a MixedSampler state_dict must hold one state per source ({len(self.samplers)}) "
                                   f"(got {short(sources)})")
        for sampler, source in zip(self.samplers, sources):
            sampler.load_state_dict(source)
        self.drawn = drawn


def _meta_names(source: Any) -> tuple[str, ...] | None:
    """The meta fields a source gives: a buffer's (its schema), a sampler's (its view's); None if unknown."""
    view = getattr(source, "view", None)
    if hasattr(source, "batch") and hasattr(source, "sample"):
        names = getattr(view, "meta_fields", None)
    else:
        names = getattr(getattr(source, "schema", None), "meta_fields", None)
    return None if names is None else tuple(names)


def _view_options(sources: list[Any], meta_fields: Any) -> dict[str, Any]:
    """The view options of the samplers made for buffer sources: ``meta_fields`` given, or the meta fields
    every source has when the sources' differ (none of them when they agree: each buffer's own)."""
    if meta_fields is not None:
        return {"meta_fields": meta_fields}
    known = [names for names in map(_meta_names, sources) if names is not None]
    if not known or all(set(names) == set(known[0]) for names in known):
        return {}
    return {"meta_fields": tuple(name for name in known[0] if all(name in names for names in known))}


def _other_fields(name: str, part: dict[str, Any], first_name: str, first: dict[str, Any]) -> str:
    only = sorted(set(part) - set(first)), sorted(set(first) - set(part))
    common = sorted(set(part) & set(first) - {"_key", "_weight"})
    return (f"source {name!r} gives the fields {sorted(part)} but source {first_name!r} gives {sorted(first)} "
            f"(only {name!r}: {only[0]}; only {first_name!r}: {only[1]}): their batches cannot be concatenated; "
            f"give every source the same fields: MixedSampler(..., meta_fields=[...]) chooses the meta fields of "
            f"buffer sources (by default the ones every source has), and a sampler source is made with "
            f"buffer.sampler(..., meta_fields=[...], fields=[...]) (the fields both give: {common}); or use "
            f"batch_by_source()")


def _concatenate(values: list[Any], key: str, names: list[str]) -> Any:
    first = values[0]
    torch = sys.modules.get("torch") if type(first).__module__.startswith("torch") else None
    for name, value in zip(names, values):
        if (type(value) is not type(first) or value.dtype != first.dtype
                or tuple(value.shape[1:]) != tuple(first.shape[1:])):
            raise InvalidDataError(
                f"field {key!r} of source {name!r} is {type(value).__name__} {value.dtype} of row shape "
                f"{tuple(value.shape[1:])} but source {names[0]!r} gives {type(first).__name__} {first.dtype} of row "
                f"shape {tuple(first.shape[1:])}: they cannot be concatenated; leave it out (meta_fields=[...] or "
                f"fields=[...] without {key!r}: MixedSampler's for buffer sources, buffer.sampler's for sampler "
                f"sources), or use batch_by_source()")
    return torch.cat(values) if torch is not None else np.concatenate(values)


def _like(array: np.ndarray, example: Any) -> Any:
    """``array`` as the kind of value ``example`` is (a torch tensor on its device, or numpy), in its dtype
    when both are floats."""
    if type(example).__module__.startswith("torch"):
        torch = sys.modules["torch"]
        tensor = torch.as_tensor(array, device=example.device)
        return tensor.to(example.dtype) if tensor.is_floating_point() and example.is_floating_point() else tensor
    return array.astype(example.dtype) if array.dtype.kind == "f" and example.dtype.kind == "f" else array
