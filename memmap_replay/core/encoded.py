"""Compressed fields on disk: one encoded frame per row, and a per-row index of where each frame is. Numpy only.

A compressed field ``image`` is two standard ``.npy`` files in ``steps/`` (the format spec, ``core/format.py``):

- ``image.frames.npy``: uint8, the frames of the rows, back to back; an episode's frames are contiguous;
- ``image.index.npy``: int64 (rows, 2), per row the frame's offset in the frames file and its length; a length
  of 0, a row never written (it reads as zeros, as a raw field's unwritten rows do; no live row has one).

Every written row is one zstd frame, with its content size and a checksum of its content; a row that does not
compress (noise) is a frame of zstd's raw blocks, a few bytes more than the row. So every byte a reader decodes is
checked, whatever its index entry says.

Frames are placed as rows are: an episode's frames follow the previous episode's, and go back to offset 0 when
its rows do (a ring's wrap, or after ``clear()``). So in a ring the frames file holds about one lap of rows,
encoded; a writer evicts the oldest episodes whose rows *or* frames the new ones would overwrite.

Reading decodes straight into the batch's memory, on the library's threads (``core/threads.py``); a row asked
for twice in a batch (windows, frame stacks) is decoded once and copied. Every frame is checked before it is
decoded (its index entry must lie inside the frames file, its length at most a frame of one row,
``codecs.frame_bound``) and after (exactly one row of bytes, the frame's checksum): damage is a
``CorruptStoreError`` naming the field and the row. A length of 0 reads as zeros, as a raw field's unwritten
rows do (``verify`` reports one on a live row: only damage puts it there).
"""

from __future__ import annotations

from functools import partial
from typing import Any, Sequence

import numpy as np

from ..errors import CorruptStoreError, ReadOnlyError
from .codecs import FrameError, ZstdFrames, frame_bound, frames_of
from .format import NpyFile
from .schema import FieldSpec
from .threads import THREADS, split

__all__ = ["EncodedColumn", "EncodedField", "MIN_FRAMES_PER_TASK", "bad_entries", "frame_spans", "frames_limit"]

MIN_FRAMES_PER_TASK = 4  # frames a thread decodes at least (fewer: the thread's start costs more than the work)
MIN_COPY_BYTES_PER_TASK = 1 << 18  # bytes of repeated rows a thread copies at least
_MIN_GROWTH_BYTES = 1 << 20


def bad_entries(offsets: np.ndarray, lengths: np.ndarray, nbytes: int, max_frame: int, *, written: bool = False
                ) -> np.ndarray:
    """Which index entries cannot be a frame: outside the ``nbytes`` of frames, or longer than ``max_frame``
    (``codecs.frame_bound``); ``written``: a length of 0 (a row never written) is one too (a live row's, in verify)."""
    return ((lengths < int(written)) | (lengths > max_frame) | (offsets < 0) | (offsets > nbytes - lengths))


def frame_spans(index: np.ndarray, first_rows: np.ndarray, last_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The bytes of frames of episodes whose rows are ``first_rows .. last_rows`` (inclusive), as ``index`` says:
    (lo, hi)."""
    return index[first_rows, 0], index[last_rows, 0] + index[last_rows, 1]


class EncodedColumn:
    """A compressed field's rows as a read-only array: ``column[rows]`` and ``column.take(rows, out=...)`` decode.
    ``shape``, ``dtype``, ``len`` and ``nbytes`` are those of the decoded rows."""

    def __init__(self, spec: FieldSpec, index: np.ndarray, frames: np.ndarray, codec: ZstdFrames):
        self.spec, self.index, self.frames, self.codec = spec, index, frames, codec
        self.dtype = spec.dtype
        self.shape = (len(index), *spec.shape)
        self.ndim = len(self.shape)
        self.row_nbytes = spec.row_nbytes
        self.max_frame = frame_bound(spec.row_nbytes)
        self.nbytes = len(index) * self.row_nbytes

    def __len__(self) -> int:
        return self.shape[0]

    def __repr__(self) -> str:
        codec = self.spec.codec
        return (f"EncodedColumn({self.spec.name!r}, shape={self.shape}, dtype={self.dtype}, "
                f"codec={codec.name if codec else None!r}, {len(self.frames)} encoded bytes)")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        values: np.ndarray = self.take(np.arange(len(self)))
        return values if dtype is None else values.astype(dtype)

    def __getitem__(self, key: Any) -> Any:
        rest: tuple[Any, ...] = ()
        if isinstance(key, tuple):
            key, rest = (key[0], key[1:]) if key else (slice(None), ())
        count = len(self)
        if isinstance(key, slice):
            rows = np.arange(*key.indices(count), dtype=np.int64)
        elif isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if not -count <= int(key) < count:
                raise IndexError(f"index {int(key)} is out of bounds for axis 0 with size {count}")
            rows = np.asarray(int(key) % count, dtype=np.int64)
        else:
            chosen = np.asarray(key)
            if chosen.dtype == bool:
                if chosen.shape != (count,):
                    raise IndexError(f"a boolean index must have shape ({count},) (got {chosen.shape})")
                chosen = np.flatnonzero(chosen)
            if chosen.dtype.kind not in "iu":
                raise IndexError(f"only integers, slices and integer or boolean arrays are valid indices "
                                 f"(got {chosen.dtype})")
            if chosen.size and (chosen.min() < -count or chosen.max() >= count):
                raise IndexError(f"index out of bounds for axis 0 with size {count}")
            rows = np.where(chosen < 0, chosen + count, chosen).astype(np.int64)
        values = self.take(rows)
        values = values[(slice(None),) * rows.ndim + rest] if rest else values
        return values[()] if values.ndim == 0 else values  # (one value of a shape () field: a numpy scalar)

    def take(self, rows: Any, axis: int = 0, out: np.ndarray | None = None, mode: str = "clip") -> np.ndarray:
        """``column[rows]`` (rows of any shape; past the end: the last row, as numpy's 'clip') decoded into ``out``
        (C-contiguous and writable, of shape ``rows.shape + field shape``), or a new array."""
        rows = np.asarray(rows)
        shape = rows.shape + self.spec.shape
        if out is None:
            out = np.empty(shape, self.dtype)
        elif (out.dtype != self.dtype or out.shape != shape or not out.flags.c_contiguous
              or not out.flags.writeable):
            raise ValueError(f"out must be a writable C-contiguous {self.dtype} array of shape {shape} to take these "
                             f"rows of field {self.spec.name!r} (got {out.dtype}, shape {out.shape}, "
                             f"C-contiguous {out.flags.c_contiguous}, writable {out.flags.writeable}); pass "
                             f"out=np.empty({shape}, {self.dtype.name!r}), or no out")
        if axis != 0 or mode != "clip":
            raise ValueError(f"a compressed field's rows are taken along axis 0 with mode 'clip' (got axis={axis}, "
                             f"mode={mode!r}); take rows, then index the result")
        if not len(self) and rows.size:
            raise IndexError(f"field {self.spec.name!r} has no rows yet to take (asked for {rows.size}); store "
                             f"episodes first")
        flat_rows = np.clip(rows.reshape(-1), 0, len(self) - 1) if rows.size else rows.reshape(-1).astype(np.int64)
        flat_out = out.reshape(-1).view(np.uint8).reshape(len(flat_rows), self.row_nbytes)
        if not len(flat_rows):
            return out
        unique, first, inverse = np.unique(flat_rows, return_index=True, return_inverse=True)
        self._decode(unique, first, flat_out)
        if len(unique) < len(flat_rows):  # each row decoded once; its other places are copies of it
            inverse = inverse.reshape(-1)
            repeats = np.flatnonzero(first[inverse] != np.arange(len(flat_rows)))
            self._copy(flat_out, repeats.tolist(), first[inverse[repeats]].tolist())
        return out

    @staticmethod
    def _copy(out: np.ndarray, targets: list[int], sources: list[int]) -> None:
        """``out[targets] = out[sources]`` row by row (no temporary: a batch of windows repeats hundreds of MB),
        split over the library's threads."""
        def copy(part: slice) -> None:
            for target, source in zip(targets[part], sources[part]):
                out[target] = out[source]

        parts = THREADS.parts(len(targets) * out.shape[1], MIN_COPY_BYTES_PER_TASK)
        THREADS.run([partial(copy, part) for part in split(len(targets), parts)])

    def _decode(self, rows: np.ndarray, positions: np.ndarray, out: np.ndarray) -> None:
        entries = self.index[rows]
        offsets, lengths = entries[:, 0], entries[:, 1]
        bad = bad_entries(offsets, lengths, len(self.frames), self.max_frame)
        if bad.any():
            at = int(np.flatnonzero(bad)[0])
            raise self._corrupt(int(rows[at]), f"its index entry (offset {int(offsets[at])}, length "
                                               f"{int(lengths[at])}) lies outside the {len(self.frames)} bytes of "
                                               f"frames, or is longer than a frame of one row ({self.max_frame} "
                                               f"bytes)")
        parts = THREADS.parts(len(rows), MIN_FRAMES_PER_TASK)  # (1: run() decodes in the calling thread)
        starts, ends, where = offsets.tolist(), (offsets + lengths).tolist(), positions.tolist()
        THREADS.run([partial(self._decode_part, rows, starts, ends, where, out, part)
                     for part in split(len(rows), parts)])

    def _decode_part(self, rows: np.ndarray, starts: Sequence[int], ends: Sequence[int], where: Sequence[int],
                     out: np.ndarray, part: slice) -> None:
        frames, decode = self.frames, self.codec.decode_into
        for i in range(part.start, part.stop):
            start, end, target = starts[i], ends[i], out[where[i]]
            if end == start:  # a row never written (as a raw field's hole in the file: zeros)
                target[:] = 0
                continue
            try:
                decode(frames[start:end], target)
            except FrameError as error:
                raise self._corrupt(int(rows[i]), f"its frame does not decode ({error})") from None

    def _corrupt(self, row: int, why: str) -> CorruptStoreError:
        return CorruptStoreError(f"field {self.spec.name!r}, row {row}: {why}; the store's frames are damaged "
                                 f"(`python -m memmap_replay verify FOLDER` lists every damaged row)")


class EncodedField:
    """A compressed step field's two files, with the interface of a step file (``NpyFile``) that the store uses:
    ``rows``, ``array()``, ``grow()``, ``sync()``, ``close()``; plus the writer's ``encode`` and ``write``."""

    def __init__(self, spec: FieldSpec, index: NpyFile, frames: NpyFile):
        self.spec, self.index, self.frames = spec, index, frames
        self._codec: ZstdFrames | None = None
        self._column: EncodedColumn | None = None

    @property
    def codec(self) -> ZstdFrames:
        if self._codec is None:
            assert self.spec.codec is not None  # (an EncodedField is made for compressed fields only)
            self._codec = frames_of(self.spec.codec, self.spec.row_nbytes)
        return self._codec

    @property
    def path(self) -> Any:
        return self.index.path

    @property
    def files(self) -> tuple[NpyFile, NpyFile]:
        return self.index, self.frames

    @property
    def rows(self) -> int:
        return self.index.rows

    @rows.setter
    def rows(self, rows: int) -> None:
        self.index.rows = rows

    def array(self, *, random: bool = False) -> EncodedColumn:
        index, frames = self.index.array(random=random), self.frames.array(random=random)
        column = self._column
        if column is None or column.index is not index or column.frames is not frames:
            column = self._column = EncodedColumn(self.spec, index, frames, self.codec)
        return column

    def grow(self, rows: int) -> None:
        self.index.grow(rows)

    def ensure_bytes(self, nbytes: int, limit: int) -> int:
        """Room for ``nbytes`` bytes of frames (growing by doubling, up to ``limit``); the bytes the file holds."""
        if nbytes > self.frames.rows:
            self.frames.grow(min(limit, max(nbytes, 2 * self.frames.rows, _MIN_GROWTH_BYTES)))
        return self.frames.rows

    def encode(self, chunks: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """An episode's rows (chunks of rows) as (lengths, frames back to back), encoded on the library's
        threads."""
        rows = [row for chunk in chunks for row in np.ascontiguousarray(chunk).reshape(len(chunk), -1)]
        encoded: list[bytes] = [b""] * len(rows)
        encode = self.codec.encode

        def work(part: slice) -> None:
            for i in range(part.start, part.stop):
                encoded[i] = encode(rows[i])

        parts = THREADS.parts(len(rows), MIN_FRAMES_PER_TASK)
        THREADS.run([partial(work, part) for part in split(len(rows), parts)])
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(rows))
        return lengths, np.frombuffer(b"".join(encoded), np.uint8)

    def write(self, row: int, at: int, lengths: np.ndarray, blob: np.ndarray) -> None:
        """The frames of rows ``row ..`` at byte ``at``, then their index entries."""
        offsets = at + np.concatenate([[0], np.cumsum(lengths[:-1])]).astype(np.int64)
        self.frames.write_rows(at, blob)
        self.index.write_rows(row, np.stack([offsets, lengths], axis=1))

    def entries(self, start: int, stop: int, committed: int) -> np.ndarray:
        """The index entries (offset, length) of rows ``start .. stop - 1`` as int64 (rows, 2), each checked to lie
        within the ``committed`` bytes of frames and to be at most one row's frame long (a copy of the frames
        reads exactly these bytes): ``CorruptStoreError`` otherwise."""
        entries = np.array(self.index.array()[start:stop], dtype=np.int64)
        if bad_entries(entries[:, 0], entries[:, 1], committed, frame_bound(self.spec.row_nbytes)).any():
            folder = self.index.path.parent.parent
            raise CorruptStoreError(f"{folder}: field {self.spec.name!r}, rows {start}..{stop - 1}: their index "
                                    f"entries lie outside the {committed} committed bytes of frames; the store's "
                                    f"frames are damaged (`python -m memmap_replay verify {folder}` lists every "
                                    f"damaged row)")
        return entries

    def span(self, first_rows: np.ndarray, last_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The bytes of frames of episodes whose rows are ``first_rows .. last_rows`` (inclusive): (lo, hi)."""
        return frame_spans(self.index.array(), first_rows, last_rows)

    def write_rows(self, start: int, rows: np.ndarray) -> None:
        raise ReadOnlyError(f"field {self.spec.name!r} is compressed ({self.spec.describe()}): its stored rows cannot "
                            f"be changed in place; store the episode again, or make the field raw (no codec)")

    def sync(self) -> None:
        for file in self.files:
            file.sync()

    def close(self) -> None:
        self._column = None
        for file in self.files:
            file.close()


def frames_limit(spec: FieldSpec, max_steps: int) -> int:
    """The most bytes of frames a field may need: every row a frame of raw blocks."""
    return max_steps * frame_bound(spec.row_nbytes)
