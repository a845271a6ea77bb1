"""Building a plan (``reading/plan.py``): the view its switches choose, the sampler of its kind, the DataLoader.

``build_view`` picks the view kind (``n_steps`` -> NStepView, ``timestep_level`` -> TimestepView,
``window`` -> WindowView, ``transitions`` -> TransitionView, ``hindsight`` -> HindsightView, else
TrajectoryView) and refuses an option the table says that kind does not take. ``build_dataloader`` and
``build_sampler`` put a view under a DataLoader or a sampler. A DataLoader with ``output="torchrl"`` over
windows or trajectories makes its view with ``episode_flags=True`` and ``next_fields`` its observation
fields unless they are given (``loader_view``): TorchRL's ``("next", ...)`` of every step.
"""

from __future__ import annotations

from typing import Any, Mapping

from torch.utils.data import Dataset

from ..core.options import did_you_mean, flag, short
from ..core.store import EpisodeStore
from ..errors import InvalidDataError, OptionError
from ..samplers.base import ReplaySampler
from ..samplers.factory import sampler_class
from ..views.batches import BatchIndexSampler
from ..views.dataset import StoreView
from ..views.hindsight import HindsightView
from ..views.kinds import NStepView, TimestepView, TrajectoryView, WindowView
from ..views.loader import ReplayDataLoader, with_loader_transform
from ..views.transforms import loader_transform
from ..core.schema import observation_like
from ..views.transitions import TransitionView
from .plan import ReadPlan, hindsight_options
from .table import BY_NAME, DATASET, SAMPLER

__all__ = ["build_view", "build_dataloader", "build_sampler", "view_kind", "check_kind", "loader_view"]

VIEW_CLASSES: dict[str, type[StoreView]] = {  # the view kinds' classes
    "trajectory": TrajectoryView, "timestep": TimestepView, "window": WindowView, "nstep": NStepView,
    "transitions": TransitionView, "hindsight": HindsightView}
_SWITCHES = ("n_steps", "timestep_level", "window", "transitions")


def view_kind(options: Mapping[str, Any]) -> str:
    """The view kind the switches among ``options`` choose (at most one of them; ``hindsight`` goes with
    ``n_steps`` only)."""
    # n_steps and window count steps (any value but None chooses them: their view checks it); the others are flags
    chosen = [name for name in _SWITCHES if (options.get(name) is not None if name in ("n_steps", "window")
                                             else options.get(name) not in (None, False) and bool(options[name]))]
    if len(chosen) > 1:
        raise OptionError(f"choose one of n_steps, timestep_level, window and transitions (got {chosen})")
    if options.get("hindsight") is not None:
        if chosen and chosen != ["n_steps"]:
            raise OptionError(f"hindsight relabels one-step transitions: drop timestep_level and window, and "
                              f"transitions (a hindsight view is made of one-step transitions) (got {chosen})")
        return "hindsight"
    return {"n_steps": "nstep", "timestep_level": "timestep", "window": "window",
            "transitions": "transitions"}.get(chosen[0] if chosen else "", "trajectory")


def build_view(store: EpisodeStore, options: Mapping[str, Any], *, caller: str = "") -> StoreView:
    """The view of ``options`` (a plan's view options, as ``buffer.dataset`` takes them) over ``store``.
    ``caller`` names the entry point for errors (e.g. "a dataloader")."""
    options = dict(options)
    for name in ("timestep_level", "transitions", "allow_empty"):
        if options.get(name) is not None:
            flag(options[name], name)
    kind = view_kind(options)
    table = BY_NAME[DATASET]
    unknown = sorted(name for name in options if name not in table and name != "collate_fn")
    if unknown:  # (dataset_kwargs, or a dict of view options: a Ray shard's view=)
        known = sorted(table)
        raise OptionError(f"unknown keyword {unknown} for a view; it takes {known}{did_you_mean(unknown, known)}")
    if "include_metadata" in options:  # memmap-replay-buffer's switch for meta fields
        if not flag(options.pop("include_metadata"), "include_metadata"):
            if options.get("meta_fields"):
                raise OptionError("include_metadata=False and meta_fields contradict each other; pass one of them")
            options["meta_fields"] = ()
    if "return_mask" in options:
        flag(options["return_mask"], "return_mask")
    if options.get("return_mask") and kind in ("nstep", "timestep", "transitions", "hindsight"):
        raise OptionError("return_mask applies to trajectories (and windows with allow_partial): "
                          "single steps and n-step transitions have nothing to mask")
    allow_empty = options.pop("allow_empty", False)
    cls = VIEW_CLASSES[kind]
    check_kind(options, kind, f"{caller} over a {cls.__name__}" if caller else f"a {cls.__name__}")
    options.pop("timestep_level", None)
    options.pop("transitions", None)
    args: tuple = ()
    if kind == "hindsight":
        hindsight = hindsight_options(options.pop("hindsight"))
        clash = sorted(set(hindsight) & set(options))
        if clash:
            raise OptionError(f"{clash} given both in hindsight= and as keywords; pass them once")
        options.update(hindsight)
    elif kind in ("nstep", "window"):
        args = (options.pop("n_steps" if kind == "nstep" else "window"),)
    if kind == "window":
        options.pop("return_mask", None)  # partial windows always carry their mask
    view = cls(store, *args, **options)
    if len(view) == 0 and not allow_empty:
        raise OptionError(f"the {cls.__name__} has no items: " + _why_empty(view, store, kind))
    return view


def check_kind(options: Mapping[str, Any], kind: str, where: str) -> None:
    """Refuse the options the table says a view of ``kind`` does not take (``where``: the view, or the
    entry point, for the message)."""
    table = BY_NAME[DATASET]
    refused = set(VIEW_CLASSES[kind].refused_options)  # (the view's own error says more)
    misplaced = sorted(name for name in options if name not in _SWITCHES and name != "hindsight"
                       and name not in refused and table[name].kinds and kind not in table[name].kinds)
    if misplaced:
        takes = sorted(name for name, option in table.items() if not option.kinds or kind in option.kinds)
        raise OptionError(f"{misplaced} do not apply to {where}; it takes {takes}")


def _why_empty(view: StoreView, store: EpisodeStore, kind: str) -> str:
    """Why a view has no items, and what to do: a filter that matched nothing, or too little data."""
    held = f"the buffer holds {store.num_episodes} episodes"
    how = "check its names and values, or pass allow_empty=True to accept an empty view"
    filter_meta = getattr(view, "filter_meta", None)
    if filter_meta and store.num_episodes and not len(view.table):
        return f"no episode matched the filter filter_meta={short(filter_meta)} ({held}); {how}"
    filter_fields = getattr(view, "filter_fields", None)
    if filter_fields and len(view.table):
        return (f"no step of the {len(view.table)} episodes it keeps matched the filter "
                f"filter_fields={short(filter_fields)}; {how}")
    item = "transition" if isinstance(view, NStepView) else "window" if kind == "window" else "step"
    return f"{held} and none give a {item} with these options; store more data"


def loader_view(plan: ReadPlan, make_view: Any) -> Any:
    """The view a DataLoader plan reads: ``make_view(view options)``, or the ``dataset=`` given; a shallow copy
    of it carries the plan's ``transform`` (run on the whole batch the loader gathers)."""
    options = dict(plan.view)
    kwargs = plan.loader.get("dataset_kwargs")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise OptionError(f"dataset_kwargs must be a dict (got {short(kwargs)})")
    options.update(kwargs or {})
    transform = loader_transform(options.pop("transform", None), options.pop("collate_fn", None))
    dataset = plan.loader.get("dataset")
    if dataset is None:
        sequences = plan.loader.get("output") == "torchrl" and view_kind(options) in ("window", "trajectory")
        if sequences:  # TorchRL's layout of a sequence: ('next', 'terminated') from the flags
            options.setdefault("episode_flags", True)
        dataset = make_view(options)
        if sequences and options.get("next_fields") is None:
            _observe_next(dataset)
    elif options:
        raise OptionError(f"view options {sorted(options)} cannot be combined with dataset=")
    elif not isinstance(dataset, Dataset) or not hasattr(dataset, "__getitems__"):
        raise OptionError(f"dataset must be a view, e.g. buffer.dataset(window=8) (a torch Dataset with "
                          f"__getitems__) (got {short(dataset)})")
    return with_loader_transform(dataset, transform)


def _observe_next(view: Any) -> None:
    """``output="torchrl"`` over windows or trajectories made without ``next_fields``: the observation fields
    (``views.torchrl_layout``'s rule) become its next fields, for ``("next", <obs>)`` (each shard's view)."""
    for part in getattr(view, "views", None) or [view]:
        names = [name for name in part.fields if observation_like(name)]
        if names:
            part.setup_next(part.store, names)
            part.check_outputs()


def build_dataloader(view: Any, batch_size: int, plan: ReadPlan) -> ReplayDataLoader:
    """A DataLoader over ``view`` (``loader_view``) whose batch sampler the plan's sampler options shape."""
    order = dict(plan.sampler)
    loader = {name: value for name, value in plan.loader.items() if name not in ("dataset", "dataset_kwargs")}
    sampler = BatchIndexSampler(len(view), batch_size, generator=loader.get("generator"), **order)
    return ReplayDataLoader(view, sampler, **loader)


def build_sampler(store: EpisodeStore, kind: str, plan: ReadPlan, *, view: StoreView | None = None,
                  caller: str = "") -> ReplaySampler:
    """A ``kind`` sampler over ``view``, else over the plan's view (single timesteps by default; a
    'sequence' sampler needs ``window=``)."""
    cls = sampler_class(kind)
    table = BY_NAME[SAMPLER]
    own = sorted(name for name, option in table.items() if option.owner == "sampler" and not option.renamed)
    refused = sorted(name for name in plan.sampler if table[name].kinds and kind not in table[name].kinds)
    if refused:
        takes = [name for name in own if not table[name].kinds or kind in table[name].kinds]
        raise OptionError(f"{refused} do not apply to a {kind!r} sampler; its options are {takes}")
    options = dict(plan.view)
    view = options.pop("view", view)
    if view is None:
        if kind == "sequence" and "window" not in options:
            raise InvalidDataError("a 'sequence' sampler draws windows: pass window=L (e.g. window=50)")
        if not {"n_steps", "window", "timestep_level", "hindsight", "transitions"} & set(options):
            options["timestep_level"] = True
        view = build_view(store, options, caller=caller or f"a {kind!r} sampler")
    elif options:
        raise InvalidDataError(f"view options {sorted(options)} cannot be combined with view= (sampler options: "
                               f"{own})")
    return cls(view, **plan.sampler)

