"""Augmentations of image fields, vectorized over the batch: DrQ's random shift."""

from __future__ import annotations

import functools
import os
from typing import Any, cast

import numpy as np
import torch

from ..errors import OptionError
from ..core.options import seed_option, short
from .transform_base import FieldTransform
from .transport import batch_number

__all__ = ["RandomShift"]


class RandomShift(FieldTransform):
    """DrQ's random shift (Kostrikov et al. 2020): each image is padded by ``pad`` pixels on every side,
    repeating its edge (replicate padding), and cropped back to its size at a random offset in
    [0, 2 * pad] per axis, drawn per item. Vectorized: the batch is padded once, then every output row
    is one window of a padded row, all gathered in one numpy call (no per-item loop). Shift before
    ``ToFloat``: it then moves a quarter of the bytes. Fields are (B, ..., H, W) with the batch first: (B, C, H, W), or
    (B, T, C, H, W) for windows, trajectories and frame stacks, where all T frames of an item get the
    same shift (as DrQ-v2 shifts stacked frames together). A time-major window (T, B, ...) needs
    ``Rearrange`` to batch-first before it. Fields named together get the same shift per item.

    Randomness: ``seed=None`` draws from torch's global RNG (which DataLoader seeds per worker, so workers
    differ, and ``torch.manual_seed`` before the loop makes it repeat). With a ``seed`` the transform has
    its own generator: in the main process the same seed gives the same sequence of shifts, batch after
    batch; in a DataLoader worker it is seeded by (seed, the worker's seed), so each worker draws its own
    shifts, new each epoch, and the whole run repeats when the workers' seeds do: the loader's ``seed=`` (or
    ``generator=torch.Generator().manual_seed(s)``) seeds them (``views.transport.worker_generator``), else
    torch's global RNG does (call ``torch.manual_seed(s)`` first). With gather
    threads (``workers="threads"``) each batch draws from (seed, the loader's iteration, the batch's
    number), or without a seed from (a seed drawn as the iteration begins, from the loader's seed or generator
    as a worker process's seed is, else from torch's global RNG, the batch's number), so the shifts repeat,
    whichever thread makes which batch, as they do in this process. (Threads and processes draw different
    shifts from the same seeds; each repeats its own.)"""

    def __init__(self, fields: Any, *, pad: int = 4, seed: int | None = None):
        super().__init__(fields)
        if isinstance(pad, (bool, np.bool_)) or not isinstance(pad, (int, np.integer)) or pad < 0:
            raise OptionError(f"pad must be an int >= 0, the pixels of the shift (got {short(pad)}); DrQ uses 4 "
                              f"for 84 x 84 images")
        self.pad = int(pad)
        self.seed = seed_option(seed)
        self._generator: torch.Generator | None = None
        self._owner: tuple | None = None  # (pid, worker seed) the generator was seeded for

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_generator": None, "_owner": None}

    def generator(self) -> torch.Generator | None:
        """This process's generator (None: torch's global RNG), seeded anew in each DataLoader worker."""
        number = batch_number()
        if number is not None:  # a gather thread's batch: its own draws, whichever thread makes it
            run, batch, base = number  # base: drawn from torch's global RNG as the iteration began
            entropy = [self.seed, 2, run, batch] if self.seed is not None else [base, 3, batch]
            state = np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0]
            return torch.Generator().manual_seed(int(state) & (2**63 - 1))
        if self.seed is None:
            return None
        info = torch.utils.data.get_worker_info()
        owner = (os.getpid(), None if info is None else info.seed)
        if owner != self._owner:
            entropy = [self.seed] if info is None else [self.seed, info.seed % 2**64]
            state = np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0]
            self._generator = torch.Generator().manual_seed(int(state) & (2**63 - 1))
            self._owner = owner
        return self._generator

    def offsets(self, batch_size: int) -> torch.Tensor:
        """(batch_size, 2) offsets (rows, columns) in [0, 2 * pad]: the next draw."""
        return torch.randint(0, 2 * self.pad + 1, (batch_size, 2), generator=self.generator())

    def __call__(self, batch: dict) -> dict:
        self.check(batch)
        sizes = {int(batch[name].shape[0]) if batch[name].ndim else None for name in self.fields}
        if len(sizes) != 1 or None in sizes:
            raise OptionError(f"RandomShift's fields {list(self.fields)} must share the leading batch axis (got "
                              f"shapes {[tuple(batch[name].shape) for name in self.fields]})")
        offsets = self.offsets(cast(int, sizes.pop()))  # (one size, not None: checked above)
        for name in self.fields:
            batch[name] = self.shifted(name, batch[name], offsets)
        return batch

    def shifted(self, name: str, value: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """``value`` (B, ..., H, W) shifted by ``offsets`` (B, 2): pixel (y, x) of item b is the padded
        image's (y + dy, x + dx), i.e. the original's (clamp(y + dy - pad), clamp(x + dx - pad))."""
        if value.ndim < 3:
            raise OptionError(f"RandomShift needs images (B, ..., H, W); field {name!r} has shape "
                              f"{tuple(value.shape)}; leave it out of fields")
        if self.pad == 0 or value.numel() == 0:
            return value
        size, height, width = value.shape[0], value.shape[-2], value.shape[-1]
        if value.device.type != "cpu" or value.requires_grad:  # torch's own gathers, on its device
            return _shifted_by_torch(value, offsets.to(value.device), self.pad)
        try:
            images = np.ascontiguousarray(value.numpy()).reshape(size, -1, height, width)  # (B, M, H, W)
        except TypeError:  # a dtype numpy lacks (bfloat16): shifted as float32 (exactly), then cast back
            return self.shifted(name, value.float(), offsets).to(value.dtype)
        pad, frames = self.pad, images.shape[1]
        padded = np.pad(images, ((0, 0), (0, 0), (pad, pad), (pad, pad)), mode="edge").reshape(-1)
        wide = width + 2 * pad
        # each output row is W consecutive values of the padded image, starting at (y + dy, dx) of its item:
        # one gather of (B * M * H) rows of a strided view of all windows (nothing copied to make it)
        dy, dx = offsets[:, 0].numpy()[:, None, None], offsets[:, 1].numpy()[:, None, None]
        frame = np.arange(size)[:, None, None] * frames + np.arange(frames)[None, :, None]
        starts = (frame * (height + 2 * pad) + np.arange(height)[None, None, :] + dy) * wide + dx
        windows = np.lib.stride_tricks.as_strided(padded, (padded.size - width + 1, width),
                                                  (padded.itemsize, padded.itemsize), writeable=False)
        return torch.from_numpy(windows[starts.reshape(-1)].reshape(value.shape))

    def __repr__(self) -> str:
        return f"RandomShift({list(self.fields)}, pad={self.pad}, seed={self.seed})"


def _shifted_by_torch(value: torch.Tensor, offsets: torch.Tensor, pad: int) -> torch.Tensor:
    """``RandomShift.shifted`` with torch's gathers (tensors on an accelerator, or needing a gradient):
    clamped rows, picked as whole (frames, W) slabs per item, then one gather along W."""
    size, height, width = value.shape[0], value.shape[-2], value.shape[-1]
    flat = value.reshape(size, -1, height, width)  # (B, M, H, W)
    arange = functools.partial(torch.arange, device=value.device)
    rows = (arange(height)[None, :] + offsets[:, :1] - pad).clamp_(0, height - 1)  # (B, H)
    cols = (arange(width)[None, :] + offsets[:, 1:] - pad).clamp_(0, width - 1)  # (B, W)
    picked = flat.transpose(1, 2)[arange(size)[:, None], rows]  # (B, H, M, W)
    out = torch.gather(picked, 3, cols[:, None, None, :].expand(picked.shape))
    return out.transpose(1, 2).contiguous().reshape(value.shape)
