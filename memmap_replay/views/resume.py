"""A loader's place, for ``ReplayDataLoader.state_dict()`` / ``load_state_dict()``: training that resumes exactly.

A loader takes the items of its batches from its batch sampler ahead of their turn (``prefetch``, worker
threads or processes in flight, a device a batch ahead), so the batch sampler's own state is ahead of the
batches the caller got. The loader records, in this process, every item its batch sampler gives
(``record``) and forgets each as its batch is handed out (``LoaderPlace.handed``); its state is then what
the caller got, whatever was in flight:

- a batch sampler of epochs (``BatchIndexSampler``: in order, shuffled, block-shuffled): the epoch in
  progress (its number and the seed of its order), the batches of it handed out, and the state of the
  loader's ``generator`` when the epoch began (the epoch's seed and torch's worker seed are drawn from it
  again, the same). Resumed, the epoch goes on from the next batch: its items are computed, not stored;
- a sampler's draws (``sampler.dataloader(...)``: ``SampleBatches``, a rate-limited sampler's too): the sampler's
  ``state_dict()`` (after every draw made so far) and the draws made but not handed out yet (keys and weights),
  oldest first. Resumed, those are handed out first, gathered again
  (keys are stable while their episode is live), then the sampler draws on from its state.

Either way a fresh loader made with the same arguments and loaded with the state gives exactly the batches
the first one would have given next: the pipeline keeps as many items in flight as before, so a sampler's
draws happen at the same points between the caller's steps (after the same priority updates).
"""

from __future__ import annotations

import itertools
from collections import deque
from typing import Any, Iterable, Iterator

import numpy as np

from ..core.index import Sample
from ..core.options import integer, short
from ..errors import InvalidDataError, OptionError
from ..samplers.base import checked_ahead
from .batches import BatchIndexSampler

__all__ = ["LoaderPlace", "record", "loader_state", "checked_loader_state", "resumed_items"]

STATE_TYPE = "ReplayDataLoader"


class LoaderPlace:
    """An iteration of a loader: the items drawn and not handed out yet (oldest first), the batches handed
    out (counting those of the iteration it resumes), whether the batch sampler ran out, and what the epoch
    in progress began from."""

    def __init__(self, handed: int = 0, generator: list[int] | None = None):
        self.drawn: deque = deque()
        self.handed = handed
        self.exhausted = False
        self.active = True
        self.generator = generator  # the loader generator's state when the iteration began
        self.begun: tuple[int, int | None] | None = None  # (epoch, seed) of a BatchIndexSampler's epoch
        self.loaded: tuple[dict[str, Any], dict[str, Any]] | None = None  # a loaded state it resumes, until begun
        self.source: Iterable | None = None  # the items of the resumed iteration (None: the batch sampler's)

    def hand_out(self) -> None:
        """A batch was handed to the caller: its items are no longer in flight."""
        if self.drawn:
            self.drawn.popleft()
        self.handed += 1


def record(items: Iterable, place: LoaderPlace, sampler: Any) -> Iterator:
    """``items`` (a batch sampler's), each noted in ``place`` as it is taken."""
    for item in items:
        if place.begun is None and isinstance(sampler, BatchIndexSampler) and sampler.begun is not None:
            place.begun = sampler.begun
        place.drawn.append(item)
        yield item
    place.exhausted = True


def _generator_state(generator: Any) -> list[int] | None:
    return None if generator is None else generator.get_state().tolist()


def _shape(batches: Any) -> dict[str, Any]:
    """What an epoch loader's state must match: the batch sampler's arguments."""
    return {"size": batches.size, "batch_size": batches.batch_size, "shuffle": batches.shuffle,
            "order": batches.order, "drop_last": batches.drop_last, "seed": batches.seed}


def _pending(item: Any) -> list[Any]:
    if not isinstance(item, Sample):
        raise OptionError(f"this loader's batch sampler gives {type(item).__name__} items, not a sampler's draws; "
                          f"its state cannot be saved")
    weights = None if item.weights is None else np.asarray(item.weights).tolist()
    return [len(item.keys), np.asarray(item.keys).tolist(), weights]


def loader_state(batches: Any, place: LoaderPlace | None, generator: Any) -> dict[str, Any]:
    """The state of a loader over ``batches`` (its batch sampler) whose iteration is ``place`` (None: none)."""
    if place is not None and not place.active:
        place = None
    if isinstance(batches, BatchIndexSampler):
        state: dict[str, Any] = {"type": STATE_TYPE, "kind": "epochs", "shape": _shape(batches)}
        if place is None or place.begun is None or place.handed >= len(batches):  # between epochs
            return dict(state, epoch=batches.epoch, batch=0, epoch_seed=None, generator=_generator_state(generator))
        epoch, seed = place.begun
        return dict(state, epoch=epoch, batch=place.handed, epoch_seed=seed, generator=place.generator)
    sampler = getattr(batches, "sampler", None)
    if sampler is None or not callable(getattr(sampler, "state_dict", None)) or not hasattr(batches, "resume_after"):
        raise OptionError(f"this loader's batch sampler ({short(batches)}) keeps no state: state_dict() needs "
                          f"buffer.dataloader(...) or sampler.dataloader(...)")
    done = place is None or (place.exhausted and not place.drawn)
    return {"type": STATE_TYPE, "kind": "draws", "sampler": sampler.state_dict(),
            "pending": [] if done else [_pending(item) for item in place.drawn],  # type: ignore[union-attr]
            "batch": 0 if done else place.handed, "exhausted": False if done else place.exhausted,  # type: ignore
            "generator": _generator_state(generator) if place is None else place.generator}


def checked_loader_state(batches: Any, state: Any, generator: Any) -> dict[str, Any]:
    """``state`` checked against a loader over ``batches``: the values ``resumed_items`` takes, or an
    ``InvalidDataError`` saying what is wrong (nothing is changed)."""
    if not isinstance(state, dict) or state.get("type") != STATE_TYPE:
        found = state.get("type") if isinstance(state, dict) else type(state).__name__
        raise InvalidDataError(f"this is a ReplayDataLoader's state_dict()? it holds a {found!r}")
    kind = "epochs" if isinstance(batches, BatchIndexSampler) else "draws"
    if state.get("kind") != kind:
        raise InvalidDataError(f"the state_dict is of a loader of {state.get('kind')}, this one reads {kind}: make the "
                               f"loader as the one saved was made (buffer.dataloader or sampler.dataloader)")
    try:
        values: dict[str, Any] = {"kind": kind, "batch": integer(state["batch"], "batch", low=0)}
        saved = state["generator"]
        if saved is not None and generator is not None:
            values["generator"] = _checked_generator(saved, generator)
        if kind == "epochs":
            saved_shape, shape = dict(state["shape"]), _shape(batches)
            saved_size = integer(saved_shape.pop("size"), "size", low=0)
            if saved_shape != {key: value for key, value in shape.items() if key != "size"}:
                raise InvalidDataError(f"the state_dict is of a loader of {state['shape']}, this one is of "
                                       f"{shape}: make the loader with the same arguments")
            values["epoch"] = integer(state["epoch"], "epoch", low=0)
            seed = state["epoch_seed"]
            values["epoch_seed"] = None if seed is None else integer(seed, "epoch_seed", low=None)
            if saved_size != batches.size:  # the view changed (a writer appended): the epoch in progress ends
                values.update(epoch=values["epoch"] + (values["batch"] > 0), epoch_seed=None, batch=0)
            elif values["batch"] > len(batches):
                raise InvalidDataError(f"batch {values['batch']} is past the epoch's {len(batches)} batches")
        else:
            values["pending"] = [sample for _, sample in checked_ahead(state["pending"])]
            values["exhausted"] = bool(state["exhausted"])
            values["sampler"] = state["sampler"]
    except InvalidDataError as error:
        raise InvalidDataError(f"a damaged loader state_dict ({error}); save it again with state_dict()") from None
    except (KeyError, TypeError, ValueError) as error:
        raise InvalidDataError(f"a damaged loader state_dict ({error!r}); save it again with state_dict()") from None
    return values


def _checked_generator(saved: Any, generator: Any) -> Any:
    """A torch generator state (a list of bytes) that ``generator`` takes."""
    if not isinstance(saved, list) or not all(type(value) is int and 0 <= value < 256 for value in saved):
        raise InvalidDataError("'generator' must be a list of bytes (a torch generator's state)")
    import torch  # (views: the torch room)

    state = torch.tensor(saved, dtype=torch.uint8)
    scratch = torch.Generator(device=generator.device)
    try:
        scratch.set_state(state)
    except (RuntimeError, ValueError) as error:
        raise InvalidDataError(f"'generator' is not a state of this loader's generator ({error})") from None
    return state


def resumed_items(batches: Any, values: dict[str, Any], generator: Any) -> Iterable:
    """The items of a resumed iteration (``values``: ``checked_loader_state``'s, the sampler's state and the
    generator's already loaded): the batch sampler set to go on from the place, after the pending draws."""
    if values["kind"] == "epochs":
        # a generator gives the epoch's seed again; without one (torch's global RNG) the seed saved is used
        batches.resume_at(values["epoch"], values["epoch_seed"] if generator is None else None, values["batch"])
        return batches
    pending = values["pending"]
    if values["exhausted"]:
        return pending
    batches.resume_after(values["batch"] + len(pending))
    return itertools.chain(pending, batches)
