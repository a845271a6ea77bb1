"""Field statistics: running moments kept on commit, and summaries computed from the live episodes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from memmap_replay import InvalidDataError, ReplayBuffer
from memmap_replay.sharing.stats import (STATS_DIR, RUNNING_FILE, TRACK_LIMIT, _Moments, compression_summary,
                                         ratio_text)

from compressed_stores import FIELDS as COMPRESSED_FIELDS, episode as compressed_episode, make_compressed_store

FIELDS = dict(obs=("float", 3), action=("int", 2), reward="float", done="bool", image=("uint8", (4, 16, 32)))


def episode(rng, length):
    return dict(obs=rng.standard_normal((length, 3)).astype(np.float32) * 5 + 100,
                action=rng.integers(-3, 4, (length, 2)), reward=rng.standard_normal(length).astype(np.float32),
                done=rng.random(length) < 0.3, image=rng.integers(0, 256, (length, 4, 16, 32), dtype=np.uint8))


def fill(buffer, rng, count, lengths=(1, 40)):
    episodes = [episode(rng, int(rng.integers(*lengths))) for _ in range(count)]
    for data in episodes:
        buffer.store_episode(**data)
    return episodes


def expected(episodes, name):
    rows = np.concatenate([data[name] for data in episodes]).astype(np.float64)
    return rows.mean(0), rows.std(0), rows.min(0), rows.max(0), len(rows)


def check(stats, episodes, name):
    mean, std, low, high, count = expected(episodes, name)
    got = stats.fields[name]
    assert got.count == count
    np.testing.assert_allclose(got.mean, mean, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(got.std, std, rtol=1e-9, atol=1e-12)
    np.testing.assert_array_equal(got.min, low)
    np.testing.assert_array_equal(got.max, high)


def new_buffer(folder, **options):
    options = dict(max_episodes=64, max_timesteps=40, fields=FIELDS) | options
    return ReplayBuffer(folder, **options)


def test_running_moments_equal_numpy_over_every_episode(tmp_path):
    rng = np.random.default_rng(0)
    with new_buffer(tmp_path / "s") as buffer:
        episodes = fill(buffer, rng, 20)
        stats = buffer.stats()
        assert set(stats.fields) == {"obs", "action", "reward", "done"}  # image: too big to track
        for name in stats.fields:
            check(stats, episodes, name)
        assert stats.episodes_counted == 20


def test_steps_written_one_by_one_and_by_vector_writers_count_the_same(tmp_path):
    rng = np.random.default_rng(1)
    episodes = [episode(rng, 7), episode(rng, 3)]
    with new_buffer(tmp_path / "s") as buffer:
        for data in episodes:
            with buffer.one_episode():
                for t in range(len(data["obs"])):
                    buffer.store(**{name: value[t] for name, value in data.items()})
        writer = buffer.vector_writer(2)
        more = [episode(rng, 5), episode(rng, 5)]
        for t in range(5):
            writer.store(**{name: np.stack([more[0][name][t], more[1][name][t]]) for name in FIELDS},
                         terminated=np.array([t == 4, t == 4]))
        check(buffer.stats(), episodes + more, "obs")


def test_the_final_row_is_not_counted(tmp_path):
    with new_buffer(tmp_path / "s") as buffer:
        data = episode(np.random.default_rng(2), 4)
        buffer.store_episode(**data, end="truncated", final=dict(obs=np.full(3, 1e6)))
        assert buffer.stats().fields["obs"].max.max() < 1e6
        check(buffer.stats(), [data], "obs")


def test_reopen_continues_and_readers_see_the_same(tmp_path):
    rng = np.random.default_rng(3)
    with new_buffer(tmp_path / "s") as buffer:
        first = fill(buffer, rng, 5)
    with ReplayBuffer.from_folder(tmp_path / "s") as buffer:
        second = fill(buffer, rng, 5)
        with ReplayBuffer.from_folder(tmp_path / "s", read_only=True) as reader:  # the file lags: it catches up
            check(reader.stats(), first + second, "obs")
        check(buffer.stats(), first + second, "obs")
    with ReplayBuffer.from_folder(tmp_path / "s", read_only=True) as reader:
        check(reader.stats(), first + second, "obs")
        assert reader.stats().episodes_counted == 10


def test_a_ring_keeps_running_moments_and_recompute_gives_the_live_ones(tmp_path):
    rng = np.random.default_rng(4)
    with new_buffer(tmp_path / "s", max_episodes=4, circular=True) as buffer:
        episodes = fill(buffer, rng, 11)
        check(buffer.stats(), episodes, "obs")  # every episode committed, as a running normalizer
        live = buffer.stats(recompute=True)
        check(live, episodes[-4:], "obs")
        check(live, episodes[-4:], "image")
        assert live.episodes_counted == 4 and live.episodes["count"] == 4


def test_precision_with_a_large_offset(tmp_path):
    """Chan's update never forms a sum of squares: a std of 1e-3 around 1e6 survives."""
    rng = np.random.default_rng(5)
    with ReplayBuffer(tmp_path / "s", max_episodes=200, max_timesteps=50, fields=dict(x="float64")) as buffer:
        episodes = [dict(x=1e6 + 1e-3 * rng.standard_normal(50)) for _ in range(200)]
        for data in episodes:
            buffer.store_episode(**data)
        got = buffer.stats().fields["x"]
    rows = np.concatenate([data["x"] for data in episodes])
    assert abs(got.std - rows.std()) / rows.std() < 1e-6
    assert abs(got.mean - rows.mean()) < 1e-9


def test_merge_matches_one_pass_in_any_grouping():
    rng = np.random.default_rng(6)
    rows = rng.standard_normal((100, 2)) * [1, 1000] + [5, -7]
    cuts = np.sort(rng.choice(np.arange(1, 100), 9, replace=False))
    merged = _Moments.empty((2,))
    for part in np.split(rows, cuts):
        merged = merged.merge(_Moments.of(part))
    whole = _Moments.of(rows)
    assert merged.count == whole.count == 100
    np.testing.assert_allclose(merged.mean, whole.mean, rtol=1e-13)
    np.testing.assert_allclose(merged.m2, whole.m2, rtol=1e-12)
    np.testing.assert_array_equal(merged.low, whole.low)


def test_untracked_fields_and_quantiles_on_request(tmp_path):
    rng = np.random.default_rng(7)
    with new_buffer(tmp_path / "s") as buffer:
        episodes = fill(buffer, rng, 6)
        stats = buffer.stats(fields=["image", "obs"], quantiles=(0.1, 0.5, 0.9))
    check(stats, episodes, "image")
    rows = np.concatenate([data["obs"] for data in episodes]).astype(np.float64)
    for q in (0.1, 0.5, 0.9):
        np.testing.assert_allclose(stats.fields["obs"].quantiles[q], np.quantile(rows, q, axis=0))
    text = stats.to_json()  # a JSON string, as its name says; to_dict() gives the plain values
    assert isinstance(text, str) and json.loads(text) == stats.to_dict()
    assert json.loads(stats.to_json(indent=2))["fields"]["obs"]["quantiles"]["0.5"] == \
        stats.fields["obs"].quantiles[0.5].tolist()
    assert isinstance(stats.fields["obs"].to_json(), str) and isinstance(stats.fields["obs"].to_dict(), dict)


def test_episode_summary_lengths_and_returns(tmp_path):
    rng = np.random.default_rng(8)
    with new_buffer(tmp_path / "s", max_episodes=6, circular=True) as buffer:
        episodes = fill(buffer, rng, 9, lengths=(1, 40))
        summary = buffer.stats().episodes
    live = episodes[-6:]
    lengths = np.array([len(data["obs"]) for data in live])
    returns = np.array([data["reward"].astype(np.float64).sum() for data in live])
    assert summary["count"] == 6 and summary["steps"] == lengths.sum()
    assert summary["length"] == dict(min=lengths.min(), max=lengths.max(), mean=lengths.mean(), std=lengths.std())
    assert summary["return_field"] == "reward"
    np.testing.assert_allclose([summary["return"][key] for key in ("min", "max", "mean", "std")],
                               [returns.min(), returns.max(), returns.mean(), returns.std()], rtol=1e-12)


def test_an_empty_store(tmp_path):
    with new_buffer(tmp_path / "s") as buffer:
        stats = buffer.stats(quantiles=0.5)
    assert stats.fields["obs"].count == 0 and np.isnan(stats.fields["obs"].mean).all()
    assert stats.episodes["count"] == 0 and stats.episodes["length"]["min"] is None
    assert json.loads(stats.to_json())["fields"]["obs"]["mean"] == [None, None, None]
    assert stats.to_dict()["episodes"]["length"]["min"] is None


def test_a_damaged_or_foreign_stats_file_starts_afresh_from_the_live_episodes(tmp_path):
    rng = np.random.default_rng(9)
    with new_buffer(tmp_path / "s") as buffer:
        episodes = fill(buffer, rng, 4)
    path = tmp_path / "s" / STATS_DIR / RUNNING_FILE
    path.write_bytes(b"not a zip")
    with ReplayBuffer.from_folder(tmp_path / "s", read_only=True) as reader:
        check(reader.stats(), episodes, "obs")
    with ReplayBuffer.from_folder(tmp_path / "s") as buffer:
        more = fill(buffer, rng, 2)
        check(buffer.stats(), episodes + more, "obs")
    with new_buffer(tmp_path / "s", overwrite=True) as buffer:  # a new store: none of the old moments
        fresh = fill(buffer, rng, 3)
        check(buffer.stats(), fresh, "obs")


def test_a_writer_without_tracking_leaves_the_catch_up_to_readers(tmp_path):
    rng = np.random.default_rng(10)
    with new_buffer(tmp_path / "s", track_stats=False) as buffer:
        episodes = fill(buffer, rng, 5)
        check(buffer.stats(), episodes, "obs")
    with ReplayBuffer.from_folder(tmp_path / "s", read_only=True) as reader:
        check(reader.stats(), episodes, "obs")


def test_a_killed_writer_loses_nothing_committed(tmp_path):
    """SIGKILL after commits whose moments were never saved: the next opener folds them in."""
    folder = tmp_path / "s"
    code = textwrap.dedent(f"""
        import os, signal, numpy as np
        from memmap_replay import ReplayBuffer
        buffer = ReplayBuffer({str(folder)!r}, max_episodes=64, max_timesteps=40, fields=dict(obs=("float", 3)))
        rng = np.random.default_rng(11)
        for i in range(12):
            buffer.store_episode(obs=rng.standard_normal((int(rng.integers(1, 40)), 3)))
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert done.returncode == -signal.SIGKILL, done.stderr
    rng = np.random.default_rng(11)
    episodes = [dict(obs=rng.standard_normal((int(rng.integers(1, 40)), 3)).astype(np.float32))  # as stored
                for _ in range(12)]
    with ReplayBuffer.from_folder(folder) as buffer:
        check(buffer.stats(), episodes, "obs")
        buffer.store_episode(obs=np.zeros((2, 3)))
        check(buffer.stats(), episodes + [dict(obs=np.zeros((2, 3)))], "obs")


@pytest.mark.parametrize("kwargs, match", [
    (dict(fields=["nope"]), r"fields has unknown names \['nope'\]"),
    (dict(fields=3), r"fields must be a name or a tuple of names \(got 3\)"),
    (dict(quantiles=1.5), r"each quantile must be a finite number in \[0.0, 1.0\] \(got 1.5\)"),
    (dict(quantiles=()), r"quantiles must be a number in \[0, 1\] or a non-empty tuple"),
    (dict(quantiles="0.5"), r"quantiles must be a number in \[0, 1\] or a non-empty tuple"),
    (dict(quantiles=(0.5, float("nan"))), r"each quantile must be a finite number"),
    (dict(recompute="yes"), r"recompute must be True or False \(got 'yes'\)"),
    (dict(fields=["z"]), r"statistics are kept for bool, int and float fields \(got \['z'\], of dtype complex64\)"),
])
def test_refusals(tmp_path, kwargs, match):
    with ReplayBuffer(tmp_path / "s", max_episodes=2, max_timesteps=3, fields=dict(x="float", z="complex64")) as buffer:
        buffer.store_episode(x=np.ones(2), z=np.ones(2))
        with pytest.raises(InvalidDataError, match=match):
            buffer.stats(**kwargs)
        assert buffer.stats().fields["x"].count == 2


def test_big_fields_are_left_to_on_request_reads():
    from memmap_replay.core.schema import Schema
    from memmap_replay.sharing.stats import _tracked_by_default

    schema = Schema.parse(dict(small=("float", TRACK_LIMIT), big=("float", TRACK_LIMIT + 1), c="complex64",
                               flag="bool"))
    assert _tracked_by_default(schema) == ("small", "flag")


def test_the_stats_file_is_plain_numpy(tmp_path):
    with new_buffer(tmp_path / "s") as buffer:
        fill(buffer, np.random.default_rng(12), 3)
    with np.load(tmp_path / "s" / STATS_DIR / RUNNING_FILE, allow_pickle=False) as data:
        assert int(data["episodes"]) == 3 and data["obs.mean"].shape == (3,)
    assert not any(name.endswith(".tmp") for name in os.listdir(tmp_path / "s" / STATS_DIR))


def test_inf_and_nan_in_the_data_give_nan_moments_without_warnings(tmp_path):
    with ReplayBuffer(tmp_path / "s", max_episodes=4, max_timesteps=3, fields=dict(x=("float", 2))) as buffer:
        buffer.store_episode(x=np.array([[1.0, np.inf], [2.0, 3.0]]))
        buffer.store_episode(x=np.array([[np.nan, 1.0]]))
        got = buffer.stats().fields["x"]
        assert got.count == 3 and np.isnan(got.mean[0]) and np.isnan(got.std).all()
        assert got.max[1] == np.inf
        assert json.loads(buffer.stats().to_json())["fields"]["x"]["max"] == [None, None]  # strict JSON: null


# ---- per channel, and LeRobot's stats.json -------------------------------------------------------------------

IMAGES = dict(chw=("uint8", (3, 6, 5)), hwc=("uint8", (6, 5, 4)), gray=("uint8", (1, 6, 5)),
              stack=("uint8", (4, 6, 5)), floaty=("float32", (3, 6, 5)), grid=("uint8", (6, 5)), reward="float")


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """Episodes of every kind of image-like field, with known values; the first has a final observation."""
    rng = np.random.default_rng(21)
    folder = tmp_path_factory.mktemp("channels") / "s"
    episodes = []
    with ReplayBuffer(folder, max_episodes=4, max_timesteps=10, fields=IMAGES) as buffer:
        for e, length in enumerate((7, 3, 10)):
            data = {name: (rng.integers(0, 256, (length, *spec[1]), dtype=np.uint8) if spec[0] == "uint8" else
                           rng.random((length, *spec[1]), dtype=np.float32)) for name, spec in IMAGES.items()
                    if name != "reward"}
            data["reward"] = rng.standard_normal(length)
            final = dict(chw=np.full((3, 6, 5), 255, np.uint8)) if e == 0 else None  # never counted
            buffer.store_episode(**data, end="terminated" if final else None, final=final)
            episodes.append(data)
    return folder, episodes


@pytest.mark.parametrize("name, layout, axes", [("chw", "CHW", (0, 2, 3)), ("hwc", "HWC", (0, 1, 2)),
                                                ("gray", "CHW", (0, 2, 3))])
def test_image_fields_get_statistics_per_channel(images, name, layout, axes):
    folder, episodes = images
    rows = np.concatenate([data[name] for data in episodes]).astype(np.float64)
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        stats = buffer.stats([name]).fields[name]
        recomputed = buffer.stats([name], recompute=True).fields[name]
    assert stats.layout == layout and stats.channels.mean.shape == (rows.shape[1 if layout == "CHW" else -1],)
    channels = stats.channels
    assert channels.count == rows.size // channels.mean.size
    np.testing.assert_allclose(channels.mean, rows.mean(axis=axes), rtol=1e-12)
    np.testing.assert_allclose(channels.std, rows.std(axis=axes), rtol=1e-9)
    np.testing.assert_array_equal(channels.min, rows.min(axis=axes))
    np.testing.assert_array_equal(channels.max, rows.max(axis=axes))
    np.testing.assert_allclose(recomputed.channels.mean, channels.mean, rtol=1e-12)
    np.testing.assert_allclose(stats.mean, rows.mean(axis=0), rtol=1e-12)  # per element as before
    assert stats.to_dict()["channels"]["layout"] == layout
    np.testing.assert_allclose(stats.to_dict()["channels"]["mean"], channels.mean)


@pytest.mark.parametrize("name", ["stack", "floaty", "grid", "reward"])
def test_other_fields_have_no_channels(images, name):
    with ReplayBuffer.from_folder(images[0], read_only=True) as buffer:
        stats = buffer.stats([name]).fields[name]
    assert stats.channels is None and stats.layout is None and "channels" not in stats.to_dict()


def test_lerobot_stats_json_has_a_key_per_field_per_channel_for_images(images, tmp_path):
    folder, episodes = images
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        stats = buffer.stats(["chw", "hwc", "stack", "reward"])
    path = stats.write_lerobot(tmp_path / "stats.json")
    data = json.loads(path.read_text())
    assert list(data) == ["chw", "hwc", "stack", "reward"]
    assert all(sorted(entry) == ["count", "max", "mean", "min", "std"] for entry in data.values())
    assert np.shape(data["chw"]["mean"]) == (3, 1, 1) and np.shape(data["hwc"]["std"]) == (1, 1, 4)
    assert np.shape(data["stack"]["mean"]) == (4, 6, 5), "not an image: per element"
    reward = np.concatenate([e["reward"] for e in episodes]).astype(np.float32).astype(np.float64)
    assert data["reward"]["count"] == [20] and np.shape(data["reward"]["mean"]) == (1,)
    np.testing.assert_allclose(data["reward"]["mean"], [reward.mean()], rtol=1e-12)
    chw = np.concatenate([e["chw"] for e in episodes]).astype(np.float64)
    np.testing.assert_allclose(np.ravel(data["chw"]["mean"]), chw.mean(axis=(0, 2, 3)), rtol=1e-12)
    assert data["chw"]["count"] == [20] and np.ravel(data["chw"]["max"]).tolist() == chw.max(axis=(0, 2, 3)).tolist()
    # a broadcastable shape: a stored row normalizes with it as is
    assert ((chw[0] - np.array(data["chw"]["mean"])) / np.array(data["chw"]["std"])).shape == (3, 6, 5)


def test_lerobot_stats_of_an_empty_store_are_null(tmp_path):
    with ReplayBuffer(tmp_path / "e", max_episodes=2, max_timesteps=3,
                      fields=dict(image=("uint8", (3, 2, 2)))) as buffer:
        data = buffer.stats(["image"]).to_lerobot()
    assert data["image"]["count"] == [0] and np.ravel(data["image"]["mean"]).tolist() == [None] * 3


def test_write_lerobot_refuses_a_path_inside_the_store_or_nowhere(images, tmp_path):
    folder = images[0]
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        stats = buffer.stats(["reward"])
    with pytest.raises(InvalidDataError, match=r"must be outside the store at .*; choose a path beside the store"):
        stats.write_lerobot(folder / "stats.json")
    with pytest.raises(InvalidDataError, match=r"must be in an existing folder .*; create the folder first"):
        stats.write_lerobot(tmp_path / "nowhere" / "stats.json")
    assert not (folder / "stats.json").exists()


# ---- compressed fields -----------------------------------------------------------------------------------


def test_statistics_of_a_compressed_field_read_its_decoded_rows(tmp_path):
    """A compressed image of at most TRACK_LIMIT numbers is tracked on commit; a reader that catches up, recompute
    and quantiles read its rows decoded: all equal numpy over the stored values."""
    rng = np.random.default_rng(11)
    episodes = [compressed_episode(rng, int(rng.integers(2, 8))) for _ in range(5)]
    with ReplayBuffer(tmp_path / "s", max_episodes=8, max_timesteps=10, fields=COMPRESSED_FIELDS,
                      track_stats=False) as buffer:  # (readers catch up from the live episodes: they decode)
        for data in episodes:
            buffer.store_episode(**data)
    with ReplayBuffer.from_folder(tmp_path / "s", read_only=True) as buffer:
        caught_up = buffer.stats()
        recomputed = buffer.stats(fields=["image"], quantiles=(0.5, 0.99), recompute=True)
    rows = np.concatenate([data["image"] for data in episodes]).astype(np.float64)
    for stats in (caught_up, recomputed):
        check(stats, episodes, "image")
        assert stats.fields["image"].layout == "HWC"
    np.testing.assert_allclose(recomputed.fields["image"].quantiles[0.99], np.quantile(rows, 0.99, axis=0))
    with ReplayBuffer(tmp_path / "t", max_episodes=8, max_timesteps=10, fields=COMPRESSED_FIELDS) as buffer:
        for data in episodes:  # (a writer folds its rows in as they commit, before they are encoded)
            buffer.store_episode(**data)
        check(buffer.stats(), episodes, "image")


def test_compression_summary_is_the_live_rows_raw_over_encoded(tmp_path):
    folder = make_compressed_store(tmp_path / "s")
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        store = buffer.episode_store
        summary = compression_summary(store)
        table = store.live_table()
    index = np.load(folder / "steps/image.index.npy")
    rows = np.concatenate([np.arange(start, start + length + final)
                           for start, length, final in zip(table.start, table.length, table.final.astype(int))])
    assert len(rows) == 19  # (episode 1's final row counts: it is stored)
    assert summary == {"image": {"codec": "zstd-3", "raw_bytes": 19 * 768, "encoded_bytes": int(index[rows, 1].sum()),
                                 "ratio": 19 * 768 / index[rows, 1].sum()}}
    assert 5 < summary["image"]["ratio"] < 768
    with ReplayBuffer(tmp_path / "raw", max_episodes=2, max_timesteps=3, fields=dict(x="float")) as buffer:
        assert compression_summary(buffer.episode_store) == {}
    with ReplayBuffer(tmp_path / "empty", max_episodes=2, max_timesteps=3, fields=COMPRESSED_FIELDS) as buffer:
        assert compression_summary(buffer.episode_store)["image"] == {"codec": "zstd-3", "raw_bytes": 0,
                                                                       "encoded_bytes": 0, "ratio": None}


@pytest.mark.parametrize("ratio, text", [(312.4, "312x"), (44.0, "44x"), (9.96, "10x"), (2.46, "2.5x"), (1.0, "1x"),
                                         (None, "-")])
def test_ratio_text(ratio, text):
    assert ratio_text(ratio) == text


def test_an_edit_before_the_first_save_and_the_statistics_of_the_episodes_left(tmp_path):
    """delete_episodes on a store whose stats/ folder is not made yet (no save so far) failed: the running
    statistics' file was removed from a folder that did not exist. The moments are those of the episodes left,
    a trimmed one counted as trimmed."""
    with ReplayBuffer(tmp_path / "store", 8, 16, dict(x="float")) as buffer:
        for n in range(4):
            buffer.store_episode(x=np.full(3 + n, float(n)))
        assert not (tmp_path / "store" / STATS_DIR).exists()
        assert buffer.delete_episodes([0, 2]) == 2
        buffer.trim(3, stop=2)
        stats = buffer.stats()
        assert stats.episodes_counted == 2
        assert stats.fields["x"].count == 4 + 2 and np.isclose(stats.fields["x"].mean, (4 * 1.0 + 2 * 3.0) / 6)
