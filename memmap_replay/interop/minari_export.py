"""Stores -> local Minari datasets (``export_minari``); the format and its mapping are described in
``memmap_replay.interop.minari``.

A store becomes a local dataset that ``minari.load_dataset`` reads: hdf5, ``jpeg_encoding=False``
(lossless). Observations are the fields ``observation`` / ``observation__*`` (or ``observation=``) plus the
final row; an episode without a final row is refused unless ``missing_final='repeat'`` (repeat the last
observation) or ``'zeros'``. Other step fields become infos (``info__a__b`` -> ``infos["a"]["b"]``, any
other name ``infos[name]``, with the final row's value when the episode has one), meta fields episode
attributes (``a__b`` -> ``a/b``; ``seed``/``seeded`` the episode's seed), the end code the last step's
termination/truncation. The card (with a provenance record of this export) goes into the dataset's
metadata under ``"memmap_replay"``; importing such a dataset restores it. The dataset is written in a
hidden folder beside its place and moved there when complete.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidDataError, OptionError, SchemaError
from .common import (segment_notes, ACTION, _ALSO_TRUNCATED, INFO, OBSERVATION, REWARD, SEP, Transfer, _check_target,
                     pick_roles, place, progress_bar, provenance_record, read_store, _remove, require, stored_episodes,
                     temporary_sibling)
from .minari import _CARD_KEYS, _COMPUTED, DATASET_ID, _MISSING_FINAL, minari_root
from .spaces import nest, space_for

__all__ = ["export_minari"]


def export_minari(folder: str | os.PathLike, dataset_id: str, *, datasets_path: str | os.PathLike | None = None,
                  observation: str | list[str] | None = None, action: str | list[str] | None = None,
                  reward: str = REWARD, infos: bool = True, missing_final: str = "error", overwrite: bool = False,
                  progress: bool = False) -> Transfer:
    """The store at ``folder`` as the local Minari dataset ``dataset_id`` (see the module docstring)."""
    minari = require("minari", "writing a Minari dataset")
    from minari.data_collector import EpisodeBuffer
    from minari.dataset.minari_storage import MinariStorage

    from ..sharing.card import read_card

    if not isinstance(dataset_id, str) or not DATASET_ID.fullmatch(dataset_id):
        raise OptionError(f"dataset_id must look like 'namespace/name-vN' (namespace optional), e.g. "
                          f"'cartpole/random-v0' (got {dataset_id!r})")
    if missing_final not in _MISSING_FINAL:
        raise OptionError(f"missing_final must be one of {_MISSING_FINAL} (got {missing_final!r})")
    store = read_store(folder)
    try:
        card = read_card(folder)
        plan = _ExportPlan(store, card, observation, action, reward, infos)
        target = minari_root(datasets_path) / dataset_id
        target.parent.mkdir(parents=True, exist_ok=True)
        _check_target(target, overwrite, lambda path: (path / "data" / "metadata.json").is_file())
        tmp = temporary_sibling(target, "exporting")
        try:
            (tmp / "data").mkdir(parents=True)
            storage = MinariStorage.new(tmp / "data", observation_space=plan.obs_space, action_space=plan.act_space,
                                        env_spec=plan.env_spec(), data_format="hdf5", jpeg_encoding=False)
            storage.update_metadata(plan.metadata(dataset_id, minari.__version__, folder))
            report = Transfer("export minari", str(folder), dataset_id, fields=plan.described(), notes=plan.notes)
            attrs = []
            with progress_bar(int(store.live_table().length.sum()), "export", progress) as bar:
                for episode in stored_episodes(store):
                    buffer, attr = plan.episode(episode, missing_final, EpisodeBuffer)
                    storage.update_episodes([buffer])
                    attrs.append(attr)
                    report.episodes += 1
                    report.steps += episode.length
                    report.nbytes += sum(value.nbytes for value in episode.steps.values())
                    bar.update(episode.length)
            if attrs and any(attrs):
                storage.update_episode_metadata(attrs, range(len(attrs)))
            _make_namespaces(minari_root(datasets_path), dataset_id)
            place(tmp, target)
        finally:
            _remove(tmp)
    finally:
        store.close()
    return report


def _make_namespaces(root: Path, dataset_id: str) -> None:
    """Minari's namespace marker files for each namespace level of ``dataset_id`` (as create_namespace does)."""
    parts = dataset_id.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        marker = root.joinpath(*parts[:depth]) / "namespace_metadata.json"
        if not marker.exists():
            marker.write_text("{}")


def _info_paths(names: list[str]) -> dict[tuple, str]:
    """Where each field goes in an episode's infos: ``info__a__b`` -> infos["a"]["b"], ``done`` -> infos["done"]."""
    paths = {tuple(name[len(INFO + SEP):].split(SEP)) if name.startswith(INFO + SEP) else (name,): name
             for name in names}
    for path, name in paths.items():
        clash = [other for key, other in paths.items() if key != path and key[:len(path)] == path]
        if clash or len(paths) != len(names):
            raise SchemaError(f"the fields {sorted(names)} cannot all be infos: {name!r} and {clash or 'another'} "
                              f"would take the same place; pass infos=False or rename a field")
    return paths


class _ExportPlan:
    """Which fields go where in a Minari dataset, its spaces and metadata, and each episode as a buffer."""

    def __init__(self, store, card, observation, action, reward, infos: bool):
        self.store, self.card, self.notes = store, card, segment_notes(store)
        specs = store.schema.fields
        self.obs_names, self.act_names, self.reward = pick_roles(store, observation, action, reward)
        self.obs_space, self.obs_paths = space_for(self.obs_names, OBSERVATION, specs,
                                                   card.observation_space if card else None, self.notes)
        self.act_space, self.act_paths = space_for(self.act_names, ACTION, specs, card.action_space if card else None,
                                                   self.notes)
        used = {*self.obs_names, *self.act_names, reward}
        self.info_paths = _info_paths([name for name in specs if name not in used]) if infos else {}
        left = [name for name in specs if name not in used and not infos]
        if left:
            self.notes.append(f"step fields {left} were left out (infos=False)")
        seed = store.schema.meta_fields.get("seed")
        self.seed = "seed" if seed is not None and seed.dtype.kind in "iu" and seed.shape == () else None  # an int
        self.attr_names = [name for name in store.schema.meta_fields
                           if name not in ("episode_id", "seeded", _ALSO_TRUNCATED) and name != self.seed]

    def described(self) -> dict:
        out = {name: "observations" for name in self.obs_names}
        out.update({name: "actions" for name in self.act_names}, **{self.reward: "rewards"})
        out.update({name: "infos/" + "/".join(path) for path, name in self.info_paths.items()})
        out.update({name: "episode attribute " + name.replace(SEP, "/") for name in self.attr_names})
        return out

    def env_spec(self):
        if self.card is None or not self.card.env_spec:
            return None
        from gymnasium.envs.registration import EnvSpec

        try:
            return EnvSpec.from_json(json.dumps(self.card.env_spec))
        except (TypeError, ValueError, KeyError) as error:
            self.notes.append(f"the card's env_spec was left out: gymnasium cannot read it ({error!r:.100})")
            return None

    def metadata(self, dataset_id: str, version: str, folder) -> dict:
        from ..sharing.card import DatasetCard

        card = DatasetCard.from_json(self.card.to_json()) if self.card else DatasetCard()
        out: dict[str, Any] = {"dataset_id": dataset_id, "minari_version": version}
        out.update({key: getattr(card, ours) for key, ours in _CARD_KEYS.items() if getattr(card, ours) is not None})
        for key in ("author", "author_email"):
            value = getattr(card, key)
            if value:
                out[key] = {value} if isinstance(value, str) else set(value)
        out.update({key: value for key, value in (card.extra.get("minari") or {}).items() if key not in _COMPUTED})
        card.provenance = [*card.provenance,
                           provenance_record("memmap_replay", folder, store_id=self.store.meta.store_id,
                                                              exported_as="minari", fields=self.described())]
        # the store's schema: an import restores its defaults and its seed field (see import_minari)
        out["memmap_replay"] = {"card": card.to_json(), "schema": self.store.schema.to_json()}
        return out

    def episode(self, episode, missing_final: str, EpisodeBuffer) -> tuple[Any, dict]:
        length = episode.length
        final = episode.final
        if final is None:
            if missing_final == "error":
                raise InvalidDataError(
                    f"episode {episode.number} of {self.store.folder} has no final observation, which Minari needs "
                    f"(T + 1 observations); pass missing_final='repeat' (repeat the last one) or 'zeros'")
            final = {name: (value[-1] if missing_final == "repeat" else np.zeros_like(value[-1]))
                     for name, value in episode.steps.items()}
        observations = {name: np.concatenate([episode.steps[name], final[name][None]]) for name in self.obs_names}
        infos: dict[str, Any] = {}
        for path, name in self.info_paths.items():
            value = episode.steps[name] if episode.final is None else np.concatenate([episode.steps[name],
                                                                                      episode.final[name][None]])
            node = infos
            for key in path[:-1]:
                node = node.setdefault(key, {})
            node[path[-1]] = value
        terminations, truncations = np.zeros(length, bool), np.zeros(length, bool)
        also = bool(episode.meta.get(_ALSO_TRUNCATED, False))
        terminations[-1] = episode.end == "terminated"
        truncations[-1] = episode.end == "truncated" or also
        # -1 is the recorder's "no seed given" (an autoreset, or a native vector env)
        seeded = self.seed is not None and bool(episode.meta.get("seeded", True)) and int(episode.meta["seed"]) >= 0
        buffer = EpisodeBuffer(
            seed=episode.meta["seed"].item() if seeded else None,
            observations=nest(self.obs_space, self.obs_paths, observations),
            actions=nest(self.act_space, self.act_paths, episode.steps),
            rewards=episode.steps[self.reward], terminations=terminations, truncations=truncations,
            infos=infos or None)
        return buffer, {name.replace(SEP, "/"): episode.meta[name] for name in self.attr_names}
