"""``split``: one store into new stores at fractions (seeded, every episode in exactly one output, the linked segments
of a long episode together) or by a meta field's value, against a reference in plain numpy; the command line; and
a SIGKILL at any instant leaving each output absent or complete."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from memmap_replay import OptionError, StoreNotFoundError, read_card, split, update_card, verify, write_manifest
from tests.sharing.test_merge import assert_same, make_store, read_back, reap


def by_task(episodes: list[dict]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {}
    for episode in episodes:
        out.setdefault(int(episode["meta"]["task_id"]) % 3, []).append(episode)
    return out


def make_tasks(folder) -> list[dict]:
    """A store whose task_id is the episode's number mod 3 (set after the fact through the meta field)."""
    from memmap_replay.core.store import EpisodeStore

    episodes = make_store(folder, 1, 10, long_every=4)
    store = EpisodeStore.open(folder, "r+")
    table, links = store.live_table(), store.links(store.live_table())
    number = -1
    for i in range(len(table)):
        number += int(links[i]) < 0
        store.update_meta("task_id", int(table.slots[i]), np.array([number % 3], np.int64))
    store.close()
    for number, episode in enumerate(episodes):
        episode["meta"]["task_id"] = np.int64(number % 3)
    return episodes


def test_split_at_fractions_deals_every_whole_episode_once(tmp_path):
    want = make_store(tmp_path / "run", 1, 23, long_every=5)
    report = split(tmp_path / "run", {"train": 0.7, "val": 0.2, "test": 0.1}, out=tmp_path / "splits", seed=3)
    got = {name: read_back(tmp_path / "splits" / name) for name in ("train", "val", "test")}
    assert [len(episodes) for episodes in got.values()] == [16, 5, 2]  # 16.1, 4.6, 2.3: the rest to 'val'
    assert {name: out["folder"] for name, out in report.outputs.items()} == {
        name: str(tmp_path / "splits" / name) for name in got}
    assert all(out["data"] in ("copy_file_range", "copied") for out in report.outputs.values())
    # each whole episode in one output, in the source's order there (its task_id is its number)
    numbers = {name: [int(episode["meta"]["task_id"]) - 100 for episode in episodes] for name, episodes in got.items()}
    assert sorted(sum(numbers.values(), [])) == list(range(23))
    for name, episodes in got.items():
        assert numbers[name] == sorted(numbers[name])
        assert_same(episodes, [want[number] for number in numbers[name]])
        assert verify(tmp_path / "splits" / name).ok
    again = split(tmp_path / "run", {"train": 0.7, "val": 0.2, "test": 0.1}, out=tmp_path / "again", seed=3)
    assert {name: read_back(tmp_path / "again" / name)[0]["meta"] for name in again.outputs} == {
        name: episodes[0]["meta"] for name, episodes in got.items()}
    other = split(tmp_path / "run", {"train": 0.7, "val": 0.2, "test": 0.1}, out=tmp_path / "other", seed=4)
    assert [read_back(tmp_path / "other" / "val")[i]["meta"] for i in range(5)] != [got["val"][i]["meta"]
                                                                                    for i in range(5)]
    assert len(read_back(tmp_path / "other" / "val")) == 5 and len(other.outputs) == 3


@pytest.mark.parametrize("kernel", ["works", "refused"])
def test_rows_are_copied_by_range_with_copy_file_range_or_by_hand(tmp_path, monkeypatch, kernel):
    want = make_store(tmp_path / "run", 1, 12)
    calls = []

    def copy_file_range(reader, writer, count, at, to):
        calls.append((at, to, count))
        if kernel == "refused":
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        return real(reader, writer, count, at, to)
    real = os.copy_file_range
    monkeypatch.setattr(os, "copy_file_range", copy_file_range)
    report = split(tmp_path / "run", {"a": 0.5, "b": 0.5}, out=tmp_path / "s", seed=2)
    assert {out["data"] for out in report.outputs.values()} == {"copy_file_range" if kernel == "works" else "copied"}
    assert report.fields["obs"] == report.outputs["a"]["data"] and report.fields["image"] == report.outputs["a"]["data"]
    numbers = [int(episode["meta"]["task_id"]) - 100 for episode in read_back(tmp_path / "s" / "a")]
    assert_same(read_back(tmp_path / "s" / "a"), [want[number] for number in numbers])
    assert verify(tmp_path / "s" / "b").ok
    # episodes next to each other in the source and in an output are one range per field
    assert len(calls) < 3 * 12 if kernel == "works" else len(calls) == 2  # (refused once per output)


def test_split_by_a_meta_field(tmp_path):
    episodes = make_tasks(tmp_path / "run")
    want = by_task(episodes)
    report = split(tmp_path / "run", by="task_id", out=tmp_path / "per_task")
    assert sorted(report.outputs) == ["task_id-0", "task_id-1", "task_id-2"]
    for value, of_task in want.items():
        assert_same(read_back(tmp_path / "per_task" / f"task_id-{value}"), of_task)
    split(tmp_path / "run", {0: "train", 1: "train", 2: "val"}, by="task_id",
          out={"train": tmp_path / "tr", "val": tmp_path / "va"})
    assert_same(read_back(tmp_path / "tr"), [episode for episode in episodes if int(episode["meta"]["task_id"]) < 2])
    assert_same(read_back(tmp_path / "va"), want[2])
    with pytest.raises(OptionError, match="every value of 'task_id' in the store; 2 has none"):
        split(tmp_path / "run", {0: "train", 1: "val"}, by="task_id", out=tmp_path / "x")
    with pytest.raises(OptionError, match="by must name a meta field of the store"):
        split(tmp_path / "run", by="nope", out=tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_bad_splits_are_refused_and_nothing_is_written(tmp_path):
    make_store(tmp_path / "run", 1, 4)
    with pytest.raises(OptionError, match="the fractions must add up to 1"):
        split(tmp_path / "run", {"train": 0.5, "val": 0.2}, out=tmp_path / "s")
    with pytest.raises(OptionError, match="the fraction of output 'val' must be a number in"):
        split(tmp_path / "run", {"train": 1.0, "val": 0}, out=tmp_path / "s")
    with pytest.raises(OptionError, match="an output name must be a plain folder name"):
        split(tmp_path / "run", {"../up": 1.0}, out=tmp_path / "s")
    with pytest.raises(StoreNotFoundError, match="no store at"):
        split(tmp_path / "nowhere", {"train": 1.0}, out=tmp_path / "s")
    assert not (tmp_path / "s").exists()


def test_the_card_records_the_split(tmp_path):
    make_store(tmp_path / "run", 1, 4)
    update_card(tmp_path / "run", name="lab/run-v0")
    write_manifest(tmp_path / "run")
    split(tmp_path / "run", {"train": 0.5, "val": 0.5}, out=tmp_path / "s", seed=0)
    card = read_card(tmp_path / "s" / "val")
    assert card.name == "lab/run-v0"
    record = card.provenance[-1]
    assert (record["kind"], record["split"], record["fraction"], record["seed"]) == ("split", "val", 0.5, 0)
    assert record["source_store"]["name"] == "lab/run-v0"
    assert verify(tmp_path / "s" / "val", checksums=True).ok


def test_cli_edit_split(tmp_path):
    make_store(tmp_path / "run", 1, 10)
    command = [sys.executable, "-m", "memmap_replay", "edit", "split", "run", "--into", "train=0.9", "--into",
               "val=0.1", "--seed", "0", "--out", "splits"]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "train -> splits/train: 9 episodes" in done.stdout and "val -> splits/val: 1 episodes" in done.stdout
    done = subprocess.run(command[:-1] + ["splits2", "--into", "x=oops"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and "the fraction must be a number" in done.stderr


def _fork_split(folder, out) -> int:
    pid = os.fork()
    if pid == 0:  # the child: it never returns into pytest
        code = 1
        try:
            split(folder, {"train": 0.5, "val": 0.5}, out=out, seed=1)
            code = 0
        finally:
            os._exit(code)
    return pid


def test_a_split_killed_at_any_instant_leaves_each_output_absent_or_whole(tmp_path):
    make_store(tmp_path / "run", 1, 36)
    split(tmp_path / "run", {"train": 0.5, "val": 0.5}, out=tmp_path / "reference", seed=1)
    want = {name: read_back(tmp_path / "reference" / name) for name in ("train", "val")}
    started = time.monotonic()
    reap(_fork_split(tmp_path / "run", tmp_path / "timed"))
    took = time.monotonic() - started
    seen = set()
    for step in range(96):  # (until every outcome was seen, at least 16 kills: a loaded machine is slower)
        if step >= 16 and seen == {0, 1, 2}:
            break
        out = tmp_path / f"s{step}"
        pid = _fork_split(tmp_path / "run", out)
        time.sleep(took * (step % 24) / 16)  # (kill instants from the start to past the end, again and again)
        os.kill(pid, signal.SIGKILL)
        reap(pid)
        present = [name for name in ("train", "val") if (out / name).exists()]
        seen.add(len(present))
        for name in present:
            assert_same(read_back(out / name), want[name])
            assert verify(out / name).ok
        if len(present) < 2:  # the next run (into a fresh parent, the first output being there) cleans up
            missing = [name for name in ("train", "val") if name not in present]
            split(tmp_path / "run", {"train": 0.5, "val": 0.5}, out={name: out / name for name in missing}
                  | {name: tmp_path / f"again{step}" / name for name in present}, seed=1)
            for name in missing:
                assert_same(read_back(out / name), want[name])
        assert not [name for name in os.listdir(out) if name.startswith(".")] if out.exists() else True
    assert seen == {0, 1, 2}
