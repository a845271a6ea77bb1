"""memmap-replay-buffer 0.2.x buffers -> stores, value for value (export back: ``mrb_export``).

``import_memmap_replay_buffer(source, folder)`` reads a folder its ``ReplayBuffer`` wrote (``metadata.pkl``
and one ``.npy`` per field), or the ``data.h5`` its ``ReplayBufferH5PY`` wrote (alone, or its folder), as a
stranger's folder (see ``mrb_source``: the pickled config is read without running anything).

Which episodes: the ``num_episodes`` committed ones (``advance_episode``, the end of ``one_episode`` /
``batched_episode`` / ``store_episode``), oldest first: the slots ``episode_index - num_episodes ..
episode_index - 1`` (mod ``max_episodes``), which is how its ring turns. Then:

- the *open* episode (steps stored in the slot ``episode_index`` with no ``advance_episode`` after them,
  ``timestep_index`` > 0) is not committed: it is left out (``open_episode='skip'``, the default; the report
  says how many steps), or stored as the newest episode, with no end recorded (``open_episode='keep'``);
- in a full buffer, the oldest slot is the one the open episode writes into: once 0.2.x has started the
  open episode there (its ``_initted`` flag is set), the old episode is partly overwritten, and it is left
  out (counted in the report);
- a committed episode of 0 steps is left out (0.2.x's datasets skip them too).

0.2.x's state holds no batch size: a *batch* of episodes left open by ``store_batch`` (no
``advance_episode``) is seen as one open episode, in the slot ``episode_index``; in a full ring the slots
after it, which that batch also started overwriting, cannot be told from intact ones and are imported.

Fields and meta fields keep their names, dtypes (int32, float32, bool, uint8), shapes and defaults (a
default this library refuses, such as inf, is dropped with a note); 0.2.x's own ``episode_lens`` and
``_initted`` become the store's episode table. Episodes have no end code (0.2.x records none). The new store
has the source's ``max_episodes``, ``max_timesteps`` and ``circular`` unless given (``max_steps``: as
``ReplayBuffer.grow`` sets it), so that it keeps taking episodes as the old buffer did; its card records
the source, the config and what was left out. Memory: one episode slot at a time, plus up to 64 MB of
episodes waiting to commit; the episode table is read a block at a time, and the rows it claims must be
held by the files (a sparse .npy's holes and an HDF5 file's unwritten chunks hold nothing; 256 MB of slack,
and a compressed dataset's best ratio, are allowed), so a small hostile folder cannot claim gigabytes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..core.schema import parse_field
from ..errors import CorruptStoreError, OptionError, SchemaError
from .common import StoreBuilder, Transfer, check_room, progress_bar
from .mrb_source import CONFIG_FILE, STATE, is_mrb_path, open_source

__all__ = ["import_memmap_replay_buffer", "is_mrb_source", "OPEN_EPISODE", "CONFIG_FILE"]

OPEN_EPISODE = ("skip", "keep")
KIND = "memmap-replay-buffer"


def import_memmap_replay_buffer(source: str | os.PathLike, folder: str | os.PathLike, *, open_episode: str = "skip",
                                overwrite: bool = False, progress: bool = False, max_episodes: int | None = None,
                                max_steps: int | None = None, max_timesteps: int | None = None,
                                circular: bool | None = None) -> Transfer:
    """The memmap-replay-buffer 0.2.x buffer at ``source`` (its folder, or its data.h5) as a new store at
    ``folder``; see the module docstring. ``open_episode``: 'skip' or 'keep' the episode left open.
    ``max_episodes``/``max_steps``/``max_timesteps``/``circular``: the new store's room (None: as the source)."""
    if open_episode not in OPEN_EPISODE:
        raise OptionError(f"open_episode must be one of {OPEN_EPISODE} (got {open_episode!r})")
    room: dict[str, Any] = dict(max_episodes=max_episodes, max_steps=max_steps, max_timesteps=max_timesteps,
                                circular=circular)
    check_room(room, episodes=0, max_timesteps=0, rows=0)  # the types, before reading anything
    reader = open_source(source)
    try:
        config, notes = reader.config, list(reader.notes)
        episodes, details = _episodes(reader, open_episode, notes)
        room = {"max_episodes": config.max_episodes, "max_timesteps": config.max_timesteps,
                "circular": config.circular, **{key: value for key, value in room.items() if value is not None}}
        room.setdefault("max_steps", room["max_episodes"] * (room["max_timesteps"] + 1))  # ReplayBuffer's default
        fields = _specs(config.fields, "field", notes)
        metas = _specs(config.meta_fields, "meta field", notes)
        episodes.check_claims(fields, metas)
        report = Transfer(f"import {KIND}", str(source), str(folder), fields={
            **{name: _described("step field", spec) for name, spec in fields.items()},
            **{name: _described("episode meta", spec) for name, spec in metas.items()}})
        with StoreBuilder(folder, fields, metas, episodes=episodes.episodes, max_timesteps=episodes.longest,
                          rows=episodes.rows, overwrite=overwrite, room=room) as builder, \
                progress_bar(episodes.rows, "import", progress) as bar:
            for slot, length in episodes:
                where = f"{reader.path}: the episode in slot {slot}"
                steps = {name: reader.steps(name, slot, length) for name in fields}
                meta = {name: reader.meta(name, slot) for name in metas}
                builder.add(steps, meta, end=None, final=None, where=where)
                bar.update(length)
            report.episodes, report.steps, report.nbytes = builder.episodes, builder.steps, builder.nbytes
            config_json = {"max_episodes": config.max_episodes, "max_timesteps": config.max_timesteps,
                           "circular": config.circular, "fields": {n: config.forms[n] for n in config.fields},
                           "meta_fields": {n: config.forms[n] for n in config.meta_fields}, **config.extra}
            if config.left_out:
                notes.append(f"config keys {config.left_out} were not kept in the card (not plain scalars)")
            card = {"extra": {KIND: {"config": config_json}}}
            builder.finish(card, KIND, str(source), {"layout": reader.kind, **details, "episodes": report.episodes,
                                                     "steps": report.steps, "notes": notes})
        report.notes = notes
        return report
    finally:
        reader.close()


def _described(kind: str, spec: tuple) -> str:
    dtype, shape, default = spec
    return f"{kind}, {dtype} {shape}" + ("" if default is None else f", default {default!r}")


def _specs(specs: dict, kind: str, notes: list[str]) -> dict[str, tuple]:
    """name -> (dtype, shape, default) for the store; a default the store refuses is dropped with a note."""
    out = {}
    for name, spec in specs.items():
        if 0 in spec.shape:
            group = "meta_fields" if "meta" in kind else "fields"
            raise SchemaError(f"the {kind} {name!r} has shape {spec.shape} in {CONFIG_FILE}, which holds no value "
                              f"(0.2.3 took it); a store's field needs at least one value a row. To import, drop the "
                              f"field: it holds nothing (load {CONFIG_FILE} with pickle, del "
                              f"config[{group!r}][{name!r}], save it again), or give it a size in memmap-replay-buffer "
                              f"and store its values")
        default = spec.default
        try:
            parse_field(name, (spec.dtype.name, spec.shape, default), kind="meta field" if "meta" in kind else "field")
        except SchemaError as error:
            if default is None:
                raise
            notes.append(f"the {kind} {name!r} lost its default {default!r}, which a store cannot keep ({error})")
            default = None
        out[name] = (spec.dtype.name, spec.shape, default)
    return out


_BLOCK = 1 << 20  # episode-table entries read at once
_SLACK = 256 << 20  # bytes a field may claim beyond what its file really holds (sparse copies of real zeros)


class _Plan:
    """The episodes to import, (slot, length) oldest first, read from the episode table a block at a time
    (its size comes from a stranger's config: it is never read whole)."""

    def __init__(self, reader, first: int, count: int, skip: int | None, open_episode: tuple[int, int] | None):
        self.reader, self.first, self.count, self.skip, self.open_episode = reader, first, count, skip, open_episode
        self.episodes = self.rows = self.empty = 0
        self.longest = 1
        for _, lens in self._blocks():
            self.empty += int((lens == 0).sum())
            self.episodes += int((lens > 0).sum())
            self.rows += int(lens.sum())
            self.longest = max(self.longest, int(lens.max(initial=0)))
        if open_episode:
            self.episodes, self.rows = self.episodes + 1, self.rows + open_episode[1]
            self.longest = max(self.longest, open_episode[1])

    def _blocks(self):
        n, done = self.reader.config.max_episodes, 0
        while done < self.count:
            start = (self.first + done) % n
            take = min(_BLOCK, self.count - done, n - start)
            slots = start + np.arange(take)
            lens = self.reader.table("episode_lens", start, take).astype(np.int64)
            keep = slots != self.skip
            yield slots[keep], lens[keep]
            done += take

    def __iter__(self):
        for slots, lens in self._blocks():
            for slot, length in zip(slots.tolist(), lens.tolist()):
                if length > 0:
                    yield slot, length
        if self.open_episode:
            yield self.open_episode

    def check_claims(self, fields: dict, metas: dict) -> None:
        """Each field's file must really hold (up to a compression ratio, and ``_SLACK``) the bytes the
        episode table claims of it: 6 KB of config and table must not make the import allocate gigabytes."""
        reader = self.reader
        for specs, rows in ((reader.config.fields, self.rows), (reader.config.meta_fields, self.episodes)):
            for name, spec in specs.items():
                if name not in fields and name not in metas:
                    continue
                claimed = rows * spec.row_nbytes
                held, ratio = reader.allocated(name)
                if claimed > held * ratio + _SLACK:
                    copied = (" If the folder was copied in a way that turns zeros into holes (cp --sparse=always, "
                              "rsync -S), copy it again without (cp --sparse=never); otherwise"
                              if reader.kind == "folder"
                              else " Otherwise")
                    where = (reader.files[name].path if reader.kind == "folder"
                             else f"{reader.path} ({reader.sets[name].name})")
                    raise CorruptStoreError(
                        f"{where}: the episode table claims {claimed} bytes of {name!r} ({rows} rows), but its "
                        f"{'file' if reader.kind == 'folder' else 'dataset'} holds only {held} bytes on disk: those "
                        f"rows must have been written, and were not.{copied} the file was altered and cannot be "
                        f"imported; import a copy that holds the rows")


def _episodes(reader, open_episode: str, notes: list[str]) -> tuple[_Plan, dict[str, Any]]:
    """The episodes to import, oldest first, and what the provenance records of the choice."""
    config, state = reader.config, reader.state
    n = config.max_episodes
    for start in range(0, n, _BLOCK):
        lens = reader.table("episode_lens", start, min(_BLOCK, n - start)).astype(np.int64)
        bad = np.flatnonzero((lens < 0) | (lens > config.max_timesteps))
        if bad.size:
            raise CorruptStoreError(f"{reader.path}: episode_lens[{start + bad[0]}] must be 0..max_timesteps "
                                    f"({config.max_timesteps}) (got {lens[bad[0]]})")
    write_slot, open_steps = state.episode_index, state.timestep_index
    details: dict[str, Any] = {"state": {name: getattr(state, name) for name in STATE}}
    skip = None
    if state.num_episodes == n and bool(reader.table("_initted", write_slot, 1)[0]):
        skip = write_slot
        details["overwritten"] = 1
        notes.append(f"slot {write_slot} held the oldest episode, and the open episode had started overwriting it: "
                     f"it was left out")
    kept = None
    if open_steps:
        details["open_episode"] = {"slot": int(write_slot), "steps": int(open_steps), "kept": open_episode == "keep"}
        if open_episode == "keep":
            kept = (int(write_slot), int(open_steps))
    plan = _Plan(reader, (state.episode_index - state.num_episodes) % n, state.num_episodes, skip, kept)
    if plan.empty:
        details["empty"] = plan.empty
        notes.append(f"{plan.empty} committed episode(s) of 0 steps were left out")
    if open_steps:
        if open_episode == "keep":
            notes.append(f"the open episode (slot {write_slot}, {open_steps} steps, never committed by "
                         f"advance_episode) was kept as the newest episode, with no end recorded")
        else:
            notes.append(f"the open episode (slot {write_slot}, {open_steps} steps, never committed by "
                         f"advance_episode) was left out; pass open_episode='keep' (on the command line: "
                         f"--open-episode keep) to keep it")
    return plan, details


def is_mrb_source(source: Any) -> bool:
    """A path the importer takes: a folder holding metadata.pkl, or an .h5/.hdf5 with metadata.pkl beside it."""
    return is_mrb_path(Path(os.fspath(source)))

