"""The option table (memmap_replay/reading/table.py) holds the read surface together: every entry point's
signature names exactly the table's options for it, with their types and defaults, and no **kwargs; each view
option is taken by the view kinds the table says, each sampler option by the sampler kinds, and each of torch's
loader options is DataLoader's own."""

from __future__ import annotations

import inspect

import pytest
from torch.utils.data import DataLoader

from memmap_replay import ConcatReplayBuffer, LimitedSampler, ReplayBuffer, ShardSet
from memmap_replay.reading.build import VIEW_CLASSES
from memmap_replay.reading.table import (BY_NAME, DATALOADER, DATASET, ENTRIES, HINDSIGHT, OPTIONS, SAMPLER,
                                         SAMPLER_KINDS, SAMPLER_LOADER, VIEW_KINDS, options_of)
from memmap_replay.samplers import SAMPLERS
from memmap_replay.samplers.base import SamplerBase
from memmap_replay.views.dataset import StoreView
from memmap_replay.views.loader import ReplayDataLoader

# every typed entry point: (the function, the table's entry, the parameters before the options, its own defaults)
ENTRY_POINTS = [
    (ReplayBuffer.dataset, DATASET, [], {}),
    (ReplayBuffer.dataloader, DATALOADER, ["batch_size"], {}),
    (ReplayBuffer.sampler, SAMPLER, ["kind"], {}),
    (ShardSet.dataset, DATASET, [], {}),
    (ShardSet.dataloader, DATALOADER, ["batch_size"], {}),
    (ShardSet.sampler, SAMPLER, ["kind"], {}),
    (ConcatReplayBuffer.dataset, DATASET, [], {}),
    (ConcatReplayBuffer.dataloader, DATALOADER, ["batch_size"], {}),
    (SamplerBase.dataloader, SAMPLER_LOADER, ["batch_size", "num_batches"], {}),
    (LimitedSampler.dataloader, SAMPLER_LOADER, ["batch_size", "num_batches"], {"prefetch": 0}),
]
# options only the entry point handles (the switches choose the view; the rest are memmap-replay-buffer's or
# torch's spellings, or decide whether an empty view is an error)
ENTRY_ONLY = {"n_steps", "timestep_level", "window", "transitions", "hindsight", "include_metadata", "allow_empty",
              "collate_fn", "view"}


@pytest.mark.parametrize("function, entry, leading, defaults", ENTRY_POINTS,
                         ids=[function.__qualname__ for function, *_ in ENTRY_POINTS])
def test_a_signature_names_every_option_of_its_entry_with_the_tables_type_and_default(function, entry, leading,
                                                                                        defaults):
    parameters = list(inspect.signature(function).parameters.values())
    assert not [p.name for p in parameters if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    assert [p.name for p in parameters[1:len(leading) + 1]] == leading
    options = [p for p in parameters if p.kind is p.KEYWORD_ONLY]
    assert [p.name for p in options] == [option.name for option in options_of(entry)]
    for parameter, option in zip(options, options_of(entry)):
        assert parameter.annotation == option.annotation, option.name
        assert parameter.default == defaults.get(option.name, option.default), option.name
    documented = inspect.getdoc(function)
    assert all(f"\n{option.name} : {option.annotation}, default" in documented for option in options_of(entry))


def test_every_option_says_what_it_does_and_where_it_goes():
    for option in OPTIONS:
        assert option.owner in ("view", "sampler", "loader"), option
        assert option.doc and option.doc[0].islower() and not option.doc.endswith("."), option.name
        assert option.entries or option.route == HINDSIGHT, option.name
        assert set(option.entries) <= set(ENTRIES) and option.route in ("keyword", HINDSIGHT)
        kinds = VIEW_KINDS if option.owner == "view" else SAMPLER_KINDS
        assert set(option.kinds) <= set(kinds), option.name
        if option.renamed:
            assert option.renamed in BY_NAME[option.entries[0]] if option.entries else option.route == HINDSIGHT


def _keywords(cls: type, base: type) -> set[str]:
    """The keyword-only parameters of every ``__init__`` from ``cls`` up to ``base``."""
    found = set()
    for klass in cls.__mro__:
        init = vars(klass).get("__init__")
        if issubclass(klass, base) and init is not None:
            found |= {name for name, p in inspect.signature(init).parameters.items() if p.kind is p.KEYWORD_ONLY}
    return found


@pytest.mark.parametrize("kind", VIEW_KINDS)
def test_the_view_kinds_the_table_names_take_exactly_those_options(kind):
    cls = VIEW_CLASSES[kind]
    declared = {option.name for option in OPTIONS if option.owner == "view" and option.route != HINDSIGHT
                and (not option.kinds or kind in option.kinds)} - ENTRY_ONLY
    if kind == "hindsight":
        declared |= {option.name for option in OPTIONS if option.route == HINDSIGHT and not option.renamed}
    taken = _keywords(cls, StoreView) - set(cls.refused_options) - {"seed"}  # (HindsightView's old spelling)
    if kind == "window":
        declared.discard("return_mask")  # (the entry drops it: partial windows always carry their mask)
    assert declared == taken - (ENTRY_ONLY - declared)


@pytest.mark.parametrize("kind", SAMPLER_KINDS)
def test_the_sampler_kinds_the_table_names_take_exactly_those_options(kind):
    declared = {option.name for option in OPTIONS if option.owner == "sampler" and SAMPLER in option.entries
                and (not option.kinds or kind in option.kinds)}
    assert declared == _keywords(SAMPLERS[kind], SamplerBase)


def test_the_loader_options_are_the_loaders_and_torchs_own():
    own = set(inspect.signature(ReplayDataLoader.__init__).parameters) | set(inspect.signature(
        DataLoader.__init__).parameters)
    loader = {option.name for option in OPTIONS if option.owner == "loader"} - {"dataset", "dataset_kwargs"}
    assert loader <= own, loader - own
    torchs = {option.name for option in OPTIONS if option.doc.startswith("torch's:")}
    assert torchs <= set(inspect.signature(DataLoader.__init__).parameters)


def test_a_word_has_one_meaning_per_entry_point():
    for entry in ENTRIES:
        names = [option.name for option in options_of(entry)]
        assert len(names) == len(set(names)), entry


def _defaults(cls: type) -> dict:
    """Every parameter default along ``cls``'s ``__init__`` chain (the nearest class's wins)."""
    found: dict = {}
    for klass in reversed(cls.__mro__):
        init = vars(klass).get("__init__")
        if init is not None and klass is not object:
            found.update({name: p.default for name, p in inspect.signature(init).parameters.items()
                          if p.default is not p.empty})
    return found


def test_the_tables_defaults_are_the_defaults_of_what_takes_each_option():
    # (an option at its table default is left out of a plan: the class's own default must then be the same)
    from memmap_replay.views.batches import BatchIndexSampler

    takers = [(cls, "view", kind) for kind, cls in VIEW_CLASSES.items()]
    takers += [(cls, "sampler", kind) for kind, cls in SAMPLERS.items()]
    takers += [(ReplayDataLoader, "loader", None), (DataLoader, "loader", None), (BatchIndexSampler, "sampler", None)]
    for cls, owner, kind in takers:
        defaults = _defaults(cls)
        for option in OPTIONS:
            if option.owner == owner and option.name in defaults and option.route != HINDSIGHT and \
                    (kind is None or not option.kinds or kind in option.kinds) and option.name not in ENTRY_ONLY:
                assert defaults[option.name] == option.default, (cls.__name__, option.name)
    hindsight = _defaults(VIEW_CLASSES["hindsight"])
    for option in OPTIONS:
        if option.route == HINDSIGHT and not option.renamed and option.default is not None:
            assert hindsight[option.name] == option.default, option.name
