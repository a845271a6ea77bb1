"""Batches moved to a device: pinned, and on an accelerator copied one batch ahead on a side stream.

``DevicePrefetcher(batches, device)`` wraps an iterator of batch dicts (name -> CPU tensor):

- ``pin_memory=True``: each tensor not pinned yet is copied into page-locked memory (torch's caching
  host allocator reuses those blocks), when this machine can pin (an accelerator is present; without
  one torch refuses to pin, and there is nothing to copy to either).
- On an accelerator (CUDA, or any ``torch.accelerator`` with streams) with ``ahead=True``: the copies
  of batch k+1 (``.to(device, non_blocking=True)``) are issued on a side stream before batch k is
  handed over, so they overlap the training step on batch k. An event recorded after the copies makes
  the consumer's stream wait for them (``wait_event``), and each tensor is marked as used by the
  consumer's stream (``record_stream``), so the caching allocator does not hand its memory to the side
  stream while the step still reads it. Batch k+1 is then gathered before batch k is handed over.
- Elsewhere (``cpu``, ``meta``), or with ``ahead=False``: each batch is moved when it comes, in order,
  nothing taken ahead.

The stream calls go through one small object (``AcceleratorStreams``); a test can pass its own.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Callable, Iterable, Iterator

import torch

__all__ = ["AcceleratorStreams", "DevicePrefetcher", "can_pin", "pinned"]


def can_pin() -> bool:
    """Whether torch can allocate pinned memory here: it needs an accelerator backend."""
    accelerator = getattr(torch, "accelerator", None)
    return accelerator.is_available() if accelerator is not None else torch.cuda.is_available()


def pinned(batch: dict) -> dict:
    """The batch with each CPU tensor not pinned yet copied into page-locked memory (torch's caching host
    allocator, which keeps a block from reuse until the device copies reading it are done)."""
    return {name: value.pin_memory() if value.device.type == "cpu" and not value.is_pinned() else value
            for name, value in batch.items()}


class AcceleratorStreams:
    """The stream calls of a prefetch to one accelerator device: a side stream for the copies, the
    consumer's (current) stream, events between them."""

    def __init__(self, device: torch.device):
        self.device = device
        self.side: torch.Stream
        self._current: Callable[[], torch.Stream]
        self._context: Callable[[], AbstractContextManager[Any]]
        if device.type == "cuda":
            self.side = side = torch.cuda.Stream(device=device)
            self._current = lambda: torch.cuda.current_stream(device)
            self._context = lambda: torch.cuda.stream(side)
        else:  # another accelerator: torch's device-generic streams (torch >= 2.5)
            self.side = torch.Stream(device=device)
            self._current = lambda: torch.accelerator.current_stream(device)
            self._context = lambda: self.side

    @classmethod
    def for_device(cls, device: torch.device | None) -> "AcceleratorStreams | None":
        """Streams for ``device`` if it is an accelerator that has them, else None (copies in order)."""
        if device is None or device.type in ("cpu", "meta"):
            return None
        if device.type == "cuda":
            return cls(device) if torch.cuda.is_available() else None
        accelerator = getattr(torch, "accelerator", None)
        current = accelerator.current_accelerator() if accelerator is not None else None
        if current is None or current.type != device.type or not hasattr(torch, "Stream"):
            return None
        try:
            return cls(device)
        except (RuntimeError, NotImplementedError, TypeError):  # a backend without streams
            return None

    def copying(self) -> AbstractContextManager:
        """The context in which the copies are issued (the side stream)."""
        return self._context()

    def record(self) -> Any:
        """An event on the side stream after the copies issued so far."""
        return self.side.record_event()

    def wait(self, event: Any) -> None:
        """The consumer's stream waits for ``event`` before its next kernels."""
        self._current().wait_event(event)

    def keep(self, tensor: torch.Tensor) -> None:
        """``tensor`` (made on the side stream) is used by the consumer's stream."""
        tensor.record_stream(self._current())


class DevicePrefetcher:
    """Batches (dicts of tensors) moved to ``device``; see the module docstring. Iterating it once
    iterates ``batches``; when the loop stops early, ``batches`` is closed (if it can be)."""

    def __init__(self, batches: Iterable[dict], device: torch.device, *, non_blocking: bool = True,
                 pin_memory: bool = False, ahead: bool = True, streams: Any = None):
        self.batches = batches
        self.device = device
        self.non_blocking = non_blocking
        self.pin = pin_memory and device.type not in ("cpu", "meta") and can_pin()
        # AcceleratorStreams (or a stand-in with its methods), None: copies in order
        self.streams: Any = (streams if streams is not None
                             else AcceleratorStreams.for_device(device) if ahead else None)

    def __iter__(self) -> Iterator[dict]:
        source = iter(self.batches)
        try:
            if self.streams is None:
                for batch in source:
                    yield self.move(batch)
                return
            staged = self.stage(source)
            while staged is not None:
                batch, event = staged
                staged = self.stage(source)  # batch k+1's copies go out before batch k is handed over
                self.streams.wait(event)
                for value in batch.values():
                    self.streams.keep(value)
                yield batch
        finally:
            close = getattr(source, "close", None)
            if close is not None:
                close()

    def stage(self, source: Iterator[dict]) -> tuple[dict, Any] | None:
        """The next batch's copies issued on the side stream, with the event after them; None at the end."""
        batch = next(source, None)
        if batch is None:
            return None
        with self.streams.copying():
            moved = self.move(batch)
        return moved, self.streams.record()

    def move(self, batch: dict) -> dict:
        device, non_blocking = self.device, self.non_blocking
        return {name: value.to(device, non_blocking=non_blocking)
                for name, value in (pinned(batch) if self.pin else batch).items()}
