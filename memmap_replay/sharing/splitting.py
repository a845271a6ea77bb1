"""``split``: one store into several new stores, by episode at given fractions (seeded) or by a meta field's
value. Numpy only; the copying, the hidden build folders and the cards are ``sharing/editing.py``'s.

The unit of a split is a whole episode: the linked segments of a long episode (``continues``) go to the same
output, together. Every live episode goes to exactly one output, in the source's order within it.

Data: an output holds a subset of the source's rows, so its files cannot be hard links of the source's. The rows of
raw fields are copied as byte ranges with ``os.copy_file_range`` (``sharing/rowcopy.py``: a reflink on btrfs/XFS, an
in-kernel copy elsewhere), a compressed field's frames without decoding; the report says for each output
``'copy_file_range'``, or ``'copied'`` when the kernel refused and the rows were read and written.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..core.options import flag
from ..core.progress import progress_bar
from ..core.store import EpisodeStore
from ..errors import OptionError, SchemaError
from .editing import EditReport, build_store, check_target, has_checksums, open_source, source_details

__all__ = ["split"]

_TOLERANCE = 1e-6  # how far the fractions' sum may be from 1


def split(folder: str | os.PathLike, into: Mapping[Any, Any] | None = None, *,
          out: str | os.PathLike | Mapping[str, str | os.PathLike], seed: int | None = None, by: str | None = None,
          progress: bool = False) -> EditReport:
    """Split a store into new stores, by episode.

    At fractions (``into={"train": 0.9, "val": 0.1}``): the episodes are shuffled with ``seed`` and dealt out,
    each output getting its fraction of them, rounded so that the counts add up to the number of episodes
    (largest remainders first). By a meta field (``by="task_id"``): one output per value (named
    ``task_id-<value>``), or ``into`` maps each value to an output name (several values may share one). The
    linked segments of a long episode stay together. Each output is built in a hidden folder beside its target
    and moved in when complete: a kill at any instant leaves each output absent or complete.

    Parameters
    ----------
    folder : str or os.PathLike
        The store to split (opened read-only; it is not changed).
    into : mapping, optional
        Output name -> fraction (positive, summing to 1), or with ``by``: meta value -> output name.
    out : str, os.PathLike or mapping
        A parent folder (each output is ``out/<name>``), or output name -> folder. Each output folder must be
        absent or empty.
    seed : int, optional
        Seeds the shuffle of a split at fractions: the same seed, the same split.
    by : str, optional
        A scalar meta field to split by instead of fractions.
    progress : bool, default False
        Draw a progress bar on stderr.

    Returns
    -------
    EditReport
        Per output: its folder, episodes, steps, and how its data came (``'copied'``).

    Examples
    --------
    >>> split("run", {"train": 0.9, "val": 0.1}, out="splits", seed=0)  # doctest: +SKIP
    """
    progress = flag(progress, "progress")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
        raise OptionError(f"seed must be an int or None (got {seed!r})")
    source = Path(folder)
    store = open_source(source)
    try:
        table = store.live_table()
        chains = _chains(store, table)
        if by is None:
            assignment = _by_fraction(into, len(chains), seed)
        else:
            assignment = _by_value(store, table, chains, by, into)
        names = list(dict.fromkeys(assignment.values())) if by is not None else list(into or {})
        targets = _targets(out, names)
        report = EditReport("split", [str(source)])
        details = source_details(source, store)
        with progress_bar(int(table.length.sum()), "split", progress) as bar:
            for name in names:
                positions = sorted(int(p) for chain, output in assignment.items() if output == name
                                   for p in chains[chain])
                info = build_store("split", targets[name], store.schema, [(store, table, positions)], room={},
                                   finish=_card(source, details, name, into, by, seed), bar=bar)
                report.fields = info.pop("fields") or report.fields
                report.outputs[name] = info
    finally:
        store.close()
    return report


def _chains(store: EpisodeStore, table: Any) -> list[list[int]]:
    """The live episodes grouped into whole episodes: the positions of each one's linked segments, in order."""
    links = store.links(table)
    chain_of: dict[int, int] = {}
    chains: list[list[int]] = []
    for position, (episode_id, link) in enumerate(zip(table.ids.tolist(), links.tolist())):
        chain = chain_of.get(link)
        if chain is None:
            chain = len(chains)
            chains.append([])
        chains[chain].append(position)
        chain_of[episode_id] = chain
    return chains


def _by_fraction(into: Any, count: int, seed: int | None) -> dict[int, str]:
    if not isinstance(into, Mapping) or not into:
        raise OptionError(f"into must map each output's name to its fraction, e.g. {{'train': 0.9, 'val': 0.1}} "
                          f"(got {into!r}); or pass by='META_FIELD' to split by a meta field's value")
    for name, fraction in into.items():
        _check_name(name)
        if isinstance(fraction, bool) or not isinstance(fraction, (int, float, np.floating, np.integer)) \
                or not 0 < fraction <= 1:
            raise OptionError(f"the fraction of output {name!r} must be a number in (0, 1] (got {fraction!r})")
    total = float(sum(into.values()))
    if abs(total - 1) > _TOLERANCE:
        raise OptionError(f"the fractions must add up to 1 (got {total:g}: {dict(into)}); e.g. "
                          f"{{'train': 0.9, 'val': 0.1}}")
    exact = np.array([float(fraction) * count for fraction in into.values()])
    counts = np.floor(exact).astype(np.int64)
    # the rest one by one to the largest remainders (the first output first among equal ones)
    for index in np.argsort(-(exact - counts), kind="stable")[:count - int(counts.sum())]:
        counts[index] += 1
    order = np.random.default_rng(seed).permutation(count)
    names = np.repeat(np.array(list(into), dtype=object), counts)
    return {int(chain): str(name) for chain, name in zip(order.tolist(), names.tolist())}


def _by_value(store: EpisodeStore, table: Any, chains: list[list[int]], by: Any, into: Any) -> dict[int, str]:
    metas = store.schema.meta_fields
    if not isinstance(by, str) or by not in metas:
        raise OptionError(f"by must name a meta field of the store {sorted(metas)} (got {by!r})")
    if metas[by].shape != ():
        raise SchemaError(f"by={by!r} must name a meta field of one value per episode (got shape {metas[by].shape})")
    if into is not None and not isinstance(into, Mapping):
        raise OptionError(f"into must map each value of {by!r} to an output name, e.g. {{0: 'train', 1: 'val'}} "
                          f"(got {into!r}), or be left out for one output per value")
    values = store.meta_array(by)
    out = {}
    for chain, positions in enumerate(chains):
        value = values[int(table.slots[positions[0]])].item()
        if into is None:
            out[chain] = _check_name(f"{by}-{value}")
            continue
        name = into.get(value, into.get(str(value)))
        if name is None:
            raise OptionError(f"into must name an output for every value of {by!r} in the store; {value!r} has none "
                              f"(into: {dict(into)}); add it, e.g. into[{value!r}] = 'other'")
        out[chain] = _check_name(name)
    return out


def _check_name(name: Any) -> str:
    if not isinstance(name, str) or not name or name.startswith(".") or "/" in name or os.sep in name:
        raise OptionError(f"an output name must be a plain folder name such as 'train' (got {name!r})")
    return name


def _targets(out: Any, names: list[str]) -> dict[str, Path]:
    if isinstance(out, Mapping):
        missing = [name for name in names if name not in out]
        if missing:
            raise OptionError(f"out must give a folder for every output {names} (missing {missing}), or be one parent "
                              f"folder for all of them")
        targets = {name: Path(out[name]) for name in names}
    elif isinstance(out, (str, os.PathLike)):
        targets = {name: Path(out) / name for name in names}
    else:
        raise OptionError(f"out must be a parent folder or a mapping output name -> folder (got {out!r})")
    for name, target in targets.items():
        check_target(target, f"the output {name!r}")
    return targets


def _card(source: Path, details: dict, name: str, into: Any, by: Any, seed: Any):
    def finish(tmp: Path) -> None:
        from .card import add_provenance, read_card, write_card
        from .checksums import write_manifest

        card = read_card(source)
        if card is not None:
            write_card(tmp, card)
        how = {"by": by} if by is not None else {"fraction": float(into[name]), "seed": seed}
        add_provenance(tmp, "split", str(source), split=name, source_store=details, **how)
        if has_checksums([source]):
            write_manifest(tmp)

    return finish
