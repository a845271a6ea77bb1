"""What both recorders share: the store recorded into (opened or created, checked against the env's
fields), the dataset card (env spec, spaces, provenance, reset seeds)."""

from __future__ import annotations

import inspect
import json
from typing import Any, Mapping

import gymnasium
import numpy as np

from ..buffer import ReplayBuffer
from ..errors import BufferFullError, OptionError, SchemaMismatchError, StoreNotFoundError
from ..core.options import choice, flag, integer
from .fields import FieldMap

__all__ = ["Recorder", "field_copies", "recorder_options", "RECORDER_OPTIONS"]


def _check_compatible(buffer: ReplayBuffer, fieldmap: FieldMap, max_timesteps: int | None) -> None:
    """The store must hold every field the recorder writes, with its shape and a dtype of the same kind."""
    unsigned = seed_unsigned(buffer, fieldmap)
    if unsigned is not None:
        raise SchemaMismatchError(
            f"the store at {buffer.folder} cannot record this env's seeds: its meta field {fieldmap.seed_field!r} "
            f"is {unsigned} (an import of a Minari dataset by an older "
            f"memmap_replay), and the recorder writes int64 seeds, -1 for none; import the dataset again (seeds "
            f"come in as int64 now), or pass seed_field=None")
    for kind, have, want in (("field", buffer.schema.fields, fieldmap.schema.fields),
                             ("meta field", buffer.schema.meta_fields, fieldmap.schema.meta_fields)):
        for name, spec in want.items():
            got = have.get(name)
            if got is None or got.shape != spec.shape or not np.can_cast(spec.dtype, got.dtype, "same_kind"):
                raise SchemaMismatchError(
                    f"the store at {buffer.folder} cannot record this env: its {kind} {name!r} must be "
                    f"{spec.dtype}{list(spec.shape)} or of that kind and shape, and it "
                    f"{'is missing' if got is None else f'is {got.dtype}{list(got.shape)}'}; record into another "
                    f"folder, pass overwrite=True to replace the store, fields=... to match it, or seed_field=None")
    _check_room(buffer, max_timesteps)


def seed_unsigned(buffer: ReplayBuffer, fieldmap: FieldMap) -> np.dtype | None:
    """The dtype of the store's seed field if unsigned (older imports of Minari seeds), else None."""
    spec = buffer.schema.meta_fields.get(fieldmap.seed_field) if fieldmap.seed_field else None
    return spec.dtype if spec is not None and spec.dtype.kind == "u" else None


def _check_room(buffer: ReplayBuffer, max_timesteps: int | None) -> None:
    """An existing store must take the env's longest episode, and (unless a ring) have room for one more: else
    one message with the ``grow`` call that would make room (an imported store is sized to its data)."""
    too_long = max_timesteps is not None and max_timesteps > buffer.max_timesteps and buffer.long_episodes != "split"
    longest = max(max_timesteps or 0, buffer.max_timesteps) if too_long else buffer.max_timesteps
    capacity, state = buffer.episode_store.meta.capacity, buffer.episode_store.meta.state
    live = state.next_episode - state.first_episode
    slots = not capacity.circular and live >= capacity.max_episodes
    rows = not capacity.circular and capacity.max_steps - state.write_head < longest + 1
    if not (too_long or slots or rows):
        return
    lacks = [f"it takes episodes of at most max_timesteps={buffer.max_timesteps} steps and the env's may have "
             f"{max_timesteps}"] if too_long else []
    if slots:
        lacks.append(f"all its {capacity.max_episodes} episode slots are used")
    if rows:
        lacks.append(f"{capacity.max_steps - state.write_head} of its max_steps={capacity.max_steps} rows are left, "
                     f"fewer than an episode of {longest} steps needs")
    grow = dict(max_episodes=live + 1 if slots else None, max_steps=state.write_head + longest + 1 if rows else None,
                max_timesteps=longest if too_long else None)
    call = ", ".join(f"{key}={value}" for key, value in grow.items() if value is not None)
    error = SchemaMismatchError if too_long else BufferFullError
    room = ("makes room for one more episode of up to {longest} steps (grow more to record more), or "
            "buffer.grow(circular=True) makes it a ring that evicts its oldest episodes" if slots or rows
            else "takes the env's longest episodes").format(longest=longest)
    raise error(f"the store at {buffer.folder} cannot record this env: {'; '.join(lacks)}. Grow it first: "
                f"buffer.grow({call}) {room} (from a shell: memmap-replay grow FOLDER --max-episodes ...); or record "
                f"into another folder" + (", or open it with long_episodes='split' (longer episodes become linked "
                                          "segments)" if too_long else ""))


def _open_store(target: Any, fieldmap: FieldMap, *, max_episodes: int, max_steps: int | None,
                max_timesteps: int | None, circular: bool, overwrite: bool) -> tuple[ReplayBuffer, bool, bool]:
    """The buffer to record into, whether the recorder owns it (opened it, so closes it) and created it."""
    buffer: ReplayBuffer | None
    if isinstance(target, ReplayBuffer):
        if flag(overwrite, "overwrite"):
            raise OptionError("overwrite=True needs a folder, not a ReplayBuffer, which is open already")
        buffer, owned = target, False
    else:
        buffer, owned = None, True
        if not flag(overwrite, "overwrite"):
            try:
                buffer = ReplayBuffer.from_folder(target)
            except StoreNotFoundError:
                pass
        if buffer is None:
            if max_timesteps is None:
                raise OptionError("max_timesteps is needed to create a store for an env without a time limit "
                                  "(env.spec.max_episode_steps is None); pass max_timesteps=...")
            return ReplayBuffer(target, max_episodes, max_timesteps, fieldmap.fields, fieldmap.meta_fields,
                                circular=circular, overwrite=overwrite, max_steps=max_steps), owned, True
    try:
        buffer.episode_store.require_writable("record episodes")
        if flag(circular, "circular") and not buffer.circular:
            raise OptionError(f"circular=True sizes a store the recorder creates, and the store at {buffer.folder} "
                              f"exists and is not a ring; make it one first with buffer.grow(circular=True) (it then "
                              f"evicts its oldest episodes, imported ones first), or leave circular out")
        _check_compatible(buffer, fieldmap, max_timesteps)
    except BaseException:
        if owned:
            buffer.close()
        raise
    return buffer, owned, False


def _env_spec(env: Any) -> Any:
    """The env's spec; for a Sync/AsyncVectorEnv its sub-envs' (make_vec's own keeps the registered time limit)."""
    if isinstance(env.unwrapped, (gymnasium.vector.SyncVectorEnv, gymnasium.vector.AsyncVectorEnv)):
        return env.unwrapped.get_attr("spec")[0] or env.spec
    return env.spec


def _spec_json(spec: Any) -> dict | None:
    try:
        return None if spec is None else json.loads(spec.to_json())
    except (ValueError, TypeError):  # kwargs that JSON cannot hold (e.g. a callable): no spec on the card
        return None


class Recorder:
    """What both wrappers share: the field map, the store, the card, the reset seeds.

    Options: see ``RecordEpisodes`` (its Parameters); the wrappers' signatures repeat this one."""

    def __init__(self, env: Any, target: Any, observation_space: Any, action_space: Any, details: dict, *,
                 fields: Any = None, info_fields: Any = None, seed_field: str | None = "seed",
                 partial: str = "commit", max_episodes: int = 10_000, max_steps: int | None = None,
                 max_timesteps: int | None = None, circular: bool = False, overwrite: bool = False, card: bool = True):
        self.partial = choice(partial, "partial", ("commit", "discard"))
        self.card = flag(card, "card")
        self.fieldmap = FieldMap(observation_space, action_space, info_fields=info_fields, fields=fields,
                                 seed_field=seed_field)
        spec = _env_spec(env)
        if max_timesteps is not None:
            max_timesteps = integer(max_timesteps, "max_timesteps", low=1)
        elif spec is not None:  # make_vec of a native vector env keeps an override in kwargs only
            max_timesteps = spec.kwargs.get("max_episode_steps") or spec.max_episode_steps
        self.buffer, self.owned, created = _open_store(target, self.fieldmap, max_episodes=max_episodes,
                                                       max_steps=max_steps, max_timesteps=max_timesteps,
                                                       circular=circular, overwrite=overwrite)
        self.seeds: list = []  # the seed argument of every reset that had one, in order
        self.closed = False
        try:
            if self.card:
                self.start_card(env, spec, observation_space, action_space, details, created)
        except BaseException:
            self.close_store()
            raise

    def start_card(self, env: Any, spec: Any, observation_space: Any, action_space: Any, details: dict,
                   created: bool) -> None:
        """The env on the card. A store created over an old one (overwrite) keeps its card's descriptive keys,
        but not its env, provenance and seeds."""
        from ..sharing.card import add_provenance, read_card, update_card

        folder, ours = self.buffer.folder, _spec_json(spec)
        theirs = None if created else getattr(read_card(folder), "env_spec", None)
        if theirs and ours and theirs.get("id") != ours.get("id"):
            raise SchemaMismatchError(f"the store at {folder} holds episodes of {theirs.get('id')!r} (its card says "
                                      f"so), not of {ours.get('id')!r}; record into another folder")
        afresh: dict[str, Any] = dict(provenance=[], seeds=None) if created else {}
        update_card(folder, observation_space=observation_space, action_space=action_space,
                    **({} if theirs else {"env_spec": ours}), **afresh)
        add_provenance(folder, "gymnasium", spec.id if spec is not None else type(env.unwrapped).__name__,
                       fields=self.fieldmap.describe(), partial=self.partial, **details)

    def note_seed(self, seed: Any) -> None:
        if seed is not None:
            self.seeds.append(int(seed) if np.ndim(seed) == 0 else [None if s is None else int(s) for s in seed])

    def close_store(self) -> None:
        if self.owned:
            self.buffer.close()

    def close(self) -> None:
        """Append this recording's reset seeds to the card's ``seeds['reset']``; close the store if owned."""
        if self.closed:
            return
        self.closed = True
        try:
            if self.card and self.seeds:
                from ..sharing.card import read_card, update_card

                card = read_card(self.buffer.folder)
                seeds = card.seeds if card is not None and isinstance(card.seeds, dict) else {}
                update_card(self.buffer.folder, seeds={**seeds, "meta_field": self.fieldmap.seed_field,
                                                       "reset": list(seeds.get("reset", [])) + self.seeds})
        finally:
            self.close_store()


def field_copies(values: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Copies: an env may hand out the same array again, changed in place, at its next step."""
    return {name: np.array(value, copy=True) for name, value in values.items()}


# the recorder's options, which RecordEpisodes and RecordVectorEpisodes spell out in their own signatures
RECORDER_OPTIONS = tuple(name for name, parameter in inspect.signature(Recorder.__init__).parameters.items()
                         if parameter.kind is parameter.KEYWORD_ONLY)


def recorder_options(arguments: dict[str, Any]) -> dict[str, Any]:
    """The recorder's options among a wrapper's ``locals()`` (its signature repeats ``Recorder``'s)."""
    return {name: arguments[name] for name in RECORDER_OPTIONS}
