"""Frames on demand: one row of an image field as a PNG, encoded per request and kept in a small LRU cache.

A frame is one row read from the field's memory map (never the field, never the episode: a float field's
value range is taken once per episode from at most 16 of its rows spread over it, as ``frames`` decides it:
[0, 1] when no value is above 1, else [0, 255]); a frame above 4096 x 4096 pixels or 64 MB a row is refused
(413). Pixels come from ``images.FrameFormat`` at scale 1 (the page enlarges them
with ``image-rendering: pixelated``, so a PNG holds the stored pixels and stays small); pillow encodes
them (``pip install 'memmap-replay[video]'``) at a low compression level: speed over a few bytes.
"""

from __future__ import annotations

import io
import threading
from collections import OrderedDict
from typing import Hashable

import numpy as np

from ...core.extras import require_extra
from ..images import FrameFormat, image_layout

__all__ = ["image_fields", "plot_fields", "encode_png", "LruBytes"]

PLOT_LIMIT = 16  # numbers per row: fields up to this size are plotted against the step
_MIN_IMAGE_SIDE = 8  # a 2-D field smaller than this is plotted (if small enough), not shown as pictures


def _image_info(spec) -> dict | None:
    """What the page needs to show a field as frames, or None when it is not an image field."""
    if spec.dtype.kind not in "biuf":
        return None
    try:
        layout = image_layout(spec.shape, field=spec.name)
    except ValueError:
        return None
    sizes = dict(zip(layout, spec.shape))
    if min(sizes["H"], sizes["W"]) < _MIN_IMAGE_SIDE:
        return None
    return {"name": spec.name, "layout": layout, "height": sizes["H"], "width": sizes["W"],
            "stack": sizes.get("K", 1), "dtype": spec.dtype.name}


def image_fields(schema) -> dict[str, dict]:
    """Image fields (see ``images.image_layout``, at least 8 x 8 pixels): name -> layout, sizes, stack depth."""
    found = {name: _image_info(spec) for name, spec in schema.fields.items()}
    return {name: info for name, info in found.items() if info is not None}


def plot_fields(schema) -> tuple[str, ...]:
    """Numeric step fields of at most ``PLOT_LIMIT`` numbers per row that are not images: plotted per step."""
    images = image_fields(schema)
    return tuple(name for name, spec in schema.fields.items()
                 if name not in images and spec.dtype.kind in "biuf" and int(np.prod(spec.shape)) <= PLOT_LIMIT)


def encode_png(spec, row: np.ndarray, *, stack: str, value_range) -> bytes:
    """One stored row of an image field as PNG bytes (RGB, the stored size; a tiled stack side by side)."""
    image = require_extra("PIL.Image", "video", "showing frames in the viewer", package="pillow")
    pixels = FrameFormat.of(spec, None, stack, 1).pixels(row[None], value_range)[0]
    out = io.BytesIO()
    image.fromarray(pixels).save(out, format="PNG", compress_level=1)
    return out.getvalue()


class LruBytes:
    """A thread-safe LRU cache of encoded frames, bounded by entries and bytes."""

    def __init__(self, *, entries: int = 512, nbytes: int = 32 << 20):
        self._items: OrderedDict[Hashable, bytes] = OrderedDict()
        self._entries, self._limit, self._size = entries, nbytes, 0
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> bytes | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: Hashable, value: bytes) -> None:
        with self._lock:
            if key in self._items:
                self._size -= len(self._items.pop(key))
            self._items[key] = value
            self._size += len(value)
            while self._items and (len(self._items) > self._entries or self._size > self._limit):
                self._size -= len(self._items.popitem(last=False)[1])

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._size = 0

    def __len__(self) -> int:
        return len(self._items)
