"""Worker transport: shared-memory batch slots (every start method, given back, never torn, killed
workers) and gather threads."""

import gc
import multiprocessing
import os
import platform
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import torch

from memmap_replay import OptionError
from memmap_replay.views import slotmemory
from memmap_replay.views.transport import SlotBatch, SlotReader, _SlotWriter, threaded

from conftest import episode_arrays

KINDS = {
    "timestep": dict(timestep_level=True),
    "n-step": dict(n_steps=3, gamma=0.9),
    "window": dict(window=4),
    "trajectory": dict(return_mask=True),
}


@pytest.fixture
def filled(make_buffer):
    buffer = make_buffer(max_episodes=30, max_timesteps=40)
    for number in range(24):
        buffer.store_episode(**episode_arrays(number, 20 + number % 7), task_id=number % 3,
                             end="terminated" if number % 2 else "truncated")
    return buffer


def same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(a[k].dtype == b[k].dtype and torch.equal(a[k], b[k]) for k in a)


def inline(buffer, kind, batch):
    return list(buffer.dataloader(batch, shuffle=True, seed=5, **KINDS[kind]))


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_slot_batches_equal_the_main_process_batches(filled, kind):
    batch = 4 if kind == "trajectory" else 16
    loader = filled.dataloader(batch, shuffle=True, seed=5, num_workers=2, multiprocessing_context="fork",
                               **KINDS[kind])
    got = [{k: v.clone() for k, v in b.items()} for b in loader]  # copies: the slots go back
    expected = inline(filled, kind, batch)
    assert len(got) == len(expected) and all(same(a, b) for a, b in zip(got, expected))
    reader = loader._slot_reader
    assert reader is not None and reader.slots, "the batches came through slots"
    # a worker holds at most prefetch_factor + 3 slots; here every batch was let go at once
    assert len(reader.slots) <= 2 * (2 + 3)


@pytest.mark.parametrize("context", ["spawn", "forkserver"])
def test_slots_under_every_start_method(filled, context):
    loader = filled.dataloader(16, timestep_level=True, shuffle=True, seed=5, num_workers=2,
                               multiprocessing_context=context)
    got = [{k: v.clone() for k, v in b.items()} for b in loader]
    assert all(same(a, b) for a, b in zip(got, inline(filled, "timestep", 16)))
    assert loader._slot_reader.slots


def test_batches_kept_are_never_overwritten(filled):
    """Holding every batch (list(loader)) exhausts the slots: the rest come torch's way, all intact; a
    batch kept while later ones arrive keeps its values."""
    loader = filled.dataloader(8, timestep_level=True, shuffle=True, seed=5, num_workers=2,
                               multiprocessing_context="fork")
    held = list(loader)
    expected = inline(filled, "timestep", 8)
    assert len(held) == len(expected) > 20 and all(same(a, b) for a, b in zip(held, expected))
    kept, copies = [], []
    for number, batch in enumerate(loader):
        if number % 5 == 0:  # a few kept (and views of them)
            kept.append(batch["obs"][1:])
            copies.append(batch["obs"][1:].clone())
    assert all(torch.equal(a, b) for a, b in zip(kept, copies))


def test_slot_release_next_reuses_at_the_next_batch(filled):
    loader = filled.dataloader(8, timestep_level=True, shuffle=True, seed=5, num_workers=2,
                               multiprocessing_context="fork", slot_release="next", persistent_workers=True)
    reference = filled.dataloader(8, timestep_level=True, shuffle=True, seed=5)
    for _ in range(2):  # epochs 0 and 1 of both
        got = [{k: v.clone() for k, v in b.items()} for b in loader]
        assert all(same(a, b) for a, b in zip(got, list(reference)))
    assert len(loader._slot_reader.slots) <= 2 * (2 + 3)


def test_torch_transport_on_request(filled):
    loader = filled.dataloader(16, timestep_level=True, shuffle=True, seed=5, num_workers=2,
                               multiprocessing_context="fork", worker_transport="torch")
    assert all(same(a, b) for a, b in zip(loader, inline(filled, "timestep", 16)))
    assert loader._slot_reader is None


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def shm_of(pid: int) -> list[str]:
    """/dev/shm entries of a process (torch names its segments torch_<pid>_...)."""
    return sorted(name for name in shm_entries() if f"_{pid}_" in name)


# a killed worker, as torch reports it; now and then its socket's reset comes first (torch's own race: the
# README's Workers section)
KILLED = r"DataLoader worker \(pid|Connection (reset by peer|refused)"


def test_a_killed_worker_is_reported_and_leaks_nothing(filled):
    loader = filled.dataloader(4, timestep_level=True, shuffle=True, seed=5, num_workers=2,
                               multiprocessing_context="fork")
    expected = inline(filled, "timestep", 4)
    received, ours = [], {os.getpid()}
    before = {child.pid for child in multiprocessing.active_children()}  # (children other tests left running)
    with pytest.raises((RuntimeError, ConnectionError), match=KILLED):
        for number, batch in enumerate(loader):
            received.append({k: v.clone() for k, v in batch.items()})
            if number == 2:
                workers = [child for child in multiprocessing.active_children() if child.pid not in before]
                ours.update(child.pid for child in workers)
                victim = workers[0]
                os.kill(victim.pid, signal.SIGKILL)
                victim.join(10)
                time.sleep(0.2)
    assert received and all(same(a, b) for a, b in zip(received, expected))  # no torn batch before the kill
    del batch, loader
    gc.collect()  # (the loader's own shared counter goes with it)
    assert [name for pid in ours for name in shm_of(pid)] == []
    again = filled.dataloader(4, timestep_level=True, shuffle=True, seed=5, num_workers=2,
                              multiprocessing_context="fork")
    assert all(same(a, b) for a, b in zip(again, expected))


def test_reader_gives_a_slot_back_only_when_every_view_is_gone():
    writer, reader = _SlotWriter(most=2), SlotReader("unused")
    batch = {"x": torch.arange(12, dtype=torch.float32).reshape(3, 4), "flag": torch.tensor([True, False, True]),
             "half": torch.ones(3, dtype=torch.bfloat16), "scalar": torch.tensor(7, dtype=torch.int64),
             "empty": torch.zeros((0, 5), dtype=torch.int16)}
    sent = writer.pack(batch)
    assert isinstance(sent, SlotBatch) and sent.memory is not None
    got = reader.unpack(sent)
    assert same(got, batch)
    index = sent.index
    part = got["x"][1]  # a view keeps the slot busy
    del got
    reader.give_back()
    assert writer.roots[index][0] == 1
    del part
    reader.give_back()
    assert writer.roots[index][0] == 0
    # a batch bigger than every free slot gets a larger slot in its place, sent again
    big = {"x": torch.arange(100_000, dtype=torch.float64)}
    sent = writer.pack(big)
    assert isinstance(sent, SlotBatch) and sent.memory is not None and same(reader.unpack(sent), big)
    # no free slot left: the batch travels as it is
    held = [reader.unpack(writer.pack(batch)) for _ in range(2)]
    assert isinstance(writer.pack(batch), dict) and len(held) == 2


def test_non_tensor_batches_travel_as_they_are():
    writer = _SlotWriter(most=2)
    batch = {"x": torch.zeros(3), "names": ["a", "b", "c"]}
    assert writer.pack(batch) is batch


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_threads_give_the_same_batches(filled, kind):
    batch = 4 if kind == "trajectory" else 16
    loader = filled.dataloader(batch, shuffle=True, seed=5, num_workers=2, workers="threads", **KINDS[kind])
    got = [{k: v.clone() for k, v in b.items()} for b in loader]
    expected = inline(filled, kind, batch)
    assert len(got) == len(expected) and all(same(a, b) for a, b in zip(got, expected))


def test_threads_stop_early_and_run_in_order():
    seen = []

    def make(items):
        time.sleep(0.001 * (items % 3))  # finishing out of order
        seen.append(items)
        return {"items": torch.tensor(items)}

    out = threaded(range(100), make, 3, 6)
    firsts = [int(next(out)["items"]) for _ in range(10)]
    out.close()
    assert firsts == list(range(10)) and len(seen) < 100


def test_sampler_dataloader_with_threads(filled):
    sampler = filled.sampler("uniform", seed=3)
    batches = list(sampler.dataloader(8, 5, num_workers=2, workers="threads"))
    assert len(batches) == 5
    assert all(b["obs"].shape == (8, 3) and "_key" in b for b in batches)


def test_transport_options_are_checked(filled):
    with pytest.raises(OptionError, match="worker_transport must be one of"):
        filled.dataloader(4, timestep_level=True, worker_transport="pipes")
    with pytest.raises(OptionError, match="slot_release must be one of"):
        filled.dataloader(4, timestep_level=True, slot_release="never")
    with pytest.raises(OptionError, match="workers must be one of"):
        filled.dataloader(4, timestep_level=True, workers="greenlets")
    with pytest.raises(OptionError, match=r"apply to worker processes; with workers='threads'"):
        filled.dataloader(4, timestep_level=True, num_workers=2, workers="threads", worker_init_fn=print)


def test_numbers_survive_every_dtype_through_slots(tmp_path):
    """Bool, ints and floats of every width stored, read back through workers bit for bit."""
    from memmap_replay import ReplayBuffer

    fields = {"b": ("bool", ()), "i8": ("int8", (2,)), "u16": ("uint16", ()), "f64": ("float64", (3,)),
              "f16": ("float16", ())}
    buffer = ReplayBuffer(tmp_path / "dtypes", 4, 30, fields=fields)
    rng = np.random.default_rng(0)
    for _ in range(3):
        buffer.store_episode(b=rng.random(25) < 0.5, i8=rng.integers(-100, 100, (25, 2)).astype(np.int8),
                             u16=rng.integers(0, 60000, 25).astype(np.uint16), f64=rng.normal(size=(25, 3)),
                             f16=rng.normal(size=25).astype(np.float16))
    workers = [{k: v.clone() for k, v in b.items()} for b in
               buffer.dataloader(8, timestep_level=True, num_workers=1, multiprocessing_context="fork")]
    assert all(same(a, b) for a, b in zip(workers, buffer.dataloader(8, timestep_level=True)))
    buffer.close()


def test_workers_auto_is_threads_unless_a_process_option_asks(filled):
    assert filled.dataloader(4, timestep_level=True, num_workers=2).workers == "threads"
    assert filled.dataloader(4, timestep_level=True, num_workers=2, persistent_workers=True).workers == "processes"
    assert filled.dataloader(4, timestep_level=True, num_workers=2,
                             multiprocessing_context="spawn").workers == "processes"
    assert filled.dataloader(4, timestep_level=True, num_workers=2, workers="processes").workers == "processes"
    # more threads than cores: torch's warning about worker processes does not apply (warnings are errors here)
    loader = filled.dataloader(4, timestep_level=True, num_workers=8)
    assert sum(len(b["reward"]) for b in loader) == len(filled.dataset(timestep_level=True))


def test_seeded_random_shift_repeats_with_threads(tmp_path):
    from memmap_replay import ReplayBuffer
    from memmap_replay.views import RandomShift

    buffer = ReplayBuffer(tmp_path / "images", 4, 40, fields={"image": ("uint8", (2, 8, 8))})
    rng = np.random.default_rng(0)
    for _ in range(3):
        buffer.store_episode(image=rng.integers(0, 255, (30, 2, 8, 8)).astype(np.uint8))

    def epochs(loader):
        return [b["image"].clone() for _ in range(2) for b in loader]

    runs = [epochs(buffer.dataloader(8, timestep_level=True, seed=1, shuffle=True, num_workers=3,
                                     transform=RandomShift("image", pad=2, seed=7))) for _ in range(3)]
    assert all(torch.equal(a, b) for run in runs[1:] for a, b in zip(runs[0], run))
    plain = [b["image"] for _ in range(2) for b in buffer.dataloader(8, timestep_level=True, seed=1, shuffle=True)]
    assert not all(torch.equal(a, b) for a, b in zip(runs[0], plain))  # shifted
    buffer.close()


def test_persistent_workers_after_a_loop_stopped_early(filled):
    """Batches torch drops when a loop stops early neither leave their slots busy for good nor leave the
    main process without a slot's memory; every later epoch is intact."""
    loader = filled.dataloader(8, timestep_level=True, shuffle=True, seed=5, num_workers=2,
                               persistent_workers=True, prefetch_factor=3)
    reference = filled.dataloader(8, timestep_level=True, shuffle=True, seed=5)
    for epoch in range(4):
        expected = list(reference)
        if epoch % 2 == 0:  # stop after two batches: the batches in flight are dropped
            got = [{k: v.clone() for k, v in b.items()} for _, b in zip(range(2), loader)]
        else:
            got = [{k: v.clone() for k, v in b.items()} for b in loader]
            assert len(got) == len(expected)
        assert all(same(a, b) for a, b in zip(got, expected))
    assert len(loader._slot_reader.slots) <= 2 * (3 + 3)


def test_a_restart_never_frees_the_slot_of_a_batch_being_sent():
    """restart() (a new iteration over persistent workers) frees the slot a worker has claimed for its next
    batch; the batch then written there must stay busy, or the worker's next batch would overwrite it."""
    writer, reader = _SlotWriter(most=3), SlotReader("unused")

    def batch(k):
        return {"x": torch.full((64,), float(k))}

    first = reader.unpack(writer.pack(batch(0)))  # slot 0; slot 1 claimed for the next batch
    del first
    second = reader.unpack(writer.pack(batch(1)))  # slot 1 (slot 0 still busy when it claimed: slot 2)
    del second
    third = reader.unpack(writer.pack(batch(2)))  # slot 2; slot 0 (given back) claimed for the next batch
    reader.restart()  # frees slot 0, which the main process knows and holds no batch of
    fourth = reader.unpack(writer.pack(batch(3)))  # written into slot 0
    fifth = reader.unpack(writer.pack(batch(4)))  # must not go into slot 0 again
    assert [float(b["x"][0]) for b in (third, fourth, fifth)] == [2.0, 3.0, 4.0]


def test_dtypes_numpy_lacks_and_lazy_conjugates_through_a_slot():
    from memmap_replay.views.pool import output_array, set_output_target

    writer, reader = _SlotWriter(most=3), SlotReader("unused")
    eight = torch.arange(6, dtype=torch.uint8).view(torch.float8_e4m3fn)
    got = reader.unpack(writer.pack({"f8": eight}))
    assert got["f8"].dtype == torch.float8_e4m3fn and torch.equal(got["f8"].view(torch.uint8), eight.view(torch.uint8))
    try:  # the worker's gathers write into the slot claimed for the next batch, as a view's do
        array = output_array((2,), np.complex64)
    finally:
        set_output_target(None)
    array[:] = [1 + 2j, 3 - 1j]
    conjugated = torch.from_numpy(array).conj()  # a lazy flag: the bytes in the slot are not conjugated
    got = reader.unpack(writer.pack({"c": conjugated}))
    assert torch.equal(got["c"], conjugated.resolve_conj())


def test_two_iterations_of_one_loader_at_once(filled):
    loader = filled.dataloader(8, timestep_level=True, num_workers=2, multiprocessing_context="fork")
    expected = list(filled.dataloader(8, timestep_level=True))
    first = iter(loader)
    got = [{k: v.clone() for k, v in next(first).items()} for _ in range(3)]
    peek = next(iter(loader))  # a second iteration (new workers) while the first goes on
    assert same(peek, expected[0])
    del peek
    got += [{k: v.clone() for k, v in b.items()} for b in first]
    assert len(got) == len(expected) and all(same(a, b) for a, b in zip(got, expected))


def test_persistent_workers_take_back_slots_of_dropped_batches(filled, monkeypatch):
    counts = {"slots": 0, "torch": 0}
    unpack = SlotReader.unpack

    def counting(self, item):
        counts["slots" if isinstance(item, SlotBatch) else "torch"] += 1
        return unpack(self, item)

    monkeypatch.setattr(SlotReader, "unpack", counting)
    loader = filled.dataloader(8, timestep_level=True, num_workers=1, persistent_workers=True,
                               multiprocessing_context="fork")
    for _ in range(12):  # each stopped after two batches: batches in flight (some in new slots) are dropped
        for _, batch in zip(range(2), loader):
            pass
    for _ in range(3):  # batches dropped by a stop hold their slots until a later iteration frees them
        counts.update(slots=0, torch=0)
        total = sum(1 for _ in loader)
    # slots leaked by the stops would run out within two stops, and every later batch would go torch's way;
    # on a loaded machine a worker may still find none free for a batch or two as an iteration starts
    # (a leak sends every batch torch's way: here a few at most, whatever the load)
    assert counts["slots"] + counts["torch"] == total and counts["torch"] <= total // 4, (counts, total)


def test_threads_repeat_an_unseeded_random_transform_after_torch_manual_seed(tmp_path):
    from memmap_replay import ReplayBuffer
    from memmap_replay.views import RandomShift

    buffer = ReplayBuffer(tmp_path / "images", 4, 40, fields={"image": ("uint8", (1, 6, 6))})
    rng = np.random.default_rng(0)
    for _ in range(3):
        buffer.store_episode(image=rng.integers(0, 255, (30, 1, 6, 6)).astype(np.uint8))
    runs = []
    for _ in range(3):
        torch.manual_seed(11)
        loader = buffer.dataloader(8, timestep_level=True, num_workers=3, transform=RandomShift("image", pad=2))
        runs.append([b["image"].clone() for b in loader])
    assert all(torch.equal(a, b) for run in runs[1:] for a, b in zip(runs[0], run))
    buffer.close()


def slow(batch):
    time.sleep(0.5)
    return batch


def test_threads_honour_timeout(filled):
    loader = filled.dataloader(8, timestep_level=True, num_workers=2, timeout=0.05, transform=slow)
    with pytest.raises(RuntimeError, match=r"DataLoader timed out after 0.05 seconds"):
        list(loader)


# --- a worker killed while it allocates a slot -------------------------------------------------------------

_SECCOMP = {"x86_64": (0xC000003E, 77), "aarch64": (0xC00000B7, 46)}  # audit arch, ftruncate's number


def die_at_next_ftruncate() -> None:
    """From now on, this thread's next ``ftruncate`` kills its process in the kernel (seccomp
    RET_KILL_PROCESS: no code of the process runs after, as with SIGKILL). Sizing memory is the step between
    making it and mapping it, so a slot allocation dies half done."""
    import ctypes
    import resource

    arch, ftruncate = _SECCOMP[platform.machine()]

    class Filter(ctypes.Structure):
        _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(Filter))]

    load, jump_equal, ret = 0x20, 0x15, 0x06
    code = (Filter * 6)(Filter(load, 0, 0, 4), Filter(jump_equal, 0, 3, arch),  # another ABI: allow
                        Filter(load, 0, 0, 0), Filter(jump_equal, 0, 1, ftruncate),
                        Filter(ret, 0, 0, 0x80000000), Filter(ret, 0, 0, 0x7FFF0000))  # kill process / allow
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # (the kernel reports it as SIGSYS: no core file)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")
    if libc.prctl(22, 2, ctypes.byref(Program(6, code)), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_SECCOMP)")


def first_worker(tmp_path) -> int | None:
    """In a DataLoader worker, the first one to ask (a file made with O_EXCL): its pid, written there."""
    from torch.utils.data import get_worker_info

    if get_worker_info() is None:
        return None
    try:
        fd = os.open(tmp_path / "victim", os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return None
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    return os.getpid()


def wait_for_victim(tmp_path) -> int:
    deadline = time.monotonic() + 120  # a hang guard, not a timing
    while not (tmp_path / "victim").exists() or not (tmp_path / "victim").read_text():
        assert time.monotonic() < deadline, "no worker allocated a slot"
        time.sleep(0.01)
    return int((tmp_path / "victim").read_text())


@pytest.mark.skipif(sys.platform != "linux" or platform.machine() not in _SECCOMP,
                    reason="seccomp on Linux x86_64/aarch64")
def test_a_worker_killed_while_it_allocates_a_slot_leaks_nothing(filled, tmp_path, monkeypatch):
    """A worker dies in the middle of allocating its first slot (the kernel kills it at the allocation's
    ftruncate): no shared-memory name of it is left behind, and the loader reports it."""
    claim = _SlotWriter.claim

    def dying(self, nbytes):
        if first_worker(tmp_path) is not None:
            die_at_next_ftruncate()
        return claim(self, nbytes)

    monkeypatch.setattr(_SlotWriter, "claim", dying)  # (fork: the workers inherit it)
    loader = filled.dataloader(4, timestep_level=True, shuffle=True, seed=5, num_workers=2, workers="processes",
                               multiprocessing_context="fork", timeout=120)
    victim = None
    try:
        with pytest.raises((RuntimeError, ConnectionError), match=KILLED):
            for _ in loader:
                pass
        victim = wait_for_victim(tmp_path)
        assert shm_of(victim) == []
    finally:
        for name in shm_of(victim) if victim is not None else ():  # (what the old allocation left behind)
            os.unlink(os.path.join("/dev/shm", name))


def test_a_worker_killed_holding_a_slot_it_never_sent_leaks_nothing(filled, tmp_path, monkeypatch):
    """SIGKILL from outside while a worker holds a slot it has just allocated and not sent yet: nothing
    left in /dev/shm, and the loader reports the worker; the other worker's batches before it are intact."""
    claim = _SlotWriter.claim

    def stuck(self, nbytes):
        got = claim(self, nbytes)
        if first_worker(tmp_path) is not None:
            while True:  # the test kills this process
                time.sleep(1)
        return got

    monkeypatch.setattr(_SlotWriter, "claim", stuck)
    loader = filled.dataloader(4, timestep_level=True, num_workers=2, workers="processes",
                               multiprocessing_context="fork", timeout=120)
    expected = list(filled.dataloader(4, timestep_level=True))
    killer = ThreadPoolExecutor(1).submit(lambda: os.kill(wait_for_victim(tmp_path), signal.SIGKILL))
    received = []
    with pytest.raises((RuntimeError, ConnectionError), match=KILLED):
        for batch in loader:
            received.append({k: v.clone() for k, v in batch.items()})
    killer.result()
    victim = wait_for_victim(tmp_path)
    assert all(same(a, b) for a, b in zip(received, expected))
    assert shm_of(victim) == []


# --- slot memory: anonymous, sent as its descriptor, freed with the loader ------------------------------------

ANONYMOUS = pytest.mark.skipif(not slotmemory.ANONYMOUS, reason="os.memfd_create is Linux's")


def slot_mappings() -> list[str]:
    """This process's mappings of slot memory (anonymous memory files named slotmemory.NAME)."""
    with open("/proc/self/maps") as maps:
        return [line for line in maps if f"/memfd:{slotmemory.NAME}" in line]


def slot_descriptors() -> list[str]:
    links = (os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if fd.isdigit()
             and os.path.exists(f"/proc/self/fd/{fd}"))
    return [link for link in links if link.startswith(f"/memfd:{slotmemory.NAME}")]


@ANONYMOUS
def test_a_slot_travels_as_its_descriptor_and_is_given_back_by_reference_count():
    """Pickled as the result queue pickles (ForkingPickler), a slot's first batch carries a descriptor, not
    the slot's bytes; unpickled, it maps the same memory; the reader gives the slot back once every view of
    the batch is gone (SlotReader.UNUSED counts the references to the mapped root array)."""
    from multiprocessing.reduction import ForkingPickler

    from memmap_replay.views.pool import set_output_target

    writer, reader = _SlotWriter(most=2), SlotReader("unused")
    batch = {"x": torch.arange(250_000, dtype=torch.float32)}  # a 1 MB batch
    sent = writer.pack(batch)
    blob = bytes(ForkingPickler.dumps(sent))
    assert len(blob) < 2_000
    received = ForkingPickler.loads(blob)
    assert isinstance(received.memory, np.ndarray)
    got = reader.unpack(received)
    assert same(got, batch) and received.memory is None
    writer.roots[sent.index][200] = 7  # one memory: the worker's writes are the main process's bytes
    assert got["x"].view(torch.uint8)[200 - 64] == 7
    part = got["x"][10:20]
    del got, received
    reader.give_back()
    assert writer.roots[sent.index][0] == 1  # a view still uses it
    del part
    reader.give_back()
    assert writer.roots[sent.index][0] == 0
    set_output_target(None)  # (the writer's next slot, armed for this thread's gathers)


@ANONYMOUS
def test_slot_memory_is_freed_with_the_loader_and_its_batches(filled):
    """The main process maps the slots while batches come; once the loader and its batches are gone, no
    mapping or descriptor of a slot is left in it, and the workers that held the rest are gone."""
    gc.collect()  # (slots of earlier tests in this process that are garbage now go first)
    before = set(slot_mappings()), len(slot_descriptors())  # (slots of this process's in-process tests)

    def new_slots():
        return set(slot_mappings()) - before[0]

    loader = filled.dataloader(8, timestep_level=True, shuffle=True, seed=5, num_workers=2, workers="processes",
                               multiprocessing_context="fork")
    held = []
    for number, batch in enumerate(loader):
        if number == 3:
            assert new_slots()
            workers = multiprocessing.active_children()
        if number % 4 == 0:
            held.append(batch["obs"][1:])  # a view holds its slot
    assert new_slots()  # (the reader keeps its slots while the loader lives)
    del loader, batch
    gc.collect()
    assert new_slots()  # the views held
    del held
    gc.collect()
    assert not new_slots() and len(slot_descriptors()) <= before[1]
    for worker in workers:
        worker.join(60)  # (a hang guard)
        assert not worker.is_alive()


def test_slots_without_memfd_are_torch_shared_memory(filled, monkeypatch):
    """Where os.memfd_create does not exist (macOS), a slot is a torch tensor in shared memory, sent by
    torch's reducers (simulated here: the workers are forks of this process)."""
    monkeypatch.setattr(slotmemory, "ANONYMOUS", False)
    before = set(slot_mappings()) if sys.platform == "linux" else set()
    loader = filled.dataloader(8, timestep_level=True, shuffle=True, seed=5, num_workers=2, workers="processes",
                               multiprocessing_context="fork")
    got = [{k: v.clone() for k, v in b.items()} for b in loader]
    expected = inline(filled, "timestep", 8)
    assert len(got) == len(expected) and all(same(a, b) for a, b in zip(got, expected))
    roots = loader._slot_reader.slots.values()
    assert roots and all(isinstance(root.base, torch.Tensor) for root in roots)  # (tensor.numpy())
    assert sys.platform != "linux" or set(slot_mappings()) <= before
