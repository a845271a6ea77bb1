"""Writes the typed entry points from the option table: ``python -m memmap_replay.reading.generate``.

Each entry point's signature names every option the table (``reading/table.py``) declares for it, with
its type and default, and its docstring documents each (numpydoc). Two modules are written:
``reading/entries.py`` (the mixins of ``ReplayBuffer``, ``ShardSet`` and ``ConcatReplayBuffer``) and
``samplers/loader_entry.py`` (``sampler.dataloader`` of every sampler and of the rate-limited sampler: the
samplers room imports nothing above it, and the rate limiter's imports no torch, so those mixins are
written there). ``tests/reading/test_generate.py`` fails when
either is not what this writes; edit the table, then run this.
"""

from __future__ import annotations

import re
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

from .table import DATALOADER, DATASET, SAMPLER, SAMPLER_LOADER, Option, options_of

__all__ = ["Method", "MODULES", "render", "main"]

PACKAGE = Path(__file__).resolve().parent.parent
_WIDTH = 120


@dataclass(frozen=True)
class Method:
    """One generated method: ``name(self, <leading>, *, <the entry's options>) -> returns``, whose body
    is ``body`` (``{options}``: the options given, a dict of name -> value)."""

    name: str
    entry: str
    leading: tuple[tuple[str, str, str], ...]  # (parameter, annotation, default or "") before the options
    returns: str
    summary: str
    body: str
    example: str = ""
    leading_docs: tuple[str, ...] = ()
    defaults: dict = field(default_factory=dict)  # this method's own default of an option, where it differs


@dataclass(frozen=True)
class Mixin:
    """A generated class: ``methods``, for the facade ``where`` (named in errors) that provides the hooks
    their bodies call (``_read_<what>`` or ``_sampler_dataloader``)."""

    name: str
    doc: str
    methods: tuple[Method, ...]
    where: str


@dataclass(frozen=True)
class Module:
    """A generated module: its docstring's first paragraph, imports (and those only a type checker reads),
    and its mixins."""

    doc: str
    imports: str
    checking: str
    mixins: tuple[Mixin, ...]


def _read(what: str, lead: str, where: str) -> str:
    """A facade method's body: compose the plan of its options, then build it (``_read_<what>``)."""
    lead = f"{lead}, " if lead else ""
    return f"return self._read_{what}({lead}compose({{entry!r}}, options, where={where!r}))"


_EXAMPLE_STORE = '''>>> import numpy as np, tempfile
>>> from memmap_replay import ReplayBuffer
>>> buffer = ReplayBuffer(tempfile.mkdtemp(), max_episodes=10, max_timesteps=20,
...                       fields={"obs": ("float", 3), "action": "int", "reward": "float"})
>>> with buffer.one_episode():
...     for t in range(8):
...         buffer.store(obs=np.full(3, t), action=t % 2, reward=1.0)
'''

_VIEW_SUMMARY = ("The view (a torch Dataset) over the live episodes that the switches choose: ``n_steps`` -> n-step "
                 "transitions, ``transitions=True`` -> one-step transitions, ``hindsight=`` -> relabelled one-step "
                 "transitions, ``timestep_level=True`` -> single steps, ``window=`` -> windows, else whole "
                 "trajectories. Reading never writes to the store.")
_LOADER_SUMMARY = ("A DataLoader over ``dataset(...)`` (or the ``dataset=`` given) that gathers each batch with one "
                   "call per field, in this process or in ``num_workers`` threads or processes.")
_SAMPLER_SUMMARY = ("A sampler over a view: ``kind`` is 'uniform', 'prioritized' or 'sequence' (prioritized windows; "
                    "needs ``window=``). The view options build its view (default: single timesteps). On a read-only "
                    "store a prioritized sampler starts from the priorities stored under its ``name`` and keeps its "
                    "updates in memory.")
_SAMPLER_LOADER_SUMMARY = ("A DataLoader over this sampler's view whose batches the sampler draws, in the main "
                           "process; DataLoader workers only gather them.")

_BATCH = ("batch_size", "int", "")
_BATCH_DOC = "batch_size : int\n    Items per batch."
_KIND = ("kind", "str", '"uniform"')
_KIND_DOC = "kind : str, default 'uniform'\n    'uniform', 'prioritized' or 'sequence'."
_NUM = ("num_batches", "int | None", "None")
_NUM_DOC = ("num_batches : int | None, default None\n    Batches per epoch (None: endless, or one epoch without "
            "replacement).")

BUFFER = Mixin("BufferReads", "``ReplayBuffer``'s reads: ``dataset``, ``dataloader`` and ``sampler``.", (
    Method("dataset", DATASET, (), "StoreView", _VIEW_SUMMARY, _read("dataset", "", "ReplayBuffer.dataset"),
           _EXAMPLE_STORE + ">>> steps = buffer.dataset(timestep_level=True)\n>>> len(steps), steps[0][\"obs\"]"
           ".tolist()\n(8, [0.0, 0.0, 0.0])\n"),
    Method("dataloader", DATALOADER, (_BATCH,), "ReplayDataLoader", _LOADER_SUMMARY,
           _read("dataloader", "batch_size", "ReplayBuffer.dataloader"),
           _EXAMPLE_STORE + ">>> loader = buffer.dataloader(4, window=3, shuffle=True, seed=0)\n"
           ">>> [batch[\"obs\"].shape for batch in loader]\n[torch.Size([4, 3, 3]), torch.Size([2, 3, 3])]\n",
           (_BATCH_DOC,)),
    Method("sampler", SAMPLER, (_KIND,), "ReplaySampler", _SAMPLER_SUMMARY,
           _read("sampler", "kind", "ReplayBuffer.sampler"),
           _EXAMPLE_STORE + ">>> sampler = buffer.sampler(\"prioritized\", n_steps=3, gamma=0.99, seed=0)\n"
           ">>> batch = sampler.batch(5)\n>>> sorted(name for name in batch if name.startswith(\"_\"))\n"
           "['_key', '_weight']\n>>> sampler.update_priorities(batch[\"_key\"], np.ones(5))\n5\n",
           (_KIND_DOC,)),
), where="ReplayBuffer")

SHARDS = Mixin("ShardReads", "``ShardSet``'s reads: the shards as one store.", (
    Method("dataset", DATASET, (), "BatchDataset", "The shards' views one after the other (a ``ConcatView``); "
           "``transform`` applies to the batches it gathers across shards.",
           _read("dataset", "", "ShardSet.dataset")),
    Method("dataloader", DATALOADER, (_BATCH,), "ReplayDataLoader", "A DataLoader over ``dataset(...)`` across the "
           "shards.", _read("dataloader", "batch_size", "ShardSet.dataloader"),
           leading_docs=(_BATCH_DOC,)),
    Method("sampler", SAMPLER, (_KIND,), "SamplerBase", "A sampler (a ``ShardedSampler``) across the shards, drawn "
           "from as one store: with replacement (for epochs, ``ShardSet.dataloader``: ``replacement=False`` and "
           "``order`` are refused), following each shard's writer at each draw (``follow`` True or False), "
           "priorities in memory (``persist`` is not used).",
           _read("sampler", "kind", "ShardSet.sampler"),
           leading_docs=(_KIND_DOC,)),
), where="ShardSet")

CONCAT = Mixin("ConcatReads", "``ConcatReplayBuffer``'s reads: memmap-replay-buffer's names over several folders.", (
    Method("dataset", DATASET, (), "BatchDataset", "memmap-replay-buffer's ``dataset(...)`` of every folder holding "
           "episodes, one after the other.",
           _read("dataset", "", "ConcatReplayBuffer.dataset")),
    Method("dataloader", DATALOADER, (_BATCH,), "ReplayDataLoader", "A DataLoader over ``dataset(...)`` (or the "
           "``dataset`` given) across the folders.",
           _read("dataloader", "batch_size", "ConcatReplayBuffer.dataloader"),
           leading_docs=(_BATCH_DOC,)),
), where="ConcatReplayBuffer")

_LOADER_BODY = "return self._sampler_dataloader(batch_size, num_batches, not_at_defaults(options, self._DEFAULTS))"

SAMPLER_LOADER_MIXIN = Mixin("SamplerLoader", "``sampler.dataloader(...)`` of every sampler.", (
    Method("dataloader", SAMPLER_LOADER, (_BATCH, _NUM), "Any", _SAMPLER_LOADER_SUMMARY, _LOADER_BODY,
           leading_docs=(_BATCH_DOC, _NUM_DOC)),
), where="sampler")

LIMITED = Mixin("LimitedLoader", "A rate-limited sampler's ``dataloader``: every batch waits for the limiter.", (
    Method("dataloader", SAMPLER_LOADER, (_BATCH, _NUM), "Any", "A DataLoader over the sampler's view "
           "whose every batch waits for the limiter, as ``batches()`` does. It takes no batch ahead by default "
           "(``prefetch=0``): a batch drawn early would ask the limiter early.", _LOADER_BODY,
           leading_docs=(_BATCH_DOC, _NUM_DOC), defaults={"prefetch": 0}),
), where="a rate-limited sampler")

_HEADER = '''"""{doc}

Generated by ``python -m memmap_replay.reading.generate`` from the option table (``reading/table.py``): do
not edit; edit the table and run it again (``tests/reading/test_generate.py`` checks that this is current).
"""

# fmt: off
from __future__ import annotations

from typing import {typing}

{imports}

if TYPE_CHECKING:
    import torch
{checking}
__all__ = {names!r}
'''

MODULES = {
    "reading/entries.py": Module(
        doc="The typed read entry points of the facades: mixins whose methods compose a plan and build it.",
        imports="from ..core.options import keyword_errors",
        checking="".join(f"    from ..{module} import {names}\n" for module, names in (
            ("samplers.base", "ReplaySampler, SamplerBase"), ("views.batch", "BatchDataset"),
            ("views.dataset", "StoreView"), ("views.loader", "ReplayDataLoader"))),
        mixins=(BUFFER, SHARDS, CONCAT)),
    "samplers/loader_entry.py": Module(
        doc="``sampler.dataloader(...)``, typed: the loader options of the option table (``reading/table.py``). "
            "Numpy only (the rate limiter's room imports it without torch).",
        imports="from ..core.options import keyword_errors, not_at_defaults",
        checking="", mixins=(SAMPLER_LOADER_MIXIN, LIMITED)),
}


def _default_text(value: object) -> str:
    return repr(value)


def _parameter(option: Option, default: object) -> str:
    return f"{option.name}: {option.annotation} = {_default_text(default)}"


def _doc_entry(option: Option, default: object) -> str:
    text = option.doc
    if option.renamed:
        text = f"Deprecated: {text}; use ``{option.renamed}``."
    body = textwrap.fill(text.rstrip(".") + ".", _WIDTH - 12)
    return f"{option.name} : {option.annotation}, default {_default_text(default)}\n" + textwrap.indent(body, "    ")


def _method(method: Method, where: str) -> str:
    options = options_of(method.entry)
    defaults = {option.name: method.defaults.get(option.name, option.default) for option in options}
    leading = [f"{name}: {annotation}" + (f" = {default}" if default else "") for name, annotation, default in
               method.leading]
    parameters = ["self", *leading, "*", *(_parameter(option, defaults[option.name]) for option in options)]
    lines = [f"    @keyword_errors({where!r})", f"    def {method.name}("]
    lines += [f"        {parameter}," for parameter in parameters]
    lines.append(f"    ) -> {method.returns}:")
    doc = [*textwrap.wrap(method.summary, _WIDTH - 12), "", "Parameters", "----------", *method.leading_docs]
    doc += [_doc_entry(option, defaults[option.name]) for option in options]
    doc += ["", "Returns", "-------", method.returns]
    if method.example:
        doc += ["", "Examples", "--------", method.example.rstrip("\n")]
    text = "\n".join(doc).replace("\\", "\\\\")
    lines.append('        """' + textwrap.indent(text, "        ").lstrip() + '\n        """')
    lines.append("        options = {")
    line = ""
    for pair in (f"{option.name!r}: {option.name}," for option in options):
        if line and len(line) + 1 + len(pair) > _WIDTH - 12:
            lines.append(" " * 12 + line)
            line = ""
        line = f"{line} {pair}" if line else pair
    lines.append(" " * 12 + line)
    lines.append("        }")
    if "compose(" in method.body:  # (imported here: importing the facades imports no torch)
        lines.append("        from .plan import compose\n")
    lines.append("        " + method.body.replace("{entry!r}", repr(method.entry)))
    return "\n".join(lines)


def _defaults(mixin: Mixin) -> str:
    """The module's ``_DEFAULTS`` (each option's default in the signature of the mixin's methods)."""
    values: dict[str, object] = {}  # (the table's: a method's own default is passed on as a value)
    for method in mixin.methods:
        for option in options_of(method.entry):
            values[option.name] = option.default
    return "{\n" + "".join(f"        {name!r}: {value!r},\n" for name, value in values.items()) + "    }"


def render(path: str) -> str:
    """The text of one generated module (``MODULES``' key)."""
    spec = MODULES[path]
    names = [mixin.name for mixin in spec.mixins]
    annotations = " ".join(option.annotation for mixin in spec.mixins for method in mixin.methods
                           for option in options_of(method.entry)) + " ".join(
        annotation for mixin in spec.mixins for method in mixin.methods for _, annotation, _ in method.leading)
    typing = ", ".join(["TYPE_CHECKING", *(name for name in ("Any", "Callable", "Mapping", "Sequence")
                                           if name in annotations + " Any")])
    doc = "\n".join(textwrap.wrap(spec.doc, _WIDTH - 4))
    parts = [_HEADER.format(doc=doc, imports=spec.imports, checking=spec.checking, names=names, typing=typing)]
    for mixin in spec.mixins:
        body = [f"\n\nclass {mixin.name}:", f'    """{mixin.doc}"""', ""]
        if any(method.body == _LOADER_BODY for method in mixin.methods):
            body += [f"    _DEFAULTS = {_defaults(mixin)}", ""]
        hooks = sorted({hook for method in mixin.methods for hook in re.findall(r"self\.(_\w+)\(", method.body)})
        body += ["    if TYPE_CHECKING:  # (the facade provides these)"]
        body += [f"        def {hook}(self, *args: Any) -> Any: ..." for hook in hooks] + [""]
        body.append("\n\n".join(_method(method, f"{mixin.where}.{method.name}") for method in mixin.methods))
        parts.append("\n".join(body))
    return "".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    for path in MODULES:
        (PACKAGE / path).write_text(render(path))
        print(f"wrote memmap_replay/{path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
