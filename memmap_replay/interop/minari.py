"""Minari datasets <-> stores, episode by episode, values exact.

Import (``import_minari``): a local dataset (an id under ``MINARI_DATASETS_PATH``, default
``~/.minari/datasets``; a dataset folder; or a ``minari.MinariDataset``; never downloaded) becomes a store:

- Minari keeps T + 1 observations per episode of T steps; the last is the store's final row
  (``final=``). Infos with T + 1 rows (what ``DataCollector(record_infos=True)`` writes: the reset info,
  then one per step) put their last row in the final row too; infos with T rows are plain step fields.
- ``terminations[-1]`` / ``truncations[-1]`` become the end code (terminated wins when both are set; the
  meta field ``also_truncated`` then records it). A flag set before the last step is refused.
- Fields are named as in ``memmap_replay.interop.common`` (``observation``, ``observation__<key>``,
  ``action``, ``reward``, ``info__<key>``). Meta fields: ``episode_id`` (Minari's id), ``seed`` and
  ``seeded`` (when some episode has a seed; a missing seed is 0 with ``seeded`` False), and every numeric
  episode attribute present in all episodes with one dtype and shape (``rewards_sum``, ``options/x`` as
  ``options__x``, ...); the others are listed in the provenance record.
- The card gets the id, description, author(s), emails, code permalink, algorithm, env spec, both spaces,
  reference scores; the rest of Minari's metadata goes to ``extra["minari"]``. Images a dataset stored
  JPEG-encoded (Minari's lossy default for image spaces) come in as Minari decodes them.

Export: ``memmap_replay.interop.minari_export`` (the same mapping backwards).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidDataError, StoreNotFoundError, UnsupportedFormatError
from .common import (ACTION, _ALSO_TRUNCATED, INFO, OBSERVATION, REWARD, SEP, StoreBuilder, Transfer, _field_name,
                     flatten, progress_bar, require, _spec_of, check_room)

__all__ = ["import_minari", "minari_root"]

_CARD_KEYS = {"description": "description", "code_permalink": "code_url", "algorithm_name": "algorithm",
             "ref_min_score": "ref_min_score", "ref_max_score": "ref_max_score",
             "num_episodes_average_score": "num_episodes_average_score"}
# what the exporter (or minari itself) writes; the rest of a card's extra["minari"] is restored on export
_COMPUTED = {"dataset_id", "minari_version", "data_format", "jpeg_encoding", "total_episodes", "total_steps",
            "dataset_size", "observation_space", "action_space", "env_spec", "author", "author_email", "memmap_replay",
            *_CARD_KEYS}
_ATTRS_KNOWN = {"id", "seed", "total_steps"}
_INT64_MAX = int(np.iinfo(np.int64).max)
DATASET_ID = re.compile(r"(?:[-_\w][-_\w/]*[-_\w]+/)?[-_\w]+?-v\d+")
_MISSING_FINAL = ("error", "repeat", "zeros")


def minari_root(datasets_path: str | os.PathLike | None = None) -> Path:
    """Where local Minari datasets live: ``datasets_path``, else $MINARI_DATASETS_PATH, else ~/.minari/datasets."""
    if datasets_path is not None:
        return Path(datasets_path)
    return Path(os.environ.get("MINARI_DATASETS_PATH") or Path.home() / ".minari" / "datasets")


def _open_dataset(dataset: Any, datasets_path: Any) -> tuple[Any, str]:
    minari = require("minari", "reading a Minari dataset")
    if isinstance(dataset, minari.MinariDataset):
        return dataset, dataset.id
    given = Path(dataset)
    candidates = [given / "data", given] if given.is_dir() else [minari_root(datasets_path) / str(dataset) / "data"]
    data = next((path for path in candidates if (path / "metadata.json").is_file()), None)
    if data is None:
        raise StoreNotFoundError(f"no local Minari dataset {str(dataset)!r}: looked for metadata.json in "
                                 f"{', '.join(map(str, candidates))}; datasets are never downloaded here: run "
                                 f"`minari download ID` first, or set MINARI_DATASETS_PATH")
    try:
        return minari.MinariDataset(data), str(dataset)
    except (ValueError, KeyError, AssertionError, OSError) as error:
        raise UnsupportedFormatError(f"{data} cannot be read by minari {minari.__version__}: {error!r:.300}") from None


# ---- import ------------------------------------------------------------------------------------------------


def import_minari(dataset: Any, folder: str | os.PathLike, *, datasets_path: str | os.PathLike | None = None,
                  infos: bool = True, overwrite: bool = False, progress: bool = False, max_episodes: int | None = None,
                  max_steps: int | None = None, max_timesteps: int | None = None, circular: bool = False) -> Transfer:
    """A local Minari dataset as a new store at ``folder`` (see the module docstring); returns a report.
    ``max_episodes``/``max_steps``/``max_timesteps``/``circular``: room for episodes stored after the import
    (offline data, then online episodes); None sizes the store to the dataset (``ReplayBuffer.grow`` later)."""
    room = dict(max_episodes=max_episodes, max_steps=max_steps, max_timesteps=max_timesteps, circular=circular)
    check_room(room, episodes=0, max_timesteps=0, rows=0)  # the types, before reading anything
    dataset, source = _open_dataset(dataset, datasets_path)
    extra_meta: set[str] = set()
    while True:
        try:
            return _import_once(dataset, source, folder, infos=infos, overwrite=overwrite, progress=progress,
                               extra_meta=extra_meta, room=room)
        except _NeedsField as needed:  # an episode both terminated and truncated: start again with the field
            extra_meta.add(needed.name)


class _NeedsField(Exception):
    def __init__(self, name: str):
        self.name = name


def _import_once(dataset, source, folder, *, infos, overwrite, progress, extra_meta, room) -> Transfer:
    indices = np.asarray(dataset.episode_indices)
    attrs = list(dataset.storage.get_episode_metadata(indices))
    lengths = [int(attr.get("total_steps", -1)) for attr in attrs]
    if -1 in lengths:
        lengths = [len(episode.rewards) for episode in dataset.iterate_episodes(indices)]
    notes: list[str] = []
    meta_fields, meta_values = _episode_meta(attrs, indices, lengths, notes)
    if _ALSO_TRUNCATED in extra_meta:
        meta_fields[_ALSO_TRUNCATED] = ("bool", ())
    fields = _first_fields(dataset, indices, infos, source) if len(indices) else {}
    report = Transfer("import minari", source, str(folder), fields={**{name: "step field" for name in fields},
                                                                    **{name: "episode meta" for name in meta_fields}})
    if not fields:
        fields = {OBSERVATION: ("float32", ())}
        notes.append("the dataset has no episodes: the store is empty")
    recorded = _recorded_schema(dataset)
    fields, meta_fields = _as_recorded(fields, recorded.get("fields")), _as_recorded(meta_fields,
                                                                                      recorded.get("meta_fields"))
    with StoreBuilder(folder, fields, meta_fields, episodes=len(indices), max_timesteps=max(lengths, default=1),
                      rows=sum(lengths) + len(lengths), overwrite=overwrite, room=room) as builder, \
            progress_bar(sum(lengths), "import", progress) as bar:
        for number, episode in enumerate(dataset.iterate_episodes(indices)):
            where = f"episode {indices[number]} of {source}"
            if len(episode.rewards) == 0:
                notes.append(f"{where} has no step and was left out")
                continue
            steps, final, end, also = _split_episode(episode, infos, where)
            meta = meta_values(number, meta_fields)
            if also:
                if _ALSO_TRUNCATED not in meta_fields:
                    raise _NeedsField(_ALSO_TRUNCATED)
                meta[_ALSO_TRUNCATED] = np.bool_(True)
            builder.add(steps, meta, end=end, final=final, where=where)
            bar.update(len(episode.rewards))
        report.episodes, report.steps, report.nbytes = builder.episodes, builder.steps, builder.nbytes
        card, details = _card_from(dataset, notes)
        builder.finish(card, "minari", source, {**details, "episodes": report.episodes, "steps": report.steps})
    report.notes = notes
    return report


def _first_fields(dataset, indices, infos: bool, source: str) -> dict[str, tuple]:
    episode = next(iter(dataset.iterate_episodes(indices[:1])))
    steps, _, _, _ = _split_episode(episode, infos, f"episode {indices[0]} of {source}")
    return {name: _spec_of(value, name) for name, value in steps.items()}


def _split_episode(episode, infos: bool, where: str):
    """(step arrays, final row, end, also truncated) of one Minari episode."""
    length = len(episode.rewards)
    observations = flatten(episode.observations, OBSERVATION, f"{where}: observations")
    steps = {**flatten(episode.actions, ACTION, f"{where}: actions"), REWARD: np.asarray(episode.rewards)}
    info = flatten(episode.infos, INFO, f"{where}: infos") if infos and episode.infos else {}
    final = {}
    for name, value in {**observations, **info}.items():
        rows = len(value) if value.ndim else 0
        if rows == length + 1:
            steps[name], final[name] = value[:length], value[length]
        elif rows == length and name not in observations:
            steps[name] = value
        else:
            want = "T + 1" if name in observations else "T or T + 1"
            raise InvalidDataError(f"{where}: {name!r} must have {want} rows for its T = {length} steps (got {rows})")
    for name, value in steps.items():
        if len(value) != length:
            raise InvalidDataError(f"{where}: {name!r} must have one row per step ({length}) (got {len(value)})")
    end, also = _end_of(np.asarray(episode.terminations, bool), np.asarray(episode.truncations, bool), where)
    return steps, final, end, also


def _end_of(terminations: np.ndarray, truncations: np.ndarray, where: str) -> tuple[str | None, bool]:
    early = np.flatnonzero(terminations[:-1] | truncations[:-1])
    if early.size:
        raise InvalidDataError(f"{where} is terminated or truncated at step {early[0]}, before its last step "
                               f"{len(terminations) - 1}: a Minari episode ends at its first such step; the "
                               f"dataset is malformed")
    terminated, truncated = bool(terminations[-1]), bool(truncations[-1])
    return ("terminated" if terminated else "truncated" if truncated else None), terminated and truncated


def _episode_meta(attrs: list[dict], indices: np.ndarray, lengths: list[int], notes: list[str]):
    """Meta fields from the episodes' attributes, and a function giving episode ``number``'s values."""
    flat = [dict(_flat_attrs(attr)) for attr in attrs]
    fields: dict[str, tuple] = {}
    ids = [int(attr.get("id", index)) for attr, index in zip(attrs, indices)]
    if ids != list(range(len(ids))) or 0 in lengths:  # else an episode's number in the store is its id
        fields["episode_id"] = ("int64", ())
    seeds = [None if attr.get("seed") is None else int(attr["seed"]) for attr in attrs]
    given = [seed for seed in seeds if seed is not None]
    if given and 0 <= min(given) and max(given) <= _INT64_MAX:  # the recorder's field: -1 is "no seed"
        fields["seed"] = ("int64", (), -1)
    elif given:
        dtype = "int64" if min(given) < 0 else "uint64"
        fields.update(seed=(dtype, ()), seeded=("bool", ()))
        notes.append(f"the seeds do not all fit in [0, 2**63): 'seed' is {dtype}, and 'seeded' says which "
                     f"episodes have one (a missing seed is 0)")
    columns = {}
    for key in sorted({key for attr in flat for key in attr} - _ATTRS_KNOWN):
        per_episode = [np.asarray(attr.get(key)) for attr in flat]
        name = key.replace("/", SEP)
        kinds = {(value.dtype, value.shape) for value in per_episode}
        try:
            _field_name(name, f"episode attribute {key!r}")
            ok = (len(kinds) == 1 and per_episode[0].dtype.kind in "biufc" and name not in fields
                  and 0 not in per_episode[0].shape)
        except InvalidDataError:
            ok = False
        if not ok:
            notes.append(f"episode attribute {key!r} was left out (not numeric with one dtype and "
                         f"shape in every episode)")
            continue
        fields[name] = (per_episode[0].dtype.name, per_episode[0].shape)
        columns[name] = per_episode

    def values(number: int, meta_fields: dict[str, tuple]) -> dict[str, Any]:
        out = {"episode_id": np.int64(ids[number])} if "episode_id" in fields else {}
        if "seeded" in fields:
            seed = seeds[number]
            out.update(seed=np.dtype(fields["seed"][0]).type(0 if seed is None else seed),
                       seeded=np.bool_(seed is not None))
        elif "seed" in meta_fields:  # the seed field's default (-1, or the exported store's) when none
            seed = seeds[number]
            out["seed"] = np.int64(meta_fields["seed"][2] if seed is None else seed)
        out.update({name: column[number] for name, column in columns.items()})
        return out

    return fields, values


def _metadata(dataset) -> dict:
    return json.loads((Path(dataset.storage.data_path) / "metadata.json").read_text())


def _recorded_schema(dataset) -> dict:
    """The schema of the store a dataset was exported from (``export_minari`` writes it), or {}."""
    ours = _metadata(dataset).get("memmap_replay")
    schema = ours.get("schema") if isinstance(ours, dict) else None
    return schema if isinstance(schema, dict) else {}


def _as_recorded(specs: dict[str, tuple], recorded: Any) -> dict[str, tuple]:
    """``specs`` in the exported store's order, with its defaults where a field came back with its dtype and
    shape; an int ``seed`` it had but whose episodes had no seed to write comes back all default."""
    if not isinstance(recorded, dict):
        return specs
    out = {}
    for name, record in recorded.items():
        spec = specs.get(name)
        if not isinstance(record, dict):
            continue
        default = record.get("default")
        if not isinstance(default, (bool, int, float)):
            default = None
        if spec is None and name == "seed" and "seeded" not in specs and record.get("dtype") == "int64" \
                and record.get("shape") == [] and default is not None:
            out[name] = ("int64", (), default)
        elif spec is not None and (spec[0], list(spec[1])) == (record.get("dtype"), record.get("shape")):
            out[name] = spec if default is None else (spec[0], spec[1], default)
    return {**out, **{name: spec for name, spec in specs.items() if name not in out}}


def _flat_attrs(attr: dict, prefix: str = ""):
    for key, value in attr.items():
        if isinstance(value, dict):
            yield from _flat_attrs(value, f"{prefix}{key}/")
        else:
            yield f"{prefix}{key}", value


def _card_from(dataset, notes: list[str]) -> tuple[dict, dict]:
    """Card fields and provenance details from the dataset's metadata (and a card an export put there)."""
    from ..sharing.card import DatasetCard, space_to_json

    raw = _metadata(dataset)
    ours = raw.get("memmap_replay", {}).get("card") if isinstance(raw.get("memmap_replay"), dict) else None
    known = set(DatasetCard.__dataclass_fields__) - {"name", "extra", "unknown"}
    card = {key: value for key, value in (ours or {}).items() if key in known}
    card.update({ours_key: raw[key] for key, ours_key in _CARD_KEYS.items() if raw.get(key) is not None})
    for key in ("author", "author_email"):
        if raw.get(key):
            values = sorted(raw[key]) if isinstance(raw[key], list) else [str(raw[key])]
            card[key] = values[0] if len(values) == 1 else values
    if _valid_name(dataset.id):
        card["name"] = dataset.id
    else:
        notes.append(f"the dataset id {dataset.id!r} is not a card name ('namespace/name-vN'): the card has no name")
    if raw.get("env_spec"):
        card["env_spec"] = json.loads(raw["env_spec"])
    card["observation_space"] = space_to_json(dataset.observation_space)
    card["action_space"] = space_to_json(dataset.action_space)
    kept = {key: value for key, value in raw.items() if key not in ("observation_space", "action_space", "env_spec",
                                                                     "author", "author_email", "memmap_replay",
                                                                    *_CARD_KEYS)}
    card["extra"] = {**((ours or {}).get("extra") or {}), "minari": kept}
    if raw.get("jpeg_encoding", True) and any(_is_image(space)
                                              for space in (dataset.observation_space, dataset.action_space)):
        notes.append("the dataset stores images JPEG-encoded (lossy): they were imported as minari decodes them")
    details = {"dataset_id": dataset.id, "minari_version": raw.get("minari_version"),
               "data_format": raw.get("data_format"), "notes": notes}
    if len(dataset.episode_indices) != raw.get("total_episodes"):
        details["episode_indices"] = [int(index) for index in dataset.episode_indices]
    return card, details


def _valid_name(name: str) -> bool:
    from ..sharing.card import DatasetCard

    try:
        DatasetCard(name=name).to_json()
        return True
    except InvalidDataError:
        return False


def _is_image(space) -> bool:
    from minari.dataset.minari_storage import is_image_space
    from gymnasium import spaces

    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        subs = space.spaces.values() if isinstance(space, spaces.Dict) else space.spaces
        return any(_is_image(sub) for sub in subs)
    return is_image_space(space)
