"""The in-place verbs of ``edit`` (delete, trim, relabel, add-field, compact) through ``cli.main``: the store after
each against a reference kept in plain numpy, the line each prints and its ``--json``, progress bars on a terminal,
and bad input refused with its exit code, a message naming the problem and meta.json byte-identical
(``sharing/test_inplace.py`` tests the edits themselves)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import ReplayBuffer, verify
from memmap_replay.cli import EXIT_OK, EXIT_USAGE, main

FIELDS = dict(obs=("float", 2), reward="float")
META = dict(task_id="int", goal=("float", 2))


def make_store(folder: Path, count: int = 8, seed: int = 0, **options) -> dict[int, dict]:
    """A closed store of ``count`` episodes; returns the reference: id -> steps, end and meta values in numpy."""
    rng = np.random.default_rng(seed)
    options = dict(dict(max_episodes=16, max_timesteps=20), **options)
    reference = {}
    with ReplayBuffer(folder, fields=FIELDS, meta_fields=META, **options) as buffer:
        for number in range(count):
            length = int(rng.integers(4, 21))
            steps = dict(obs=rng.standard_normal((length, 2)).astype(np.float32),
                         reward=rng.standard_normal(length).astype(np.float32))
            meta = dict(task_id=number % 3, goal=rng.standard_normal(2).astype(np.float32))
            ident = buffer.store_episode(**steps, **meta, end="terminated")
            reference[ident] = dict(steps=steps, meta=meta, end="terminated")
    return reference


def run(argv: list) -> int:
    """``main(argv)``'s exit code; argparse's usage errors (a SystemExit) too."""
    try:
        return main([str(part) for part in argv])
    except SystemExit as exit_:
        return int(exit_.code or 0)


def episodes(folder: Path) -> dict:
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        return {episode.id: episode for episode in buffer.episodes()}


def assert_steps(got, steps: dict) -> None:
    assert len(got) == len(steps["obs"])
    for name, rows in steps.items():
        np.testing.assert_array_equal(got[name], rows)


def test_delete_removes_the_ids_and_ranges_given(tmp_path, capsys):
    folder = tmp_path / "s"
    reference = make_store(folder)
    assert run(["edit", "delete", folder, 3, "5-6", 3]) == EXIT_OK
    assert capsys.readouterr().out == f"deleted 3 episodes from {folder} (5 live now)\n"
    got = episodes(folder)
    assert sorted(got) == [0, 1, 2, 4, 7]
    for ident, episode in got.items():
        assert_steps(episode, reference[ident]["steps"])
    assert run(["edit", "delete", folder, 0, "--json"]) == EXIT_OK
    assert json.loads(capsys.readouterr().out) == {"ok": True, "folder": str(folder), "deleted": 1, "live": 4}
    assert verify(folder).ok


@pytest.mark.parametrize("start, stop", [(None, -3), (2, None), (-3, -1), (1, 4)])
def test_trim_keeps_the_slice_given(tmp_path, capsys, start, stop):
    folder = tmp_path / "s"
    reference = make_store(folder)
    options = [*(["--start", start] if start is not None else []), *(["--stop", stop] if stop is not None else [])]
    assert run(["edit", "trim", folder, 4, *options]) == EXIT_OK
    length = len(reference[4]["steps"]["obs"])
    first, last, _ = slice(start, stop).indices(length)
    cut = ", truncated" if last < length else ""
    assert capsys.readouterr().out == (f"trimmed episode 4 of {folder} to its steps {first}:{last} ({last - first} of "
                                       f"{length} steps kept{cut})\n")
    got = episodes(folder)
    assert_steps(got[4], {name: rows[first:last] for name, rows in reference[4]["steps"].items()})
    assert got[4].end == ("truncated" if cut else "terminated")
    for ident in set(reference) - {4}:
        assert_steps(got[ident], reference[ident]["steps"])
    assert verify(folder).ok


def test_relabel_by_ids_and_by_meta_values(tmp_path, capsys):
    folder = tmp_path / "s"
    reference = make_store(folder)
    assert run(["edit", "relabel", folder, "--where", "task_id=1", "--set", "task_id=7", "goal=[0.5,-1]"]) == EXIT_OK
    ones = [ident for ident, item in reference.items() if item["meta"]["task_id"] == 1]
    assert capsys.readouterr().out == (f"relabeled {len(ones)} episodes of {folder} where task_id=1: task_id=7, "
                                       f"goal=[0.5,-1]\n")
    for ident in ones:
        reference[ident]["meta"].update(task_id=7, goal=np.array([0.5, -1], np.float32))
    assert run(["edit", "relabel", folder, "--ids", 0, 2, "--set", "task_id=[4,5]", "--json"]) == EXIT_OK
    report = json.loads(capsys.readouterr().out)
    assert report == {"ok": True, "folder": str(folder), "relabeled": 2, "values": {"task_id": [4, 5]}, "ids": [0, 2]}
    reference[0]["meta"]["task_id"], reference[2]["meta"]["task_id"] = 4, 5
    assert run(["edit", "relabel", folder, "--where", "task_id=99", "--set", "task_id=1"]) == EXIT_OK
    assert capsys.readouterr().out.startswith("relabeled 0 episodes")
    for ident, episode in episodes(folder).items():
        assert episode.meta["task_id"] == reference[ident]["meta"]["task_id"]
        np.testing.assert_array_equal(episode.meta["goal"], reference[ident]["meta"]["goal"])


def discounted_sums(rewards: np.ndarray, gamma: float) -> np.ndarray:
    sums, total = np.zeros(len(rewards)), 0.0
    for t in range(len(rewards) - 1, -1, -1):
        total = float(rewards[t]) + gamma * total
        sums[t] = total
    return sums


def test_add_field_returns_to_go_and_discounted_return(tmp_path, capsys):
    folder = tmp_path / "s"
    reference = make_store(folder)
    assert run(["edit", "delete", folder, 1]) == EXIT_OK  # (the fields cover the live episodes)
    del reference[1]
    assert run(["edit", "add-field", folder, "rtg", "--returns-to-go"]) == EXIT_OK
    assert run(["edit", "add-field", folder, "rtg_half", "--returns-to-go", "--gamma", 0.5]) == EXIT_OK
    assert run(["edit", "add-field", folder, "ret", "--discounted-return", "--dtype", "float64", "--json"]) == EXIT_OK
    lines = capsys.readouterr().out.split("\n", 3)
    assert lines[1:3] == [f"added the step field rtg (float32) to {folder}: returns_to_go('reward', gamma=1.0) of 7 "
                          f"episodes", f"added the step field rtg_half (float32) to {folder}: returns_to_go('reward', "
                          f"gamma=0.5) of 7 episodes"]
    assert json.loads(lines[3]) == {"ok": True, "folder": str(folder), "field": "ret", "per": "episode",
                                    "dtype": "float64", "shape": [], "values": "discounted_return('reward', "
                                    "gamma=0.99)", "episodes": 7}
    got = episodes(folder)
    assert sorted(got) == sorted(reference)
    for ident, episode in got.items():
        rewards = reference[ident]["steps"]["reward"]
        assert episode["rtg"].dtype == np.float32
        np.testing.assert_allclose(episode["rtg"], discounted_sums(rewards, 1.0), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(episode["rtg_half"], discounted_sums(rewards, 0.5), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(episode.meta["ret"], discounted_sums(rewards, 0.99)[0], rtol=1e-12)
    assert verify(folder).ok


def test_compact_frees_rows_and_keeps_the_episodes(tmp_path, capsys):
    folder = tmp_path / "s"
    make_store(folder)
    assert run(["edit", "delete", folder, 1, 2]) == EXIT_OK
    assert run(["edit", "trim", folder, 4, "--stop", 2]) == EXIT_OK
    before = episodes(folder)
    capsys.readouterr()
    assert run(["edit", "compact", folder]) == EXIT_OK
    line = capsys.readouterr().out
    match = re.fullmatch(rf"compacted {re.escape(str(folder))}: rows (\d+) -> (\d+) \((\d+) freed\), (\d+) episodes "
                         rf"moved, .+ of disk freed\n", line)
    assert match, line
    rows_before, rows_after, freed, _ = map(int, match.groups())
    # (a cut tail leaves its first cut step as the final observation row)
    assert rows_after == sum(len(episode) + (episode.final is not None) for episode in before.values())
    assert freed == rows_before - rows_after > 0
    assert verify(folder).ok
    after = episodes(folder)
    assert sorted(after) == sorted(before)
    for ident, episode in after.items():
        assert_steps(episode, {name: before[ident][name] for name in FIELDS})
        assert episode.end == before[ident].end
    assert run(["edit", "compact", folder, "--json"]) == EXIT_OK  # (nothing left to move)
    report = json.loads(capsys.readouterr().out)
    assert report["ok"] and report["moved_episodes"] == 0 and report["rows_before"] == report["rows_after"]


def test_compact_of_a_store_without_free_rows_grows_its_max_steps(tmp_path, capsys):
    folder = tmp_path / "s"
    full(folder)
    before = episodes(folder)
    assert run(["edit", "compact", folder]) == EXIT_OK
    line = capsys.readouterr().out
    assert re.search(r"rows 15 -> 10 \(5 freed\), 2 episodes moved, .* freed; max_steps grown from 15 to 20 to move "
                     r"them\n$", line), line
    assert verify(folder).ok and sorted(episodes(folder)) == sorted(before)


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_bars_on_a_terminal_unless_quiet(tmp_path, monkeypatch, capsys):
    folder = tmp_path / "s"
    make_store(folder)
    run(["edit", "delete", folder, 0])
    for argv, bar in ((["add-field", folder, "rtg", "--returns-to-go"], "add_field rtg"),
                      (["compact", folder], "compact"),
                      (["add-field", folder, "ret", "--discounted-return", "--quiet"], None)):
        terminal = FakeTerminal()
        monkeypatch.setattr(sys, "stderr", terminal)
        assert run(["edit", *argv]) == EXIT_OK
        assert (bar in terminal.getvalue()) if bar else terminal.getvalue() == ""


def ring(folder: Path) -> None:
    make_store(folder, circular=True)


def full(folder: Path) -> None:
    """Every row used (no room past the write head), then its first episode deleted: the rest must move."""
    with ReplayBuffer(folder, 4, 5, fields=FIELDS, meta_fields=META, max_steps=15) as buffer:
        for _ in range(3):
            buffer.store_episode(obs=np.zeros((5, 2)), reward=np.zeros(5), task_id=0, goal=np.zeros(2))
        buffer.delete_episodes(0)


BAD = [
    (make_store, ["delete", 3, 99], EXIT_USAGE, r"edit delete: error: delete_episodes: episode id\(s\) \[99\] are not "
                                                r"live in .*nothing was changed"),
    (make_store, ["delete", "5-3"], EXIT_USAGE, r"argument ID: must be an episode id .* \(got '5-3'\)"),
    (make_store, ["delete", "x"], EXIT_USAGE, r"argument ID: must be an episode id .* \(got 'x'\)"),
    (make_store, ["trim", 99, "--stop", -1], EXIT_USAGE,
     r"edit trim: error: trim: episode id\(s\) \[99\] are not live"),
    (make_store, ["trim", 2, "--start", 3, "--stop", 3], EXIT_USAGE, r"edit trim: error: trim\(id=2, start=3, stop=3\) "
                                                                     r"must keep at least one"),
    (make_store, ["relabel", "--ids", 1, "--set", "task_id"], EXIT_USAGE,
     r"edit relabel: error: --set takes NAME=VALUE .* \(got 'task_id'\)"),
    (make_store, ["relabel", "--ids", 1, "--set", "task_id=two"], EXIT_USAGE,
     r"--set takes NAME=VALUE with VALUE a JSON number or list.*\(got 'task_id=two'\)"),
    (make_store, ["relabel", "--ids", 1, "--set", "task=2"], EXIT_USAGE,
     r"\['task'\] are not meta fields of the store"),
    (make_store, ["relabel", "--where", "task=1", "--set", "task_id=2"], EXIT_USAGE,
     r"unknown meta field \['task'\].*did you mean 'task_id'"),
    (make_store, ["relabel", "--where", "task_id=one", "--set", "task_id=2"], EXIT_USAGE,
     r"--where takes NAME=VALUE .*\(got 'task_id=one'\)"),
    (make_store, ["relabel", "--ids", 1, 99, "--set", "task_id=2"], EXIT_USAGE, r"\[99\] are not live"),
    (make_store, ["relabel", "--ids", 1, 2, "--set", "task_id=[1,2,3]"], EXIT_USAGE, r"meta field 'task_id' must have "
                                                                                     r"one value for every episode"),
    (make_store, ["relabel", "--set", "task_id=2"], EXIT_USAGE, r"one of the arguments --ids --where is required"),
    (make_store, ["add-field", "rtg", "--returns-to-go", "--reward", "rewards"], EXIT_USAGE,
     r"edit add-field: error: unknown field \['rewards'\]"),
    (make_store, ["add-field", "obs", "--returns-to-go"], EXIT_USAGE, r"already has a field 'obs'"),
    (make_store, ["add-field", "r", "--discounted-return", "--gamma", 1.5], EXIT_USAGE, r"gamma must be a number in "
                                                                                        r"\[0, 1\] \(got 1.5\)"),
    (make_store, ["add-field", "r", "--returns-to-go", "--dtype", "floaty"], EXIT_USAGE,
     r"argument --dtype: must be a numpy dtype .*\(got 'floaty'\)"),
    (make_store, ["add-field", "r"], EXIT_USAGE,
     r"one of the arguments --returns-to-go --discounted-return is required"),
    (ring, ["compact"], EXIT_USAGE, r"edit compact: error: compact\(\) is for stores that are not rings"),
]


@pytest.mark.parametrize("make, argv, code, message", BAD, ids=[" ".join(map(str, case[1])) for case in BAD])
def test_bad_input_is_refused_with_nothing_changed(tmp_path, capsys, make, argv, code, message):
    folder = tmp_path / "s"
    make(folder)
    meta = (folder / "meta.json").read_bytes()
    files = sorted(path.relative_to(folder) for path in folder.rglob("*"))
    assert run(["edit", argv[0], folder, *argv[1:]]) == code
    err = capsys.readouterr().err
    assert re.search(message, err), err
    assert (folder / "meta.json").read_bytes() == meta
    assert sorted(path.relative_to(folder) for path in folder.rglob("*")) == files


@pytest.mark.parametrize("verb", [["delete", 1], ["trim", 1], ["relabel", "--ids", 1, "--set", "task_id=1"],
                                  ["add-field", "r", "--returns-to-go"], ["compact"]])
def test_a_path_that_is_not_a_store(tmp_path, capsys, verb):
    assert run(["edit", verb[0], tmp_path / "nowhere", *verb[1:], "--json"]) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert json.loads(out)["is_store"] is False
    assert err.startswith(f"memmap-replay edit {verb[0]}: error: no store at {tmp_path / 'nowhere'}")


def test_a_store_a_writer_is_writing_is_refused(tmp_path, capsys):
    folder = tmp_path / "s"
    make_store(folder)
    with ReplayBuffer.from_folder(folder) as writer:
        writer.store_episode(obs=np.zeros((3, 2)), reward=np.zeros(3), task_id=0, goal=np.zeros(2))  # (holds the lock)
        meta = (folder / "meta.json").read_bytes()
        assert run(["edit", "delete", folder, 1]) == EXIT_USAGE
        assert (folder / "meta.json").read_bytes() == meta
    assert re.search(r"edit delete: error: .* one writer at a time", capsys.readouterr().err)
    assert sorted(episodes(folder)) == list(range(9))


def test_the_console_command(tmp_path):
    make_store(tmp_path / "s")
    done = subprocess.run([sys.executable, "-m", "memmap_replay", "edit", "delete", "s", "2-3"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "deleted 2 episodes from s (6 live now)\n", "")
    done = subprocess.run([sys.executable, "-m", "memmap_replay", "edit", "trim", "s", "2"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "edit trim: error: trim: episode id(s) [2] are not live" in done.stderr
