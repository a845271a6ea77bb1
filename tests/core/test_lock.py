"""The writer lock: one writer per folder (in this process or any other), readers always welcome, the lock
released on close and when the holder dies, and opening an existing folder never wipes it by accident."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import (EpisodeStore, ReadOnlyError, OptionError, ReplayBuffer, ReplayError, SchemaMismatchError,
                           StoreLockedError)
from memmap_replay.errors import CorruptStoreError
from memmap_replay.core.writer import whole_episode

from conftest import reap

FIELDS = dict(x="float", action=("int", 2))
META_FIELDS = dict(number="int")
SPEC = dict(max_episodes=8, max_timesteps=10, fields=FIELDS, meta_fields=META_FIELDS)
LOCKED = "one writer at a time"
WAIT_LIMIT = 60.0  # seconds a child may take to reach a marker before the test gives up (not a timing assertion)


def episode(number: int, length: int = 4) -> dict:
    t = np.arange(length)
    return dict(x=(number * 100 + t).astype(np.float32), action=np.stack([t, -t], 1) + number, number=number)


def store_numbers(buffer: ReplayBuffer, numbers) -> None:
    for number in numbers:
        buffer.store_episode(**episode(number))


def live_numbers(buffer: ReplayBuffer) -> list[int]:
    """Numbers of the live episodes, oldest first, after checking each one's data is intact."""
    store = buffer.episode_store
    table = store.live_table()
    numbers = [int(n) for n in store.meta_array("number")[table.slots]]
    for number, start, length in zip(numbers, table.start, table.length):
        expected = episode(number, int(length))
        np.testing.assert_array_equal(store.step_array("x")[start:start + length], expected["x"])
        np.testing.assert_array_equal(store.step_array("action")[start:start + length], expected["action"])
    return numbers


@pytest.fixture
def folder(tmp_path) -> Path:
    """A store holding episodes 0, 1, 2, closed."""
    path = tmp_path / "store"
    with ReplayBuffer(path, **SPEC) as buffer:
        store_numbers(buffer, range(3))
    return path


def write_with_a_second_writer(folder: Path, opener=None) -> None:
    """Open another writer and write one episode with it.

    The writer lock may be taken when a writer opens or, at the latest, at its first write; either way a
    second writer must get StoreLockedError before it changes anything."""
    buffer = (opener or ReplayBuffer.from_folder)(folder)
    try:
        buffer.store_episode(**episode(9))
    finally:
        buffer.close()


# ---- other processes -------------------------------------------------------------------------------------

HOLDER = r'''
import sys, time
from pathlib import Path
import numpy as np
from memmap_replay import ReplayBuffer

folder, control = sys.argv[1], Path(sys.argv[2])
buffer = ReplayBuffer.from_folder(folder)
t = np.arange(4)
buffer.store_episode(x=(300 + t).astype(np.float32), action=np.stack([t, -t], 1) + 3, number=3)
(control / "holding").write_text("")
while not (control / "release").exists():
    time.sleep(0.005)
buffer.close()
(control / "closed").write_text("")
time.sleep(600)
'''

TRY_OPEN = r'''
import json, sys
import numpy as np
from memmap_replay import ReplayBuffer, StoreLockedError

folder = sys.argv[1]
report = {}
try:
    buffer = ReplayBuffer.from_folder(folder)
    try:
        t = np.arange(4)
        buffer.store_episode(x=(900 + t).astype(np.float32), action=np.stack([t, -t], 1) + 9, number=9)
    finally:
        buffer.close()
    report["writer"] = "wrote"
except StoreLockedError as error:
    report["writer"] = "StoreLockedError"
    report["message"] = str(error)
    report["builtin"] = isinstance(error, BlockingIOError)
with ReplayBuffer.from_folder(folder, read_only=True) as reader:
    report["reader_episodes"] = reader.num_episodes
print(json.dumps(report))
'''


def start_holder(folder: Path, control: Path) -> subprocess.Popen:
    control.mkdir()
    return subprocess.Popen([sys.executable, "-c", HOLDER, str(folder), str(control)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def reap_holder(process: subprocess.Popen) -> str:
    return reap(process, WAIT_LIMIT)


def wait_for_marker(process: subprocess.Popen, marker: Path) -> None:
    deadline = time.monotonic() + WAIT_LIMIT
    while not marker.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            stderr = reap_holder(process)
            pytest.fail(f"the child never wrote {marker.name} (exit {process.returncode}):\n{stderr}")
        time.sleep(0.005)


def kill_holder(process: subprocess.Popen) -> None:
    process.send_signal(signal.SIGKILL)
    stderr = reap_holder(process)
    assert process.returncode == -signal.SIGKILL, stderr


def try_open_in_another_process(folder: Path) -> dict:
    result = subprocess.run([sys.executable, "-c", TRY_OPEN, str(folder)], capture_output=True, text=True,
                            timeout=WAIT_LIMIT)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_a_writer_in_another_process_is_refused_while_this_one_holds_the_lock(folder):
    with ReplayBuffer.from_folder(folder) as writer:
        store_numbers(writer, [3])  # this writer has written: it holds the lock
        report = try_open_in_another_process(folder)
        assert report["writer"] == "StoreLockedError" and report["builtin"]
        assert LOCKED in report["message"] and str(folder) in report["message"]
        assert report["reader_episodes"] == 4  # read-only opens are allowed meanwhile
        store_numbers(writer, [4])
        assert live_numbers(writer) == [0, 1, 2, 3, 4]
    # closed: the other process may write now
    assert try_open_in_another_process(folder) == {"writer": "wrote", "reader_episodes": 6}
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert live_numbers(reader) == [0, 1, 2, 3, 4, 9]


def test_another_process_holding_the_lock_refuses_this_writer_and_welcomes_readers(folder, tmp_path):
    holder = start_holder(folder, tmp_path / "control")
    try:
        wait_for_marker(holder, tmp_path / "control" / "holding")
        with pytest.raises(StoreLockedError, match=LOCKED):
            write_with_a_second_writer(folder)
        with pytest.raises(StoreLockedError, match=LOCKED):
            write_with_a_second_writer(folder, lambda path: ReplayBuffer(path, **SPEC))
        with pytest.raises(StoreLockedError, match=LOCKED):
            write_with_a_second_writer(folder, lambda path: ReplayBuffer(path, **SPEC, overwrite=True))
        with ReplayBuffer.from_folder(folder, read_only=True) as reader:
            assert live_numbers(reader) == [0, 1, 2, 3]  # the holder's commit is visible; nothing was wiped
    finally:
        kill_holder(holder)


def test_the_lock_dies_with_a_sigkilled_holder(folder, tmp_path):
    holder = start_holder(folder, tmp_path / "control")
    try:
        wait_for_marker(holder, tmp_path / "control" / "holding")
        with pytest.raises(StoreLockedError, match=LOCKED):
            write_with_a_second_writer(folder)
    finally:
        kill_holder(holder)
    with ReplayBuffer.from_folder(folder) as writer:
        assert live_numbers(writer) == [0, 1, 2, 3]
        store_numbers(writer, [4])
        assert live_numbers(writer) == [0, 1, 2, 3, 4]


def test_close_releases_the_lock_while_the_holder_lives_on(folder, tmp_path):
    control = tmp_path / "control"
    holder = start_holder(folder, control)
    try:
        wait_for_marker(holder, control / "holding")
        with pytest.raises(StoreLockedError, match=LOCKED):
            write_with_a_second_writer(folder)
        (control / "release").write_text("")
        wait_for_marker(holder, control / "closed")
        assert holder.poll() is None  # still running: close(), not the process exit, freed the lock
        with ReplayBuffer.from_folder(folder) as writer:
            store_numbers(writer, [4])
            assert live_numbers(writer) == [0, 1, 2, 3, 4]
    finally:
        kill_holder(holder)


# ---- this process -------------------------------------------------------------------------------------------

def store_commit(store: EpisodeStore) -> None:
    store.commit([whole_episode(store.schema, store.capacity.max_timesteps, episode(9))])


SECOND_WRITERS = {
    "from_folder": lambda folder: write_with_a_second_writer(folder),
    "same_spec": lambda folder: write_with_a_second_writer(folder, lambda path: ReplayBuffer(path, **SPEC)),
    "overwrite": lambda folder: write_with_a_second_writer(
        folder, lambda path: ReplayBuffer(path, **SPEC, overwrite=True)),
    "one_episode": lambda folder: write_steps_with_a_second_writer(folder),
    "store_r+": lambda folder: write_with_a_second_store(folder, "r+"),
    "store_a": lambda folder: write_with_a_second_store(folder, "a"),
}


def write_steps_with_a_second_writer(folder: Path) -> None:
    with ReplayBuffer.from_folder(folder) as buffer:
        with buffer.one_episode(number=9):
            buffer.store(x=1.0, action=[1, 2])


def write_with_a_second_store(folder: Path, mode: str) -> None:
    store = EpisodeStore.open(folder, mode)
    try:
        store_commit(store)
    finally:
        store.close()


@pytest.mark.parametrize("second", sorted(SECOND_WRITERS))
def test_a_second_writer_in_the_same_process_is_refused(folder, second):
    with ReplayBuffer.from_folder(folder) as writer:
        store_numbers(writer, [3])  # this writer has written: it holds the lock
        with pytest.raises(StoreLockedError, match=LOCKED) as caught:
            SECOND_WRITERS[second](folder)
        assert isinstance(caught.value, BlockingIOError) and isinstance(caught.value, ReplayError)
        # the refused writer changed nothing: the first writer goes on, nothing was wiped
        store_numbers(writer, [4])
        assert live_numbers(writer) == [0, 1, 2, 3, 4]
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert live_numbers(reader) == [0, 1, 2, 3, 4]


def test_read_only_opens_are_allowed_while_a_writer_holds_the_lock(folder):
    with ReplayBuffer.from_folder(folder) as writer:
        store_numbers(writer, [3])  # this writer has written: it holds the lock
        readers = [ReplayBuffer.from_folder(folder, read_only=True), ReplayBuffer(folder, read_only=True)]
        store = EpisodeStore.open(folder, "r")
        try:
            for reader in readers:
                assert reader.read_only and live_numbers(reader) == [0, 1, 2, 3]
            assert store.num_episodes == 4
            store_numbers(writer, [4, 5])
            for reader in readers:
                assert live_numbers(reader) == [0, 1, 2, 3]  # until it refreshes
                assert reader.refresh()
                assert live_numbers(reader) == [0, 1, 2, 3, 4, 5]
                with pytest.raises(ReadOnlyError, match="read-only"):
                    reader.store_episode(**episode(9))
            assert store.refresh() and store.num_episodes == 6
        finally:
            for reader in readers:
                reader.close()
            store.close()


def test_read_only_opens_never_take_the_lock(folder):
    (folder / "writer.lock").unlink()
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert live_numbers(reader) == [0, 1, 2]
        assert not (folder / "writer.lock").exists()
        with ReplayBuffer.from_folder(folder) as writer:  # a reader never blocks a writer
            store_numbers(writer, [3])
        assert reader.refresh() and live_numbers(reader) == [0, 1, 2, 3]


def test_close_releases_the_lock(folder):
    writer = ReplayBuffer.from_folder(folder)
    store_numbers(writer, [3])
    with pytest.raises(StoreLockedError, match=LOCKED):
        write_with_a_second_writer(folder)
    writer.close()
    writer.close()  # closing twice is harmless
    with pytest.raises(ReadOnlyError, match="closed"):
        writer.store_episode(**episode(9))
    with ReplayBuffer.from_folder(folder) as again:  # the context manager closes too
        store_numbers(again, [4])
    with ReplayBuffer(folder, **SPEC) as again:
        store_numbers(again, [5])
        assert live_numbers(again) == [0, 1, 2, 3, 4, 5]


def test_a_refused_open_does_not_keep_the_lock(folder):
    with pytest.raises(SchemaMismatchError, match="created with a different config"):
        ReplayBuffer(folder, **{**SPEC, "fields": dict(x="float")})
    with pytest.raises(OptionError, match="contradict"):
        ReplayBuffer(folder, **SPEC, overwrite=True, read_only=True)
    with ReplayBuffer.from_folder(folder) as writer:
        store_numbers(writer, [3])
        assert live_numbers(writer) == [0, 1, 2, 3]


# ---- overwrite -----------------------------------------------------------------------------------------------

DIFFERENT = {
    "fields": (dict(fields=dict(x="float")), "field 'action'"),
    "field_dtype": (dict(fields=dict(x="int", action=("int", 2))), "field 'x'"),
    "meta_fields": (dict(meta_fields=None), "meta field 'number'"),
    "max_episodes": (dict(max_episodes=9), "max_episodes"),
    "max_timesteps": (dict(max_timesteps=11), "max_timesteps"),
    "circular": (dict(circular=True), "circular"),
}


def test_reopening_with_overwrite_false_keeps_everything(folder):
    with ReplayBuffer(folder, **SPEC) as buffer:  # overwrite defaults to False
        assert live_numbers(buffer) == [0, 1, 2]
        store_numbers(buffer, [3])
    with ReplayBuffer(folder, **SPEC, overwrite=False) as buffer:
        assert live_numbers(buffer) == [0, 1, 2, 3]


@pytest.mark.parametrize("change", sorted(DIFFERENT))
def test_overwrite_false_with_a_different_spec_is_an_error_never_a_wipe(folder, change):
    other, match = DIFFERENT[change]
    store_id = json.loads((folder / "meta.json").read_text())["store_id"]
    with pytest.raises(SchemaMismatchError, match=match):
        ReplayBuffer(folder, **{**SPEC, **other}, overwrite=False)
    assert json.loads((folder / "meta.json").read_text())["store_id"] == store_id
    with ReplayBuffer.from_folder(folder) as buffer:
        assert live_numbers(buffer) == [0, 1, 2]


def test_overwrite_true_wipes_the_store_and_only_the_store(folder):
    (folder / "notes.txt").write_text("mine")
    with ReplayBuffer.from_folder(folder, read_only=True) as old_reader:
        with ReplayBuffer(folder, **{**SPEC, "fields": dict(x="float")}, overwrite=True) as buffer:
            assert buffer.num_episodes == 0 and buffer.fieldnames == ("x",)
            buffer.store_episode(x=np.arange(3.0), number=7)
        with pytest.raises(CorruptStoreError, match="replaced by a new store"):
            old_reader.refresh()
    assert (folder / "notes.txt").read_text() == "mine"
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert reader.num_episodes == 1 and reader.get_all_data()["number"].tolist() == [7]


def test_forked_child_cannot_write_through_parents_buffer(tmp_path):
    """A fork-mode DataLoader worker inherits the buffer: it must not write, nor keep the lock alive."""
    import multiprocessing

    buffer = ReplayBuffer(tmp_path / "f", max_episodes=4, max_timesteps=5, fields=dict(x="float"))
    buffer.store_episode(x=[1.0, 2.0])

    def child(queue):
        try:
            buffer.store_episode(x=[3.0])
            queue.put("wrote")
        except ReadOnlyError as error:
            queue.put(str(error))
        except BaseException as error:  # anything else fails the test with its message
            queue.put(repr(error))

    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    process = context.Process(target=child, args=(queue,))
    process.start()
    message = queue.get(timeout=60)
    process.join(60)
    assert "inherited through fork" in message
    buffer.store_episode(x=[4.0])
    buffer.close()
    again = ReplayBuffer.from_folder(tmp_path / "f")
    again.store_episode(x=[5.0])  # the parent's close released the lock although the child had a copy
    assert again.num_episodes == 3
    again.close()


def test_creation_rechecks_after_taking_the_lock(tmp_path, monkeypatch):
    """If another writer creates the store while we wait for the lock, we open it instead of wiping it."""
    from memmap_replay.core import lock as lock_module

    folder = tmp_path / "race"
    spec = dict(max_episodes=4, max_timesteps=5, fields=dict(x="float"))
    real = lock_module.WriterLock.__init__

    def create_first(self, path, **options):
        monkeypatch.setattr(lock_module.WriterLock, "__init__", real)
        other = ReplayBuffer(folder, **spec)
        other.store_episode(x=[1.0, 2.0])
        other.close()
        real(self, path, **options)

    monkeypatch.setattr(lock_module.WriterLock, "__init__", create_first)
    buffer = ReplayBuffer(folder, **spec)
    assert buffer.num_episodes == 1
    buffer.close()
