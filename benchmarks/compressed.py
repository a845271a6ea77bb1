"""Compressed-fields benchmark (issue 29, point 7; shared/bench/WORKLOAD.md, "Compressed fields"): real Atari frames
stored raw and with ``codec="zstd"``, side by side in one run.

Frames: Pong, Breakout and MsPacman through gymnasium + ale-py (``gym.make("ALE/<game>-v5")``: frameskip 4,
repeat_action_probability 0.25), a random policy (``env.reset(seed=)``, ``env.action_space.seed()``), ``--frames``
RGB 210x160x3 frames per game (default 3,000). The recording is cached in ``--cache`` (default
<tmp>/memmap_replay-bench/atari, never in the repository), keyed by game, frames, seed and ale-py's version;
``--quick`` records 300 frames of Pong afresh and caches nothing.

For each game, two stores of the same episodes, written in this run by per-step ``store()`` inside
``one_episode`` (its end set as gymnasium said, 'terminated' or 'truncated'; the last episode, cut by the
recording, 'truncated'): fields image uint8 (210, 160, 3), action int, reward float, done bool; raw, and with
``image=dict(dtype="uint8", shape=(210, 160, 3), codec="zstd")`` (level 3, the default). Figures:

- size: ``du`` of the store's folder (blocks allocated) and of the image field's files, raw / compressed;
- W: per-step ``store()`` steps/s, median of ``--write-repeats`` passes (raw and compressed alternated, each into
  a fresh folder), against the codec's own rate: ``zstandard.ZstdCompressor(level=3).compress`` of each frame in
  one thread (the library's frames also carry a checksum: ``ZstdFrames``, printed beside it);
- warm T, S, N, stack: ``dataset.__getitems__`` on the index batches of ``dataloader(batch, shuffle=True,
  seed=...)``, read.py's views (T 256 random steps of image + action + reward, S 50 windows x 50, N 256 x n=5)
  and stack (T with ``frame_stack=4`` on image); the stores' pages in the page cache and touched once by this
  process; compressed / raw batches/s (both read the same batches; "same bytes: checked" when the batches are
  equal, and T's equal the numpy limit's); T also against the numpy limit (a fancy-index gather of the same rows
  from in-RAM arrays). Medians of ``--repeats`` runs of ``--batches`` batches, the ways interleaved;
- cold: the same batches with every file of the store evicted from the page cache before each timed batch
  (benchmarks/cold.py's ``evict``: this process's maps of them dropped with madvise(MADV_DONTNEED), then
  ``posix_fadvise(POSIX_FADV_DONTNEED)`` on every file); the batch's own time summed over ``--cold-batches``;
- the codec study (one thread, the frames in RAM): per-frame blocks, chunks of 16 frames, and per-frame blocks of
  the XOR with the previous frame (a key frame every 16; chunks and key frames restart at each episode): ratio,
  encode time a frame, decode time of one random frame (a chunk: the whole chunk decoded, then the frame copied;
  a delta: its key frame, then every delta up to it), and the decode time of the distinct frames of one T batch
  (256 random) and one S batch (50 windows of 50), each decoded once.

The issue's goals are printed next to the figures: size >= 40x on MsPacman and >= 200x on Pong; warm T >= 0.5 of
raw (median over the games), S >= 0.7; cold T >= 3x raw's batches/s; per-step store >= 0.7 of the codec's
single-thread compress rate. Needs zstandard (the ``zstd`` extra) and gymnasium + ale-py (the ``atari`` extra):
without them the script says so and exits 0 ("SKIPPED: ...").

    python benchmarks/compressed.py             # 3,000 frames a game: about 3-5 minutes on 2 cores
    python benchmarks/compressed.py --frames 20000
    python benchmarks/compressed.py --quick     # a smoke run (Pong, 300 frames, 1 repeat, a few batches)
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import cold  # benchmarks/cold.py: evict (maps dropped, then POSIX_FADV_DONTNEED on every file), cached_fraction
import read  # benchmarks/read.py: VIEWS, READ, rows_read, gather_limit, touch_pages, warm_ram, pin_malloc

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

from memmap_replay import ReplayBuffer  # noqa: E402
from memmap_replay.core.codecs import ZstdFrames  # noqa: E402
from memmap_replay.core.threads import get_threads  # noqa: E402

NEEDED = {"zstandard": "zstd", "gymnasium": "atari", "ale_py": "atari"}  # module -> the extra that brings it
GAMES = ("Pong", "Breakout", "MsPacman")
SHAPE = (210, 160, 3)
ROW = int(np.prod(SHAPE))
RAW_FIELDS = dict(image=("uint8", SHAPE), action="int", reward="float", done="bool")
ZSTD_FIELDS = dict(RAW_FIELDS, image=dict(dtype="uint8", shape=SHAPE, codec="zstd"))
LEVEL, GROUP = 3, 16  # the codec's default level; frames a chunk / frames from one key frame to the next
GOAL_SIZE = {"Pong": 200.0, "MsPacman": 40.0}
GOAL_WARM = {"T": 0.5, "S": 0.7}
GOAL_COLD_T, GOAL_WRITE = 3.0, 0.7
MB, GB = 1e6, 1e9
READ = read.READ  # image, action, reward
KINDS = {"T": (256, read.VIEWS["T"][1]), "S": (50, read.VIEWS["S"][1]), "N": (256, read.VIEWS["N"][1]),
         "stack": (256, dict(timestep_level=True, frame_stack=4, stack_fields=("image",), fields=READ,
                             meta_fields=()))}


# ---- frames ----------------------------------------------------------------------------------------------------


class Recording:
    """One game's frames and steps: image (n, 210, 160, 3), action, reward, done; episodes as lengths and ends."""

    def __init__(self, game: str, image, action, reward, done, lengths, ends):
        self.game, self.image, self.action, self.reward, self.done = game, image, action, reward, done
        self.lengths, self.ends = np.asarray(lengths, np.int64), list(ends)
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.frames = len(image)

    @property
    def episode_t(self) -> np.ndarray:
        """Each frame's step in its episode."""
        return np.arange(self.frames) - np.repeat(self.starts, self.lengths)


def record(game: str, frames: int, seed: int) -> Recording:
    import ale_py
    import gymnasium as gym

    gym.register_envs(ale_py)
    env = gym.make(f"ALE/{game}-v5")
    image = np.empty((frames, *SHAPE), np.uint8)
    action, reward, done = np.empty(frames, np.int64), np.empty(frames, np.float32), np.zeros(frames, bool)
    lengths, ends = [], []
    obs, _ = env.reset(seed=seed)
    env.action_space.seed(seed)
    length = 0
    for i in range(frames):
        image[i], action[i] = obs, env.action_space.sample()
        obs, r, terminated, truncated, _ = env.step(int(action[i]))
        reward[i], done[i], length = r, terminated or truncated, length + 1
        if terminated or truncated:
            lengths.append(length)
            ends.append("terminated" if terminated else "truncated")
            obs, _, length = *env.reset(), 0
    if length:
        lengths.append(length)
        ends.append("truncated")  # cut by the recording
    env.close()
    return Recording(game, image, action, reward, done, lengths, ends)


def load_or_record(game: str, frames: int, seed: int, cache: Path | None) -> tuple[Recording, str]:
    """The recording from the cache, or recorded now (and cached when ``cache`` is given)."""
    import ale_py

    key = f"{game}-{frames}-seed{seed}-ale{ale_py.__version__}"
    folder = None if cache is None else cache / key
    names = ("image", "action", "reward", "done")
    if folder is not None and (folder / "ends.json").exists():
        arrays = {name: np.load(folder / f"{name}.npy") for name in names}
        episodes = json.loads((folder / "ends.json").read_text())
        return Recording(game, **arrays, **episodes), f"from the cache {folder}"
    start = time.perf_counter()
    rec = record(game, frames, seed)
    how = f"recorded in {time.perf_counter() - start:.1f} s"
    if folder is not None:
        cache.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=f".{key}-", dir=cache))
        for name in names:
            np.save(scratch / f"{name}.npy", getattr(rec, name))
        (scratch / "ends.json").write_text(json.dumps(dict(lengths=rec.lengths.tolist(), ends=rec.ends)))
        try:
            os.replace(scratch, folder)  # whole or not at all
        except OSError:  # (another run cached it first)
            shutil.rmtree(scratch, ignore_errors=True)
        how += f", cached in {folder}"
    return rec, how


# ---- writing and size ------------------------------------------------------------------------------------------


def write_store(folder: Path, rec: Recording, fields: dict) -> float:
    """Per-step store() of every frame, inside one_episode; seconds of the writing loop (commits included)."""
    buffer = ReplayBuffer(folder, len(rec.lengths), int(rec.lengths.max()), fields=fields,
                          max_steps=rec.frames + len(rec.lengths), overwrite=True)
    image, action, reward, done = rec.image, rec.action.tolist(), rec.reward.tolist(), rec.done.tolist()
    start = time.perf_counter()
    for first, length, end in zip(rec.starts.tolist(), rec.lengths.tolist(), rec.ends):
        with buffer.one_episode() as meta:
            for t in range(first, first + length):
                buffer.store(image=image[t], action=action[t], reward=reward[t], done=done[t])
            meta.set_end(end)
    elapsed = time.perf_counter() - start
    buffer.close()
    return elapsed


def sync_files(folder: Path) -> None:
    """Write the store's dirty pages back (its files only: os.sync() would wait for every other process's too)."""
    for path in cold.store_files(folder):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def compress_rate(rec: Recording, repeats: int, checksum: bool = False) -> float:
    """Frames/s of zstandard's ZstdCompressor(level=3).compress, one frame at a time, one thread."""
    import zstandard

    compressor = zstandard.ZstdCompressor(level=LEVEL, write_checksum=checksum)
    frames = list(rec.image)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for frame in frames:
            compressor.compress(frame)
        times.append(time.perf_counter() - start)
    return rec.frames / statistics.median(times)


def du(*paths: Path) -> int:
    """Bytes allocated on disk (du): files and folders, blocks of 512 bytes."""
    total = 0
    for path in paths:
        total += os.lstat(path).st_blocks * 512
        if path.is_dir():
            for parent, dirs, files in os.walk(path):
                total += sum(os.lstat(Path(parent) / name).st_blocks * 512 for name in dirs + files)
    return total


def sizes(raw: Path, zstd: Path) -> dict[str, float]:
    state = json.loads((zstd / "meta.json").read_text())["state"]
    image_raw = du(raw / "steps" / "image.npy")
    image_zstd = du(zstd / "steps" / "image.frames.npy", zstd / "steps" / "image.index.npy")
    encoded = state["frames"]["image"]["head"] + 16 * state["write_head"]  # committed frames + index entries
    return {"store raw": du(raw), "store zstd": du(zstd), "image raw": image_raw, "image zstd": image_zstd,
            "encoded": encoded, "frames file": (zstd / "steps" / "image.frames.npy").stat().st_size}


# ---- reading ---------------------------------------------------------------------------------------------------


def touch(store) -> None:
    """Map every page of the store's step files in this process (a compressed field: its frames and index)."""
    for name in store.schema.fields:
        column = store.step_array(name)
        for array in (column.frames, column.index) if hasattr(column, "frames") else (column,):
            read.touch_pages(array)


class Game:
    """The raw and the compressed store of one game, open read-only, and each kind's index batches."""

    def __init__(self, raw: Path, zstd: Path, args):
        self.args, self.folders = args, {"raw": raw, "zstd": zstd}
        self.buffers = {how: ReplayBuffer.from_folder(folder, read_only=True) for how, folder in self.folders.items()}
        self.ram = {name: np.array(self.buffers["raw"].episode_store.step_array(name)) for name in READ}
        for buffer in self.buffers.values():
            touch(buffer.episode_store)
        self.datasets, self.batches, self.nbytes, self.checks = {}, {}, {}, {}
        for kind, (batch, options) in KINDS.items():
            self.datasets[kind] = {how: b.dataset(**options) for how, b in self.buffers.items()}
            sampler = self.buffers["raw"].dataloader(batch, shuffle=True, seed=read.SEED, **options).batch_sampler
            epoch = [np.asarray(b) for b in sampler if len(b) == batch]
            self.batches[kind] = [epoch[i % len(epoch)] for i in range(max(args.batches, args.cold_batches))]
            first = {how: d.__getitems__(self.batches[kind][0]) for how, d in self.datasets[kind].items()}
            self.nbytes[kind] = sum(v.numel() * v.element_size() for v in first["raw"].values())
            same = set(first["raw"]) == set(first["zstd"]) and all(
                torch.equal(first["raw"][k], first["zstd"][k]) for k in first["raw"])
            if kind == "T":
                plan = self.plan(self.batches[kind][0])
                same = same and all(np.array_equal(first["raw"][out].numpy(), array[rows]) for out, array, rows in plan)
            self.checks[kind] = "same bytes: checked" if same else "MISMATCH: compressed and raw batches differ"

    def plan(self, items) -> list:
        return [(out, self.ram[field], rows) for out, field, rows, _ in read.rows_read("T", self.datasets["T"]["raw"],
                                                                                       items)]

    def batches_of(self, kind: str, cold: bool) -> list:
        """The kind's timed batches: --batches (warm) or --cold-batches, S a quarter or half of them."""
        count = self.args.cold_batches if cold else self.args.batches
        if kind == "S":  # 50 x 50 raw frames are 250 MB a batch
            count = max(1, count // (2 if cold else 4))
        return self.batches[kind][:count]

    def warm(self, kind: str) -> dict[str, list[float]]:
        batches = self.batches_of(kind, cold=False)
        ways = {how: (lambda d=d: run_batches(d, batches)) for how, d in self.datasets[kind].items()}
        if kind == "T":
            plans = [self.plan(items) for items in batches]
            ways["numpy limit"] = lambda: run_limit(plans)
        for run in ways.values():  # untimed: first touches, allocator
            run()
        times: dict[str, list[float]] = {how: [] for how in ways}
        for _ in range(self.args.repeats):
            for how, run in ways.items():  # interleaved: a change of load touches every way alike
                read.warm_ram(self.args.warm_bytes)
                times[how].append(run())
        return times

    def cold(self, kind: str) -> dict[str, list[float]]:
        batches = self.batches_of(kind, cold=True)
        times: dict[str, list[float]] = {how: [] for how in self.datasets[kind]}
        for _ in range(min(self.args.repeats, 3)):
            for how, dataset in self.datasets[kind].items():
                read.warm_ram(self.args.warm_bytes)
                times[how].append(run_batches(dataset, batches, evict=self.folders[how]))
        return times

    def close(self) -> None:
        self.datasets.clear()
        for buffer in self.buffers.values():
            buffer.close()


def run_batches(dataset, batches: list, evict: Path | None = None) -> float:
    """Seconds of ``__getitems__`` over the batches (each after evicting the store when ``evict`` is given); the
    previous batch is kept alive while the next is made, as ``for batch in loader`` does."""
    previous, elapsed = None, 0.0
    for items in batches:
        if evict is not None:
            cold.evict(evict, drop_maps=True)
        start = time.perf_counter()
        previous = dataset.__getitems__(items)
        elapsed += time.perf_counter() - start
    del previous
    return elapsed


def run_limit(plans: list) -> float:
    previous = None
    start = time.perf_counter()
    for plan in plans:
        previous = read.gather_limit(plan)
    elapsed = time.perf_counter() - start
    del previous
    return elapsed


# ---- the codec study -------------------------------------------------------------------------------------------


class Scheme:
    """Frames encoded one way (per frame, chunks, or XOR deltas with key frames), decoded into rows of ``out``."""

    def __init__(self, kind: str, rec: Recording):
        self.kind = kind
        t = rec.episode_t
        self.group_first = np.arange(rec.frames) - (t % GROUP)  # the first frame of each frame's chunk or key group
        self.codecs: dict[int, ZstdFrames] = {}
        start = time.perf_counter()
        if kind == "chunks":  # a chunk at an episode's end may hold fewer frames
            firsts = np.flatnonzero(t % GROUP == 0)
            self.chunk_of = np.cumsum(t % GROUP == 0) - 1
            self.sizes = np.bincount(self.chunk_of).tolist()
            blobs = [self.codec(n).encode(rec.image[f:f + n]) for f, n in zip(firsts.tolist(), self.sizes)]
        elif kind == "delta":
            key = t % GROUP == 0
            blobs = [self.codec(1).encode(rec.image[i] if key[i] else np.bitwise_xor(rec.image[i], rec.image[i - 1]))
                     for i in range(rec.frames)]
        else:
            blobs = [self.codec(1).encode(frame) for frame in rec.image]
        self.encode_s = (time.perf_counter() - start) / rec.frames
        self.blobs = [np.frombuffer(blob, np.uint8) for blob in blobs]
        self.ratio = rec.frames * ROW / sum(len(blob) for blob in self.blobs)
        self.scratch = np.empty((GROUP, *SHAPE), np.uint8)
        self.delta = np.empty(SHAPE, np.uint8)

    def codec(self, frames: int) -> ZstdFrames:
        if frames not in self.codecs:
            self.codecs[frames] = ZstdFrames(LEVEL, frames * ROW)
        return self.codecs[frames]

    def decode(self, rows, out: np.ndarray) -> None:
        """Rows (sorted, distinct) into out[0 .. len(rows)]; each chunk or key chain decoded once for the set."""
        blobs, scratch, first = self.blobs, self.scratch, self.group_first
        if self.kind == "frames":
            decode = self.codec(1).decode_into
            for k, row in enumerate(rows):
                decode(blobs[row], out[k])
        elif self.kind == "chunks":
            current = -1
            for k, row in enumerate(rows):
                chunk = self.chunk_of[row]
                if chunk != current:
                    size = self.sizes[chunk]
                    self.codec(size).decode_into(blobs[chunk], scratch[:size])
                    current = chunk
                out[k] = scratch[row - first[row]]
        else:
            decode, current = self.codec(1).decode_into, -1
            for k, row in enumerate(rows):
                key = first[row]
                if not key <= current <= row:  # else: go on from the frame decoded last
                    decode(blobs[key], scratch[0])
                    current = key
                while current < row:
                    current += 1
                    decode(blobs[current], self.delta)
                    np.bitwise_xor(scratch[0], self.delta, out=scratch[0])
                out[k] = scratch[0]


def codec_study(rec: Recording, args, rng: np.random.Generator) -> list[tuple]:
    """Rows (scheme, ratio, encode us/frame, decode us of one random frame, T batch ms, S batch ms)."""
    picks = rng.integers(0, rec.frames, args.picks)
    t_sets = [np.unique(rng.integers(0, rec.frames, 256)) for _ in range(5)]
    long = np.flatnonzero(rec.lengths >= read.WINDOW)
    s_sets = []
    for _ in range(5):
        episodes = rng.choice(long, 50)
        starts = rec.starts[episodes] + rng.integers(0, rec.lengths[episodes] - read.WINDOW + 1)
        s_sets.append(np.unique((starts[:, None] + np.arange(read.WINDOW)).reshape(-1)))
    out = np.empty((max(len(s) for s in s_sets + t_sets), *SHAPE), np.uint8)
    rows = []

    def one_frame(decode) -> float:
        start = time.perf_counter()
        for row in picks.tolist():
            decode([row], out)
        return (time.perf_counter() - start) / len(picks)

    def batch(decode, sets) -> float:
        times = []
        for chosen in sets:
            start = time.perf_counter()
            decode(chosen, out)
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    def gather(chosen, target):
        np.take(rec.image, chosen, axis=0, out=target[:len(chosen)])

    rows.append(("raw gather from RAM", 1.0, 0.0, one_frame(gather), batch(gather, t_sets), batch(gather, s_sets)))
    for kind, label in (("frames", "per-frame blocks"), ("chunks", f"chunks of {GROUP} frames"),
                        ("delta", f"per-frame XOR delta, key every {GROUP}")):
        scheme = Scheme(kind, rec)
        check = np.empty((len(t_sets[0]), *SHAPE), np.uint8)
        scheme.decode(t_sets[0], check)
        if not np.array_equal(check, rec.image[t_sets[0]]):
            raise RuntimeError(f"{label} does not decode to the frames")
        rows.append((label, scheme.ratio, scheme.encode_s, one_frame(scheme.decode), batch(scheme.decode, t_sets),
                     batch(scheme.decode, s_sets)))
        del scheme
    return rows


def print_study(rows: list[tuple]) -> None:
    print(f"  {'codec study (one thread)':<36} {'ratio':>8} {'encode':>10} {'1 random frame':>15} "
          f"{'T batch (256)':>14} {'S batch (50x50)':>16}")
    for label, ratio, encode, one, t_batch, s_batch in rows:
        encoded = f"{encode * 1e6:>7,.0f} us" if encode else f"{'-':>10}"
        print(f"  {label:<36} {ratio:>7,.0f}x {encoded} {one * 1e6:>12,.1f} us "
              f"{t_batch * 1e3:>11,.2f} ms {s_batch * 1e3:>13,.2f} ms", flush=True)


# ---- one game --------------------------------------------------------------------------------------------------


def spread(count: int, times: list[float]) -> str:
    return ", ".join(f"{count / t:,.1f}" for t in times)


def measure_game(game: str, args, root: Path, cache: Path | None, rng: np.random.Generator) -> dict:
    rec, how = load_or_record(game, args.frames, args.seed, cache)
    lengths = ", ".join(str(n) for n in rec.lengths[:8]) + (", ..." if len(rec.lengths) > 8 else "")
    print(f"\n{game}: {rec.frames:,} frames in {len(rec.lengths)} episode(s) (lengths {lengths}), {how}", flush=True)
    result: dict = {"study": codec_study(rec, args, rng)}
    print_study(result["study"])

    repeats = max(args.write_repeats, 1)
    result["codec"] = compress_rate(rec, repeats)
    result["codec checksum"] = compress_rate(rec, repeats, checksum=True)
    folders = {"raw": root / f"{game}-raw", "zstd": root / f"{game}-zstd"}
    writes: dict[str, list[float]] = {"raw": [], "zstd": []}
    for _ in range(repeats):
        for way, fields in (("raw", RAW_FIELDS), ("zstd", ZSTD_FIELDS)):  # alternated: load touches both alike
            shutil.rmtree(folders[way], ignore_errors=True)
            read.warm_ram(args.warm_bytes)
            writes[way].append(write_store(folders[way], rec, fields))
            sync_files(folders[way])  # untimed: its write-back does not overlap the next pass; clean pages evict
    frames = rec.frames
    result["write"] = {way: frames / statistics.median(t) for way, t in writes.items()}
    print(f"  W per-step store(): raw {result['write']['raw']:,.0f} steps/s [{spread(frames, writes['raw'])}], "
          f"zstd {result['write']['zstd']:,.0f} steps/s [{spread(frames, writes['zstd'])}]; the codec alone, one "
          f"thread: {result['codec']:,.0f} frames/s ({result['codec checksum']:,.0f} with a checksum, as the "
          f"library writes); zstd store / codec = {result['write']['zstd'] / result['codec']:.2f}", flush=True)
    del rec
    gc.collect()

    size = result["size"] = sizes(folders["raw"], folders["zstd"])
    print(f"  size (du): store raw {size['store raw'] / MB:,.1f} MB, zstd {size['store zstd'] / MB:,.3f} MB: "
          f"{size['store raw'] / size['store zstd']:,.0f}x; image files raw {size['image raw'] / MB:,.1f} MB, zstd "
          f"{size['image zstd'] / MB:,.3f} MB: {size['image raw'] / size['image zstd']:,.0f}x; committed frames + "
          f"index {size['encoded'] / MB:,.3f} MB: {frames * ROW / size['encoded']:,.0f}x "
          f"(frames file's length {size['frames file'] / MB:,.2f} MB)", flush=True)

    game_reads = Game(folders["raw"], folders["zstd"], args)
    result["warm"], result["cold"], result["limit"] = {}, {}, None
    for kind in KINDS:
        times = game_reads.warm(kind)
        count = len(game_reads.batches_of(kind, cold=False))
        rates = {way: count / statistics.median(t) for way, t in times.items()}
        result["warm"][kind] = rates["zstd"] / rates["raw"]
        line = (f"  warm {kind:<5} raw {rates['raw']:>8,.1f} batches/s [{spread(count, times['raw'])}], zstd "
                f"{rates['zstd']:>8,.1f} [{spread(count, times['zstd'])}]: {result['warm'][kind]:.2f} x raw")
        if "numpy limit" in rates:
            result["limit"] = (rates["raw"] / rates["numpy limit"], rates["zstd"] / rates["numpy limit"])
            line += (f"; numpy limit {rates['numpy limit']:,.1f} (raw {result['limit'][0]:.2f}, zstd "
                     f"{result['limit'][1]:.2f} x limit)")
        print(f"{line}; {game_reads.nbytes[kind] / MB:.1f} MB a batch; {game_reads.checks[kind]}", flush=True)
    gc.collect()
    for folder in folders.values():
        cold.evict(folder, drop_maps=True)
    print(f"  cold: after an eviction {cold.cached_fraction(folders['raw']):.1%} (raw) and "
          f"{cold.cached_fraction(folders['zstd']):.1%} (zstd) of the stores' pages are in the page cache", flush=True)
    for kind in KINDS:
        times = game_reads.cold(kind)
        count = len(game_reads.batches_of(kind, cold=True))
        rates = {way: count / statistics.median(t) for way, t in times.items()}
        result["cold"][kind] = rates["zstd"] / rates["raw"]
        print(f"  cold {kind:<5} raw {rates['raw']:>8,.1f} batches/s [{spread(count, times['raw'])}], zstd "
              f"{rates['zstd']:>8,.1f} [{spread(count, times['zstd'])}]: {result['cold'][kind]:.2f} x raw", flush=True)
    game_reads.close()
    del game_reads
    gc.collect()
    if not args.keep:
        for folder in folders.values():
            shutil.rmtree(folder, ignore_errors=True)
    return result


# ---- summary ---------------------------------------------------------------------------------------------------


def verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


def summary(results: dict[str, dict], args) -> None:
    games = list(results)
    print(f"\nCompressed figures: {args.frames:,} frames a game, codec zstd level {LEVEL}, one frame per block; "
          f"medians of {args.repeats} repeat(s); {get_threads()} library thread(s); ratios compressed / raw, this run")
    header = ["game", "size store", "size image", "W / codec"] + [f"warm {k}" for k in KINDS] + \
        [f"cold {k}" for k in KINDS] + ["T raw/limit", "T zstd/limit"]
    rows = []
    for game, r in results.items():
        size, limit = r["size"], r["limit"] or (float("nan"),) * 2
        rows.append([game, f"{size['store raw'] / size['store zstd']:,.0f}x",
                     f"{size['image raw'] / size['image zstd']:,.0f}x", f"{r['write']['zstd'] / r['codec']:.2f}"]
                    + [f"{r['warm'][k]:.2f}" for k in KINDS] + [f"{r['cold'][k]:.2f}" for k in KINDS]
                    + [f"{limit[0]:.2f}", f"{limit[1]:.2f}"])
    widths = [max(len(row[i]) for row in rows + [header]) for i in range(len(header))]
    for row in [header] + rows:
        print("  " + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))

    print("\nCodec study: ratio, and decode of one random frame (us), one thread; the stores ship per-frame blocks")
    labels = [row[0] for row in next(iter(results.values()))["study"]]
    for label in labels:
        cells = []
        for game in games:
            row = next(row for row in results[game]["study"] if row[0] == label)
            cells.append(f"{game} {row[1]:,.0f}x {row[3] * 1e6:,.1f} us, T {row[4] * 1e3:,.1f} ms, "
                         f"S {row[5] * 1e3:,.1f} ms")
        print(f"  {label:<36} " + "; ".join(cells))

    print("\nGoals (issue 29):")
    for game, goal in GOAL_SIZE.items():
        if game in results:
            size = results[game]["size"]
            ratio = size["store raw"] / size["store zstd"]
            print(f"  size {game} >= {goal:.0f}x: {ratio:,.0f}x (du of the store folder) {verdict(ratio >= goal)}")
    for kind, goal in GOAL_WARM.items():
        ratios = [results[g]["warm"][kind] for g in games]
        median = statistics.median(ratios)
        print(f"  warm {kind} >= {goal} of raw (median over the games): {median:.2f} {verdict(median >= goal)}  "
              f"[{', '.join(f'{g} {x:.2f}' for g, x in zip(games, ratios))}]")
    ratios = [results[g]["cold"]["T"] for g in games]
    median = statistics.median(ratios)
    print(f"  cold T >= {GOAL_COLD_T:.0f}x raw's batches/s: median over the games {median:.2f} "
          f"{verdict(median >= GOAL_COLD_T)}, every game {verdict(min(ratios) >= GOAL_COLD_T)}  "
          f"[{', '.join(f'{g} {x:.2f}' for g, x in zip(games, ratios))}]")
    ratios = [results[g]["write"]["zstd"] / results[g]["codec"] for g in games]
    median = statistics.median(ratios)
    print(f"  per-step store >= {GOAL_WRITE} of the codec's single-thread compress rate: median over the games "
          f"{median:.2f} {verdict(median >= GOAL_WRITE)}, every game {verdict(min(ratios) >= GOAL_WRITE)}  "
          f"[{', '.join(f'{g} {x:.2f}' for g, x in zip(games, ratios))}]")


# ---- main ------------------------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add = parser.add_argument
    add("--quick", action="store_true", help="smoke run: Pong, 300 frames, not cached, 1 repeat, 2 batches")
    add("--frames", type=int, help="frames recorded a game (default 3,000)")
    add("--games", nargs="+", choices=GAMES, help="games (default all three; --quick: Pong)")
    add("--seed", type=int, default=0, help="seed of the environment and the random policy (default 0)")
    add("--batches", type=int, help="warm batches a run (default 48; S a quarter of it: 250 MB a raw batch)")
    add("--cold-batches", type=int, help="cold batches a run, each after an eviction (default 5; S 2)")
    add("--repeats", type=int, help="runs of each way, interleaved; medians are printed (default 5; cold 3)")
    add("--write-repeats", type=int, help="per-step store passes of each store (default 3)")
    add("--picks", type=int, help="random frames the codec study decodes one at a time (default 1,000)")
    add("--warm-mb", type=int, help="MB of RAM touched and freed before each run (default 256; see read.py)")
    add("--cache", type=Path, default=Path(tempfile.gettempdir()) / "memmap_replay-bench" / "atari",
        help="folder of recorded frames, reused by later runs (default: %(default)s)")
    add("--no-cache", action="store_true", help="record afresh and cache nothing")
    add("--folder", type=Path, help="where to write the stores (a scratch folder is made inside it and removed at "
                                    "the end; default: the current directory, so the same disk as the project)")
    add("--keep", action="store_true", help="keep the scratch folder and its stores")
    args = parser.parse_args(argv)

    missing = [module for module in NEEDED if importlib.util.find_spec(module) is None]
    if missing:
        extras = ",".join(sorted({NEEDED[module] for module in missing}))
        print(f"SKIPPED: {', '.join(missing)} not installed; pip install 'memmap-replay[{extras}]'")
        return 0
    args.frames = args.frames or (300 if args.quick else 3000)
    args.games = args.games or (["Pong"] if args.quick else list(GAMES))
    args.batches = args.batches or (2 if args.quick else 48)
    args.cold_batches = args.cold_batches or (1 if args.quick else 5)
    args.repeats = args.repeats or (1 if args.quick else 5)
    args.write_repeats = args.write_repeats or (1 if args.quick else 3)
    args.picks = args.picks or (20 if args.quick else 1000)
    args.warm_bytes = (args.warm_mb if args.warm_mb is not None else (1 if args.quick else 256)) * 2**20
    if min(args.frames, args.batches, args.cold_batches, args.repeats, args.write_repeats, args.picks) < 1:
        parser.error("--frames, --batches, --cold-batches, --repeats, --write-repeats and --picks must be positive")
    if args.frames < 300:
        parser.error("--frames must be at least 300 (a T batch is 256 steps, an S window 50)")
    cache = None if args.quick or args.no_cache else args.cache
    parent = args.folder if args.folder is not None else Path.cwd()
    parent.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix=".bench-compressed-", dir=parent))
    torch.set_num_threads(1)  # the library's own threads decode; torch's are not used
    gc.freeze()  # what the imports made: the collections between runs (read.warm_ram) skip it

    import ale_py
    import zstandard

    started = time.perf_counter()
    print(f"memmap_replay compressed-fields benchmark: {', '.join(args.games)}; {args.frames:,} frames a game "
          f"(210x160x3, random policy, seed {args.seed}); medians of {args.repeats} repeat(s)")
    print(f"python {platform.python_version()}, numpy {np.__version__}, torch {torch.__version__}, zstandard "
          f"{zstandard.__version__} ({zstandard.backend}), ale-py {ale_py.__version__}, {os.cpu_count()} cpus, load "
          f"average {os.getloadavg()[0]:.2f}, kernel {platform.release()}; library threads {get_threads()}")
    print(f"folder {root} ({'kept' if args.keep else 'removed at the end'}); frames cache "
          f"{cache if cache is not None else 'none'}; {read.pin_malloc()}", flush=True)
    rng = np.random.default_rng(args.seed)
    results = {}
    try:
        for game in args.games:
            results[game] = measure_game(game, args, root, cache, rng)
    finally:
        if args.keep:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    summary(results, args)
    print(f"(total run time {time.perf_counter() - started:.0f} s; load average now {os.getloadavg()[0]:.2f} on "
          f"{os.cpu_count()} cpus: other processes running during the runs widen the spread)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
