"""``verify``'s checks of compressed fields (format 2.0): ``state.frames`` in meta.json, and each live row's frame.

A compressed field ``image`` is ``steps/image.index.npy`` (int64 (rows, 2): offset and length of each row's frame)
and ``steps/image.frames.npy`` (uint8: the frames back to back); ``verify`` checks both files as it checks step
files (dtype, shape, rows: the index holds ``state.rows`` rows, the frames at least
``state.frames["image"]["bytes"]`` bytes). Here, for every live row (a final-observation row included):

- its index entry lies inside the committed frames (``offset + length <= bytes``) with a length of 1 .. the
  most a frame of one row takes (``core.codecs.frame_bound``);
- an episode's frames are contiguous (row r + 1's frame starts where row r's ends), and no two live episodes
  share bytes of frames; ``state.frames[...]["head"]`` is the byte after the newest episode's frames (or 0);
- its frame decodes to exactly one row (``EncodedColumn.take`` in blocks, on the library's threads; the rows of a
  block that fails are decoded one by one to name each damaged one).

Findings name the field and the first damaged rows, and count the rest. Without the codec's package (the
``zstd`` extra) the frames cannot be decoded: a warning says so, and the rest is still checked.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..core.codecs import FrameError, ZstdFrames, frame_bound, frames_of
from ..core.encoded import EncodedColumn, bad_entries
from ..core.schema import FieldSpec, Schema
from ..errors import CorruptStoreError, MissingExtraError
from .stats import _chunks

__all__ = ["check_frames_state", "FieldFramesCheck"]

_MAX_LISTED = 5  # findings listed per kind; the rest are counted
_BLOCK_BYTES = 8 << 20  # decoded bytes per block of frames
_INDEX_ROWS = 1 << 20  # index entries read at a time
Report = Callable[[str, str], None]


def check_frames_state(data: Any, schema: Schema, problem: Report) -> dict[str, dict[str, int]] | None:
    """meta.json's ``state.frames`` (``data``: the state object): an entry per compressed field, each of integers
    0 <= head <= bytes < 2**62, and none for other fields. Returns the entries when they are all good."""
    where, encoded = "meta.json", sorted(schema.encoded)
    found = data.get("frames") if isinstance(data, dict) else None
    if not encoded:
        if found not in (None, {}):
            problem(where, f"'state.frames' must be absent or empty in a store without compressed fields (found "
                           f"{str(found)[:200]}); a reader refuses it")
            return None
        return {}
    if found is None:
        problem(where, f"'state.frames' is missing (expected an entry per compressed field {encoded}, e.g. "
                       f"{{\"{encoded[0]}\": {{\"head\": 0, \"bytes\": 0}}}}): where their frames end is unknown")
        return None
    if not isinstance(found, dict):
        problem(where, f"'state.frames' must be a JSON object with an entry per compressed field {encoded} (found "
                       f"{str(found)[:200]})")
        return None
    good = True
    unknown = sorted(set(found) - set(encoded))
    if unknown:
        problem(where, f"'state.frames' has entries for {unknown}, which are not compressed fields (expected entries "
                       f"for {encoded} only); a reader refuses it")
        good = False
    for name in encoded:
        entry = found.get(name)
        if name not in found:
            problem(where, f"'state.frames' has no entry for the compressed field {name!r} (expected "
                           f"{{\"head\": ..., \"bytes\": ...}})")
        elif not isinstance(entry, dict) or any(type(entry.get(key)) is not int for key in ("head", "bytes")):
            problem(where, f"'state.frames.{name}' must hold integers 'head' and 'bytes' (found {str(entry)[:200]})")
        elif not 0 <= entry["head"] <= entry["bytes"] < 2**62:
            problem(where, f"'state.frames.{name}' must have 0 <= head <= bytes < 2**62 (found head {entry['head']}, "
                           f"bytes {entry['bytes']})")
        else:
            continue
        good = False
    return {name: {"head": found[name]["head"], "bytes": found[name]["bytes"]} for name in encoded} if good else None


class FieldFramesCheck:
    """The live rows of one compressed field against its index and its frames (maps ``verify`` checked:
    ``index`` of ``state.rows`` rows, ``frames`` of the committed bytes); ``run`` returns the frames decoded."""

    def __init__(self, spec: FieldSpec, index: np.ndarray, frames: np.ndarray, head: int, problem: Report,
                 warn: Report):
        self.spec, self.index, self.frames, self.head = spec, index, frames, head
        self.problem, self.warn = problem, warn
        self.row_nbytes = spec.row_nbytes
        self.max_frame = frame_bound(spec.row_nbytes)
        self.index_file, self.frames_file = f"steps/{spec.name}.index.npy", f"steps/{spec.name}.frames.npy"
        # findings per kind: (listed lines, count)
        self.found: dict[str, tuple[list[str], int]] = {}

    def note(self, kind: str, lines: list[str], count: int) -> None:
        listed, total = self.found.get(kind, ([], 0))
        self.found[kind] = (listed + lines[:_MAX_LISTED - len(listed)], total + count)

    def run(self, ids: np.ndarray, start: np.ndarray, stop: np.ndarray,
            progress: Callable[[int], object] = lambda rows: None) -> int:
        """Check the rows ``start[i] .. stop[i] - 1`` of each live episode ``ids[i]``; ``progress(rows)`` is called
        as their frames are decoded."""
        codec = self.codec()
        column = None if codec is None else EncodedColumn(self.spec, self.index, self.frames, codec)
        owners, lows, highs = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        decoded = 0
        for picked, rows in _chunks(start, stop - start, _INDEX_ROWS):
            owner = np.repeat(ids[picked], (stop - start)[picked])
            good, (whole, lo, hi) = self.check_entries(rows, owner, picked, stop - start)
            owners.append(ids[picked][whole])
            lows.append(lo)
            highs.append(hi)
            if column is not None and codec is not None:
                decoded += self.decode(column, codec, rows[good], owner[good], progress)
        self.check_spans(ids, np.concatenate(owners), np.concatenate(lows), np.concatenate(highs))
        self.report()
        return decoded

    def codec(self) -> ZstdFrames | None:
        if self.spec.codec is None:  # (a FieldFramesCheck is made for compressed fields only)
            return None
        try:
            return frames_of(self.spec.codec, self.row_nbytes)
        except MissingExtraError as error:
            self.warn(self.frames_file, f"its frames were not decoded: {error} (the index entries and their bounds "
                                        f"were checked)")
            return None

    def check_entries(self, rows: np.ndarray, owner: np.ndarray, picked: np.ndarray, counts: np.ndarray
                      ) -> tuple[np.ndarray, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Bounds and contiguity of the entries of ``rows`` (whole episodes ``picked``, in row order); the mask of
        rows whose frames may be decoded, and (episodes of good frames, their first byte, the byte after)."""
        entries = np.asarray(self.index[rows])
        offsets, lengths = entries[:, 0], entries[:, 1]
        nbytes, name = len(self.frames), self.spec.name
        bad = bad_entries(offsets, lengths, nbytes, self.max_frame, written=True)
        hits = np.flatnonzero(bad)
        self.note("bounds", [f"field {name!r}, row {rows[i]} (live episode {owner[i]}): its index entry (offset "
                             f"{offsets[i]}, length {lengths[i]}) must lie inside the {nbytes} committed bytes of "
                             f"frames (state.frames in meta.json) with a length of 1 .. {self.max_frame}"
                             for i in hits[:_MAX_LISTED]], len(hits))
        same = owner[1:] == owner[:-1]
        expected = offsets[:-1] + lengths[:-1]
        gaps = np.flatnonzero(same & ~bad[1:] & ~bad[:-1] & (offsets[1:] != expected)) + 1
        self.note("contiguous", [f"field {name!r}, row {rows[i]} (live episode {owner[i]}): its frame starts at byte "
                                 f"{offsets[i]} (expected {expected[i - 1]}, right after row {rows[i - 1]}'s: an "
                                 f"episode's frames are contiguous)" for i in gaps[:_MAX_LISTED]], len(gaps))
        sizes = counts[picked]
        local = np.repeat(np.arange(len(picked)), sizes)
        broken = np.zeros(len(picked), bool)
        broken[local[bad]] = True
        broken[local[gaps]] = True
        last = np.cumsum(sizes) - 1
        first = last - sizes + 1
        whole = np.flatnonzero(~broken)
        return ~bad, (whole, offsets[first[whole]], offsets[last[whole]] + lengths[last[whole]])

    def check_spans(self, ids: np.ndarray, owners: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> None:
        """No two live episodes share bytes of frames; the head is the byte after the newest one's frames."""
        order = np.argsort(lo, kind="stable")
        owners, lo, hi = owners[order], lo[order], hi[order]
        reach = np.maximum.accumulate(hi) if len(hi) else hi
        clashes = np.flatnonzero(lo[1:] < reach[:-1]) + 1
        lines = []
        for k in clashes[:_MAX_LISTED]:
            j = int(np.argmax(hi[:k] > lo[k]))
            lines.append(f"field {self.spec.name!r}: live episodes {owners[j]} (bytes {lo[j]} .. {hi[j] - 1} of "
                         f"frames) and {owners[k]} (bytes {lo[k]} .. {hi[k] - 1}) overlap (expected each episode's "
                         f"frames on bytes of their own)")
        self.note("overlap", lines, len(clashes))
        newest = np.flatnonzero(owners == ids[-1]) if len(ids) else np.zeros(0, np.int64)
        # (at or after the newest one's frames: an edit of the newest episode leaves frames between them)
        if len(newest) and self.head != 0 and self.head < int(hi[newest[0]]):
            self.problem("meta.json", f"state.frames.{self.spec.name}.head is {self.head} (expected "
                                      f"{int(hi[newest[0]])} or more, after the frames of the newest live episode "
                                      f"{ids[-1]}, or 0); a writer would overwrite live frames")

    def decode(self, column: EncodedColumn, codec: ZstdFrames, rows: np.ndarray, owner: np.ndarray,
               progress: Callable[[int], object]) -> int:
        """Decode the frames of ``rows`` in blocks (EncodedColumn.take); the rows of a block that fails one by
        one, to name each damaged row."""
        block = max(1, _BLOCK_BYTES // max(1, self.row_nbytes))
        damaged: list[str] = []
        count = 0
        out = np.empty((min(block, len(rows)), self.row_nbytes), np.uint8)
        for at in range(0, len(rows), block):
            part = rows[at:at + block]
            try:
                column.take(part, out=out[:len(part)].view(self.spec.dtype).reshape(len(part), *self.spec.shape))
            except CorruptStoreError as error:
                damaged += self.damaged_rows(codec, part, owner[at:at + block]) or [str(error)]
            count += len(part)
            progress(len(part))
        self.note("decode", damaged[:_MAX_LISTED], len(damaged))
        return count

    def damaged_rows(self, codec: ZstdFrames, rows: np.ndarray, owner: np.ndarray) -> list[str]:
        frames, size = self.frames.view(np.ndarray), self.row_nbytes
        target, lines = np.empty(size, np.uint8), []
        for row, episode in zip(rows.tolist(), owner.tolist()):
            offset, length = (int(value) for value in self.index[row])
            try:
                codec.decode_into(frames[offset:offset + length], target)
            except FrameError as error:
                lines.append(f"field {self.spec.name!r}, row {row} (live episode {episode}): its frame (offset "
                             f"{offset}, length {length}) does not decode ({error}); reading it raises "
                             f"CorruptStoreError")
        return lines

    def report(self) -> None:
        files = {"bounds": self.index_file, "contiguous": self.index_file, "overlap": self.index_file,
                 "decode": self.frames_file}
        words = {"bounds": "live rows", "contiguous": "live rows", "overlap": "overlapping live episodes",
                 "decode": "live rows"}
        for kind, (lines, count) in self.found.items():
            for line in lines:
                self.problem(files[kind], line)
            if count > len(lines):
                self.problem(files[kind], f"and {count - len(lines)} more {words[kind]} like these")
