"""views.device: batches moved to a device; on an accelerator a batch ahead on a side stream (a fake
stream object runs that logic here; the real streams and pinned memory run where an accelerator is)."""

from contextlib import contextmanager

import pytest
import torch

from memmap_replay.views import device as device_module
from memmap_replay.views.device import AcceleratorStreams, DevicePrefetcher, can_pin

from conftest import episode_arrays

NO_ACCELERATOR = "no accelerator on this machine: pinned memory and side streams are measured where one is"
CPU = torch.device("cpu")


class Recorded:
    """A batch entry that logs its moves."""

    def __init__(self, log, number):
        self.log, self.number = log, number

    def to(self, device, non_blocking=False):
        self.log.append(("to", self.number, device.type, non_blocking))
        return self


class FakeStreams:
    """AcceleratorStreams' calls, logged."""

    def __init__(self, log):
        self.log, self.events = log, 0

    @contextmanager
    def copying(self):
        self.log.append("side")
        yield
        self.log.append("current")

    def record(self):
        self.events += 1
        self.log.append(("record", self.events))
        return self.events

    def wait(self, event):
        self.log.append(("wait", event))

    def keep(self, value):
        self.log.append(("keep", getattr(value, "number", None)))


def source(log, count):
    for number in range(count):
        log.append(("pull", number))
        yield {"x": Recorded(log, number)}


def test_on_the_cpu_each_batch_moves_when_it_comes_nothing_ahead():
    log = []
    for batch in DevicePrefetcher(source(log, 3), CPU, non_blocking=True):
        log.append(("got", batch["x"].number))
    assert log == [("pull", 0), ("to", 0, "cpu", True), ("got", 0), ("pull", 1), ("to", 1, "cpu", True), ("got", 1),
                   ("pull", 2), ("to", 2, "cpu", True), ("got", 2)]


def test_with_streams_batch_k_plus_1_is_copied_on_the_side_stream_before_batch_k_is_handed_over():
    log = []
    for batch in DevicePrefetcher(source(log, 3), CPU, streams=FakeStreams(log)):
        log.append(("got", batch["x"].number))
    staged = [[("pull", k), "side", ("to", k, "cpu", True), "current", ("record", k + 1)] for k in range(3)]
    handed = [[("wait", k + 1), ("keep", k), ("got", k)] for k in range(3)]
    assert log == [*staged[0], *staged[1], *handed[0], *staged[2], *handed[1], *handed[2]]


def test_a_loop_that_stops_early_closes_the_source():
    log, closed = [], []

    def batches():
        try:
            yield from source(log, 10)
        finally:
            closed.append(True)

    for streams in (None, FakeStreams(log)):
        closed.clear()
        iterator = iter(DevicePrefetcher(batches(), CPU, streams=streams))
        next(iterator)
        iterator.close()
        assert closed == [True]


def test_no_streams_off_accelerators():
    assert AcceleratorStreams.for_device(None) is None
    assert AcceleratorStreams.for_device(CPU) is None
    assert AcceleratorStreams.for_device(torch.device("meta")) is None
    if not torch.cuda.is_available():
        assert AcceleratorStreams.for_device(torch.device("cuda")) is None


def test_pin_memory_off_accelerators_pins_nothing_and_moves_in_order():
    batches = [{"x": torch.arange(3) + k} for k in range(3)]
    moved = list(DevicePrefetcher(iter(batches), CPU, pin_memory=True))
    assert [batch["x"].tolist() for batch in moved] == [[0, 1, 2], [1, 2, 3], [2, 3, 4]]
    meta = list(DevicePrefetcher(iter(batches), torch.device("meta"), pin_memory=True))
    assert all(batch["x"].is_meta for batch in meta)


@pytest.mark.skipif(can_pin(), reason="this machine can pin: the pinned tests below run instead")
def test_torch_cannot_pin_without_an_accelerator():
    """Why pinning is skipped here (torch 2.13, CPU build): there is no pinned allocator."""
    with pytest.raises(RuntimeError, match="pin"):
        torch.empty(4, pin_memory=True)


@pytest.mark.skipif(not can_pin(), reason=NO_ACCELERATOR)
def test_pinned_batches_where_an_accelerator_is():
    accelerator = torch.accelerator.current_accelerator()
    batches = [{"x": torch.arange(1000.0) + k} for k in range(4)]
    prefetcher = DevicePrefetcher(iter(batches), accelerator, pin_memory=True)
    assert prefetcher.pin
    for k, batch in enumerate(prefetcher):
        assert batch["x"].device.type == accelerator.type
        assert torch.equal(batch["x"].cpu(), torch.arange(1000.0) + k)


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_ACCELERATOR)
def test_real_cuda_streams_give_the_same_values():
    streams = AcceleratorStreams.for_device(torch.device("cuda"))
    assert streams is not None
    batches = [{"x": torch.randn(256, 256)} for _ in range(5)]
    for batch, expected in zip(DevicePrefetcher(iter(batches), torch.device("cuda")), batches):
        assert torch.equal((batch["x"] * 2).cpu(), expected["x"] * 2)


# ---- in the loader ----------------------------------------------------------------------------------------


@pytest.fixture
def filled(make_buffer):
    buffer = make_buffer(max_episodes=20)
    for number in range(4):
        buffer.store_episode(**episode_arrays(number, 6), task_id=number, end="terminated")
    return buffer


def test_the_loader_moves_batches_through_the_prefetcher(filled, monkeypatch):
    log = []
    monkeypatch.setattr(device_module.AcceleratorStreams, "for_device", classmethod(lambda cls, d: FakeStreams(log)))
    expected = list(filled.dataloader(4, timestep_level=True))
    ahead = list(filled.dataloader(4, timestep_level=True, device="cpu", pin_memory=True))
    assert len(ahead) == len(expected) == 6
    for batch, plain in zip(ahead, expected):
        assert batch.keys() == plain.keys() and all(torch.equal(batch[k], plain[k]) for k in batch)
    assert [entry for entry in log if entry[0] == "wait"] == [("wait", k) for k in range(1, 7)]


def test_prefetch_0_takes_no_batch_ahead_to_the_device(filled, monkeypatch):
    log = []
    monkeypatch.setattr(device_module.AcceleratorStreams, "for_device", classmethod(lambda cls, d: FakeStreams(log)))
    batches = list(filled.dataloader(4, timestep_level=True, device="cpu", prefetch=0))
    assert len(batches) == 6 and log == []


def test_meta_device_batches(filled):
    batch = next(iter(filled.dataloader(4, timestep_level=True, device="meta")))
    assert batch["obs"].is_meta and batch["obs"].shape == (4, 3)
