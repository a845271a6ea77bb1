"""The viewer's episodes table: one row per live episode (id, length, return, end, scalar meta values),
kept in memory as numpy columns and queried with paging, sorting and filtering.

Columns are read without touching a step row except the reward's: ``length`` and ``end`` come from the
episode table, meta values from their per-episode files, ``return`` (when the store has a scalar
``reward``/``rewards`` field) is summed once per episode, in bounded chunks (``stats._episode_returns``),
and kept: a refresh sums the new episodes only. A store of 100,000 episodes is a few MB of columns;
sorting one takes milliseconds.

Filters are small expressions ``COLUMN OP VALUE`` (OP one of ``= != < <= > >=``), all of which must hold;
``end`` compares names ('terminated', 'truncated', 'none'), every other column numbers. A query has at most
``FILTER_COUNT`` filters of at most ``FILTER_CHARS`` characters each, split at their first operator (no
regular expression over the text: one request must not hold the server).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from ...core.episodes import end_names
from ...core.schema import Schema
from ...errors import OptionError
from ..stats import _REWARD_FIELDS, _episode_returns

__all__ = ["EpisodeColumns", "parse_filter", "TABLE_LIMIT"]

TABLE_LIMIT = 500  # rows per page at most
FILTER_CHARS = 200  # characters per filter at most
FILTER_COUNT = 16  # filters per query at most
_OP_START = re.compile(r"[<>=!]")
_OPS = {"=": np.equal, "==": np.equal, "!=": np.not_equal, "<": np.less, "<=": np.less_equal,
        ">": np.greater, ">=": np.greater_equal}
_END_VALUES = ("terminated", "truncated", "none")
_RESERVED = ("id", "length", "return", "end")  # the table's own columns (return: also when the store has no reward)


def reward_field(schema) -> str | None:
    """The scalar numeric reward field whose sum is an episode's return (None: the store has none)."""
    return next((name for name in _REWARD_FIELDS if name in schema.fields and schema.fields[name].shape == ()
                 and schema.fields[name].dtype.kind in "biuf"), None)


def table_meta_fields(schema) -> tuple[str, ...]:
    """Meta fields shown as table columns: the scalar numeric ones."""
    return tuple(name for name, spec in schema.meta_fields.items() if spec.shape == () and spec.dtype.kind in "biuf")


@dataclass(frozen=True)
class Filter:
    column: str
    op: str
    value: Any

    def mask(self, values: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore"):
            return _OPS[self.op](values, self.value)


def parse_filter(text: str, columns: tuple[str, ...]) -> Filter:
    """``'return > 10'`` as a Filter over one of ``columns``; OptionError says what is wrong and what fits."""
    example = "e.g. 'length >= 100', 'end = terminated' or 'seed != 3'"
    if isinstance(text, str) and len(text) > FILTER_CHARS:
        raise OptionError(f"a filter has at most {FILTER_CHARS} characters (got {len(text)}); {example}")
    # split at the first operator character, no regular expression over the whole text (one that
    # backtracked took seconds per long filter, the server's lock held all along)
    found = _OP_START.search(text) if isinstance(text, str) else None
    column = value = op = ""
    if found is not None:
        at = found.start()
        op = text[at:at + 2] if text[at:at + 2] in _OPS else text[at]
        column, value = text[:at].strip(), text[at + len(op):].strip()
    if op not in _OPS or not column or not value:
        raise OptionError(f"a filter must be COLUMN OP VALUE with OP one of = != < <= > >=, {example} (got {text!r})")
    if column not in columns:
        raise OptionError(f"filter {text!r} names no column: the columns are {', '.join(columns)}")
    if column == "end":
        if value not in _END_VALUES or op not in ("=", "==", "!="):
            raise OptionError(f"filter {text!r}: end is compared with = or != to one of {', '.join(_END_VALUES)}")
        return Filter(column, op, "" if value == "none" else value)
    try:
        number = float(value)
    except ValueError:
        raise OptionError(f"filter {text!r}: {column} is compared with a number (got {value!r}); {example}") from None
    return Filter(column, op, number)


class EpisodeColumns:
    """The live episodes' table columns, oldest first, updated from a store's live table by ``update``."""

    def __init__(self, schema: Schema) -> None:
        self.reward = reward_field(schema)
        self.meta_names = table_meta_fields(schema)
        base = ("id", "length", *(("return",) if self.reward else ()), "end")
        # a meta field named like a column of the table (id, length, return, end) is shown as 'meta.NAME': it
        # replaced the real column (the episode's id, length, return or end) in the table and the overview
        self.meta_columns: dict[str, str] = {}
        for name in self.meta_names:
            column = name
            while column in base or column in self.meta_columns or column in _RESERVED:
                column = f"meta.{column}"
            self.meta_columns[column] = name
        self.columns: tuple[str, ...] = (*base, *self.meta_columns)
        self.ids = self.starts = np.zeros(0, np.int64)
        self.values: dict[str, np.ndarray] = {name: np.zeros(0) for name in self.columns}

    def update(self, store, table) -> None:
        """Take the store's live ``table``: returns are summed for episodes not seen before only."""
        values = {"id": table.ids, "length": table.length.astype(np.int64), "end": end_names(table.end)}
        if self.reward:
            returns = np.full(len(table), np.nan)
            known = np.isin(table.ids, self.ids, assume_unique=True)
            where = np.searchsorted(self.ids, table.ids[known])
            # (an episode trimmed since keeps its id, not its rows: its return is summed again)
            known[known] = (self.starts[where] == table.start[known]) & (self.values["length"][where]
                                                                         == table.length[known])
            if known.any():
                where = np.searchsorted(self.ids, table.ids[known])
                returns[known] = self.values["return"][where]
            new = ~known
            if new.any():
                returns[new] = _episode_returns(store, self.reward, table.start[new], table.length[new])
            values["return"] = returns
        for column, name in self.meta_columns.items():
            values[column] = np.asarray(store.meta_array(name)[table.slots])
        self.ids, self.starts, self.values = table.ids.copy(), table.start.copy(), values

    def __len__(self) -> int:
        return len(self.ids)

    def query(self, *, offset: int = 0, limit: int = 50, sort: str = "id", descending: bool = False,
              filters: tuple[str, ...] = ()) -> dict:
        """One page of rows after filtering and sorting (a stable sort: ties keep episode order)."""
        if sort not in self.columns:
            raise OptionError(f"sort must be one of the columns {', '.join(self.columns)} (got {sort!r})")
        if len(filters) > FILTER_COUNT:
            raise OptionError(f"at most {FILTER_COUNT} filters at a time (got {len(filters)})")
        keep = np.ones(len(self.ids), dtype=bool)
        for text in filters:
            rule = parse_filter(text, self.columns)
            keep &= rule.mask(self.values[rule.column])
        picked = np.flatnonzero(keep)
        order = _order(self.values[sort][picked], descending)
        page = picked[order[offset:offset + limit]]
        rows = [[_plain(self.values[name][i]) for name in self.columns] for i in page.tolist()]
        return {"columns": list(self.columns), "rows": rows, "total": len(self.ids), "matched": int(len(picked)),
                "offset": offset, "limit": limit, "sort": sort, "descending": descending, "filters": list(filters)}


def _order(key: np.ndarray, descending: bool) -> np.ndarray:
    """Positions of ``key`` sorted (stable: ties keep episode order), NaN (no return) last either way."""
    _, rank = np.unique(key, return_inverse=True)
    rank = rank.reshape(-1).astype(np.int64)
    if descending:
        rank = -rank
    if key.dtype.kind == "f":
        rank[np.isnan(key)] = np.iinfo(np.int64).max
    return np.argsort(rank, kind="stable")


def _plain(value: Any) -> Any:
    """A numpy scalar as JSON: NaN and inf as None."""
    value = value.item() if hasattr(value, "item") else value
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value
