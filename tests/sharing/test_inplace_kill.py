"""Edits in place under SIGKILL and under a live reader in another process: a writer killed at any instant while it
deletes, trims or relabels leaves either the store before an edit or the store after it (the reference kept in
plain numpy names every version), ``verify`` clean, and a next writer that finishes a journal in flight; a reader
drawing batches meanwhile gets each batch from one version of the store, never a mix."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import pytest

from kill_sweeps import WAIT_LIMIT, fork_writer, reap
from memmap_replay import ReplayBuffer, verify

from conftest import reap as reap_process

FIELDS = dict(obs=("float", 3), action=("int", 2), reward="float")
META = dict(task_id="int")
MAX_TIMESTEPS = 12
COUNT = 12


def make_store(folder: Path, seed: int = 0) -> list[dict]:
    """A closed store of ``COUNT`` episodes; each step's obs is (episode id, step, noise); task_id 0 for all."""
    rng = np.random.default_rng(seed)
    reference = []
    with ReplayBuffer(folder, 16, MAX_TIMESTEPS, fields=FIELDS, meta_fields=META) as buffer:
        for number in range(COUNT):
            length = int(rng.integers(3, MAX_TIMESTEPS + 1))
            obs = np.stack([np.full(length, number), np.arange(length), rng.standard_normal(length)], 1)
            steps = dict(obs=obs.astype(np.float32), action=rng.integers(-9, 9, (length, 2)).astype(np.int32),
                         reward=rng.standard_normal(length).astype(np.float32))
            end = ("terminated", "truncated")[number % 2]
            final = dict(obs=np.full(3, -number, np.float32)) if end == "truncated" else None
            buffer.store_episode(**steps, task_id=0, end=end, final=final)
            reference.append(dict(id=number, obs=steps["obs"], end=end, final=None if final is None else final["obs"],
                                  task_id=0))
    return reference


def plan(verb: str, reference: list[dict], seed: int) -> tuple[list[tuple], list[list[dict]]]:
    """A seeded sequence of edits of one verb and the reference after each (``states[k]``: after k edits)."""
    rng = np.random.default_rng(seed)
    states, edits = [reference], []
    for k in range(1, 9):
        live = states[-1]
        if verb == "delete":
            ids = sorted(rng.choice([item["id"] for item in live], 1 + k % 2, replace=False).tolist())
            edit: tuple = ("delete", ids)
            new = [item for item in live if item["id"] not in ids]
        elif verb == "trim":
            item = live[int(rng.integers(len(live)))]
            length = len(item["obs"])
            first = int(rng.integers(0, length // 2))
            last = int(rng.integers(first + 1, length + 1))
            start, stop = (first - length if k % 2 else first), (last - length if k % 3 and last < length else last)
            edit = ("trim", item["id"], start, stop)
            kept = dict(item, obs=item["obs"][first:last])
            if last < length:
                kept.update(end="truncated", final=item["obs"][last])
            new = [kept if each["id"] == item["id"] else each for each in live]
        else:  # every episode to k at once: by ids, by a filter, one value per episode
            ids = [item["id"] for item in live]
            edit = (("relabel", ids, k), ("relabel", {"task_id": k - 1}, k), ("relabel", ids, [k] * len(ids)))[k % 3]
            new = [dict(item, task_id=k) for item in live]
        edits.append(edit)
        states.append(new)
    return edits, states


def apply(buffer: ReplayBuffer, edit: tuple) -> None:
    if edit[0] == "delete":
        buffer.delete_episodes(edit[1])
    elif edit[0] == "trim":
        buffer.trim(edit[1], start=edit[2], stop=edit[3])
    else:
        buffer.relabel(edit[1], task_id=edit[2])


def read_back(folder: Path) -> list[dict]:
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        return [dict(id=item.id, obs=item["obs"], end=item.end, task_id=int(item.meta["task_id"]),
                     final=None if item.final is None else item.final["obs"]) for item in buffer.episodes()]


def same(got: list[dict], want: list[dict]) -> bool:
    if [item["id"] for item in got] != [item["id"] for item in want]:
        return False
    for g, w in zip(got, want):
        if g["end"] != w["end"] or g["task_id"] != w["task_id"] or not np.array_equal(g["obs"], w["obs"]):
            return False
        if (g["final"] is None) != (w["final"] is None) or (w["final"] is not None
                                                             and not np.array_equal(g["final"], w["final"])):
            return False
    return True


def sweep(tmp_path: Path, verb: str, kills: int) -> None:
    base = tmp_path / "base"
    edits, states = plan(verb, make_store(base), seed=len(verb))
    timed = tmp_path / "timed"
    shutil.copytree(base, timed)
    pid = fork_writer(timed, lambda buffer: [apply(buffer, edit) for edit in edits])
    started = time.monotonic()
    assert reap(pid) == 0
    took = time.monotonic() - started  # (the edits and the close, after the writer opened)
    assert same(read_back(timed), states[-1])
    rng = np.random.default_rng(kills)
    seen = []
    for number in range(kills):
        folder = tmp_path / f"s{number}"
        shutil.copytree(base, folder)
        pid = fork_writer(folder, lambda buffer: [apply(buffer, edit) for edit in edits])
        delay = float(rng.uniform(0, took))
        time.sleep(delay)
        os.kill(pid, signal.SIGKILL)
        assert reap(pid) in (0, signal.SIGKILL), f"kill {number}: the child failed before the kill"
        got = read_back(folder)
        found = [k for k, state in enumerate(states) if same(got, state)]
        assert found, f"kill {number}: the store is none of the {len(states)} versions: {[i['id'] for i in got]}"
        in_flight = json.loads((folder / "meta.json").read_text())["state"].get("edits", 0) % 2 == 1
        seen.append((found[-1], in_flight))
        report = verify(folder)
        assert report.ok, report
        with ReplayBuffer.from_folder(folder) as writer:  # the next writer: finishes an edit in flight first
            writer.store_episode(obs=np.full((2, 3), 99, np.float32), action=np.zeros((2, 2), np.int32),
                                 reward=np.zeros(2, np.float32), task_id=99)
        number_of_edits = json.loads((folder / "meta.json").read_text())["state"].get("edits", 0)
        assert number_of_edits % 2 == 0
        if (folder / "episodes" / "journal.npy").exists():  # (a journal before its commit, or after its last)
            assert (np.load(folder / "episodes" / "journal.npy")["edit"] % 2 == 1).all()
        after = read_back(folder)
        assert same(after[:-1], states[found[-1]]) and after[-1]["task_id"] == 99
        assert verify(folder).ok
        shutil.rmtree(folder)
    assert len(seen) == kills  # (which versions the kills met: seen, e.g. for a debugger)


@pytest.mark.parametrize("verb", ["delete", "trim", "relabel"])
def test_a_few_kills_during_edits_leave_one_version(tmp_path, verb):
    sweep(tmp_path, verb, kills=4)


@pytest.mark.slow
@pytest.mark.parametrize("verb", ["delete", "trim", "relabel"])
def test_kills_at_many_instants_during_edits_leave_one_version(tmp_path, verb):
    sweep(tmp_path, verb, kills=24)


# ---- a live reader in another process ---------------------------------------------------------------------

READER = r'''
import os, sys
from pathlib import Path
import numpy as np
from memmap_replay import ReplayBuffer, SampleExpiredError

folder, control, stride = sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])
count = 0
with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
    sampler = buffer.sampler("uniform", timestep_level=True, seed=0)
    while not (control / "stop").exists():
        batch = sampler.batch(64)
        ids, t = np.divmod(batch["_key"].numpy(), stride)
        obs, task = batch["obs"].numpy(), batch["task_id"].numpy()
        assert (obs[:, 0] == ids).all(), ("rows of other episodes", ids, obs[:, 0])
        offsets = obs[:, 1] - t  # (a cut head shifts an episode's steps: by one amount in one version)
        assert (offsets >= 0).all(), (offsets, t)
        for id in np.unique(ids):
            assert len(np.unique(offsets[ids == id])) == 1, ("an episode's steps of two versions", id, offsets)
        assert len(np.unique(task)) == 1, ("task_id of two versions in one batch", task)
        if count % 4 == 0:
            try:  # (a list of episodes made before an edit of one of them refuses to read it: read the list again)
                for episode in buffer.episodes():
                    rows = episode["obs"]
                    assert len(rows) >= 1 and (rows[:, 0] == episode.id).all(), (episode.id, rows[:, 0])
                    assert (np.diff(rows[:, 1]) == 1).all(), (episode.id, rows[:, 1])
            except SampleExpiredError as error:
                assert "since the list of episodes was made" in str(error), error
        count += 1
        (control / "count.tmp").write_text(str(count))
        os.replace(control / "count.tmp", control / "count")
print(count)
'''


def batches_read(control: Path) -> int:
    try:
        return int((control / "count").read_text())
    except (FileNotFoundError, ValueError):
        return 0


def wait_for_batches(reader: subprocess.Popen, control: Path, count: int) -> None:
    deadline = time.monotonic() + WAIT_LIMIT
    while batches_read(control) < count:
        if reader.poll() is not None or time.monotonic() > deadline:
            reader.kill()
            pytest.fail(f"the reader stopped or stalled (exit {reader.returncode}):\n{reap_process(reader, 60)}")
        time.sleep(0.002)


def read_while(folder: Path, control: Path, work: Callable[[subprocess.Popen], object]) -> int:
    """Run ``work(reader)`` while the READER process draws batches from ``folder`` (it has read one first); then
    stop the reader, check that it ended cleanly, and return how many batches it read."""
    reader = subprocess.Popen([sys.executable, "-c", READER, str(folder), str(control), str(MAX_TIMESTEPS)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for_batches(reader, control, 1)
        work(reader)
        (control / "stop").write_text("")
        out, err = reader.communicate(timeout=WAIT_LIMIT)
    finally:
        if reader.poll() is None:
            reader.kill()
            reader.communicate()
    assert reader.returncode == 0, err.decode(errors="replace")
    return int(out)


def test_a_reader_in_another_process_gets_each_batch_from_one_version(tmp_path):
    folder, control = tmp_path / "s", tmp_path / "control"
    control.mkdir()
    reference = make_store(folder)
    def work(reader: subprocess.Popen) -> None:
        rng = np.random.default_rng(7)
        with ReplayBuffer.from_folder(folder) as buffer:
            for k in range(1, 31):
                buffer.relabel(buffer.episode_ids, task_id=k)
                ids = buffer.episode_ids.tolist()
                if k % 5 == 0 and len(ids) > 4:
                    buffer.delete_episodes(int(rng.choice(ids)))
                elif k % 5 in (2, 4):
                    id = int(rng.choice(buffer.episode_ids))
                    length = len(buffer.episodes()[buffer.episode_ids.tolist().index(id)])
                    if length > 2:
                        buffer.trim(id, start=1) if k % 5 == 2 else buffer.trim(id, stop=-1)
                wait_for_batches(reader, control, batches_read(control) + 2)
            assert buffer.num_episodes < len(reference)

    assert read_while(folder, control, work) >= 60
    assert verify(folder).ok
