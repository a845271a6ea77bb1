"""Crash safety, for real: a writer process is SIGKILLed and the folder is reopened.

Every scenario runs a child process (forked from the test's, running ``CHILD_SOURCE`` as ``python -c`` would:
see ``Child``) that writes episodes to a store under ``tmp_path``. Episode data are a pure function of an
episode number ``ep`` (stored in the ``ep`` meta field), so the parent can recompute what every live episode
must hold.

The child keeps a side log, one JSON line per event, each written with a single unbuffered ``os.write``:

- ``open``   the store's committed state when the child opened it;
- ``meta``   every state the store asks ``format.write_meta`` to commit (logged *before* the call);
- ``intent`` the episodes (``[ep, length, mode]``) a commit is about to store, in id order;
- ``done``   the committed state after a commit returned;
- ``inside`` the child sits inside an open episode, waiting to be killed.

Because every ``meta`` line but the last was followed by more work, those commits certainly reached
``meta.json``; the last one may or may not have. So after the kill the reopened state must be exactly
the last or the second-to-last logged state, every live id must map (through the ``intent`` lines) to an
episode whose rows, meta, end code and final row are intact, and nothing else may be visible.

Deterministic kill points are injected in the child by wrapping ``NpyFile.write_rows``,
``NpyFile.grow``, ``os.ftruncate`` (between a file's new size and its new header) and
``format.write_meta`` so that their k-th call after the target commit began does
``os.kill(os.getpid(), SIGKILL)``, before or after the real call.
"""

from __future__ import annotations

import inspect
import json
import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import ReplayBuffer
from memmap_replay import StoreNotFoundError
from memmap_replay.sharing import verify
from memmap_replay.core.format import END_CODES, State

from conftest import REAL_FSYNC, reap

FIELDS = dict(obs=("float", (3,)), action=("int", 2), reward="float", flag="bool")
META_FIELDS = dict(ep="int")
WAIT_LIMIT = 60.0  # seconds a child may take to reach a marker before the test gives up (not a timing assertion)

LINEAR = dict(max_episodes=5000, max_timesteps=30, circular=False)
RING = dict(max_episodes=6, max_timesteps=12, max_steps=60, circular=True)


# ---- episode data: shared verbatim with the child (their source is sent to it) --------------------------


def step_values(ep, t):
    """The values of step t of episode number ep (every value encodes both)."""
    v = ep * 1000 + t
    return {"obs": np.array([v, v + 0.5, -v], np.float32), "action": np.array([v, -v], np.int32),
            "reward": float(v), "flag": bool(t % 2)}


def final_values(ep, length):
    """The final observation (the row after the last step) of episode ep."""
    v = ep * 1000 + length
    return {"obs": np.array([v, v + 0.5, -v], np.float32)}


def episode_length(ep, lengths):
    """A fixed length, or a deterministic length in [low, high] for ep."""
    if isinstance(lengths, int):
        return lengths
    low, high = lengths
    return low + (ep * 7919 + 13) % (high - low + 1)


def episode_end(ep, mode):
    """(end, has_final) of episode ep written in mode 'steps', 'whole' or 'vector'."""
    if mode == "vector":
        return ("terminated" if ep % 2 else "truncated"), False
    return [("truncated", True), ("terminated", False), (None, False)][ep % 3]


def episode_arrays(ep, length):
    rows = [step_values(ep, t) for t in range(length)]
    return {name: np.stack([np.asarray(row[name]) for row in rows]) for name in rows[0]}


def write_one(buffer, ep, length, mode):
    """Write episode ep with one_episode + store ('steps') or store_episode ('whole')."""
    end, has_final = episode_end(ep, mode)
    final = final_values(ep, length) if has_final else None
    if mode == "whole":
        buffer.store_episode(end=end, final=final, ep=ep, **episode_arrays(ep, length))
        return
    with buffer.one_episode(ep=ep) as episode:
        for t in range(length):
            buffer.store(**step_values(ep, t))
        if end is not None:
            episode.set_end(end, final=final)


CHILD_MAIN = r'''
import json, os, shutil, signal, sys, time
from dataclasses import asdict

import memmap_replay.core.format as fmt
from memmap_replay import ReplayBuffer

cfg = json.loads(sys.argv[1])
LOG = os.open(cfg["log"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)


def log(kind, payload):
    os.write(LOG, (kind + " " + json.dumps(payload) + "\n").encode())


def die():
    os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)


real_write_meta = fmt.write_meta


def spy_write_meta(folder, meta, **kwargs):
    log("meta", asdict(meta.state))
    return real_write_meta(folder, meta, **kwargs)


fmt.write_meta = spy_write_meta

trap = cfg.get("trap")
armed = bool(trap) and trap["arm_after"] < 0  # armed from the start: kills while opening
calls = 0
if trap:
    owner, name = {"write_rows": (fmt.NpyFile, "write_rows"), "grow": (fmt.NpyFile, "grow"),
                   "write_meta": (fmt, "write_meta"), "ftruncate": (os, "ftruncate"),
                   "rmtree": (shutil, "rmtree")}[trap["target"]]
    original = getattr(owner, name)

    def trapped(*args, **kwargs):
        global calls
        hit = False
        if armed:
            calls += 1
            hit = calls == trap["k"]
        if hit and trap["when"] == "before":
            die()
        result = original(*args, **kwargs)
        if hit:
            die()
        return result

    setattr(owner, name, trapped)


class Bomb:
    """An array-like whose conversion kills the process: a kill in the middle of store()."""

    def __array__(self, dtype=None, copy=None):
        die()


if cfg.get("overwrite"):
    buffer = ReplayBuffer(cfg["folder"], overwrite=True, **cfg["overwrite"])
else:
    buffer = ReplayBuffer.from_folder(cfg["folder"], durable=cfg.get("durable", False))
state = lambda: asdict(buffer.episode_store.meta.state)
log("open", state())
mode, lengths = cfg["mode"], cfg["lengths"]
limit = cfg["commits"] if cfg["commits"] is not None else cfg.get("cap", 500)
next_ep = cfg["first_ep"]
commits = 0


def arm():
    global armed
    if trap and commits == trap["arm_after"]:
        armed = True


if mode in ("steps", "whole"):
    while commits < limit:
        arm()
        ep, next_ep = next_ep, next_ep + 1
        length = episode_length(ep, lengths)
        log("intent", [[ep, length, mode]])
        write_one(buffer, ep, length, mode)
        commits += 1
        log("done", state())
    if cfg.get("hang") or cfg.get("bomb_at") is not None:
        ep = next_ep
        with buffer.one_episode(ep=ep):
            length = episode_length(ep, lengths)
            for t in range(length):
                step = step_values(ep, t)
                if t == cfg.get("bomb_at"):
                    step = {"action": step["action"], "reward": step["reward"], "flag": step["flag"], "obs": Bomb()}
                buffer.store(**step)
                if cfg.get("hang") and t == min(2, length - 1):
                    log("inside", {"ep": ep, "steps": t + 1})
                    time.sleep(600)
else:  # vector
    n = cfg["num_envs"]
    writer = buffer.vector_writer(n)
    eps = list(range(next_ep, next_ep + n))
    next_ep += n
    ts = [0] * n
    while commits < limit:
        arm()
        writer.set_meta(ep=np.array(eps))
        rows = [step_values(eps[e], ts[e]) for e in range(n)]
        steps = {name: np.stack([np.asarray(row[name]) for row in rows]) for name in rows[0]}
        done = [ts[e] + 1 == episode_length(eps[e], lengths) for e in range(n)]
        terminated = [done[e] and episode_end(eps[e], "vector")[0] == "terminated" for e in range(n)]
        truncated = [done[e] and not terminated[e] for e in range(n)]
        if any(done):
            log("intent", [[eps[e], ts[e] + 1, "vector"] for e in range(n) if done[e]])
        writer.store(terminated=terminated, truncated=truncated, **steps)
        for e in range(n):
            ts[e] += 1
            if done[e]:
                eps[e], next_ep, ts[e] = next_ep, next_ep + 1, 0
        if any(done):
            commits += 1
            log("done", state())
    if cfg.get("hang"):
        log("inside", {"steps": ts})
        time.sleep(600)

if cfg.get("sleep"):
    time.sleep(600)
buffer.close()
log("exit", {})
'''

CHILD_SOURCE = "\n".join(["import numpy as np"]
                         + [inspect.getsource(f) for f in (step_values, final_values, episode_length, episode_end,
                                                           episode_arrays, write_one)]
                         + [CHILD_MAIN])


# ---- the parent's side ------------------------------------------------------------------------------------


@dataclass
class History:
    """What the parent knows was written: episode id -> ep, and ep -> (length, mode)."""

    id_to_ep: dict = field(default_factory=dict)
    info: dict = field(default_factory=dict)
    next_ep: int = 0

    def record(self, episode_id, ep, length, mode):
        self.id_to_ep[episode_id] = ep
        self.info[ep] = (length, mode)
        self.next_ep = max(self.next_ep, ep + 1)

    def forget_from(self, next_episode):
        """Ids at or past the committed next_episode were never committed; they will be reused."""
        self.id_to_ep = {i: ep for i, ep in self.id_to_ep.items() if i < next_episode}


@dataclass
class ChildLog:
    open_state: dict
    metas: list
    intents: list
    dones: list
    inside: bool
    exited: bool

    @property
    def candidates(self):
        """The states meta.json may hold: the last logged commit, or (if it never landed) the one before."""
        applied = [self.open_state] + self.metas
        return applied[-2:] if self.metas else applied

    @property
    def last_done(self):
        return self.dones[-1] if self.dones else self.open_state


def read_log(path: Path) -> ChildLog:
    log = ChildLog(None, [], [], [], False, False)
    text = path.read_text() if path.exists() else ""
    for line in text.splitlines(keepends=True):
        if not line.endswith("\n"):
            break
        kind, _, payload = line.partition(" ")
        value = json.loads(payload)
        if kind == "open":
            log.open_state = value
        elif kind == "meta":
            log.metas.append(value)
        elif kind == "intent":
            log.intents.append(value)
        elif kind == "done":
            log.dones.append(value)
        elif kind == "inside":
            log.inside = True
        elif kind == "exit":
            log.exited = True
    return log


def create_store(folder: Path, **capacity) -> None:
    ReplayBuffer(folder, fields=FIELDS, meta_fields=META_FIELDS, **capacity).close()


def child_config(folder: Path, log: Path, history: History, *, mode="steps", lengths=(1, 12), commits=None,
                 **extra) -> dict:
    return dict(folder=str(folder), log=str(log), mode=mode, lengths=lengths, commits=commits,
                first_ep=history.next_ep, num_envs=3, **extra)


class Child:
    """A child process running CHILD_SOURCE with ``config``, in ``cwd``: forked from this one, so it starts with
    the library imported (a fresh interpreter cost half a second each, some sixty of them here). It runs the
    same source a ``python -c`` child runs, with the real ``os.fsync`` (the tests' does not wait for the disk),
    and dies the same SIGKILL. The part of ``subprocess.Popen`` this file uses: ``poll``, ``send_signal``,
    ``kill``, ``communicate`` (its stderr; conftest's ``reap``) and ``returncode``."""

    def __init__(self, config: dict, cwd: Path):
        self.returncode = None
        self.error = cwd / f"child-{time.monotonic_ns()}.stderr"
        pid = os.fork()
        if pid == 0:  # the child: it never returns into pytest
            code = 1
            try:
                os.chdir(cwd)
                null = os.open(os.devnull, os.O_RDWR)
                os.dup2(null, 0)
                os.dup2(null, 1)
                os.dup2(os.open(self.error, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644), 2)
                os.fsync = REAL_FSYNC
                sys.argv = ["-c", json.dumps(config)]
                exec(compile(CHILD_SOURCE, "<crash child>", "exec"), {"__name__": "__main__"})
                code = 0
            except SystemExit as exit:
                code = exit.code if isinstance(exit.code, int) else 1
            except BaseException:
                os.write(2, traceback.format_exc().encode())
            finally:
                os._exit(code)
        self.pid = pid

    def poll(self) -> int | None:
        if self.returncode is None:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
            if pid:
                self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, number: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, number)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float) -> tuple[None, bytes]:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"crash child {self.pid}", timeout)
            time.sleep(0.002)
        return None, self.error.read_bytes() if self.error.exists() else b""


def start_child(config: dict, cwd: Path) -> Child:
    return Child(config, cwd)


def finish(process: Child) -> str:
    return reap(process, WAIT_LIMIT)


def run_self_killing_child(config: dict, cwd: Path) -> ChildLog:
    """A child that kills itself at an injected point; it must die of SIGKILL."""
    process = start_child(config, cwd)
    stderr = finish(process)
    assert process.returncode == -signal.SIGKILL, f"the child was not killed (exit {process.returncode}):\n{stderr}"
    return read_log(Path(config["log"]))


def wait_for(process: Child, log_path: Path, ready) -> ChildLog:
    """Poll the child's log until ready(log) holds; fail if the child exits or takes unreasonably long."""
    deadline = time.monotonic() + WAIT_LIMIT
    while True:
        log = read_log(log_path)
        if ready(log):
            return log
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            stderr = finish(process)
            pytest.fail(f"the child never reached its marker (exit {process.returncode}):\n{stderr}")
        time.sleep(0.002)


def kill(process: Child) -> None:
    process.send_signal(signal.SIGKILL)
    stderr = finish(process)
    assert process.returncode == -signal.SIGKILL, f"the child ended on its own (exit {process.returncode}):\n{stderr}"


def absorb(history: History, log: ChildLog) -> None:
    """Map the ids of every commit the child attempted to the episodes it wrote."""
    episode_id = log.open_state["next_episode"]
    for intent in log.intents:
        for ep, length, mode in intent:
            history.record(episode_id, ep, length, mode)
            episode_id += 1


def expected_rows(ep, length, mode):
    end, has_final = episode_end(ep, mode)
    arrays = episode_arrays(ep, length)
    if has_final:
        final = final_values(ep, length)
        arrays = {name: np.concatenate([values, np.asarray(final.get(name, np.zeros_like(values[0])))[None]])
                  for name, values in arrays.items()}
    return end, has_final, arrays


def check_store(buffer: ReplayBuffer, history: History) -> dict:
    """Every live episode is exactly what was written for its number, and nothing else is visible."""
    store = buffer.episode_store
    state = asdict(store.meta.state)
    table = store.live_table()
    live = list(range(state["first_episode"], state["next_episode"]))
    assert table.ids.tolist() == live
    assert buffer.num_episodes == len(buffer) == len(live)
    eps = store.meta_array("ep")
    for episode_id, slot, start, length, end_code, final in zip(table.ids, table.slots, table.start, table.length,
                                                                table.end, table.final):
        ep = history.id_to_ep[int(episode_id)]
        written_length, mode = history.info[ep]
        where = f"episode id {episode_id} (ep {ep}, slot {slot})"
        assert int(eps[slot]) == ep, where
        assert int(length) == written_length, where
        end, has_final, arrays = expected_rows(ep, written_length, mode)
        assert int(end_code) == END_CODES[end], where
        assert bool(final) == has_final, where
        for name, values in arrays.items():
            np.testing.assert_array_equal(store.step_array(name)[start:start + len(values)], values,
                                          err_msg=f"{where}, field {name!r}")
    data = buffer.get_all_data()
    if not live:
        assert data["episode_lens"].tolist() == [] and data["ep"].shape[0] == 0
        return state
    assert data["ep"].tolist() == [history.id_to_ep[i] for i in live]
    assert data["episode_lens"].tolist() == [history.info[history.id_to_ep[i]][0] for i in live]
    for row, episode_id in enumerate(live):
        ep = history.id_to_ep[episode_id]
        length, mode = history.info[ep]
        arrays = episode_arrays(ep, length)
        for name, values in arrays.items():
            got = data[name][row].numpy()
            np.testing.assert_array_equal(got[:length], values, err_msg=f"get_all_data {name!r} of ep {ep}")
            assert not got[length:].any(), f"get_all_data pads {name!r} of ep {ep} with zeros"
    return state


def reopen_and_check(folder: Path, history: History, candidates, *, lengths=(1, 12), more=3) -> dict:
    """Reopen writable and read-only, check both, then write more (the dead child's writer lock must be
    gone) and check again, through the writer, the refreshed reader and a fresh read-only open. verify()
    finds no problem before or after (a crash leaves at most warnings: a meta.json.tmp, a grown file)."""
    report = verify(folder)
    assert report.ok, report
    with ReplayBuffer.from_folder(folder) as writer, ReplayBuffer.from_folder(folder, read_only=True) as reader:
        state = check_store(writer, history)
        assert check_store(reader, history) == state
        assert state in candidates, f"reopened state {state} is none of the states the child committed {candidates}"
        history.forget_from(state["next_episode"])
        for k in range(more):
            ep = history.next_ep
            length = episode_length(ep, lengths)
            mode = ("steps", "whole")[k % 2]
            history.record(writer.episode_store.meta.state.next_episode, ep, length, mode)
            write_one(writer, ep, length, mode)
        after = check_store(writer, history)
        assert after["next_episode"] == state["next_episode"] + more
        if not writer.circular:  # the first new episode took the rows the killed writer left half-written
            first_new = writer.episode_store.live_table().start[state["next_episode"] - after["first_episode"]]
            assert first_new == state["write_head"]
        assert writer.episode_store.live_table().ids[-1] == after["next_episode"] - 1
        assert reader.refresh()
        assert check_store(reader, history) == after
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert check_store(reader, history) == after
    report = verify(folder)
    assert report.ok and not any(line.startswith("meta.json.tmp") for line in report.warnings), report
    return state


def prepare(tmp_path: Path, capacity: dict, name="store") -> tuple[Path, History]:
    folder = tmp_path / name
    create_store(folder, **capacity)
    return folder, History()


# ---- kills inside an open episode -------------------------------------------------------------------------


@pytest.mark.parametrize("mode, capacity", [("steps", LINEAR), ("steps", RING), ("vector", RING)],
                         ids=["linear-steps", "ring-steps", "ring-vector"])
def test_kill_inside_an_open_episode(tmp_path, mode, capacity):
    folder, history = prepare(tmp_path, capacity)
    log_path = tmp_path / "log"
    process = start_child(child_config(folder, log_path, history, mode=mode, commits=9, hang=True), tmp_path)
    log = wait_for(process, log_path, lambda log: log.inside)
    kill(process)
    absorb(history, log)
    assert len(log.dones) == 9
    state = reopen_and_check(folder, history, [log.last_done])
    assert state == log.last_done
    if mode == "steps" and not capacity["circular"]:
        assert state["next_episode"] == 9


@pytest.mark.parametrize("bomb_at", [0, 3])
@pytest.mark.parametrize("capacity", [LINEAR, RING], ids=["linear", "ring"])
def test_kill_in_the_middle_of_a_store_call(tmp_path, capacity, bomb_at):
    """The child dies while converting a step's last field, after its other fields were staged."""
    folder, history = prepare(tmp_path, capacity)
    config = child_config(folder, tmp_path / "log", history, lengths=(5, 12), commits=4, bomb_at=bomb_at)
    log = run_self_killing_child(config, tmp_path)
    absorb(history, log)
    assert len(log.dones) == 4 and log.metas[-1] == log.last_done
    assert reopen_and_check(folder, history, [log.last_done]) == log.last_done


# ---- kills inside a commit ---------------------------------------------------------------------------------

# a 'steps' commit of one episode writes 4 step fields, 1 meta field, then 5 episode-table entries
LINEAR_COMMIT_TRAPS = [
    ("write_rows", 1, "before"),   # before any row
    ("write_rows", 2, "before"),   # between two fields' rows
    ("write_rows", 4, "after"),    # every row written, nothing of the table
    ("write_rows", 5, "after"),    # the meta field written
    ("write_rows", 7, "before"),   # half the episode table
    ("write_rows", 10, "after"),   # the whole table written, meta.json not replaced
    ("write_meta", 1, "before"),   # at the commit point
    ("write_meta", 1, "after"),    # just after the commit point
]


@pytest.mark.parametrize("target, k, when", LINEAR_COMMIT_TRAPS,
                         ids=[f"{t}-{k}-{w}" for t, k, w in LINEAR_COMMIT_TRAPS])
def test_kill_during_a_commit(tmp_path, target, k, when):
    folder, history = prepare(tmp_path, LINEAR)
    trap = dict(target=target, k=k, when=when, arm_after=5)
    log = run_self_killing_child(child_config(folder, tmp_path / "log", history, commits=8, trap=trap), tmp_path)
    absorb(history, log)
    assert len(log.dones) == 5, "the trap must fire inside the 6th commit"
    landed = target == "write_meta" and when == "after"
    state = reopen_and_check(folder, history, log.candidates)
    assert state["next_episode"] == (6 if landed else 5)
    assert state == (log.metas[-1] if landed else log.last_done)


# fixed episodes of 400 steps: the 3rd commit grows the step files from 1024 to 2048 rows
GROW_TRAPS = [
    ("grow", 1, "before"),       # no file grown yet
    ("grow", 2, "before"),       # one field's file grown, the others not
    ("ftruncate", 1, "before"),  # the first file about to get its new size
    ("ftruncate", 1, "after"),   # a file's new size written, its header still says the old row count
    ("ftruncate", 3, "after"),
    ("grow", 4, "after"),        # every file grown, no row written
]


@pytest.mark.parametrize("target, k, when", GROW_TRAPS, ids=[f"{t}-{k}-{w}" for t, k, w in GROW_TRAPS])
def test_kill_while_growing_the_step_files(tmp_path, target, k, when):
    capacity = dict(max_episodes=10, max_timesteps=400, circular=False)
    folder, history = prepare(tmp_path, capacity)
    trap = dict(target=target, k=k, when=when, arm_after=2)
    config = child_config(folder, tmp_path / "log", history, lengths=400, commits=4, trap=trap)
    log = run_self_killing_child(config, tmp_path)
    absorb(history, log)
    assert len(log.dones) == 2 and log.last_done["rows"] == 1024
    state = reopen_and_check(folder, history, [log.last_done], lengths=400, more=2)
    assert state == log.last_done
    with ReplayBuffer.from_folder(folder, read_only=True) as reader:
        assert reader.episode_store.meta.state.rows >= 2 * 1024


# ring of 4 episodes: by the 7th commit every commit evicts (phase 1 meta.json, then rows, then phase 2)
RING4 = dict(max_episodes=4, max_timesteps=12, max_steps=40, circular=True)
RING_TRAPS = [
    ("write_meta", 1, "before", "before"),    # before the evictions are committed
    ("write_meta", 1, "after", "evicted"),    # evictions committed, nothing written
    ("write_rows", 1, "before", "evicted"),
    ("write_rows", 3, "after", "evicted"),    # rows of evicted episodes being overwritten
    ("write_rows", 10, "after", "evicted"),   # everything written but the final meta.json
    ("write_meta", 2, "before", "evicted"),
    ("write_meta", 2, "after", "after"),
]


@pytest.mark.parametrize("target, k, when, outcome", RING_TRAPS,
                         ids=[f"{t}-{k}-{w}" for t, k, w, _ in RING_TRAPS])
def test_kill_during_a_ring_commit_that_evicts(tmp_path, target, k, when, outcome):
    folder, history = prepare(tmp_path, RING4)
    trap = dict(target=target, k=k, when=when, arm_after=6)
    log = run_self_killing_child(child_config(folder, tmp_path / "log", history, commits=9, trap=trap), tmp_path)
    absorb(history, log)
    assert len(log.dones) == 6
    before = log.last_done
    phase1 = [m for m in log.metas if m["commits"] > before["commits"] and m["next_episode"] == before["next_episode"]]
    if outcome != "before":
        assert phase1 and phase1[0]["first_episode"] > before["first_episode"], "the killed commit must evict"
    state = reopen_and_check(folder, history, log.candidates)
    if outcome == "before":
        assert state == before
    elif outcome == "evicted":
        assert state == phase1[0]
        assert state["next_episode"] == before["next_episode"] and state["first_episode"] > before["first_episode"]
    else:
        assert state["next_episode"] == before["next_episode"] + 1 and state == log.metas[-1]


def test_kill_during_a_vector_commit_of_several_episodes_in_a_ring(tmp_path):
    """3 envs finish together: one commit of 3 episodes into a ring of 4, killed in its 2nd episode's rows."""
    folder, history = prepare(tmp_path, RING4)
    trap = dict(target="write_rows", k=12, when="before", arm_after=2)
    config = child_config(folder, tmp_path / "log", history, mode="vector", lengths=5, commits=4, trap=trap)
    log = run_self_killing_child(config, tmp_path)
    absorb(history, log)
    assert [len(intent) for intent in log.intents] == [3, 3, 3]
    state = reopen_and_check(folder, history, log.candidates, lengths=5)
    # the evictions of the 3-episode commit were committed: only the newest old episode is left
    assert (state["first_episode"], state["next_episode"]) == (5, 6)


def test_kill_between_the_phases_of_a_commit_larger_than_the_ring(tmp_path):
    """3 envs finish together into a ring of 2 slots: the commit evicts one of its own episodes."""
    capacity = dict(max_episodes=2, max_timesteps=12, max_steps=40, circular=True)
    folder, history = prepare(tmp_path, capacity)
    trap = dict(target="write_meta", k=1, when="after", arm_after=0)
    config = child_config(folder, tmp_path / "log", history, mode="vector", lengths=4, commits=2, trap=trap)
    log = run_self_killing_child(config, tmp_path)
    absorb(history, log)
    reopen_and_check(folder, history, log.candidates, lengths=4)


OVERWRITE_TRAPS = [
    ("rmtree", 1, "before"),       # the old meta.json is gone, its data files not yet
    ("rmtree", 2, "after"),        # some of the old data files removed
    ("write_meta", 1, "before"),   # fresh files created, no meta.json yet
    ("write_meta", 1, "after"),    # the fresh, empty store committed
]


@pytest.mark.parametrize("target, k, when", OVERWRITE_TRAPS, ids=[f"{t}-{k}-{w}" for t, k, w in OVERWRITE_TRAPS])
def test_kill_while_overwriting_a_store(tmp_path, target, k, when):
    """overwrite=True wipes on purpose; killed half way, the folder holds no store or a fresh empty one,
    never a half-removed store that fails to open, and it can be created again without overwrite."""
    folder, history = prepare(tmp_path, LINEAR)
    with ReplayBuffer.from_folder(folder) as buffer:
        for ep in range(4):
            history.record(ep, ep, episode_length(ep, (1, 12)), "steps")
            write_one(buffer, ep, *history.info[ep])
        old_id = buffer.episode_store.meta.store_id
    trap = dict(target=target, k=k, when=when, arm_after=-1)
    create = dict(fields=FIELDS, meta_fields=META_FIELDS, **LINEAR)
    log = run_self_killing_child(child_config(folder, tmp_path / "log", history, commits=3, trap=trap,
                                              overwrite=create), tmp_path)
    assert log.open_state is None
    if (folder / "meta.json").exists():
        with ReplayBuffer.from_folder(folder, read_only=True) as reader:
            assert reader.episode_store.meta.store_id != old_id and reader.num_episodes == 0
    else:
        with pytest.raises(StoreNotFoundError, match="holds no meta.json"):
            ReplayBuffer.from_folder(folder)
    ReplayBuffer(folder, **create).close()  # overwrite=False: opens the fresh store or creates one
    history = History(next_ep=history.next_ep)
    state = reopen_and_check(folder, history, [asdict(State())])
    assert state["next_episode"] == 0


# ---- kills at random instants ------------------------------------------------------------------------------

RANDOM_SCENARIOS = {
    "linear-steps": dict(mode="steps", capacity=LINEAR, seed=11),
    "ring-steps-durable": dict(mode="steps", capacity=RING, seed=12, durable=True),
    "ring-whole": dict(mode="whole", capacity=RING, seed=13),
    "ring-vector": dict(mode="vector", capacity=RING, seed=14),
}
ROUNDS = 6


def kill_at_a_random_instant(tmp_path, folder, history, scenario, rng, trial) -> ChildLog:
    """A child appends episodes in a loop; kill it after a random number of commits plus a random
    fraction of a commit's time (so kills land anywhere in the step/commit cycle)."""
    log_path = tmp_path / f"log{trial}"
    config = child_config(folder, log_path, history, mode=scenario["mode"], lengths=(1, 12), cap=300,
                          sleep=True, durable=scenario.get("durable", False))
    process = start_child(config, tmp_path)
    commits = int(rng.integers(0, 30))
    wait_for(process, log_path, lambda log: log.open_state is not None and len(log.dones) >= commits)
    time.sleep(float(rng.uniform(0, 0.003)))
    kill(process)
    log = read_log(log_path)
    absorb(history, log)
    return log


@pytest.mark.parametrize("name", sorted(RANDOM_SCENARIOS))
def test_kill_at_random_instants(tmp_path, name):
    """ROUNDS kill/reopen cycles on one folder, watched by a reader that stays open throughout."""
    scenario = RANDOM_SCENARIOS[name]
    rng = np.random.default_rng(scenario["seed"])
    folder, history = prepare(tmp_path, scenario["capacity"])
    with ReplayBuffer.from_folder(folder, read_only=True) as survivor:
        for trial in range(ROUNDS):
            log = kill_at_a_random_instant(tmp_path, folder, history, scenario, rng, trial)
            survivor.refresh()
            assert check_store(survivor, history) in log.candidates
            reopen_and_check(folder, history, log.candidates)
            survivor.refresh()
            check_store(survivor, history)
