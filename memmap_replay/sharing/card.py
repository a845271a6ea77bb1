"""The dataset card: ``card.json`` (what the data is, where it came from) and ``README.md`` beside it.

A card is optional and lives in the store's folder. ``card.json`` is a UTF-8 JSON object; every key is
optional and keys this version does not know are kept when the card is rewritten. Values are plain JSON
that reads back as written (string keys, finite numbers, valid Unicode, nested at most ``MAX_DEPTH``
levels), and card.json and README.md take at most 64 MiB each (what ``unpack`` accepts). ``README.md`` is the
card rendered as Markdown, written whenever ``card.json`` is. Both are replaced atomically (temporary
file, fsync, ``os.replace``), so a write killed half-way leaves the old card whole. Card writes do not
take the writer lock (a card may be edited while a writer appends); they serialize with each other (and
with ``checksum`` and ``pack``) through an OS lock on the folder itself, and keep an existing
``checksums.sha256`` up to date for the two files they replace.

Spaces are stored as JSON with the keys minari uses (``type``, ``dtype``, ``shape``, ``low``, ``high``,
``n``, ``start``, ``nvec``, ``subspaces``, ``max_length``, ``min_length``, ``charset``), except that
infinite Box bounds are the strings ``"inf"`` / ``"-inf"`` (plain JSON has no infinity) and a Box bound
that is the same everywhere is one number. Nothing is pickled.
"""

from __future__ import annotations

import json
import math
import os
import re
from dataclasses import dataclass, field, fields
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..core import folderio
from ..core import format as fmt
from .checksums import _TEXT_LIMIT, _folder_lock, _refresh_entries, store_folder, _write_atomic
from ..errors import CorruptStoreError, InvalidDataError, MissingFileError, OptionError

__all__ = ["CARD_FILE", "README_FILE", "DatasetCard", "read_card", "write_card", "update_card", "add_provenance",
           "space_to_json", "space_from_json"]

CARD_FILE, README_FILE = "card.json", "README.md"
# "namespace/name-vN" (minari's form: the namespace may have several parts, and is optional)
_NAME = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*/)*[A-Za-z0-9_][A-Za-z0-9_.-]*-v\d+")
TEXT_KEYS = ("name", "description", "author", "author_email", "license", "code_url", "algorithm")
_SPACE_KEYS = ("observation_space", "action_space")
_SCORE_KEYS = ("ref_min_score", "ref_max_score")
_PROVENANCE_KEYS = ("kind", "source", "time", "tool")
MAX_DEPTH = 64  # nesting of JSON values (deeper would hit Python's recursion limit in json)


@dataclass
class DatasetCard:
    """What a dataset is: every attribute optional. ``author`` / ``author_email`` may be a list of strings;
    ``env_spec`` is a gymnasium EnvSpec's JSON as a dict; the spaces are ``space_to_json`` dicts;
    ``provenance`` is a list of records (oldest first), each with ``kind``, ``source``, ``time``, ``tool``
    and any details; ``seeds`` is free-form JSON; ``extra`` is yours. ``unknown`` keeps keys of a newer
    card.json so that a rewrite does not drop them."""

    name: str | None = None
    description: str | None = None
    author: str | list[str] | None = None
    author_email: str | list[str] | None = None
    license: str | None = None
    code_url: str | None = None
    algorithm: str | None = None
    env_spec: dict | None = None
    observation_space: dict | None = None
    action_space: dict | None = None
    ref_min_score: float | None = None
    ref_max_score: float | None = None
    num_episodes_average_score: int | None = None
    provenance: list[dict] = field(default_factory=list)
    seeds: Any = None
    extra: dict = field(default_factory=dict)
    unknown: dict = field(default_factory=dict, repr=False)

    def to_json(self) -> dict:
        """The card as a JSON object (unknown keys included); checks every value first."""
        _check_card(self)
        data = {key.name: getattr(self, key.name) for key in fields(self) if key.name != "unknown"}
        return {**self.unknown, **json.loads(json.dumps(data))}

    @classmethod
    def from_json(cls, data: Any) -> "DatasetCard":
        """A card from a JSON object; InvalidDataError names the key, what it must be and what came."""
        if not isinstance(data, dict):
            raise InvalidDataError(f"a dataset card must be a JSON object (got a {_json_type(data)})")
        known = {key.name for key in fields(cls)} - {"unknown"}
        card = cls(**{key: value for key, value in data.items() if key in known})
        card.unknown = {key: value for key, value in data.items() if key not in known}
        _check_card(card)
        return card

    def render(self, *, fields_of: dict | None = None, summary: dict | None = None, front_matter: bool = True) -> str:
        """The card as Markdown (what README.md holds): YAML front matter for the Hugging Face Hub (see
        ``front_matter``; ``front_matter=False`` leaves it out), the card, then ``fields_of`` as a table of
        the store's fields (meta.json's schema: ``{"fields": {...}, "meta_fields": {...}}``; a column of each
        field's codec when one is compressed, with its measured ratio from ``summary["compression"]``), ``summary``
        (``stats.episode_summary``: episodes, steps, lengths and returns) as a Contents section, and how to
        load the folder."""
        head = self.front_matter(summary) if front_matter else ""
        return head + self._body(fields_of, summary)

    def front_matter(self, summary: dict | None = None) -> str:
        """The YAML block (between ``---`` lines) the Hugging Face Hub reads from a dataset's README.md:
        ``license`` (a Hub license id when the card's license is one, spelled in any case, e.g. CC-BY-4.0 ->
        cc-by-4.0; else ``other`` with ``license_name``), ``pretty_name`` (the card's name), ``tags``
        (reinforcement-learning, memmap-replay), ``task_categories`` (reinforcement-learning) and, with a
        ``summary``, ``size_categories`` from the number of steps. Strings are JSON-quoted (valid YAML)."""
        lines = ["---"]
        if self.license:
            license_id = _hub_license(self.license)
            lines.append(f"license: {license_id if license_id else 'other'}")
            if not license_id:
                lines.append(f"license_name: {_yaml_text(_slug(self.license) or 'custom')}")
        if self.name:
            lines.append(f"pretty_name: {_yaml_text(self.name)}")
        lines += ["tags:", "- reinforcement-learning", "- memmap-replay", "task_categories:",
                  "- reinforcement-learning"]
        if summary and isinstance(summary.get("steps"), int):
            lines += ["size_categories:", f"- {_size_category(summary['steps'])}"]
        return "\n".join(lines + ["---", "", ""])

    def _body(self, fields_of: dict | None, summary: dict | None) -> str:
        rows = [(label, _cell(value)) for label, value in (
            ("Author", self.author), ("Contact", self.author_email), ("License", self.license),
            ("Code", self.code_url), ("Algorithm", self.algorithm),
            ("Environment", _env_text(self.env_spec)), ("Observation space", _space_text(self.observation_space)),
            ("Action space", _space_text(self.action_space)), ("Reference scores", _score_text(self)),
            ("Seeds", None if self.seeds is None else json.dumps(self.seeds)[:200])) if value not in (None, [], "")]
        lines = [f"# {self.name or 'Unnamed dataset'}", ""]
        lines += [self.description.strip(), ""] if self.description else []
        lines += ["| | |", "|---|---|", *(f"| {label} | {value} |" for label, value in rows), ""] if rows else []
        lines += _fields_lines(fields_of, (summary or {}).get("compression") or {})
        lines += ["## Provenance", ""] + [f"{number}. {_provenance_text(record)}" for number, record in
                                         enumerate(self.provenance, 1)] + [""] if self.provenance else []
        lines += ["## Extra", "", "```json", json.dumps(self.extra, indent=2), "```", ""] if self.extra else []
        lines += _contents_lines(summary) if summary else []
        lines += _LOAD_LINES if fields_of is not None else []
        if fields_of is not None and any(isinstance(spec, dict) and spec.get("codec")
                                         for spec in (fields_of.get("fields") or {}).values()):
            lines += _COMPRESSED_LINES
        return "\n".join(lines)


def _fields_lines(fields_of: dict | None, compression: dict) -> list[str]:
    """The Fields section: each field's dtype and shape, and its codec (and measured ratio) when one is compressed."""
    groups = [(group, specs) for group, specs in (fields_of or {}).items() if isinstance(specs, dict)]
    coded = any(isinstance(spec, dict) and spec.get("codec") for _, specs in groups for spec in specs.values())
    table = []
    for group, specs in groups:
        for name, spec in specs.items():
            row = f"| {name} | {'step' if group == 'fields' else 'episode'} | {spec.get('dtype')} | " \
                  f"{tuple(spec.get('shape', ()))} |"
            if coded:
                row += f" {_codec_text(spec.get('codec'), compression.get(name)) if group == 'fields' else ''} |"
            table.append(row)
    if not table:
        return []
    head = ["| field | per | dtype | shape | codec |", "|---|---|---|---|---|"] if coded else \
        ["| field | per | dtype | shape |", "|---|---|---|---|"]
    return ["## Fields", "", *head, *table, ""]


def _codec_text(codec: Any, measured: dict | None) -> str:
    """'zstd-3, 312x smaller' (the ratio of the live rows as the card was written), 'zstd-3', or 'raw'."""
    if not isinstance(codec, dict):
        return "raw"
    from .stats import ratio_text  # noqa: PLC0415 - as _summary_of imports it

    text = f"{codec.get('name')}-{codec.get('level')}"
    ratio = measured.get("ratio") if isinstance(measured, dict) else None
    return text if ratio is None else f"{text}, {ratio_text(ratio)} smaller"


# license ids the Hugging Face Hub knows (https://huggingface.co/docs/hub/repositories-licenses)
_HUB_LICENSES = frozenset("""
apache-2.0 mit openrail bigscience-openrail-m creativeml-openrail-m bigscience-bloom-rail-1.0 bigcode-openrail-m
afl-3.0 artistic-2.0 bsl-1.0 bsd bsd-2-clause bsd-3-clause bsd-3-clause-clear c-uda cc cc0-1.0 cc-by-2.0 cc-by-2.5
cc-by-3.0 cc-by-4.0 cc-by-sa-3.0 cc-by-sa-4.0 cc-by-nc-2.0 cc-by-nc-3.0 cc-by-nc-4.0 cc-by-nd-4.0 cc-by-nc-nd-3.0
cc-by-nc-nd-4.0 cc-by-nc-sa-2.0 cc-by-nc-sa-3.0 cc-by-nc-sa-4.0 cdla-sharing-1.0 cdla-permissive-1.0
cdla-permissive-2.0 wtfpl ecl-2.0 epl-1.0 epl-2.0 etalab-2.0 eupl-1.1 eupl-1.2 agpl-3.0 gfdl gpl gpl-2.0 gpl-3.0 lgpl
lgpl-2.1 lgpl-3.0 isc lppl-1.3c ms-pl apple-ascl mpl-2.0 odc-by odbl openrail++ osl-3.0 postgresql ofl-1.1 ncsa
unlicense zlib pddl lgpl-lr unknown other""".split())
_SIZE_CATEGORIES = ((1_000, "n<1K"), (10_000, "1K<n<10K"), (100_000, "10K<n<100K"), (1_000_000, "100K<n<1M"),
                    (10_000_000, "1M<n<10M"), (100_000_000, "10M<n<100M"), (1_000_000_000, "100M<n<1B"),
                    (10_000_000_000, "1B<n<10B"), (100_000_000_000, "10B<n<100B"), (1_000_000_000_000, "100B<n<1T"))
_LOAD_LINES = [
    "## How to load", "",
    "Every field is a plain `.npy` file (`steps/<field>.npy`; the episode table in `episodes/` says which rows "
    "belong to which episode), readable with `numpy.load(path, mmap_mode=\"r\")`, no pickle anywhere. With "
    "[memmap-replay](https://pypi.org/project/memmap-replay/):",
    "", "```bash", "pip install memmap-replay", "```", "",
    "```python", "from memmap_replay import ReplayBuffer", "",
    "buffer = ReplayBuffer.from_folder(\"path/to/this/folder\", read_only=True)",
    "print(buffer.stats().episodes)  # episodes, steps, lengths and returns",
    "loader = buffer.dataloader(batch_size=256, timestep_level=True, shuffle=True)",
    "for batch in loader:  # a dict of tensors, one per field",
    "    ...", "```", "",
    "From the Hugging Face Hub: `huggingface_hub.snapshot_download(\"<user>/<dataset>\", repo_type=\"dataset\")` "
    "downloads the folder and returns its path.", "",
]
_COMPRESSED_LINES = [
    "A compressed field (a codec in the table above) is two `.npy` files instead of one: `steps/<field>.frames.npy`, "
    "its rows' zstd frames back to back (uint8), and `steps/<field>.index.npy`, each row's (offset, length) in it "
    "(int64). memmap-replay decodes them as it reads "
    "(`pip install 'memmap-replay[zstd]'`); with numpy and zstandard alone, row r is "
    "`zstandard.decompress(frames[offset:offset + length])` (reshaped to the field's dtype and shape).", "",
]


def _hub_license(text: str) -> str | None:
    """The Hub's id of a license written in any case (e.g. 'CC-BY-4.0' -> 'cc-by-4.0'), or None."""
    key = text.strip().lower()
    return key if key in _HUB_LICENSES else None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-.")[:64]


def _yaml_text(text: str) -> str:
    """A YAML double-quoted scalar: JSON's quoting, with the characters YAML may not hold raw escaped."""
    quoted = json.dumps(text, ensure_ascii=False)
    return re.sub("[\u007f-\u009f\u2028\u2029\ud800-\udfff\ufeff\ufffe\uffff]",
                  lambda match: f"\\u{ord(match.group()):04x}", quoted)


def _size_category(steps: int) -> str:
    return next((label for limit, label in _SIZE_CATEGORIES if steps < limit), "n>1T")


def _figure(value: Any) -> str:
    return "-" if value is None else f"{value:.6g}" if isinstance(value, float) else f"{value:,}"


def _contents_lines(summary: dict) -> list[str]:
    """The Contents section: counts, episode lengths and, when there is a reward field, returns."""
    length = summary.get("length") or {}
    lines = ["## Contents", "", "| | |", "|---|---|", f"| Episodes | {_figure(summary.get('count'))} |",
             f"| Steps | {_figure(summary.get('steps'))} |"]
    if length.get("mean") is not None:
        lines.append(f"| Episode length | mean {_figure(length['mean'])}, std {_figure(length['std'])}, "
                     f"min {_figure(length['min'])}, max {_figure(length['max'])} |")
    returns = summary.get("return")
    if returns and returns.get("mean") is not None:
        lines.append(f"| Episode return (sum of `{summary.get('return_field')}`) | mean {_figure(returns['mean'])}, "
                     f"std {_figure(returns['std'])}, min {_figure(returns['min'])}, max {_figure(returns['max'])} |")
    return lines + ["", "(As of when this card was written: writing the card again updates them.)", ""]


def _json_type(value: Any) -> str:
    return {dict: "JSON object", list: "JSON array", str: "string", bool: "boolean", type(None): "null"}.get(
        type(value), "number" if isinstance(value, (int, float)) else type(value).__name__)


def _check_card(card: DatasetCard) -> None:
    for key in TEXT_KEYS:
        value = getattr(card, key)
        authors = (key in ("author", "author_email") and isinstance(value, list)
                   and all(isinstance(v, str) for v in value))
        if value is not None and not isinstance(value, str) and not authors:
            what = "a string or a list of strings" if key.startswith("author") else "a string"
            raise InvalidDataError(
                f"card key '{key}' must be {what} or null (got a {_json_type(value)}: {value!r:.80})")
    if card.name is not None and not _NAME.fullmatch(card.name):
        raise InvalidDataError(f"card key 'name' must look like 'namespace/name-vN' (namespace optional, N a "
                               f"version number), e.g. 'mujoco/hopper-expert-v0' (got {card.name!r:.80})")
    for key in ("env_spec", *_SPACE_KEYS):
        value = getattr(card, key)
        if value is not None and not isinstance(value, dict):
            raise InvalidDataError(f"card key '{key}' must be a JSON object or null (got a {_json_type(value)}); pass "
                                   f"{'json.loads(spec.to_json())' if key == 'env_spec' else 'space_to_json(space)'}")
        if key in _SPACE_KEYS and value is not None and not isinstance(value.get("type"), str):
            raise InvalidDataError(f"card key '{key}' must describe a space with a 'type' such as \"Box\" "
                                   f"(got keys {sorted(value)[:8]}); make it with space_to_json(space)")
    for key in _SCORE_KEYS:
        value = getattr(card, key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value)):
            raise InvalidDataError(f"card key '{key}' must be a finite number or null (got {value!r:.80})")
    count = card.num_episodes_average_score
    if count is not None and (isinstance(count, bool) or not isinstance(count, int) or count < 0):
        raise InvalidDataError(f"card key 'num_episodes_average_score' must be an integer >= 0 "
                               f"or null (got {count!r:.80})")
    _check_provenance(card.provenance)
    if not isinstance(card.extra, dict):
        raise InvalidDataError(f"card key 'extra' must be a JSON object (got a {_json_type(card.extra)})")
    for key in (*TEXT_KEYS, "seeds", "extra", "env_spec", *_SPACE_KEYS, "provenance"):
        _check_plain(getattr(card, key), key)


def _check_plain(value: Any, where: str, depth: int = 0) -> None:
    """``value`` is plain JSON that reads back as it is: null, booleans, ints, finite floats, UTF-8 strings,
    lists (or tuples) and objects with string keys, nested at most MAX_DEPTH levels."""
    def refuse(what: str) -> InvalidDataError:
        return InvalidDataError(f"a dataset card must hold plain JSON values (no NaN, no objects): card key {where} "
                                f"{what}; convert it to plain JSON (str, int, float, bool, None, list, dict)")
    if depth > MAX_DEPTH:
        raise refuse(f"is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise refuse(f"holds a string that is not valid Unicode ({value!r:.80})") from None
    elif isinstance(value, float) and not math.isfinite(value):
        raise refuse(f"holds {value} (JSON has no NaN or infinity)")
    elif isinstance(value, (list, tuple)):
        for number, item in enumerate(value):
            _check_plain(item, f"{where}[{number}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise refuse(f"has the key {key!r:.40} of type {type(key).__name__} (JSON keys are strings)")
            _check_plain(item, f"{where}[{key!r:.40}]", depth + 1)
    elif value is not None and not isinstance(value, (int, float)):
        raise refuse(f"holds a value of type {type(value).__name__} ({value!r:.60})")


def _check_provenance(records: Any) -> None:
    if not isinstance(records, list):
        raise InvalidDataError(f"card key 'provenance' must be a JSON array of records (got a {_json_type(records)})")
    for number, record in enumerate(records):
        if not isinstance(record, dict):
            raise InvalidDataError(f"provenance record {number} must be a JSON object (got a {_json_type(record)})")
        for key in _PROVENANCE_KEYS:
            if not isinstance(record.get(key), str):
                raise InvalidDataError(f"provenance record {number} must have '{key}' as a string (got "
                                       f"{record.get(key)!r:.80}); add records with add_provenance()")


def _cell(value: Any) -> str:
    """A value as one Markdown table cell (no newline, no bare pipe)."""
    text = ", ".join(value) if isinstance(value, list) else str(value)
    return " ".join(text.split()).replace("|", "\\|")


def _env_text(spec: dict | None) -> str | None:
    if not spec:
        return None
    steps = spec.get("max_episode_steps")
    return f"`{spec.get('id')}`" + (f", at most {steps} steps an episode" if steps else "")


def _space_text(space: Any) -> str | None:
    if not isinstance(space, dict):
        return None
    kind, sub = space.get("type"), space.get("subspaces")
    if kind == "Box":
        low, high = space.get("low"), space.get("high")
        bounds = f"{low}, {high}, " if not isinstance(low, list) and not isinstance(high, list) else ""
        return f"Box({bounds}{tuple(space.get('shape', ()))}, {space.get('dtype')})"
    if kind == "Dict" and isinstance(sub, dict):
        return f"Dict({', '.join(f'{key}: {_space_text(value)}' for key, value in sub.items())})"
    if kind == "Tuple" and isinstance(sub, list):
        return f"Tuple({', '.join(str(_space_text(value)) for value in sub)})"
    details = ", ".join(f"{key}={value}" for key, value in space.items() if key not in ("type", "charset"))
    return f"{kind}({details})"


def _score_text(card: DatasetCard) -> str | None:
    low, high, count = card.ref_min_score, card.ref_max_score, card.num_episodes_average_score
    if low is None and high is None:
        return None
    text = ", ".join(f"{word} {value}" for word, value in (("min", low), ("max", high)) if value is not None)
    return text + (f" (each an average over {count} episodes)" if count else "")


def _provenance_text(record: dict) -> str:
    details = {key: value for key, value in record.items() if key not in _PROVENANCE_KEYS}
    text = f"{record.get('time')}: {record.get('kind')} from `{record.get('source')}` ({record.get('tool')})"
    return _cell(text + (f"; {json.dumps(details)[:300]}" if details else ""))


# ---- reading and writing -----------------------------------------------------------------------------


def read_card(folder: str | os.PathLike) -> DatasetCard | None:
    """The card of the store at ``folder``, or None when it has no card.json."""
    folder = store_folder(folder, need_meta=False)
    path = folder / CARD_FILE
    try:  # a regular file inside the folder, at most _TEXT_LIMIT bytes (a FIFO, a link out or a huge file: refused)
        raw = folderio.read_bounded(folder, path, _TEXT_LIMIT, doing="read the card")
    except MissingFileError:
        return None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorruptStoreError(f"{path} cannot be read as UTF-8 text ({error}); restore it from a copy, or delete "
                                f"it and write the card again") from None
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as error:
        raise CorruptStoreError(f"{path} is not valid JSON ({str(error)[:200]}); restore it from a copy, or delete it "
                                f"and write the card again") from None
    if not isinstance(data, dict):
        raise CorruptStoreError(f"{path} must hold a JSON object (got a {_json_type(data)}); restore it from a copy, "
                                f"or delete it and write the card again")
    try:
        return DatasetCard.from_json(data)
    except InvalidDataError as error:
        raise CorruptStoreError(f"{path} is not a valid dataset card: {error}") from None


def write_card(folder: str | os.PathLike, card: DatasetCard) -> None:
    """Write ``card.json`` and ``README.md`` atomically into the store at ``folder``."""
    if not isinstance(card, DatasetCard):
        raise OptionError(f"card must be a DatasetCard (got {type(card).__name__}); build one with "
                               f"DatasetCard(name=...) or DatasetCard.from_json(data)")
    folder = store_folder(folder)
    with _folder_lock(folder):
        _save(folder, card)


def update_card(folder: str | os.PathLike, **values: Any) -> DatasetCard:
    """Merge ``values`` into the store's card (a new one if it has none), write it, return it. A gymnasium
    ``EnvSpec`` or ``Space`` may be passed as such for ``env_spec`` and the spaces."""
    folder = store_folder(folder)
    known = {key.name for key in fields(DatasetCard)} - {"unknown"}
    unknown = sorted(set(values) - known)
    if unknown:
        raise InvalidDataError(f"unknown card keys {unknown} (known: {sorted(known)}); put your own values in extra=")
    with _folder_lock(folder):
        card = read_card(folder) or DatasetCard()
        for key, value in values.items():
            setattr(card, key, _plain(key, value))
        _save(folder, card)
    return card


def add_provenance(folder: str | os.PathLike, kind: str, source: str | os.PathLike, **details: Any) -> DatasetCard:
    """Append one provenance record (``kind``, ``source``, the time now in UTC, this tool) to the card."""
    return _add_record(folder, kind, source, details)


def record_edit(store: Any, kind: str, **details: Any) -> DatasetCard:
    """An edit's provenance record on the card of the writer ``store`` (an ``EpisodeStore``): the README's summary is
    read from ``store`` itself (the live episodes' table and kept returns), not from a store opened for it."""
    return _add_record(store.folder, kind, str(store.folder), details, store)


def _add_record(folder: str | os.PathLike, kind: str, source: str | os.PathLike, details: dict[str, Any],
                store: Any = None) -> DatasetCard:
    from .._version import __version__

    if not isinstance(kind, str) or not kind:
        raise OptionError(f"kind must be a non-empty string such as 'minari' or 'gymnasium' (got {kind!r})")
    record = {"kind": kind, "source": os.fspath(source) if isinstance(source, os.PathLike) else source,
              "time": datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z"),
              "tool": f"memmap_replay {__version__}", **details}
    if not isinstance(record["source"], str):
        raise OptionError(f"source must be a path or a dataset id (got {source!r:.80})")
    folder = store_folder(folder)
    with _folder_lock(folder):
        card = read_card(folder) or DatasetCard()
        card.provenance = [*card.provenance, record]
        _save(folder, card, store)
    return card


def _plain(key: str, value: Any) -> Any:
    """gymnasium objects given to update_card, as their JSON."""
    if key == "env_spec" and hasattr(value, "to_json") and not isinstance(value, dict):
        return json.loads(value.to_json())
    if key in _SPACE_KEYS and value is not None and not isinstance(value, dict):
        return space_to_json(value)
    return value


def _save(folder: Path, card: DatasetCard, store: Any = None) -> None:
    """Write card.json and README.md; the README's summary from ``store`` when given (a writer's), else from a store
    opened read-only."""
    text = (json.dumps(card.to_json(), indent=2, ensure_ascii=False) + "\n").encode("utf-8")
    summary = _summary_of(folder) if store is None else _summary_from(store)
    readme = card.render(fields_of=_schema_of(folder), summary=summary).encode("utf-8")
    if max(len(text), len(readme)) > _TEXT_LIMIT:
        raise InvalidDataError(f"a dataset card must take at most {_TEXT_LIMIT >> 20} MiB as card.json and README.md "
                               f"(got {len(text):,} and {len(readme):,} bytes), so that `unpack` accepts it; keep "
                               f"large data (weights, logs) in files of your own, outside the card")
    _write_atomic(folder / CARD_FILE, text)
    _write_atomic(folder / README_FILE, readme)
    _refresh_entries(folder, (CARD_FILE, README_FILE))


def _schema_of(folder: Path) -> dict | None:
    try:
        return fmt.read_meta(folder).schema.to_json()
    except Exception:  # noqa: BLE001 - the README simply leaves the table out
        return None


def _summary_of(folder: Path) -> dict | None:
    """The live episodes' counts, lengths and returns (read-only, no lock), or None when they cannot be read."""
    from ..core.store import EpisodeStore  # noqa: PLC0415

    try:
        store = EpisodeStore.open(folder, "r")
    except Exception:  # noqa: BLE001 - the README simply leaves the section out
        return None
    try:
        return _summary_from(store)
    finally:
        store.close()


def _summary_from(store: Any) -> dict | None:
    """The live episodes' counts, lengths and returns of an open store, or None when they cannot be read."""
    from .stats import compression_summary, episode_summary  # noqa: PLC0415

    try:
        summary = episode_summary(store)
        compression = compression_summary(store)
        return {**summary, "compression": compression} if compression else summary
    except Exception:  # noqa: BLE001 - the README simply leaves the section out
        return None


# ---- gymnasium spaces as JSON ------------------------------------------------------------------------


def space_to_json(space: Any) -> dict:
    """A gymnasium space (Box, Discrete, MultiDiscrete, MultiBinary, Text, Dict, Tuple) as a JSON object."""
    from gymnasium import spaces  # noqa: PLC0415 - gymnasium is optional

    if isinstance(space, spaces.Box):
        return {"type": "Box", "dtype": str(space.dtype), "shape": list(space.shape),
                "low": _bound_to_json(space.low), "high": _bound_to_json(space.high)}
    if isinstance(space, spaces.Discrete):
        return {"type": "Discrete", "dtype": str(space.dtype), "n": int(space.n), "start": int(space.start)}
    if isinstance(space, spaces.MultiDiscrete):
        return {"type": "MultiDiscrete", "dtype": str(space.dtype), "nvec": space.nvec.tolist(),
                "start": space.start.tolist()}
    if isinstance(space, spaces.MultiBinary):
        return {"type": "MultiBinary", "n": space.n if isinstance(space.n, int) else list(space.n)}
    if isinstance(space, spaces.Text):
        return {"type": "Text", "max_length": space.max_length, "min_length": space.min_length,
                "charset": "".join(sorted(space.character_set))}
    if isinstance(space, spaces.Dict):
        return {"type": "Dict", "subspaces": {key: space_to_json(sub) for key, sub in space.spaces.items()}}
    if isinstance(space, spaces.Tuple):
        return {"type": "Tuple", "subspaces": [space_to_json(sub) for sub in space.spaces]}
    raise InvalidDataError(f"cannot describe {type(space).__name__} {space!r:.80} as JSON (supported: Box, Discrete, "
                           f"MultiDiscrete, MultiBinary, Text, Dict, Tuple)")


def _bound_to_json(bound: Any) -> Any:
    import numpy as np  # noqa: PLC0415

    flat = bound.reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return _number_to_json(flat[0].item())
    return np.vectorize(_number_to_json, otypes=[object])(bound).tolist() if bound.size else []


def _number_to_json(value: Any) -> Any:
    if isinstance(value, float) and math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return value


def space_from_json(data: Any) -> Any:
    """The gymnasium space a ``space_to_json`` object describes (no pickle; InvalidDataError if malformed)."""
    from gymnasium import spaces  # noqa: PLC0415 - gymnasium is optional
    import numpy as np  # noqa: PLC0415

    kind = data.get("type") if isinstance(data, dict) else None
    try:
        if kind == "Box":
            dtype, shape = np.dtype(data["dtype"]), tuple(data["shape"])
            low, high = (np.asarray(_bound_from_json(data[key])) for key in ("low", "high"))
            low, high = (np.broadcast_to(value, shape).astype(dtype) for value in (low, high))
            return spaces.Box(low=low, high=high, shape=shape, dtype=dtype)
        if kind == "Discrete":
            return spaces.Discrete(int(data["n"]), start=int(data.get("start", 0)), dtype=data.get("dtype", "int64"))
        if kind == "MultiDiscrete":
            return spaces.MultiDiscrete(data["nvec"], dtype=data.get("dtype", "int64"), start=data.get("start"))
        if kind == "MultiBinary":
            return spaces.MultiBinary(data["n"])
        if kind == "Text":
            return spaces.Text(int(data["max_length"]), min_length=int(data.get("min_length", 1)),
                               charset=data["charset"])
        if kind == "Dict":
            return spaces.Dict({key: space_from_json(sub) for key, sub in data["subspaces"].items()})
        if kind == "Tuple":
            return spaces.Tuple([space_from_json(sub) for sub in data["subspaces"]])
    except InvalidDataError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError) as error:
        raise InvalidDataError(
            f"malformed {kind} space description ({error!r:.200}): {json.dumps(data)[:200]}") from None
    raise InvalidDataError(f"a space description must have 'type' one of Box, Discrete, MultiDiscrete, MultiBinary, "
                           f"Text, Dict, Tuple (got {kind!r:.80})")


def _bound_from_json(value: Any) -> Any:
    if isinstance(value, list):
        return [_bound_from_json(item) for item in value]
    if value in ("inf", "-inf"):
        return float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"a Box bound must be a number, 'inf' or '-inf' (got {value!r:.40})")
    return value
