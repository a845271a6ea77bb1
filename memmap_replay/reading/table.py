"""Every read option, declared once: its name, owner, type, default, check and one line of documentation.

The typed entry points (``ReplayBuffer.dataset/dataloader/sampler``, the same on ``ShardSet``,
``ConcatReplayBuffer.dataset/dataloader``, ``sampler.dataloader``) are generated from this table
(``reading/generate.py`` writes ``reading/entries.py`` and ``samplers/loader_entry.py``), composition
(``reading/plan.py``) splits a call's arguments by owner with it, and the reference's "Read options" page
is rendered from it. ``tests/reading/test_table.py`` holds the table, the signatures and the classes that
take each option together.

Owners: ``view`` options go to the view (the Dataset that gathers batches), ``sampler`` options shape
which items come in which order (a sampler's draws, or a DataLoader's batch sampler: ``shuffle``,
``seed``, ...), ``loader`` options go to the DataLoader (workers, devices, the batch's type).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Callable

from ..core.options import choice, flag, follow_option, integer, number
from ..samplers.orders import EPOCH_ORDERS
from ..views._options import device_option, generator_option
from ..views.readahead import readahead_mode
from ..views.transport import SLOT_RELEASES, WORKER_KINDS, WORKER_TRANSPORTS

__all__ = ["Option", "OPTIONS", "BY_NAME", "ENTRIES", "VIEW_KINDS", "SAMPLER_KINDS", "HINDSIGHT", "options_of"]

# the entry points: the read options each takes
DATASET, DATALOADER, SAMPLER, SAMPLER_LOADER = "dataset", "dataloader", "sampler", "sampler.dataloader"
ENTRIES = (DATASET, DATALOADER, SAMPLER, SAMPLER_LOADER)
# the view kinds (reading/build.py picks one from the switches n_steps, timestep_level, window, transitions and
# hindsight) and the sampler kinds
VIEW_KINDS = ("trajectory", "timestep", "window", "nstep", "transitions", "hindsight")
SAMPLER_KINDS = ("uniform", "prioritized", "sequence")
HINDSIGHT = "hindsight"  # route of the options given as keys of hindsight=dict(...)


@dataclass(frozen=True)
class Option:
    """One read option.

    ``entries``: the entry points whose signatures name it. ``kinds``: the view kinds (a view option) or
    sampler kinds (a sampler option) that take it; empty: every kind. ``check(value, name)``: the checks
    that need no store, run before anything is built (the view or sampler checks the rest). ``renamed``:
    set on an old spelling kept for one release; it names the option that replaces it. ``route``:
    ``"keyword"`` (in the signatures) or ``"hindsight"`` (a key of ``hindsight=dict(...)``)."""

    name: str
    owner: str
    annotation: str
    default: Any
    doc: str
    entries: tuple[str, ...]
    kinds: tuple[str, ...] = ()
    check: Callable[[Any, str], Any] | None = None
    renamed: str | None = None
    route: str = "keyword"


_VIEW_ENTRIES = (DATASET, DATALOADER, SAMPLER)
_BATCH_FUNCTION = "Callable[[dict[str, Any]], dict[str, Any]] | None"  # a transform
_STEPS = ("timestep", "nstep", "transitions", "hindsight")  # single steps and transitions: frame stacks, filters
_NSTEP = ("nstep", "hindsight")
_PRIORITIZED = ("prioritized", "sequence")


def _view(name: str, annotation: str, default: Any, doc: str, kinds: tuple[str, ...] = (),
          check: Callable[[Any, str], Any] | None = None, entries: tuple[str, ...] = _VIEW_ENTRIES) -> Option:
    return Option(name, "view", annotation, default, doc, entries, kinds, check)


def _flag(value: Any, name: str) -> bool:
    return flag(value, name)


def _at_least(low: int) -> Callable[[Any, str], int]:
    return lambda value, name: integer(value, name, low=low)


def _among(choices: tuple) -> Callable[[Any, str], Any]:
    return lambda value, name: choice(value, name, choices)


VIEW_OPTIONS = (
    # which view: the switches (none of them: whole trajectories)
    _view("n_steps", "int | None", None, "n-step transitions of this many steps (an n-step view)", _NSTEP),
    _view("timestep_level", "bool | None", None, "single timesteps when True (a timestep view), whole trajectories "
          "when False; None: single timesteps for a sampler, trajectories for a dataset, unless another switch "
          "chooses", ("timestep",), lambda value, name: None if value is None else flag(value, name)),
    _view("window", "int | None", None, "windows of this many consecutive steps inside one episode (a window view)",
          ("window",)),
    _view("transitions", "bool", False, "one-step transitions with next_<observation>, terminated and truncated",
          ("transitions",), _flag),
    _view("hindsight", "Mapping[str, Any] | None", None, "one-step transitions with hindsight goal relabelling: a "
          "dict of goal_field, achieved_field, reward_fn and optionally strategy, relabel_ratio, relabel_seed",
          ("hindsight",)),
    # every view
    _view("fields", "Sequence[str] | str | None", None, "the step fields returned (None: every field; an n-step "
          "view takes current_fields and next_fields instead)", ("trajectory", "timestep", "window", "transitions")),
    _view("meta_fields", "Sequence[str] | str | None", None, "the episode meta fields returned with each item "
          "(None: every meta field; () none)"),
    _view("include_metadata", "bool", True, "memmap-replay-buffer's switch: False returns no meta fields "
          "(as meta_fields=())", check=_flag),
    _view("filter_meta", "Mapping[str, Any] | None", None, "keep the episodes whose meta fields equal these values "
          "(a value, or a list of accepted values, per meta field)"),
    _view("fieldname_map", "Mapping[str, str] | None", None, "rename outputs: output name -> name in the batch"),
    _view("return_indices", "bool", False, "add _episode and _t (each item's episode id and step) to the batch",
          check=_flag),
    _view("readahead", "bool | str", "auto", "advise a batch's rows to the kernel before gathering them: 'auto' "
          "when they are not cached, 'always', or 'off'", check=lambda value, name: readahead_mode(value, name)),
    _view("transform", _BATCH_FUNCTION, None, "a function of the whole gathered batch dict, run "
          "where the batch is gathered (in a worker when there are workers)",
          entries=(DATASET, DATALOADER, SAMPLER, SAMPLER_LOADER)),
    _view("collate_fn", _BATCH_FUNCTION, None, "torch's name for transform: it receives the gathered "
          "batch dict, not a list of samples", entries=(DATALOADER, SAMPLER_LOADER)),
    _view("min_episode_len", "int", 1, "leave out episodes shorter than this many steps", check=_at_least(1)),
    _view("allow_empty", "bool", False, "accept a view with no items instead of refusing it", check=_flag),
    _view("view", "Any", None, "a view to draw from (buffer.dataset(...)) instead of view options",
          entries=(SAMPLER,)),
    # trajectories
    _view("return_mask", "bool", False, "add _mask, True at real steps and False at padding (trajectories; partial "
          "windows always carry it)", ("trajectory", "window"), _flag),
    _view("episode_flags", "bool", False, "add Dreamer's _is_first, _is_last and _is_terminal per step",
          ("trajectory", "window"), _flag),
    _view("slice_by_episode_len", "bool", True, "pad a batch of episodes to its longest episode (False: to the "
          "store's max_timesteps)", ("trajectory",), _flag),
    _view("return_episode_lens", "bool", True, "add _lens, each episode's length", ("trajectory",), _flag),
    # windows
    _view("allow_partial", "bool", False, "windows may run past an episode's end, zero-padded, with _lens and _mask",
          ("window",), _flag),
    _view("time_major", "bool", False, "per-step outputs as (L, B, ...) instead of (B, L, ...)", ("window",), _flag),
    # single steps and transitions
    _view("filter_fields", "Mapping[str, Any] | None", None, "keep the steps whose scalar fields equal these values",
          _STEPS),
    _view("frame_stack", "int", 1, "stack this many frames ending at each step (DQN), without storing them twice",
          _STEPS, _at_least(1)),
    _view("stack_fields", "Sequence[str] | str | None", None, "the fields stacked (None: fields of 2 or more "
          "dimensions)", _STEPS),
    _view("stack_pad", "str", "repeat", "frames before an episode's first: 'repeat' the first frame, or 'zero'",
          _STEPS),
    # n-step and one-step transitions
    _view("current_fields", "Sequence[str] | str | None", None, "the fields returned at t (None: every field)",
          _NSTEP),
    _view("next_fields", "Sequence[str] | str | None", None, "the fields returned at the next state as "
          "next_<field>: at t + n (n-step; None: every field), or at each step's t + 1, the final observation "
          "after an episode's last step, zeros where it has none (windows and trajectories; None: none)",
          (*_NSTEP, "trajectory", "window")),
    _view("sequence_fields", "Sequence[str] | str | None", (), "the fields returned for every step t .. t + n - 1",
          _NSTEP),
    _view("gamma", "float | None", None, "the discount: an n-step view adds the discounted return, a transitions "
          "view a discount", ("nstep", "transitions", "hindsight"),
          lambda value, name: None if value is None else number(value, name, low=0, high=1)),
    _view("reward_field", "str", "reward", "the scalar field whose n-step return gamma discounts", _NSTEP),
    _view("observation_fields", "Sequence[str] | str | None", None, "the observation fields that get a "
          "next_<field> (None: those named obs*, state*, image*, pixel*)", ("transitions",)),
)

# keys of hindsight=dict(...): the relabelling's own options
HINDSIGHT_OPTIONS = tuple(
    Option(name, "view", annotation, default, doc, (), ("hindsight",), None, renamed, HINDSIGHT)
    for name, annotation, default, doc, renamed in (
        ("goal_field", "str", None, "the field holding the desired goal (relabelled)", None),
        ("achieved_field", "str", None, "the field holding the goal achieved at each step", None),
        ("reward_fn", "Callable[[ndarray, ndarray], Any]", None, "reward_fn(achieved_goal, desired_goal) -> one "
         "reward per row, vectorized and picklable", None),
        ("strategy", "str", "future", "where relabelled goals come from: 'future', 'final' or 'episode'", None),
        ("relabel_ratio", "float", 0.8, "the share of each batch relabelled", None),
        ("relabel_seed", "int", 0, "seeds which rows are relabelled and with which step", None),
        ("n_steps", "int", 1, "steps per transition: 1 (hindsight relabels one-step transitions)", None),
        ("seed", "int | None", None, "old spelling of relabel_seed", "relabel_seed"),
    ))


def _order(name: str, annotation: str, default: Any, doc: str, entries: tuple[str, ...], kinds: tuple[str, ...] = (),
           check: Callable[[Any, str], Any] | None = None, renamed: str | None = None) -> Option:
    return Option(name, "sampler", annotation, default, doc, entries, kinds, check, renamed)


_ORDERS = (DATALOADER, SAMPLER)
SAMPLER_OPTIONS = (
    _order("shuffle", "bool | str", False, "a new random order every epoch (True), a block-shuffled one for stores "
           "bigger than RAM ('blocks'), or the stored order (False)", (DATALOADER,)),
    _order("drop_last", "bool", False, "leave out the last batch when it is smaller than batch_size",
           (DATALOADER, SAMPLER_LOADER), check=_flag),
    _order("seed", "int | None", None, "seeds the order: a DataLoader's shuffle, a sampler's draws (None: torch's "
           "generator for a DataLoader, fresh entropy for a sampler)", _ORDERS),
    _order("block_size", "int | None", None, "items per block of a block-shuffled epoch (shuffle='blocks', "
           "order='blocks')", _ORDERS, ("uniform",)),
    _order("block_window", "int | None", None, "blocks shuffled together in a block-shuffled epoch", _ORDERS,
           ("uniform",)),
    _order("replacement", "bool", True, "draw with replacement (False: epochs, each item once)", (SAMPLER,),
           ("uniform",), _flag),
    _order("order", "str", "random", "an epoch's order without replacement: 'random' or 'blocks'", (SAMPLER,),
           ("uniform",), _among(EPOCH_ORDERS)),
    _order("rank", "int | None", None, "this learner's rank among world_size learners: its own share of the draws",
           (SAMPLER,)),
    _order("world_size", "int | None", None, "the number of learners drawing together", (SAMPLER,)),
    _order("follow", "bool | str", True, "take in the episodes committed since the last draw: by this process's "
           "writer (True), by any process ('disk'), or never (False)", (SAMPLER,),
           check=lambda value, name: follow_option(value)),
    _order("draw_ahead", "int", 0, "batches drawn ahead as batch() returns one, their rows advised to the kernel",
           (SAMPLER,), check=_at_least(0)),
    _order("prefetch", "int | None", None, "old spelling of draw_ahead (a DataLoader's prefetch reads batches "
           "ahead)", (SAMPLER,), renamed="draw_ahead"),
    _order("alpha", "float", 0.6, "how much priorities count: P(i) ~ priority_i ** alpha", (SAMPLER,), _PRIORITIZED,
           lambda value, name: number(value, name, low=0.0)),
    _order("beta", "float", 0.4, "the importance-weight exponent at the start", (SAMPLER,), _PRIORITIZED),
    _order("beta_final", "float", 1.0, "the importance-weight exponent beta is annealed to", (SAMPLER,), _PRIORITIZED),
    _order("beta_steps", "int", 0, "draws over which beta anneals to beta_final (0: fixed)", (SAMPLER,),
           _PRIORITIZED),
    _order("name", "str | None", None, "the name its priorities are kept under in the folder (None: the view's kind)",
           (SAMPLER,), _PRIORITIZED),
    _order("persist", "bool | None", None, "keep priorities in the folder (None: when the store is writable)",
           (SAMPLER,), _PRIORITIZED),
    _order("eta", "float", 0.9, "a window's priority from its steps': eta * max + (1 - eta) * mean", (SAMPLER,),
           ("sequence",), lambda value, name: number(value, name, low=0.0, high=1.0)),
)


def _loader(name: str, annotation: str, default: Any, doc: str, entries: tuple[str, ...] = (DATALOADER, SAMPLER_LOADER),
            check: Callable[[Any, str], Any] | None = None) -> Option:
    return Option(name, "loader", annotation, default, doc, entries, (), check)


LOADER_OPTIONS = (
    _loader("dataset", "Any", None, "a view to load from (buffer.dataset(...)) instead of view options; a shallow "
            "copy carries transform", (DATALOADER,)),
    _loader("dataset_kwargs", "Mapping[str, Any] | None", None, "view options as a dict (memmap-replay-buffer's "
            "spelling)", (DATALOADER,)),
    _loader("to_named_tuple", "Sequence[str] | None", None, "batches as named tuples of these outputs (a leading "
            "underscore is dropped from the names)", (DATALOADER,)),
    _loader("output", "str", "dict", "the batch's type: 'dict', 'tensordict' (the [tensordict] extra: flat names) "
            "or 'torchrl' (the [torchrl] extra: TorchRL's nested layout, ('next', ...))",
            check=_among(("dict", "tensordict", "torchrl"))),
    _loader("device", "torch.device | str | int | None", None, "move each batch there (on an accelerator, a batch "
            "ahead on a side stream)", check=lambda value, name: device_option(value, name)),
    _loader("non_blocking", "bool", True, "copies to the device do not wait", check=_flag),
    _loader("prefetch", "int", 1, "batches whose rows are read (advised to the kernel) ahead of their turn; on an "
            "accelerator also the batch copied ahead (0: none); over a sampler, its draws are made that many batches "
            "early (priorities updated meanwhile reach the batch after)", check=_at_least(0)),
    _loader("workers", "str", "auto", "what num_workers are: 'threads' of this process, torch's worker "
            "'processes', or 'auto' (threads unless a process-only option is given)", check=_among(WORKER_KINDS)),
    _loader("worker_transport", "str", "slots", "how worker processes hand batches back: shared-memory 'slots', or "
            "'torch' (torch's own transport)", check=_among(WORKER_TRANSPORTS)),
    _loader("slot_release", "str", "unused", "when a slot is free again: once the batch's tensors are 'unused', or "
            "at the 'next' batch", check=_among(SLOT_RELEASES)),
    _loader("num_workers", "int", 0, "torch's: workers gathering batches (0: in this process)", check=_at_least(0)),
    _loader("pin_memory", "bool", False, "torch's: batches in pinned memory, for fast copies to an accelerator"),
    _loader("timeout", "float", 0, "torch's: seconds to wait for a worker's batch (0: forever)"),
    _loader("worker_init_fn", "Callable[[int], None] | None", None, "torch's: run in each worker process as it "
            "starts"),
    _loader("multiprocessing_context", "Any", None, "torch's: the start method of worker processes"),
    _loader("generator", "torch.Generator | None", None, "torch's: the generator a shuffle without seed draws its "
            "seed from", check=lambda value, name: generator_option(value)),
    _loader("prefetch_factor", "int | None", None, "torch's: batches in flight per worker"),
    _loader("persistent_workers", "bool", False, "torch's: keep worker processes between epochs"),
    _loader("pin_memory_device", "str", "", "torch's: the device pinned memory is for"),
    _loader("in_order", "bool", True, "torch's: batches in sampler order (False: as workers finish them)"),
)

OPTIONS: tuple[Option, ...] = VIEW_OPTIONS + SAMPLER_OPTIONS + LOADER_OPTIONS + HINDSIGHT_OPTIONS


def options_of(entry: str) -> tuple[Option, ...]:
    """The options an entry point's signature names, in table order (a name the table declares twice, e.g.
    ``prefetch``, once: the one this entry takes)."""
    return tuple(option for option in OPTIONS if entry in option.entries)


def _by_name() -> MappingProxyType:
    table: dict[str, dict[str, Option]] = {}
    for entry in ENTRIES:
        for option in options_of(entry):
            if option.name in table.setdefault(entry, {}):
                raise RuntimeError(f"the option table declares {option.name!r} twice for {entry}")
            table[entry][option.name] = option
    return MappingProxyType({entry: MappingProxyType(options) for entry, options in table.items()})


BY_NAME = _by_name()  # entry -> name -> Option
