"""verify() and ``python -m memmap_replay verify``: every kind of damage is reported in plain words, and
opening the damaged folder gives the library's error (or, for damage outside the live data, opens fine).

Each damage kind is a function of the folder of a closed store (``folder``: three episodes, a final
row, a meta field, persisted priorities). For each one: ``verify()`` reports it naming the file;
``ReplayBuffer.from_folder(folder, read_only=True)`` raises the expected library error (message naming
the file, pointing at the verify command) or opens with the committed episodes intact; the command
line exits 1 (0 for warnings only) and prints the file's name.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import memmap_replay
from memmap_replay import (CorruptStoreError, InvalidDataError, NotAFolderError, ReplayBuffer, ReplayError,
                           StoreNotFoundError, UnsupportedFormatError, VerifyReport, verify)
from memmap_replay.sharing.card import update_card
from memmap_replay.sharing.checksums import write_manifest
from memmap_replay.cli import main

from conftest import SMALL_FIELDS, SMALL_META, episode_arrays

LENGTHS = (3, 4, 5)  # episode e has LENGTHS[e] steps; episode 1 also stores a final observation row
MAX_EPISODES, MAX_TIMESTEPS = 6, 10
HINT = r"python -m memmap_replay verify"


def make_store(folder: Path) -> Path:
    """A closed store: episodes 0..2 (rows 0-2, 3-7 with a final row, 8-12), priorities persisted."""
    with ReplayBuffer(folder, max_episodes=MAX_EPISODES, max_timesteps=MAX_TIMESTEPS, fields=SMALL_FIELDS,
                      meta_fields=SMALL_META) as buffer:
        for number, length in enumerate(LENGTHS):
            final = dict(obs=np.full(3, -1.0, np.float32)) if number == 1 else None
            buffer.store_episode(**episode_arrays(number, length), task_id=number,
                                 end="terminated" if number == 1 else "truncated", final=final)
        sampler = buffer.sampler("prioritized", seed=0)
        batch = sampler.batch(4)
        sampler.update_priorities(batch["_key"], np.arange(1.0, 5.0))
        sampler.close()
    return folder


@pytest.fixture
def folder(tmp_path):
    return make_store(tmp_path / "store")


def assert_intact(buffer: ReplayBuffer, count: int = len(LENGTHS)) -> None:
    """The first ``count`` committed episodes read back as written."""
    assert buffer.num_episodes == count
    data = buffer.get_all_data()
    for number in range(count):
        length = LENGTHS[number]
        assert int(data["episode_lens"][number]) == length
        for name, values in episode_arrays(number, length).items():
            np.testing.assert_array_equal(data[name][number, :length].numpy(), values, err_msg=name)


# ---- damage kinds ------------------------------------------------------------------------------------


def edit_meta(change):
    def mutate(folder):
        data = json.loads((folder / "meta.json").read_text())
        change(data)
        (folder / "meta.json").write_text(json.dumps(data))
    return mutate


def write(name, data: bytes):
    return lambda folder: (folder / name).write_bytes(data)


def truncate(name, by):
    return lambda folder: os.truncate(folder / name, (folder / name).stat().st_size - by)


def remove(name):
    return lambda folder: (folder / name).unlink()


def rows_of(folder) -> int:
    return json.loads((folder / "meta.json").read_text())["state"]["rows"]


def replace_npy(name, make_array, **save):
    return lambda folder: np.save(folder / name, make_array(rows_of(folder)), **save)


def poke(name, slot, value):
    def mutate(folder):
        array = np.load(folder / name, mmap_mode="r+")
        array.view(np.uint8 if array.dtype == bool else array.dtype)[slot] = value
        array.flush()
        del array
    return mutate


def set_state(**values):
    return edit_meta(lambda data: data["state"].update(values))


def meta_is_a_folder(folder):
    (folder / "meta.json").unlink()
    (folder / "meta.json").mkdir()


# (mutate, the file the report names, the open error and its message; None: opens with every episode)
DAMAGE = [
    # data and table files
    pytest.param(truncate("steps/obs.npy", 1), "steps/obs.npy", CorruptStoreError, r"steps/obs\.npy is truncated",
                 id="step-file-truncated"),
    pytest.param(truncate("episodes/length.npy", 1), "episodes/length.npy", CorruptStoreError,
                 r"episodes/length\.npy is truncated", id="table-file-truncated"),
    pytest.param(truncate("meta/task_id.npy", 3), "meta/task_id.npy", CorruptStoreError,
                 r"meta/task_id\.npy is truncated", id="meta-file-truncated"),
    pytest.param(replace_npy("steps/obs.npy", lambda rows: np.zeros((rows, 3), np.float64)), "steps/obs.npy",
                 CorruptStoreError,
                 r"steps/obs\.npy must hold float32 rows of shape \(3,\) as meta\.json says \(got float64",
                 id="header-wrong-dtype"),
    pytest.param(replace_npy("steps/action.npy", lambda rows: np.zeros((rows, 3), np.int32)), "steps/action.npy",
                 CorruptStoreError,
                 r"steps/action\.npy must hold int32 rows of shape \(2,\) .*\(got int32 of shape \(3,\)\)",
                 id="header-wrong-shape"),
    pytest.param(replace_npy("steps/reward.npy", lambda rows: np.zeros(2, np.float32)), "steps/reward.npy",
                 CorruptStoreError,
                 r"steps/reward\.npy is truncated: it must hold at least \d+ rows", id="header-too-few-rows"),
    pytest.param(replace_npy("episodes/start.npy", lambda rows: np.array([None] * MAX_EPISODES), allow_pickle=True),
                 "episodes/start.npy",
                 CorruptStoreError, r"episodes/start\.npy must hold int64 rows .*\(got object", id="pickled-objects"),
    pytest.param(write("steps/reward.npy", b"not an npy file" * 10), "steps/reward.npy", CorruptStoreError,
                 r"steps/reward\.npy is not a readable \.npy file", id="npy-garbage"),
    pytest.param(remove("steps/obs.npy"), "steps/obs.npy", CorruptStoreError, r"steps/obs\.npy is missing",
                 id="missing-step-file"),
    pytest.param(remove("meta/task_id.npy"), "meta/task_id.npy", CorruptStoreError, r"meta/task_id\.npy is missing",
                 id="missing-meta-file"),
    pytest.param(remove("episodes/id.npy"), "episodes/id.npy", CorruptStoreError, r"episodes/id\.npy is missing",
                 id="missing-table-file"),
    # meta.json
    pytest.param(remove("meta.json"), "meta.json", StoreNotFoundError,
                 r"holds no meta\.json, only a store's other files", id="meta-missing"),
    pytest.param(write("meta.json", b"{not json"), "meta.json", CorruptStoreError, r"meta\.json is not valid JSON",
                 id="meta-garbage"),
    pytest.param(write("meta.json", b""), "meta.json", CorruptStoreError, r"meta\.json is not valid JSON",
                 id="meta-empty"),
    pytest.param(write("meta.json", b"\xff\xfe\x00\x01"), "meta.json", CorruptStoreError,
                 r"meta\.json is not valid JSON", id="meta-binary"),
    pytest.param(write("meta.json", b"[" * 100_000), "meta.json", CorruptStoreError, r"meta\.json is not valid JSON",
                 id="meta-nested-too-deep"),
    pytest.param(meta_is_a_folder, "meta.json", CorruptStoreError, r"meta\.json is a folder where the "
                                                                   r"store must have a file", id="meta-is-a-folder"),
    pytest.param(write("meta.json", b"[1, 2]"), "meta.json", UnsupportedFormatError,
                 r"must declare format 'memmap_replay'", id="meta-json-list"),
    pytest.param(edit_meta(lambda d: d.update(format="zarr")), "meta.json", UnsupportedFormatError, r"got 'zarr'",
                 id="meta-wrong-format"),
    pytest.param(edit_meta(lambda d: d.update(version="4.0")), "meta.json", UnsupportedFormatError,
                 r"major versions 1, 2 and 3 only", id="meta-version-4"),
    pytest.param(edit_meta(lambda d: d.pop("schema")), "meta.json", CorruptStoreError,
                 r"meta\.json is missing or has malformed entries", id="meta-no-schema"),
    pytest.param(edit_meta(lambda d: d["state"].pop("rows")), "meta.json", CorruptStoreError,
                 r"malformed entries.*'rows'", id="meta-no-state-rows"),
    pytest.param(edit_meta(lambda d: d.pop("store_id")), "meta.json", CorruptStoreError,
                 r"malformed entries.*'store_id'", id="meta-no-store-id"),
    pytest.param(edit_meta(lambda d: d["schema"]["fields"]["obs"].update(dtype="object")), "meta.json",
                 CorruptStoreError, r"malformed entries.*'obs'", id="meta-field-dtype-object"),
    pytest.param(edit_meta(lambda d: d["capacity"].update(max_episodes="6")), "meta.json", CorruptStoreError,
                 r"must hold non-negative integers", id="meta-capacity-string"),
    pytest.param(edit_meta(lambda d: d["capacity"].update(circular="no")), "meta.json", CorruptStoreError,
                 r"must hold non-negative integers", id="meta-circular-string"),
    pytest.param(set_state(commits=2.5), "meta.json", CorruptStoreError, r"must hold non-negative integers",
                 id="meta-commits-float"),
    pytest.param(edit_meta(lambda d: d["capacity"].update(max_timesteps=0)), "meta.json", CorruptStoreError,
                 r"impossible capacity", id="meta-capacity-impossible"),
    pytest.param(set_state(first_episode=3, next_episode=2), "meta.json", CorruptStoreError, r"inconsistent counters",
                 id="first-after-next"),
    pytest.param(set_state(write_head=4), "meta.json", CorruptStoreError,
                 r"meta\.json's state\.write_head is 4 \(expected 13, the row after the newest episode 2, or beyond "
                 r"it, or 0\)",
                 id="write-head-inside-live-rows"),
    # the live episode table
    pytest.param(poke("episodes/id.npy", 1, 7), "episodes/id.npy", CorruptStoreError,
                 r"episodes/id\.npy does not match meta\.json's live episodes 0\.\.2.*slot 1 must hold episode 1, "
                 r"got 7", id="slot-id-wrong"),
    pytest.param(poke("episodes/start.npy", 1, 2), "episodes/start.npy", CorruptStoreError,
                 r"episodes/start\.npy, episodes/length\.npy: episode \d \(slot \d\) has rows "
                 r".*another live episode also holds", id="episodes-overlap"),
    pytest.param(lambda folder: poke("episodes/start.npy", 2, rows_of(folder) - 2)(folder), "episodes/start.npy",
                 CorruptStoreError,
                 r"episode 2 \(slot 2\) has start \d+, length 5: the episode table points outside the \d+ stored rows",
                 id="start-plus-length-beyond-rows"),
    pytest.param(poke("episodes/start.npy", 0, 2**62), "episodes/start.npy", CorruptStoreError,
                 r"episode 0 .*points outside", id="start-huge"),
    pytest.param(poke("episodes/start.npy", 0, -1), "episodes/start.npy", CorruptStoreError,
                 r"episode 0 \(slot 0\) has start -1, .*points outside", id="start-negative"),
    pytest.param(poke("episodes/length.npy", 0, 0), "episodes/length.npy", CorruptStoreError,
                 r"episode 0 \(slot 0\) has start 0, length 0: .*expected a length of 1\.\.10", id="length-zero"),
    pytest.param(poke("episodes/length.npy", 2, MAX_TIMESTEPS + 1), "episodes/length.npy", CorruptStoreError,
                 r"episode 2 \(slot 2\) has start 8, length 11: .*expected a length of 1\.\.10",
                 id="length-beyond-max-timesteps"),
    pytest.param(poke("episodes/end.npy", 2, 7), "episodes/end.npy", CorruptStoreError,
                 r"episodes/end\.npy: episode 2 \(slot 2\) has end code 7 \(expected 0 unspecified, 1 "
                 r"terminated or 2 truncated\)", id="end-code-out-of-range"),
    # damage outside the live data: reported, and the store opens
    pytest.param(truncate("priorities/steps.npy", 8), "priorities/steps.npy", None, None, id="priorities-truncated"),
    pytest.param(write("priorities/steps.npy", b"garbage" * 9), "priorities/steps.npy", None, None,
                 id="priorities-garbage"),
    pytest.param(lambda folder: np.save(folder / "priorities/steps.owner.npy", np.zeros(3, np.float32)),
                 "priorities/steps.owner.npy", None, None, id="priorities-owner-wrong-header"),
    pytest.param(write("priorities/steps.json", b"{oops"), "priorities/steps.json", None, None,
                 id="priorities-view-spec-garbage"),
    pytest.param(poke("episodes/length.npy", 5, -3), None, None, None, id="free-slot-garbage"),
]
WARNED = {"priorities-truncated", "priorities-garbage", "priorities-owner-wrong-header", "priorities-view-spec-garbage"}
CLEAN = {"free-slot-garbage"}  # a slot no live episode uses: a reader ignores it, and so does verify


@pytest.mark.parametrize("mutate, named, error, match", DAMAGE)
def test_damage_is_reported_and_refused(folder, mutate, named, error, match, request):
    mutate(folder)
    report = verify(folder)
    kind = request.node.callspec.id
    if kind in WARNED:
        assert report.ok and not report.problems, report
        assert any(line.startswith(named) and "sampler" in line for line in report.warnings), report
    elif kind in CLEAN:
        assert report.ok and not report.warnings, report
    else:
        assert not report.ok, f"verify missed it:\n{report}"
        assert any(named in line for line in report.problems), report
    if error is None:
        with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
            assert_intact(buffer)
        return
    for read_only in (True, False):
        with pytest.raises(error, match=match) as info:
            ReplayBuffer.from_folder(folder, read_only=read_only)
        assert isinstance(info.value, ReplayError)
        assert HINT in str(info.value) and str(folder) in str(info.value)


def test_damaged_priorities_are_started_afresh_or_refused_clearly(folder):
    for damage in (b"garbage" * 9, None):  # garbage, then a priorities file cut short
        if damage is None:
            path = folder / "priorities/steps.npy"
            path.write_bytes(path.read_bytes()[:-64])
        else:
            write("priorities/steps.npy", damage)(folder)
        assert verify(folder).ok and verify(folder).warnings  # sampler state, not data: a warning
        with ReplayBuffer.from_folder(folder) as buffer:
            sampler = buffer.sampler("prioritized", seed=1)  # started afresh: every position at priority 1
            assert sampler.tree.total == len(sampler.view) and sampler.tree.min == 1.0
            sampler.close()
        assert verify(folder).ok and not verify(folder).warnings


def test_priorities_of_a_grown_store_are_healthy(folder):
    """A grow leaves the priorities files of the capacity before it (a sampler remaps them when it opens)."""
    with ReplayBuffer.from_folder(folder) as buffer:
        buffer.grow(max_episodes=buffer.episode_store.capacity.max_episodes * 3 + 1, max_timesteps=40)
    report = verify(folder)
    assert report.ok and report.warnings == [], report
    with ReplayBuffer.from_folder(folder) as buffer:
        buffer.sampler("prioritized", seed=1).close()  # remapped to the new capacity
    report = verify(folder)
    assert report.ok and report.warnings == [], report


def test_healthy_store_report(folder):
    report = verify(folder)
    assert isinstance(report, VerifyReport)
    assert report.ok and report.problems == [] and report.warnings == [] and report.is_store
    assert report.checked == {"meta_json": 1, "npy_files": 12, "live_episodes": 3, "live_rows": 13, "priority_files": 2,
                              "checksums": 0, "entries": 23, "frames": 0}  # 7 in the folder, 16 in its layout folders
    text = str(report)
    assert text.splitlines()[0] == f"{folder}: OK, 0 warnings"
    assert "3 live episodes" in text and "13 live rows" in text and "12 .npy headers" in text
    assert "decoded frame" not in text  # (no compressed field)
    assert json.loads(json.dumps(report.to_json())) == {
        "folder": str(folder), "ok": True, "is_store": True, "problems": [], "warnings": [], "checked": report.checked}


def test_a_ring_that_wrapped_many_times_is_healthy(tmp_path):
    """No false alarm on a valid store: a ring of mixed lengths (some with final rows) after many wraps."""
    rng = np.random.default_rng(3)
    with ReplayBuffer(tmp_path / "ring", max_episodes=7, max_timesteps=9, max_steps=40, circular=True,
                      fields=dict(x="float")) as buffer:
        for number in range(120):
            length = int(rng.integers(1, 10))
            final = dict(x=np.float32(-1)) if rng.random() < 0.3 and length < 9 else None
            buffer.store_episode(x=np.full(length, number, np.float32), final=final)
            if number % 10 == 9:
                report = verify(buffer.folder)
                assert report.ok and not report.warnings, report
                assert report.checked["live_episodes"] == buffer.num_episodes
                assert report.checked["live_rows"] == buffer.num_steps + int(
                    buffer.episode_store.live_table().final.sum())


def test_every_problem_is_listed_not_only_the_first(folder):
    truncate("steps/obs.npy", 1)(folder)
    remove("meta/task_id.npy")(folder)
    poke("episodes/end.npy", 0, 9)(folder)
    (folder / "meta.json.tmp").write_text("{")
    report = verify(folder)
    assert [line.split(":")[0] for line in report.problems] == ["steps/obs.npy", "meta/task_id.npy", "episodes/end.npy"]
    assert "expected" in report.problems[0] and "found" in report.problems[0]
    assert report.warnings[0].startswith("meta.json.tmp: left by a commit that was interrupted")
    text = str(report)
    assert "DAMAGED: 3 problems, 1 warning" in text and "  - steps/obs.npy: truncated" in text


def test_many_bad_slots_are_counted_past_the_first_few(tmp_path):
    with ReplayBuffer(tmp_path / "s", max_episodes=20, max_timesteps=4, fields=dict(x="float")) as buffer:
        for _ in range(12):
            buffer.store_episode(x=np.zeros(2, np.float32))
    ends = np.load(tmp_path / "s/episodes/end.npy", mmap_mode="r+")
    ends[:12] = 5
    ends.flush()
    del ends
    problems = verify(tmp_path / "s").problems
    assert len(problems) == 6 and problems[-1] == "episodes/end.npy: and 7 more live episodes like these"


def test_stray_files_and_extra_bytes_are_warnings(folder):
    (folder / "meta.json.tmp").write_text('{"format": "memmap_replay"')
    (folder / "notes.txt").write_text("mine")
    np.save(folder / "steps/old_field.npy", np.zeros(3))
    with open(folder / "steps/obs.npy", "ab") as file:
        file.write(b"\0" * 12)  # an interrupted grow: the size went first, the header did not follow
    report = verify(folder)
    assert report.ok, report
    assert [line.split(":")[0] for line in report.warnings] == ["steps/obs.npy", "meta.json.tmp", "notes.txt",
                                                                "steps/old_field.npy"]
    assert "12 bytes past the" in report.warnings[0]
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        assert_intact(buffer)


def test_truncation_past_the_live_rows_is_refused_too(folder):
    # the header declares more rows than the committed state.rows, and the file is cut in those rows: no
    # live row is missing, but neither plain numpy nor a reader (which maps every declared row) can map it
    rows = rows_of(folder)
    header_rows = rows + 100
    path = folder / "steps/reward.npy"
    with open(path, "r+b") as file:
        header = memmap_replay.core.format.npy_header(np.dtype(np.float32), (header_rows,))
        file.write(header)
        file.truncate(len(header) + (rows + 10) * 4)
    report = verify(folder)
    assert report.problems == [f"steps/reward.npy: truncated: {len(header) + (rows + 10) * 4} bytes on disk (expected "
                               f"{len(header) + header_rows * 4} for the {header_rows} rows its header declares; "
                               f"found {rows + 10} whole rows)"]
    with pytest.raises(CorruptStoreError, match=rf"steps/reward\.npy is truncated: its header declares {header_rows} "
                                                rf"rows .*{HINT}"):
        ReplayBuffer.from_folder(folder, read_only=True)


def test_folders_that_are_not_stores(tmp_path):
    with pytest.raises(StoreNotFoundError, match=r"no store at .*nowhere: the folder does not exist"):
        verify(tmp_path / "nowhere")
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotAFolderError, match=r"file must be a folder \(got a file\)"):
        verify(tmp_path / "file")
    (tmp_path / "empty").mkdir()
    report = verify(tmp_path / "empty")
    assert not report.ok and not report.is_store
    assert report.problems == ["meta.json: missing (expected the store's metadata, its commit point); this folder is "
                               "not a memmap_replay store"]


# ---- checksums.sha256 -----------------------------------------------------------------------------------


def test_checksums_are_checked_when_present(folder):
    update_card(folder, name="test/verify-v0")
    assert (folder / "stats/running.npz").is_file()  # the writer's running statistics
    write_manifest(folder)
    report = verify(folder)
    assert report.ok and not report.warnings, report  # card.json, README.md, stats/, checksums.sha256 are the store's
    assert report.checked["checksums"] == 18 and "18 checksummed files" in str(report)
    assert verify(folder, checksums=False).checked["checksums"] == 0


def test_checksum_findings_in_plain_words(folder):
    write_manifest(folder)
    poke("steps/reward.npy", 0, 99.0)(folder)  # the header and sizes are fine: only the checksum sees it
    poke("priorities/steps.npy", 0, 5.0)(folder)  # sampler state: a warning
    (folder / "card.json").write_text("{}")  # written by hand after the manifest: unlisted, not data
    report = verify(folder)
    assert [line.split(":")[0] for line in report.problems] == ["steps/reward.npy"], report
    assert re.fullmatch(r"steps/reward\.npy: its sha256 is [0-9a-f]{12}… \(expected [0-9a-f]{12}…, from "
                        r"checksums\.sha256\)", report.problems[0])
    assert [line.split(":")[0] for line in report.warnings] == ["priorities/steps.npy", "card.json"], report
    assert "priorities are sampler state" in report.warnings[0] and "not in checksums.sha256" in report.warnings[1]
    assert verify(folder, checksums=False).ok


def test_a_writer_drops_the_manifest_it_makes_stale(folder):
    write_manifest(folder)
    with ReplayBuffer.from_folder(folder) as writer:
        assert (folder / "checksums.sha256").exists()  # opening changes nothing
        writer.store_episode(**episode_arrays(3, 2), task_id=3)
        assert not (folder / "checksums.sha256").exists()
    assert verify(folder).ok and verify(folder).checked["checksums"] == 0


def test_a_commit_after_the_manifest_is_explained(folder):
    write_manifest(folder)
    manifest = (folder / "checksums.sha256").read_bytes()
    with ReplayBuffer.from_folder(folder) as writer:
        writer.store_episode(**episode_arrays(3, 2), task_id=3)
    (folder / "checksums.sha256").write_bytes(manifest)  # an old manifest copied back by hand
    problems = verify(folder).problems
    meta = [line for line in problems if line.startswith("meta.json")]
    assert len(meta) == 1 and "the store was written to after checksums.sha256 was" in meta[0]
    assert f"python -m memmap_replay checksum {folder}" in meta[0]
    write_manifest(folder)
    assert verify(folder).ok


def test_many_checksum_findings_are_counted(tmp_path):
    with ReplayBuffer(tmp_path / "s", max_episodes=3, max_timesteps=4,
                      fields={f"f{i}": "float" for i in range(8)}) as buffer:
        buffer.store_episode(**{f"f{i}": np.ones(2, np.float32) for i in range(8)})
    write_manifest(tmp_path / "s")
    for i in range(8):
        poke(f"steps/f{i}.npy", 0, 7.0)(tmp_path / "s")
    problems = verify(tmp_path / "s").problems
    assert len(problems) == 6 and problems[-1] == "checksums.sha256: and 3 more changed files"


def test_forced_and_skipped_checksums(folder):
    report = verify(folder, checksums=True)
    assert report.problems == [f"checksums.sha256: missing: write one with `python -m memmap_replay checksum {folder}`"]
    (folder / "checksums.sha256").write_text("zz  meta.json\n" + "0" * 64 + "  ../../etc/passwd\n")
    problems = verify(folder).problems
    assert problems[0].startswith("checksums.sha256: line 1: expected '<64 hex digits>  <path>'")
    assert problems[1].startswith("checksums.sha256: line 2: a path that is not a plain relative path")
    with pytest.raises(InvalidDataError, match=r"checksums must be None, True or False \(got 'yes'\)"):
        verify(folder, checksums="yes")


def test_temporary_files_of_card_and_checksum_writes_are_warned_about(folder):
    (folder / "card.json.123.ab12cd34.tmp").write_text("{")
    (folder / "checksums.sha256.9.ffffffff.tmp").write_text("")
    report = verify(folder)
    assert report.ok and [line.split(":")[0] for line in report.warnings] == ["card.json.123.ab12cd34.tmp",
                                                                             "checksums.sha256.9.ffffffff.tmp"]
    assert "left by an interrupted write" in report.warnings[0]


def test_cli_checksum_options(folder, capsys):
    write_manifest(folder)
    poke("steps/reward.npy", 0, 99.0)(folder)
    done = run_cli("verify", folder, "--no-checksums")
    assert done.returncode == 0 and "0 checksummed files" in done.stdout, done.stderr
    assert main(["verify", str(folder)]) == 1
    assert "  - steps/reward.npy: its sha256 is" in capsys.readouterr().out
    (folder / "checksums.sha256").unlink()
    assert main(["verify", str(folder)]) == 0 and main(["verify", str(folder), "--quiet", "--checksums"]) == 1
    assert "checksums.sha256: missing" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="2"):
        main(["verify", str(folder), "--checksums", "--no-checksums"])
    assert "not allowed with argument" in capsys.readouterr().err


# ---- a crash's uncommitted tail -----------------------------------------------------------------------


def test_uncommitted_tail_is_ignored_and_reclaimed(folder):
    """A writer killed mid-commit leaves rows past write_head, a table slot for the next id and a
    meta.json.tmp; readers see only the committed episodes, and the next writer overwrites the tail."""
    meta = json.loads((folder / "meta.json").read_text())
    state = meta["state"]
    head, next_id = state["write_head"], state["next_episode"]
    rng = np.random.default_rng(7)
    for name in ("obs", "action", "reward"):
        array = np.load(folder / f"steps/{name}.npy", mmap_mode="r+")
        array[head: head + 6] = rng.integers(100, 200, size=array[head: head + 6].shape)
        array.flush()
        del array
    for name, value in dict(start=head, length=6, end=1, id=next_id).items():
        poke(f"episodes/{name}.npy", next_id % MAX_EPISODES, value)(folder)
    tmp = folder / "meta.json.tmp"
    tmp.write_text(json.dumps({**meta, "state": {**state, "next_episode": next_id + 1, "write_head": head + 6}}))

    report = verify(folder)
    assert report.ok and len(report.warnings) == 1 and report.warnings[0].startswith("meta.json.tmp")
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert_intact(reader)
    with ReplayBuffer.from_folder(folder) as writer:
        assert_intact(writer)
        writer.store_episode(**episode_arrays(3, 4), task_id=3)
        assert writer.episode_store.live_table().start[-1] == head  # the tail's rows were reclaimed
    assert not tmp.exists()  # the commit wrote its own meta.json.tmp and renamed it
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        data = reader.get_all_data()
        assert reader.num_episodes == 4 and data["task_id"].tolist() == [0, 1, 2, 3]
        for name, values in episode_arrays(3, 4).items():
            np.testing.assert_array_equal(data[name][3, :4].numpy(), values, err_msg=name)
    assert verify(folder).ok and not verify(folder).warnings


# ---- entries the library refuses: links, special files, hard links, files over their caps -----------------


@pytest.fixture
def alarm():
    """A hang (verify blocking on a FIFO, reading /dev/zero) fails the test instead of stopping the suite."""
    def rang(signum, frame):
        raise TimeoutError("verify blocked")
    previous = signal.signal(signal.SIGALRM, rang)
    signal.alarm(120)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


def outside_file(folder: Path, name: str, data: bytes = b"someone else's file\n") -> Path:
    path = folder.parent / "outside" / name
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(data)
    return path


def planted(rel, make):
    """Replace ``rel`` in the store by what ``make(folder, path)`` plants there."""
    def mutate(folder):
        path = folder / rel
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        make(folder, path)
    return mutate


def link_out(folder, path):
    path.symlink_to(outside_file(folder, path.name))


def sparse(size):
    def mutate(folder):
        path = folder / mutate.rel
        with open(path, "ab") as file:
            file.truncate(size)
    return mutate


def sized(rel, size):
    mutate = sparse(size)
    mutate.rel = rel
    return mutate


def hard_linked(rel):
    return lambda folder: os.link(folder / rel, outside_file(folder, "x").parent / "shared")


def moved_inside(rel):
    def mutate(folder):
        (folder / rel).rename(folder / (rel + ".real"))
        (folder / rel).symlink_to(Path(rel + ".real").name)
    return mutate


OUT = r"a link leading out of the store folder \(to .*outside.*\): the library refuses it, for reading and writing"
FIFO = r"a FIFO \(named pipe\), not a regular file: the library refuses it without opening it"
WRITER = r"readers follow it, but a writer refuses a store holding links"
REFUSED = [
    pytest.param(planted("meta.json", link_out), "meta.json", OUT, id="meta-link-out"),
    pytest.param(planted("steps/obs.npy", link_out), "steps/obs.npy", OUT + r".*replace the link by the file itself",
                 id="step-file-link-out"),
    pytest.param(planted("steps", lambda folder, path: path.symlink_to(outside_file(folder, "x").parent)), "steps",
                 r"a link leading out .*replace the link by the folder itself", id="steps-folder-link-out"),
    pytest.param(planted("card.json", lambda folder, path: path.symlink_to("/dev/zero")), "card.json",
                 r"a link leading out of the store folder \(to /dev/zero, a device\)", id="card-to-dev-zero"),
    pytest.param(planted("checksums.sha256", lambda folder, path: path.symlink_to("/dev/zero")), "checksums.sha256",
                 r"to /dev/zero", id="checksums-to-dev-zero"),
    pytest.param(planted("writer.lock", lambda folder, path: path.symlink_to(folder.parent / "absent")), "writer.lock",
                 r"a link to .*absent, which does not exist \(a dangling link\).*a writer never creates",
                 id="lock-dangling"),
    pytest.param(planted("episodes/id.npy", lambda folder, path: path.symlink_to("id.npy")), "episodes/id.npy",
                 r"a link to id\.npy that loops", id="table-file-loop"),
    pytest.param(planted("meta.json", lambda folder, path: os.mkfifo(path)), "meta.json", FIFO, id="meta-fifo"),
    pytest.param(planted("steps/reward.npy", lambda folder, path: os.mkfifo(path)), "steps/reward.npy", FIFO,
                 id="step-file-fifo"),
    pytest.param(planted("priorities/steps.json", lambda folder, path: os.mkfifo(path)), "priorities/steps.json", FIFO,
                 id="priorities-json-fifo"),
    pytest.param(planted("stats/running.npz", lambda folder, path: os.mkfifo(path)), "stats/running.npz", FIFO,
                 id="running-npz-fifo"),
    pytest.param(sized("meta.json", 1 << 30), "meta.json", r"1073741824 bytes, over the 4194304-byte cap on JSON files",
                 id="meta-1GiB-sparse"),
    pytest.param(sized("checksums.sha256", (4 << 20) + 1), "checksums.sha256",
                 r"4194305 bytes, over the 4194304-byte cap on checksums\.sha256", id="checksums-over-cap"),
    pytest.param(sized("stats/running.npz", (64 << 20) + 1), "stats/running.npz",
                 r"67108865 bytes, over the 67108864-byte cap on stats/running\.npz.*rebuilt",
                 id="running-npz-over-cap"),
    pytest.param(hard_linked("steps/obs.npy"), "steps/obs.npy",
                 r"a hard link shared with 1 other name\(s\): a writer refuses it .*cp steps/obs\.npy", id="hard-link"),
    pytest.param(hard_linked("meta.json"), "meta.json", r"a hard link shared with 1 other", id="meta-hard-link"),
    pytest.param(moved_inside("steps/obs.npy"), "steps/obs.npy",
                 r"a link \(to obs\.npy\.real, inside the folder\): " + WRITER, id="link-inside"),
    pytest.param(moved_inside("steps"), "steps", r"a link \(to steps\.real, inside the folder\)",
                 id="folder-link-inside"),
]


@pytest.mark.parametrize("mutate, rel, match", REFUSED)
def test_entries_the_library_refuses_are_problems(folder, mutate, rel, match, alarm, capsys):
    mutate(folder)
    report = verify(folder)
    mine = [line for line in report.problems if line.startswith(f"{rel}: ")]
    assert not report.ok and len(mine) == 1, report  # reported once, naming the entry
    assert re.search(match, mine[0]), mine[0]
    assert main(["verify", str(folder)]) == 1
    assert f"{rel}: " in capsys.readouterr().out


def test_the_folder_itself_may_be_a_link(folder, tmp_path):
    (tmp_path / "elsewhere").symlink_to(folder)  # how a store is put on another disk
    report = verify(tmp_path / "elsewhere")
    assert report.ok and not report.warnings, report


def test_readers_are_not_refused_what_writers_are(folder):
    moved_inside("steps/obs.npy")(folder)
    hard_linked("meta.json")(folder)
    report = verify(folder)
    assert len(report.problems) == 2 and report.checked["live_rows"] == 13, report  # read through the inside link
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        assert_intact(buffer)


def test_stray_links_and_fifos_are_warnings(folder, alarm):
    (folder / "meta.json.tmp").symlink_to(outside_file(folder, "secret.txt"))
    (folder / "stats/running.npz.tmp").symlink_to(outside_file(folder, "secret.txt"))
    os.mkfifo(folder / "steps/old.npy")
    with open(folder / "notes.json", "wb") as file:  # a big file of the user's: not the library's, not capped
        file.truncate(8 << 20)
    report = verify(folder)
    assert report.ok, report
    assert [line for line in report.warnings if line.startswith("notes.json")] == [
        "notes.json: not part of the store (readers ignore it)"]
    lines = {line.split(": ")[0]: line for line in report.warnings if "not part of the store, so the library" in line}
    assert set(lines) == {"meta.json.tmp", "stats/running.npz.tmp", "steps/old.npy"}, report.warnings
    assert re.search(r"a link leading out of the store folder \(to .*secret\.txt\); it is not part",
                     lines["meta.json.tmp"])
    assert lines["steps/old.npy"].startswith("steps/old.npy: a FIFO (named pipe), not a regular file; it is not part")


def running_npz(folder: Path, **members: bytes) -> None:
    """stats/running.npz with raw ``members`` added (replacing any of the same name)."""
    path = folder / "stats/running.npz"
    with zipfile.ZipFile(path) as source:
        kept = {info.filename: source.read(info) for info in source.infolist() if info.filename not in members}
    with zipfile.ZipFile(path, "w") as out:
        for name, data in {**kept, **members}.items():
            out.writestr(name, data)


def npy_header(descr: str, shape: tuple) -> bytes:
    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": descr, "fortran_order": False, "shape": shape})
    return buffer.getvalue()


@pytest.mark.parametrize("members, match", [
    pytest.param({"extra.npy": npy_header("<f8", (1 << 29,)) + bytes(16)},
                 r"an unknown member 'extra\.npy' \(\d+ bytes\)", id="unknown-member"),
    pytest.param({"notes.txt": b"hello"}, r"an unknown member 'notes\.txt'", id="unknown-non-npy-member"),
    pytest.param({"obs.mean.npy": npy_header("<f8", (1 << 29,)) + bytes(16)},
                 r"member 'obs\.mean\.npy' declares an array of 4294967296 bytes \(float64, shape \(536870912,\); "
                 r"expected at most 24\)", id="member-header-declares-4GiB"),
    pytest.param({"obs.m2.npy": npy_header("<f8", (1 << 16,)) + bytes(8 << 16)},
                 r"member 'obs\.m2\.npy' holds 524416 bytes \(expected at most \d+\)", id="oversized-member"),
    pytest.param({"obs.min.npy": npy_header("|O", (3,)) + bytes(24)}, r"member 'obs\.min\.npy' holds Python objects",
                 id="object-member"),
])
def test_running_statistics_members_are_checked_without_inflating(folder, members, match):
    running_npz(folder, **members)
    report = verify(folder)
    mine = [line for line in report.problems if line.startswith("stats/running.npz: ")]
    assert len(mine) == 1 and re.search(match, mine[0]) and "rebuilds the statistics" in mine[0], report


def test_unreadable_running_statistics_are_a_warning(folder):
    (folder / "stats/running.npz").write_bytes(b"not a zip" * 10)
    report = verify(folder)
    assert report.ok and any(line.startswith("stats/running.npz: not a readable .npz") and "rebuilds" in line
                             for line in report.warnings), report


# ---- the command line ----------------------------------------------------------------------------------


def run_cli(*args, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memmap_replay", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_cli_on_a_healthy_store(folder):
    done = run_cli("verify", folder)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"{folder}: OK, 0 warnings") and done.stderr == ""
    done = run_cli("verify", folder, "--json")
    assert done.returncode == 0 and json.loads(done.stdout) == verify(folder).to_json()


def test_cli_json_on_a_damaged_store(folder):
    poke("episodes/end.npy", 2, 7)(folder)
    done = run_cli("verify", "--json", folder)
    assert done.returncode == 1 and done.stderr == ""
    report = json.loads(done.stdout)
    assert report["ok"] is False and report["is_store"] is True and report["checked"]["live_episodes"] == 3
    assert report["problems"] == ["episodes/end.npy: live episode 2 (slot 2) has end code 7 (expected 0 unspecified, "
                                  "1 terminated, 2 truncated, or 255 removed)"]


def test_cli_on_every_damage_kind(tmp_path, capsys):
    """Every damage kind through the command line: each through ``main``, what ``python -m memmap_replay``
    runs, and one healthy and one damaged store as a user runs them, a process each (a process for each of
    the 34 kinds cost a minute)."""
    cases = []
    for index, case in enumerate(DAMAGE):
        mutate, named, _, _ = case.values
        target = make_store(tmp_path / f"s{index}")
        mutate(target)
        cases.append((case.id, named, target))
    wrong = []

    def check(kind, named, target, code, stdout, stderr):
        expected = 0 if kind in WARNED | CLEAN else 1
        first = f"{target}: OK" if expected == 0 else f"{target}: DAMAGED"
        if code != expected or not stdout.startswith(first) or (named and named not in stdout) or stderr:
            wrong.append(f"{kind}: exit {code}, expected {expected}:\n{stdout}{stderr}")

    for kind, named, target in cases:
        code = main(["verify", str(target)], prog="python -m memmap_replay")
        check(kind, named, target, code, *capsys.readouterr())
    as_a_user = [next(case for case in cases if case[0] in WARNED | CLEAN),
                 next(case for case in cases if case[0] not in WARNED | CLEAN)]
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda case: run_cli("verify", case[2]), as_a_user))
    for (kind, named, target), done in zip(as_a_user, runs):
        check(kind, named, target, done.returncode, done.stdout, done.stderr)
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("args, match", [
    pytest.param(["verify", "{tmp}/nowhere"], r"error: no store at .*nowhere: the folder does not exist",
                 id="no-such-path"),
    pytest.param(["verify", "{tmp}/file"], r"error: .*file must be a folder \(got a file\)", id="a-file"),
    pytest.param(["verify", "{tmp}/empty"], r"error: .*empty is not a memmap_replay store", id="empty-folder"),
    pytest.param(["verify"], r"the following arguments are required: FOLDER", id="no-folder"),
    pytest.param(["verify", "{tmp}/empty", "--bogus"], r"unrecognized arguments: --bogus", id="unknown-option"),
    pytest.param(["check", "{tmp}"], r"invalid choice: 'check'", id="unknown-command"),
    pytest.param([], r"usage: python -m memmap_replay .*COMMAND", id="no-command"),
])
def test_cli_usage_errors_and_paths_that_are_not_stores(tmp_path, args, match):
    (tmp_path / "file").write_text("x")
    (tmp_path / "empty").mkdir()
    done = run_cli(*[arg.format(tmp=tmp_path) for arg in args])
    assert done.returncode == 2
    assert re.search(match, done.stderr, re.S), done.stderr
    assert not (tmp_path / "nowhere").exists()


def test_cli_json_for_a_path_that_is_not_a_store(tmp_path):
    done = run_cli("verify", "--json", tmp_path / "nowhere")
    assert done.returncode == 2
    assert json.loads(done.stdout) == {"folder": str(tmp_path / "nowhere"), "ok": False, "is_store": False,
                                       "error": f"no store at {tmp_path / 'nowhere'}: the folder does not exist"}


def test_cli_help_teaches(capsys):
    for args in (["--help"], ["verify", "--help"]):
        with pytest.raises(SystemExit, match="0"):
            main(args, prog="memmap-replay")
    text = capsys.readouterr().out
    for words in ("verify", "exit codes:", "0  the folder is a healthy store", "1  problems found",
                  "2  usage error", "--json", "meta.json.tmp", "priorities/", "memmap-replay verify replay_data"):
        assert words in text, words
    done = run_cli("--help")
    assert done.returncode == 0 and "python -m memmap_replay" in done.stdout


def test_console_script_points_at_the_cli(capsys):
    tomllib = pytest.importorskip("tomllib")
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    module, function = pyproject["project"]["scripts"]["memmap-replay"].split(":")
    assert module == "memmap_replay.cli" and function == "main"
    assert main([]) == 2  # no command: the help on stderr, the usage exit code
    assert "verify" in capsys.readouterr().err
