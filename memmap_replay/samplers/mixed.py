"""MixedSampler: each batch drawn from several sources (samplers, or buffers) at fixed ratios, with exact
per-source counts: offline data and online episodes in one batch (RLPD-style 50/50), demonstrations beside
replay, several tasks at once.

``MixedSampler({source_a: 0.5, source_b: 0.5}, seed=0)`` (or a list of ``(source, ratio)`` pairs). A source
is a sampler (anything with ``sample`` and ``batch``: a uniform, prioritized, sequence or sharded sampler,
over any view) or an object with ``sampler(kind, **options)`` (a ``ReplayBuffer``: it gets a uniform sampler
of single timesteps, seeded from ``seed``). Ratios are numbers >= 0 (they are normalized).

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

Numpy only: this module never imports torch (a torch batch is concatenated with the torch its tensors come
from).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.options import batch_size as batch_size_of, integer, number, seed_option, short
from ..errors import InvalidDataError, OptionError

__all__ = ["MixedSampler"]


class MixedSampler:
    """Batches of several sources at fixed ratios with exact per-source counts (see the module docstring)."""

    def __init__(self, sources: Any, *, names: Any = None, seed: int | None = None):
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
        self.samplers = [self._sampler_of(source, child, name) for (source, _), child, name
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
    def _sampler_of(source: Any, seed: np.random.SeedSequence | None, name: str) -> Any:
        if hasattr(source, "batch") and hasattr(source, "sample"):
            if getattr(source, "draw_ahead", 0):
                raise OptionError(f"source {name!r} draws ahead (draw_ahead={source.draw_ahead}), but a mixed batch "
                                  f"asks each source for a count that changes from batch to batch, so its draws ahead "
                                  f"would be dropped every time; make that sampler with draw_ahead=0")
            return source
        make = getattr(source, "sampler", None)
        if callable(make):
            return make("uniform", seed=None if seed is None else int(seed.generate_state(1, np.uint32)[0]))
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
                raise InvalidDataError(
                    f"source {name!r} gives the fields {sorted(part)} but source {first_name!r} gives "
                    f"{sorted(first)}: their batches cannot be concatenated; use batch_by_source(), or give the "
                    f"sources' views the same fields")
        out = {key: _concatenate([part[key] for part in parts.values()], key, list(parts)) for key in first}
        index = {name: i for i, name in enumerate(self.names)}
        source = np.concatenate([np.full(len(next(iter(part.values()))), index[name], dtype=np.int64)
                                 for name, part in parts.items()])
        out["_source"] = _like(source, next(iter(first.values())))
        return out

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


def _concatenate(values: list[Any], key: str, names: list[str]) -> Any:
    first = values[0]
    torch = sys.modules.get("torch") if type(first).__module__.startswith("torch") else None
    for name, value in zip(names, values):
        if (type(value) is not type(first) or value.dtype != first.dtype
                or tuple(value.shape[1:]) != tuple(first.shape[1:])):
            raise InvalidDataError(
                f"field {key!r} of source {name!r} is {type(value).__name__} {value.dtype} of row shape "
                f"{tuple(value.shape[1:])} but source {names[0]!r} gives {type(first).__name__} {first.dtype} of row "
                f"shape {tuple(first.shape[1:])}: they cannot be concatenated; use batch_by_source()")
    return torch.cat(values) if torch is not None else np.concatenate(values)


def _like(array: np.ndarray, example: Any) -> Any:
    """``array`` as the kind of value ``example`` is (a torch tensor on its device, or numpy), in its dtype
    when both are floats."""
    if type(example).__module__.startswith("torch"):
        torch = sys.modules["torch"]
        tensor = torch.as_tensor(array, device=example.device)
        return tensor.to(example.dtype) if tensor.is_floating_point() and example.is_floating_point() else tensor
    return array.astype(example.dtype) if array.dtype.kind == "f" and example.dtype.kind == "f" else array
