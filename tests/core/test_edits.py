"""The journal of an edit in place (``core/edits.py``, "Edits (3.0)" in ``format``): an edit whose writer was killed
after its commit point (``state.edits`` odd, the journal on disk, the files not yet written) is seen done by readers
and kept by the next writer, whatever it does next (relabel another field, add_field); a stale journal (``edits``
even) is ignored and removed at the next writer's first change; ``read_journal`` refuses hostile files with library
errors and never hangs; a journal of a later edit sends the reader to the newer meta.json; ``verify`` warns of an
edit in flight and calls a missing journal a problem."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from memmap_replay import CorruptStoreError, ReplayBuffer, UnsafeEntryError, verify
from memmap_replay.core import format as fmt
from memmap_replay.core.edits import journal_dtype, read_journal
from memmap_replay.core.store import EpisodeStore

COUNT, LENGTH = 6, 5
WAIT_LIMIT = 60.0  # seconds before a call is called hung (not a timing assertion)


def make_store(folder: Path) -> Path:
    """``COUNT`` truncated episodes of ``LENGTH`` steps; obs row t of episode i is (i, t, 0), its final (-i, -i, -i);
    task_id i, other 0."""
    with ReplayBuffer(folder, 16, 12, fields=dict(obs=("float", 3), reward="float"),
                      meta_fields=dict(task_id="int", other="int")) as buffer:
        for number in range(COUNT):
            obs = np.stack([np.full(LENGTH, number), np.arange(LENGTH), np.zeros(LENGTH)], 1).astype(np.float32)
            buffer.store_episode(obs=obs, reward=np.full(LENGTH, number, np.float32), task_id=number, other=0,
                                 end="truncated", final=dict(obs=np.full(3, -number, np.float32)))
    return folder


def killed(folder: Path, edit: Callable[[ReplayBuffer], object]) -> None:
    """Make ``edit`` in a forked writer killed right after the edit's commit point (``edits`` odd): it dies in
    ``_finish_edit``, before the entries are written in place (an edit already in flight is finished first)."""
    before = fmt.read_meta(folder).state.edits
    pid = os.fork()
    if pid == 0:  # the child: it never returns into pytest
        try:
            finish = EpisodeStore._finish_edit

            def finish_or_die(self, **kw):
                if self.meta.state.edits & 1 and self.meta.state.edits > before:
                    os._exit(9)
                finish(self, **kw)

            EpisodeStore._finish_edit = finish_or_die
            buffer = ReplayBuffer.from_folder(folder)
            edit(buffer)
        finally:
            os._exit(1)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 9, "the child was not killed at the commit point"
    assert fmt.read_meta(folder).state.edits % 2 == 1
    assert (folder / fmt.EPISODES_DIR / fmt.JOURNAL_FILE).is_file()


def episodes(folder: Path) -> dict[int, dict]:
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        return {item.id: dict(obs=item["obs"], end=item.end, final=None if item.final is None else item.final["obs"],
                              **item.meta) for item in reader.episodes()}


def assert_done(folder: Path) -> None:
    """No edit in flight: ``edits`` even, no journal, verify clean without warnings."""
    assert fmt.read_meta(folder).state.edits % 2 == 0
    assert not (folder / fmt.EPISODES_DIR / fmt.JOURNAL_FILE).exists()
    report = verify(folder)
    assert report.ok and not report.warnings, report


def test_a_killed_relabel_is_seen_done_and_kept_by_a_relabel_of_another_field(tmp_path):
    folder = make_store(tmp_path / "s")
    killed(folder, lambda buffer: buffer.relabel([2], task_id=99))
    seen = episodes(folder)  # (a reader takes the journal over the files)
    assert [seen[id]["task_id"] for id in range(COUNT)] == [0, 1, 99, 3, 4, 5]
    report = verify(folder)
    assert report.ok and any("in flight" in line for line in report.warnings), report
    with ReplayBuffer.from_folder(folder) as buffer:
        buffer.relabel([2], other=7)
    seen = episodes(folder)
    assert (seen[2]["task_id"], seen[2]["other"]) == (99, 7)
    assert [seen[id]["task_id"] for id in range(COUNT)] == [0, 1, 99, 3, 4, 5]
    assert_done(folder)


def test_a_killed_trim_is_kept_by_a_relabel_of_its_episode(tmp_path):
    folder = make_store(tmp_path / "s")
    killed(folder, lambda buffer: buffer.trim(2, stop=2))
    for seen in (episodes(folder), None):
        if seen is None:
            with ReplayBuffer.from_folder(folder) as buffer:
                buffer.relabel([2], other=7)
            seen = episodes(folder)
        assert len(seen[2]["obs"]) == 2 and seen[2]["end"] == "truncated"
        np.testing.assert_array_equal(seen[2]["final"], [2, 2, 0])  # (the first cut step)
        assert all(len(seen[id]["obs"]) == LENGTH for id in seen if id != 2)
    assert seen[2]["other"] == 7
    assert_done(folder)


def test_add_field_after_a_killed_edit(tmp_path):
    folder = make_store(tmp_path / "s")
    killed(folder, lambda buffer: buffer.delete_episodes([1]))
    with ReplayBuffer.from_folder(folder) as buffer:
        buffer.add_field("score", np.arange(COUNT - 1) * 10, per="episode")
        assert buffer.episode_ids.tolist() == [0, 2, 3, 4, 5]
    seen = episodes(folder)
    assert sorted(seen) == [0, 2, 3, 4, 5]
    assert [seen[id]["score"] for id in sorted(seen)] == [0, 10, 20, 30, 40]
    assert_done(folder)


def stale_journal(folder: Path, edit: int) -> None:
    """A journal the writer left before its commit (or after its last): slot 2's task_id 555, as edit ``edit``."""
    meta = fmt.read_meta(folder)
    records = np.zeros(1, journal_dtype(meta.schema))
    records["edit"], records["slot"] = edit, 2
    for name in ("start", "length", "end", "final", "continues"):
        records[name] = np.load(folder / fmt.EPISODES_DIR / f"{name}.npy")[2]
    records["meta.task_id"], records["meta.other"] = 555, 0
    np.save(folder / fmt.EPISODES_DIR / fmt.JOURNAL_FILE, records)


@pytest.mark.parametrize("offset", [1, -1, 3])
def test_a_stale_journal_is_ignored_and_removed_at_the_next_writers_first_change(tmp_path, offset):
    folder = make_store(tmp_path / "s")
    with ReplayBuffer.from_folder(folder) as buffer:
        buffer.relabel([0], other=1)
    edits = fmt.read_meta(folder).state.edits
    assert edits == 2
    stale_journal(folder, edits + offset)
    assert episodes(folder)[2]["task_id"] == 2
    assert verify(folder).ok
    with ReplayBuffer.from_folder(folder) as buffer:
        assert buffer.episodes()[2].meta["task_id"] == 2
        buffer.relabel([3], other=5)
        assert not (folder / fmt.EPISODES_DIR / fmt.JOURNAL_FILE).exists()
    seen = episodes(folder)
    assert (seen[2]["task_id"], seen[3]["other"], seen[0]["other"]) == (2, 5, 1)
    assert_done(folder)


def call_bounded(call: Callable[[], object]) -> object:
    """``call()`` in a thread: its result, or its exception raised here; a call still running after
    ``WAIT_LIMIT`` fails the test (a hang)."""
    out: dict[str, object] = {}

    def run():
        try:
            out["value"] = call()
        except BaseException as error:  # noqa: BLE001 - raised again in the test's thread
            out["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(WAIT_LIMIT)
    if thread.is_alive():
        pytest.fail(f"the call hung for {WAIT_LIMIT} s")
    if "error" in out:
        raise out["error"]  # type: ignore[misc]
    return out.get("value")


@pytest.fixture
def in_flight(tmp_path) -> Path:
    """A store with an edit in flight (slots 1 and 3 relabelled, writer killed at the commit point)."""
    folder = make_store(tmp_path / "s")
    killed(folder, lambda buffer: buffer.relabel([1, 3], task_id=99))
    return folder


def records_of(folder: Path) -> np.ndarray:
    return np.load(folder / fmt.EPISODES_DIR / fmt.JOURNAL_FILE)


def saved(records: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, records, allow_pickle=False)
    return buffer.getvalue()


def with_(records: np.ndarray, **columns) -> np.ndarray:
    records = records.copy()
    for name, values in columns.items():
        records[name] = values
    return records


HOSTILE = {  # name: (the journal's bytes from the genuine records and max_episodes, error, match)
    "wrong dtype": (lambda r, m: saved(np.zeros(2, np.int64)), CorruptStoreError, "must hold a 1-D array of"),
    "2-D": (lambda r, m: saved(r.reshape(2, 1)), CorruptStoreError, "must hold a 1-D array of"),
    "more records than slots": (lambda r, m: saved(np.resize(r, m + 1)), CorruptStoreError,
                                "the edit's journal is damaged"),
    "more bytes than slots' records": (lambda r, m: saved(np.resize(r, m + (1 << 16))), UnsafeEntryError,
                                       "must hold at most"),
    "no records": (lambda r, m: saved(r[:0]), CorruptStoreError, "the edit's journal is damaged"),
    "slots descending": (lambda r, m: saved(r[::-1]), CorruptStoreError, "the edit's journal is damaged"),
    "a slot twice": (lambda r, m: saved(with_(r, slot=[1, 1])), CorruptStoreError, "the edit's journal is damaged"),
    "slot out of range": (lambda r, m: saved(with_(r, slot=[1, m])), CorruptStoreError,
                          "the edit's journal is damaged"),
    "negative slot": (lambda r, m: saved(with_(r, slot=[-1, 3])), CorruptStoreError, "the edit's journal is damaged"),
    "an older edit": (lambda r, m: saved(with_(r, edit=r["edit"] - 2)), CorruptStoreError,
                      "the edit's journal is damaged"),
    "two edits": (lambda r, m: saved(with_(r, edit=[r["edit"][0], r["edit"][0] + 2])), CorruptStoreError,
                  "the edit's journal is damaged"),
    "truncated": (lambda r, m: saved(r)[: len(saved(r)) - 7], CorruptStoreError, "is not a readable .npy file"),
    "header only": (lambda r, m: saved(r)[:60], CorruptStoreError, "is not a readable .npy file"),
    "pickled objects": (lambda r, m: np.lib.format.header_data_from_array_1_0(np.zeros(1, object)) and
                        _pickled(), CorruptStoreError, "is not a readable .npy file"),
}


def _pickled() -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, np.array([{"a": 1}, None], dtype=object), allow_pickle=True)
    return buffer.getvalue()


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_read_journal_refuses_a_hostile_file(in_flight, case):
    make, error, match = HOSTILE[case]
    path = in_flight / fmt.EPISODES_DIR / fmt.JOURNAL_FILE
    meta = fmt.read_meta(in_flight)
    path.write_bytes(make(records_of(in_flight), meta.capacity.max_episodes))
    with pytest.raises(error, match=match):
        call_bounded(lambda: read_journal(in_flight, meta))
    report = call_bounded(lambda: verify(in_flight))
    assert not report.ok and any("journal" in line for line in report.problems), report
    with pytest.raises(CorruptStoreError, match="journal"):
        call_bounded(lambda: ReplayBuffer.from_folder(in_flight, read_only=True).episodes())


@pytest.mark.parametrize("kind", ["fifo", "link out of the folder", "link to /dev/zero", "a folder"])
def test_read_journal_refuses_what_is_not_a_regular_file_inside_the_folder(in_flight, tmp_path, kind):
    path = in_flight / fmt.EPISODES_DIR / fmt.JOURNAL_FILE
    outside = tmp_path / "outside.npy"
    outside.write_bytes(path.read_bytes())
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "a folder":
        path.mkdir()
    else:
        path.symlink_to(outside if kind == "link out of the folder" else Path("/dev/zero"))
    meta = fmt.read_meta(in_flight)
    with pytest.raises(UnsafeEntryError if kind != "a folder" else CorruptStoreError, match="journal.npy"):
        call_bounded(lambda: read_journal(in_flight, meta))
    report = call_bounded(lambda: verify(in_flight))
    assert not report.ok, report


def test_a_journal_of_a_later_edit_sends_the_reader_to_the_newer_meta_json(in_flight):
    meta = fmt.read_meta(in_flight)
    with ReplayBuffer.from_folder(in_flight, read_only=True) as reader:
        assert [item.meta["task_id"] for item in reader.episodes()] == [0, 99, 2, 99, 4, 5]
        # the writer finishes that edit and makes another, killed at its commit point too
        killed(in_flight, lambda buffer: buffer.relabel([4], task_id=44))
        assert read_journal(in_flight, meta) is None  # (the journal is edit meta.edits + 2's)
        store = reader._store
        store._journal, store._overlaid = None, {}  # (as a reader that read meta.json before the writer's edits)
        assert store.meta.state.edits == meta.state.edits
        journal = store.journal()
        assert journal is not None and journal.number == store.meta.state.edits == meta.state.edits + 2
        assert store.meta_array("task_id")[:COUNT].tolist() == [0, 99, 2, 99, 44, 5]
    assert [episodes(in_flight)[id]["task_id"] for id in range(COUNT)] == [0, 99, 2, 99, 44, 5]


def test_verify_warns_of_an_edit_in_flight_and_calls_a_missing_journal_a_problem(in_flight):
    report = verify(in_flight)
    assert report.ok, report
    assert [line for line in report.warnings if "journal.npy" in line and "in flight" in line], report
    (in_flight / fmt.EPISODES_DIR / fmt.JOURNAL_FILE).unlink()
    report = verify(in_flight)
    assert not report.ok
    assert [line for line in report.problems if "journal.npy" in line and "missing" in line], report
    with pytest.raises(CorruptStoreError, match=r"journal.npy must hold the journal of edit"):
        ReplayBuffer.from_folder(in_flight, read_only=True).episodes()
