"""The reference's "Read options" page, rendered from the option table (the docs site's hook writes it)."""

from __future__ import annotations

from .table import DATALOADER, DATASET, ENTRIES, HINDSIGHT, OPTIONS, SAMPLER, SAMPLER_LOADER, Option

__all__ = ["options_markdown"]

_CALLS = {DATASET: "dataset", DATALOADER: "dataloader", SAMPLER: "sampler", SAMPLER_LOADER: "sampler.dataloader"}
_OWNERS = (("view", "View options", "They go to the view, the torch Dataset that gathers each batch with one call per "
            "field. The switches `n_steps`, `timestep_level`, `window`, `transitions` and `hindsight` choose its kind "
            "(none of them: whole trajectories); an option of another kind is refused with the list of those this "
            "kind takes."),
           ("sampler", "Sampler options", "They shape which items come in which order: a sampler's draws "
            "(`buffer.sampler(...)`), or a DataLoader's batch sampler (`shuffle`, `drop_last`, `seed`, "
            "`block_size`, `block_window`)."),
           ("loader", "Loader options", "They go to the DataLoader: its workers, the device, the batch's type. The "
            "last ones are torch's own, passed on as they are."))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _row(option: Option) -> str:
    takes = ", ".join(f"`{_CALLS[entry]}`" for entry in ENTRIES if entry in option.entries)
    kinds = ", ".join(option.kinds) if option.kinds else "all"
    doc = option.doc[0].upper() + option.doc[1:]
    if option.renamed:
        doc = f"**Deprecated**: {doc}; use `{option.renamed}`"
    return (f"| `{option.name}` | `{_cell(option.annotation)}` | `{option.default!r}` | {_cell(doc)} | {takes} | "
            f"{kinds} |")


def options_markdown() -> str:
    """The page: one table per owner, each option's type, default, meaning, the entry points that take it
    and the view or sampler kinds it applies to."""
    lines = ["# Read options", "",
             "Every option of `ReplayBuffer.dataset`, `.dataloader` and `.sampler` (and of the same methods of "
             "`ShardSet` and `ConcatReplayBuffer`, and of `sampler.dataloader`), generated from the option table "
             "`memmap_replay/reading/table.py`: the signatures of those methods are generated from the same table, "
             "so this page and `help()` say the same.", ""]
    for owner, title, text in _OWNERS:
        lines += [f"## {title}", "", text, "", "| option | type | default | what it does | taken by | kinds |",
                  "|---|---|---|---|---|---|"]
        lines += [_row(option) for option in OPTIONS if option.owner == owner and option.route != HINDSIGHT]
        lines.append("")
    lines += ["## Hindsight options", "", "The keys of `hindsight=dict(...)` (one-step transitions with hindsight goal "
              "relabelling).", "", "| key | type | default | what it does |", "|---|---|---|---|"]
    lines += [f"| `{o.name}` | `{_cell(o.annotation)}` | `{o.default!r}` | "
              f"{_cell(('**Deprecated**: ' if o.renamed else '') + o.doc)} |" for o in OPTIONS if o.route == HINDSIGHT]
    return "\n".join(lines) + "\n"
