"""Image fields: their layout, and their rows as RGB pixels (uint8), for ``memmap_replay.frames``.

Layout (``image_layout``): a step field of shape (H, W), (H, W, C) or (C, H, W) with C in 1, 3, 4, or a
frame stack: (k, H, W), (k, H, W, C), (k, C, H, W), or (H, W, k) given as ``layout='HWK'``. From the
shape alone: a last axis of 1, 3 or 4 is channels (HWC); else a first axis of 1 or 3 is channels (CHW);
else the first axis is a stack of frames (so an Atari stack (4, 84, 84) is four frames, not RGBA).
``layout=`` overrides the guess. A stack shows its last (newest) frame, or with ``stack='tile'`` all k
frames side by side, oldest first. Alpha is dropped; grayscale is shown as gray.

Values (``to_uint8``, ``resolve_range``): uint8 as they are; bool as 0 / 255; floats as [0, 1] when every
value shown is at most 1, else as [0, 255]; other integers as [0, 255]; ``value_range=(low, high)`` maps
low..high to 0..255. Values outside are clipped and NaN shows as 0.

Numpy only: nothing here reads a store or needs pillow.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import OptionError
from ..core.options import choice, integer, number

__all__ = ["LAYOUTS", "STACK_MODES", "image_layout", "FrameFormat", "channels_last", "to_uint8", "peak",
           "resolve_range"]

LAYOUTS = ("HW", "HWC", "CHW", "KHW", "HWK", "KHWC", "KCHW")
STACK_MODES = ("last", "tile")
_MIN_SIDE = 64                  # scale=None enlarges frames (by whole pixels) to at least this
_MAX_SCALE = 16


def image_layout(shape: tuple[int, ...], layout: str | None = None, *, field: str = "field") -> str:
    """The layout of a field of this shape per row (one of ``LAYOUTS``): ``layout`` checked, or guessed."""
    shape = tuple(shape)
    what = f"field {field!r} has shape {shape}"
    if layout is not None:
        choice(layout, "layout", LAYOUTS)
        channels = shape[layout.index("C")] if "C" in layout and len(shape) == len(layout) else 1
        if len(shape) != len(layout) or channels not in (1, 3, 4) or 0 in shape:
            raise OptionError(f"layout {layout!r} does not fit: {what}; {layout!r} needs {len(layout)} "
                                   f"axes{', C in 1, 3, 4' if 'C' in layout else ''}, none of them 0")
        return layout
    guess, rgb = None, (1, 3, 4)
    if 0 not in shape and len(shape) == 2:
        guess = "HW"
    elif 0 not in shape and len(shape) == 3:
        guess = "HWC" if shape[2] in rgb else "CHW" if shape[0] in (1, 3) else "KHW"
    elif 0 not in shape and len(shape) == 4:
        guess = "KHWC" if shape[3] in rgb else "KCHW" if shape[1] in rgb else None
    if guess is None:
        raise OptionError(
            f"{what}, which is not an image: an image field has shape (H, W), (H, W, C) or (C, H, W) with C in "
            f"1, 3, 4, or is a frame stack (k, H, W), (k, H, W, C) or (k, C, H, W); choose an image field, or "
            f"pass layout= (one of {', '.join(LAYOUTS)})")
    return guess


@dataclass(frozen=True)
class FrameFormat:
    """How rows of one field become RGB frames (n, height, width, 3) of uint8."""

    layout: str
    stack: str
    scale: int
    height: int
    width: int

    @classmethod
    def of(cls, spec, layout: str | None, stack: str, scale: int | None) -> "FrameFormat":
        if spec.dtype.kind not in "biuf":
            raise OptionError(f"field {spec.name!r} has dtype {spec.dtype}, which is not an image: an image "
                                   f"field is uint8, bool, an integer or a float")
        layout = image_layout(spec.shape, layout, field=spec.name)
        stack = choice(stack, "stack", STACK_MODES)
        sizes = dict(zip(layout, spec.shape))
        height, width = sizes["H"], sizes["W"] * (sizes.get("K", 1) if stack == "tile" else 1)
        if scale is None:
            scale = min(_MAX_SCALE, max(1, math.ceil(_MIN_SIDE / min(sizes["H"], sizes["W"]))))
        scale = integer(scale, "scale", low=1, high=_MAX_SCALE)
        return cls(layout, stack, scale, height * scale, width * scale)

    def pixels(self, rows: np.ndarray, value_range: tuple[float, float] | None) -> np.ndarray:
        """Rows (n, *field_shape) as RGB frames (n, height, width, 3) uint8."""
        frames = channels_last(rows, self.layout)
        if frames.ndim == 5:  # a stack (n, k, H, W, C)
            if self.stack == "last":
                frames = frames[:, -1]
            else:
                n, k, h, w, c = frames.shape
                frames = frames.transpose(0, 2, 1, 3, 4).reshape(n, h, k * w, c)
        frames = to_uint8(frames[..., :3], value_range)  # alpha dropped
        if frames.shape[-1] == 1:
            frames = np.repeat(frames, 3, axis=-1)
        if self.scale > 1:
            frames = frames.repeat(self.scale, axis=1).repeat(self.scale, axis=2)
        return np.ascontiguousarray(frames)


def channels_last(rows: np.ndarray, layout: str) -> np.ndarray:
    """(n, H, W, C) for a single frame, (n, k, H, W, C) for a stack: views, no copy."""
    if layout in ("HW", "KHW"):
        return rows[..., None]
    if layout == "CHW":
        return np.moveaxis(rows, 1, -1)
    if layout == "HWK":
        return np.moveaxis(rows, -1, 1)[..., None]
    if layout == "KCHW":
        return np.moveaxis(rows, 2, -1)
    return rows  # HWC, KHWC


def to_uint8(values: np.ndarray, value_range: tuple[float, float] | None) -> np.ndarray:
    if value_range is None and values.dtype == np.uint8:
        return values
    if value_range is None and values.dtype == np.bool_:
        return values.astype(np.uint8) * np.uint8(255)
    low, high = value_range if value_range is not None else (0.0, 255.0)
    scaled = (values.astype(np.float32) - np.float32(low)) * np.float32(255.0 / (high - low))
    np.nan_to_num(scaled, copy=False, nan=0.0, posinf=255.0, neginf=0.0)
    return np.rint(np.clip(scaled, 0.0, 255.0, out=scaled)).astype(np.uint8)


def peak(rows: np.ndarray) -> float:
    """The largest finite value (0 when there is none)."""
    finite = rows[np.isfinite(rows)]
    return float(finite.max()) if finite.size else 0.0


def resolve_range(dtype: np.dtype, value_range: Any, largest) -> tuple[float, float] | None:
    """The value range shown as 0..255; ``largest()`` is asked only for float fields without one."""
    if value_range is not None:
        if not isinstance(value_range, (tuple, list)) or len(value_range) != 2:
            raise OptionError(f"value_range must be a pair (low, high) (got {value_range!r})")
        low, high = number(value_range[0], "value_range low"), number(value_range[1], "value_range high")
        if high <= low:
            raise OptionError(f"value_range must have high > low (got {value_range!r})")
        return low, high
    if dtype.kind == "f":
        return (0.0, 1.0) if largest() <= 1.0 else (0.0, 255.0)
    return None
