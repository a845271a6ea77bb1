"""The ``info`` and ``stats`` commands: figures checked against numpy, JSON, refusals, damage, empty stores.

A couple of tests run ``python -m memmap_replay`` as a user would; the rest call ``cli.main`` in-process.
"""

from __future__ import annotations

import io
import json
import math
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

from memmap_replay import ReplayBuffer
from memmap_replay.sharing.card import DatasetCard, write_card
from memmap_replay.cli import main
from memmap_replay.cli.info import _columns, _figure, _human_bytes
from memmap_replay.core.format import NpyFile
from memmap_replay.sharing.stats import compression_summary, ratio_text

from compressed_stores import all_data, make_compressed_store

FIELDS = dict(obs=("float", 3), action=("int", 2), reward="float", image=("uint8", (8, 40, 40)))
LENGTHS = (5, 12, 30, 1, 17)
ENDS = ("terminated", "truncated", None, "terminated", "truncated")


def episodes_of(rng, lengths):
    return [dict(obs=(rng.standard_normal((n, 3)) * 3 + 1).astype(np.float32), action=rng.integers(-3, 4, (n, 2)),
                 reward=rng.standard_normal(n).astype(np.float32),
                 image=rng.integers(0, 256, (n, 8, 40, 40), dtype=np.uint8)) for n in lengths]


@pytest.fixture(scope="module")
def known(tmp_path_factory):
    """(folder, episodes): five episodes of known values, a card; episode 2 has a final observation."""
    folder = tmp_path_factory.mktemp("cli_info") / "replay_data"
    episodes = episodes_of(np.random.default_rng(7), LENGTHS)
    with ReplayBuffer(folder, 8, 32, FIELDS, meta_fields=dict(task="int")) as buffer:
        for i, (data, end) in enumerate(zip(episodes, ENDS)):
            final = dict(obs=np.full(3, 99, np.float32)) if i == 2 else None  # never counted in the statistics
            buffer.store_episode(**data, task=i, end=end, final=final)
    write_card(folder, DatasetCard(name="test/known-v0", description="Five known episodes."))
    return folder, episodes


@pytest.fixture
def copy(known, tmp_path):
    """A copy of the known store to damage."""
    return shutil.copytree(known[0], tmp_path / "copy")


def rows_of(episodes, name):
    return np.concatenate([data[name] for data in episodes]).astype(np.float64)


def run(capsys, *args):
    code = main([*map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def table_row(out: str, label: str) -> list[float]:
    """The numbers of the stats table's row ``label`` (count first); '-' as NaN."""
    line = next(line for line in out.splitlines() if line.split() and line.split()[0] == label)
    return [math.nan if cell == "-" else float(cell.replace(",", "")) for cell in line.split()[1:]]


def close(printed: float, value: float) -> bool:
    return math.isclose(printed, value, rel_tol=1e-5, abs_tol=1e-9)


# ---- as a user runs them ---------------------------------------------------------------------------------


def test_info_and_stats_as_a_user_runs_them(known):
    folder, episodes = known
    info = subprocess.run([sys.executable, "-m", "memmap_replay", "info", str(folder)], capture_output=True,
                          text=True, timeout=120)
    assert info.returncode == 0, info.stderr
    assert info.stderr == ""
    assert info.stdout.splitlines()[:2] == [f"{folder}  test/known-v0", "  Five known episodes."]
    assert re.search(r"^contents +5 episodes \(ids 0\.\.4; the next is 5\), 65 steps", info.stdout, re.M)
    stats = subprocess.run([sys.executable, "-m", "memmap_replay", "stats", str(folder), "obs", "--json"],
                           capture_output=True, text=True, timeout=120)
    assert stats.returncode == 0, stats.stderr
    assert stats.stderr == ""  # no progress bar when stderr is not a terminal
    np.testing.assert_allclose(json.loads(stats.stdout)["fields"]["obs"]["mean"], rows_of(episodes, "obs").mean(0),
                               rtol=1e-12)


# ---- info ------------------------------------------------------------------------------------------------


def test_info_text_shows_the_figures(known, capsys):
    folder, episodes = known
    code, out, err = run(capsys, "info", folder)
    assert (code, err) == (0, "")
    lengths = np.array(LENGTHS)
    returns = np.array([data["reward"].astype(np.float64).sum() for data in episodes])
    assert re.search(r"^capacity +8 episodes of up to 32 steps in 264 rows; not circular", out, re.M)
    assert re.search(rf"^length +min 1  mean {_figure(lengths.mean())}  max 30  std {_figure(lengths.std())}$", out,
                     re.M)
    assert re.search(rf"^return +min {re.escape(_figure(returns.min()))}  mean {re.escape(_figure(returns.mean()))}  "
                     rf"max {re.escape(_figure(returns.max()))}  std {re.escape(_figure(returns.std()))}  "
                     rf"\(sum of reward\)$", out, re.M)
    assert re.search(r"^ends +2 terminated, 2 truncated, 1 unspecified; 1 with a final observation$", out, re.M)
    assert re.search(r"^files +checksums\.sha256: no; card\.json: yes; stats/running\.npz: yes$", out, re.M)
    assert re.search(r"^format +memmap_replay 1\.1 \(store id [0-9a-f]{32}\)$", out, re.M)
    assert re.search(r"^  image +uint8 +\(8, 40, 40\) +zeros +\S+ \S+ +\S+ \S+$", out, re.M)
    assert re.search(r"^meta fields \(one value per episode\)\n  task +int32 +\(\) +zeros", out, re.M)


def test_info_json_matches_the_folder(known, capsys):
    folder, episodes = known
    code, out, _ = run(capsys, "info", folder, "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] and report["is_store"]
    assert (report["name"], report["description"], report["version"]) == ("test/known-v0", "Five known episodes.",
                                                                          "1.1")
    assert report["schema"]["fields"]["image"] == {"dtype": "uint8", "shape": [8, 40, 40], "default": None}
    assert report["schema"]["meta_fields"] == {"task": {"dtype": "int32", "shape": [], "default": None}}
    assert report["capacity"] == {"max_episodes": 8, "max_timesteps": 32, "max_steps": 264, "circular": False}
    counts = report["counts"]
    assert (counts["episodes"], counts["steps"], counts["first_episode"], counts["next_episode"]) == (5, 65, 0, 5)
    length = report["episodes"]["length"]
    assert (length["min"], length["max"], length["mean"]) == (1, 30, np.mean(LENGTHS))
    returns = [data["reward"].astype(np.float64).sum() for data in episodes]
    assert math.isclose(report["episodes"]["return"]["mean"], np.mean(returns), rel_tol=1e-12)
    assert report["episodes"]["ends"] == {"unspecified": 1, "terminated": 2, "truncated": 2}
    assert report["files"] == {"checksums": False, "card": True, "stats": True}
    sizes = report["sizes"]
    for name in FIELDS:
        info = os.stat(folder / "steps" / f"{name}.npy")
        assert sizes["fields"][name] == {"disk": info.st_blocks * 512, "apparent": info.st_size}
    every = [path for path in folder.rglob("*") if path.is_file() and path.name != "writer.lock"]
    assert sizes["total"]["apparent"] == sum(path.stat().st_size for path in every)
    assert sizes["total"]["disk"] == sum(path.stat().st_blocks * 512 for path in every)


def test_info_shows_the_codec_and_ratio_of_a_compressed_field_and_counts_both_its_files(tmp_path, capsys,
                                                                                         monkeypatch):
    folder = make_compressed_store(tmp_path / "pixels")
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        summary = compression_summary(buffer.episode_store)
    monkeypatch.setitem(sys.modules, "zstandard", None)  # no frame is decoded: it works without the codec's package
    code, out, err = run(capsys, "info", folder)
    assert (code, err) == (0, "")
    ratio = ratio_text(summary["image"]["ratio"])
    assert re.search(r"^ +dtype +shape +default +codec +ratio +on disk +apparent$", out, re.M)
    assert re.search(rf"^  image +uint8 +\(16, 16, 3\) +zeros +zstd-3 +{re.escape(ratio)} +\S+ \S+ +\S+ \S+$", out,
                     re.M), out
    assert re.search(r"^  action +int32 +\(\) +zeros +raw +\S+ \S+ +\S+ \S+$", out, re.M)
    assert re.search(r"^format +memmap_replay 2\.0 ", out, re.M)
    report = json.loads(run(capsys, "info", folder, "--json")[1])
    assert report["compression"] == summary and summary["image"]["codec"] == "zstd-3"
    assert report["schema"]["fields"]["image"]["codec"] == {"name": "zstd", "level": 3}
    usage = [os.stat(folder / "steps" / f"image.{part}.npy") for part in ("frames", "index")]
    assert report["sizes"]["fields"]["image"] == {"disk": sum(info.st_blocks * 512 for info in usage),
                                                  "apparent": sum(info.st_size for info in usage)}
    every = [path for path in folder.rglob("*") if path.is_file() and path.name != "writer.lock"]
    assert report["sizes"]["total"]["apparent"] == sum(path.stat().st_size for path in every)
    assert sum(used["apparent"] for used in report["sizes"]["fields"].values()) == sum(  # (each file once)
        path.stat().st_size for path in (folder / "steps").iterdir())


def test_stats_of_a_compressed_field(tmp_path, capsys):
    folder = make_compressed_store(tmp_path / "pixels")
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        summary = compression_summary(buffer.episode_store)["image"]
    code, out, _ = run(capsys, "stats", folder, "image", "--recompute", "--quiet")
    assert code == 0
    assert re.search(rf"^  compressed +image: zstd-3, {re.escape(ratio_text(summary['ratio']))} smaller \("
                     rf"{re.escape(_human_bytes(19 * 768))} of live rows in {summary['encoded_bytes']} B\)$", out, re.M)
    pixels = all_data(folder)
    rows = np.concatenate([image[:n] for image, n in zip(pixels["image"], pixels["episode_lens"])])
    for channel in range(3):
        count, mean, std, low, high = table_row(out, f"image[channel={channel}]")
        values = rows[..., channel].astype(np.float64)
        assert count == values.size and close(mean, values.mean()) and close(std, values.std())
        assert (low, high) == (values.min(), values.max())
    report = json.loads(run(capsys, "stats", folder, "--json")[1])
    assert report["compression"] == {"image": summary}
    np.testing.assert_allclose(report["fields"]["image"]["mean"], rows.astype(np.float64).mean(0), rtol=1e-12)


def test_info_reads_no_step_data_but_rewards(known, capsys, monkeypatch):
    mapped = set()
    real = NpyFile.array
    monkeypatch.setattr(NpyFile, "array", lambda self: mapped.add(self.path.relative_to(known[0]).as_posix())
                        or real(self))
    assert run(capsys, "info", known[0])[0] == 0
    # the returns the writer kept (stats/returns.npy), one number per episode
    assert {path for path in mapped if not path.startswith("episodes/")} == {"stats/returns.npy"}
    (known[0] / "stats" / "returns.npy").unlink()  # (a cache: without it, the rewards are summed)
    mapped.clear()
    assert run(capsys, "info", known[0])[0] == 0
    assert {path for path in mapped if not path.startswith("episodes/")} == {"steps/reward.npy"}


def test_info_and_stats_work_while_a_writer_writes(known, tmp_path, capsys):
    folder = tmp_path / "live"
    with ReplayBuffer(folder, 8, 32, FIELDS) as writer:
        writer.store_episode(**known[1][0])  # the writer holds the lock from here on
        assert json.loads(run(capsys, "info", folder, "--json")[1])["counts"]["episodes"] == 1
        code, out, _ = run(capsys, "stats", folder, "obs", "--quantiles", "0.5")
        assert code == 0 and "obs[2]" in out
        writer.store_episode(**known[1][1])  # neither command took the writer lock
        assert json.loads(run(capsys, "info", folder, "--json")[1])["counts"]["episodes"] == 2


def test_info_of_a_circular_store_and_a_damaged_card(tmp_path, capsys):
    rng = np.random.default_rng(3)
    with ReplayBuffer(tmp_path / "ring", 3, 32, FIELDS, circular=True) as buffer:
        for data in episodes_of(rng, (4, 6, 8, 10, 12)):
            buffer.store_episode(**data)
    (tmp_path / "ring" / "card.json").write_text("[1]")
    code, out, err = run(capsys, "info", tmp_path / "ring")
    assert code == 0
    assert re.search(r"^contents +3 episodes \(ids 2\.\.4; the next is 5\), 30 steps", out, re.M)
    assert "circular: the oldest episodes are evicted" in out
    assert err.startswith("memmap-replay info: warning: ") and "card.json must hold a JSON object" in err


# ---- stats -----------------------------------------------------------------------------------------------


def test_stats_text_shows_numpys_figures(known, capsys):
    folder, episodes = known
    code, out, err = run(capsys, "stats", folder)
    assert (code, err) == (0, "")
    assert out.splitlines()[0] == (f"{folder}: 5 live episodes, 65 steps; running statistics of 5 committed episodes")
    for name, labels in (("obs", ["obs[0]", "obs[1]", "obs[2]"]), ("action", ["action[0]", "action[1]"]),
                         ("reward", ["reward"])):
        rows = rows_of(episodes, name).reshape(65, -1)
        for i, label in enumerate(labels):
            count, mean, std, low, high = table_row(out, label)
            assert count == 65
            for printed, value in ((mean, rows[:, i].mean()), (std, rows[:, i].std()), (low, rows[:, i].min()),
                                   (high, rows[:, i].max())):
                assert close(printed, value), (label, printed, value)
    assert "image" not in out.split("not shown")[0]  # 12800 numbers a row: not tracked
    assert out.rstrip().endswith("not shown (not tracked; name them to read them from the live episodes): image")


def test_stats_quantiles_and_a_large_field(known, capsys):
    folder, episodes = known
    code, out, _ = run(capsys, "stats", folder, "image", "reward", "--quantiles", "0.05,0.5,0.95")
    assert code == 0
    header = next(line for line in out.splitlines() if line.startswith("field"))
    assert header.split() == ["field", "count", "mean", "std", "min", "max", "q0.05", "q0.5", "q0.95"]
    reward = rows_of(episodes, "reward")
    printed = table_row(out, "reward")
    for got, want in zip(printed[5:], np.quantile(reward, [0.05, 0.5, 0.95])):
        assert close(got, want)
    image = rows_of(episodes, "image").reshape(65, -1)
    assert close(table_row(out, "image[0,0,3]")[1], image[:, 3].mean())
    assert close(table_row(out, "image[7,39,39]")[4], image[:, -1].max())
    assert "image[0,0,8]" not in out and f"  ... {12800 - 10:,} more (--json lists every element)" in out
    count, mean, std, low, high, *quantiles = table_row(out, "image[all]")
    assert count == image.size and close(mean, image.mean()) and close(std, image.std())
    assert (low, high) == (image.min(), image.max()) and all(map(math.isnan, quantiles))
    assert out.index("image[0,0,0]") < out.index("reward ")  # in the order named

    report = json.loads(run(capsys, "stats", folder, "image", "--quantiles", "0.5", "--json")[1])
    stats = report["fields"]["image"]
    assert np.array(stats["mean"]).shape == (8, 40, 40)  # every element
    np.testing.assert_allclose(stats["mean"], image.mean(0).reshape(8, 40, 40), rtol=1e-12)
    np.testing.assert_allclose(stats["quantiles"]["0.5"], np.quantile(image, 0.5, axis=0).reshape(8, 40, 40))
    assert report["not_shown"] == [] and report["recomputed"] is False


def test_stats_recompute_counts_only_the_live_episodes(tmp_path, capsys):
    rng = np.random.default_rng(5)
    episodes = episodes_of(rng, (4, 6, 8, 10, 12))
    with ReplayBuffer(tmp_path / "ring", 3, 32, FIELDS, circular=True) as buffer:
        for data in episodes:
            buffer.store_episode(**data)
    code, out, _ = run(capsys, "stats", tmp_path / "ring", "obs")
    assert "running statistics of 5 committed episodes (evicted ones included" in out
    assert table_row(out, "obs[0]")[0] == 40
    code, out, _ = run(capsys, "stats", tmp_path / "ring", "--recompute")
    assert code == 0 and "computed from the 3 live episodes" in out
    live = rows_of(episodes[2:], "obs")
    assert table_row(out, "obs[1]")[0] == 30 and close(table_row(out, "obs[1]")[1], live[:, 1].mean())
    assert "image[all]" in out and "not shown" not in out  # --recompute covers every numeric field
    report = json.loads(run(capsys, "stats", tmp_path / "ring", "--recompute", "--json")[1])
    assert report["episodes_counted"] == 3 and report["recomputed"] is True
    np.testing.assert_allclose(report["fields"]["obs"]["std"], live.std(0), rtol=1e-9)


def test_stats_of_an_rgb_image_per_channel_and_a_lerobot_stats_json(tmp_path, capsys):
    rng = np.random.default_rng(11)
    rgb = [rng.integers(0, 256, (n, 3, 6, 5), dtype=np.uint8) for n in (4, 9)]
    with ReplayBuffer(tmp_path / "rgb", 4, 16,
                      dict(rgb=("uint8", (3, 6, 5)), obs=("float", 2), reward="float")) as buffer:
        for pixels in rgb:
            buffer.store_episode(rgb=pixels, obs=rng.random((len(pixels), 2)), reward=rng.random(len(pixels)))
    rows = np.concatenate(rgb).astype(np.float64)
    code, out, _ = run(capsys, "stats", tmp_path / "rgb", "rgb")
    assert code == 0 and "rgb[0,0,0]" not in out, "an image shows channels, not elements"
    for c in range(3):
        count, mean, std, low, high = table_row(out, f"rgb[channel={c}]")
        assert count == 13 * 30 and close(mean, rows[:, c].mean()) and close(std, rows[:, c].std())
        assert (low, high) == (rows[:, c].min(), rows[:, c].max())
    assert table_row(out, "rgb[all]")[0] == rows.size

    target = tmp_path / "stats.json"
    code, out, _ = run(capsys, "stats", tmp_path / "rgb", "--stats-json", target)
    assert code == 0 and out.rstrip().endswith(f"wrote {target} (LeRobot's stats.json: 3 fields; per channel: rgb)")
    data = json.loads(target.read_text())
    assert list(data) == ["rgb", "obs", "reward"], "without FIELD: every numeric step field, images included"
    np.testing.assert_allclose(np.ravel(data["rgb"]["mean"]), rows.mean(axis=(0, 2, 3)), rtol=1e-12)
    assert np.shape(data["rgb"]["std"]) == (3, 1, 1) and data["obs"]["count"] == [13]
    report = json.loads(run(capsys, "stats", tmp_path / "rgb", "obs", "--stats-json", target, "--json")[1])
    assert report["stats_json"] == str(target) and list(json.loads(target.read_text())) == ["obs"]
    np.testing.assert_allclose(report["fields"]["obs"]["mean"], data["obs"]["mean"])
    code, out, err = run(capsys, "stats", tmp_path / "rgb", "--stats-json", tmp_path / "rgb" / "stats.json")
    assert code == 2 and "must be outside the store" in err and not (tmp_path / "rgb" / "stats.json").exists()


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize("args, bar", [(["image"], True), (["obs", "--recompute"], True), (["obs"], False),
                                       (["image", "--quiet"], False)])
def test_stats_progress_bar_only_when_it_reads_rows_on_a_terminal(known, monkeypatch, capsys, args, bar):
    terminal = Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["stats", str(known[0]), *args]) == 0
    assert ("stats:" in terminal.getvalue()) == bar


# ---- refusals, damage, empty stores ----------------------------------------------------------------------


@pytest.mark.parametrize("args, message", [
    (["info"], "the following arguments are required: FOLDER"),
    (["info", "{folder}", "--bogus"], "unrecognized arguments: --bogus"),
    (["stats", "{folder}", "--quantiles", "0.5,high"], "--quantiles: must be numbers in [0, 1] separated by commas"),
    (["stats", "{folder}", "--quantiles", "1.5"], "--quantiles: must be numbers in [0, 1]"),
])
def test_wrong_arguments_exit_2(known, capsys, args, message):
    with pytest.raises(SystemExit) as exit:
        main([arg.format(folder=known[0]) for arg in args])
    assert exit.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("field, message", [
    ("nope", "'nope' is not a field: statistics cover step fields; the store's are obs, action, reward, image"),
    ("task", "'task' is a meta field (one value per episode); statistics cover step fields; the store's are obs, "
             "action, reward, image"),
])
def test_stats_of_an_unknown_or_meta_field_exits_2(known, capsys, field, message):
    code, out, err = run(capsys, "stats", known[0], "obs", field)
    assert (code, out) == (2, "") and err == f"memmap-replay stats: error: {message}\n"


@pytest.mark.parametrize("command", ["info", "stats"])
def test_a_path_that_is_not_a_store_exits_2(tmp_path, capsys, command):
    (tmp_path / "empty").mkdir()
    (tmp_path / "file").write_text("x")
    for path, message in ((tmp_path / "nowhere", "the folder does not exist"),
                          (tmp_path / "empty", "holds no meta.json"),
                          (tmp_path / "file", "must be a folder (got a file)")):
        code, out, err = run(capsys, command, path)
        assert (code, out) == (2, "") and err.startswith(f"memmap-replay {command}: error: ") and message in err
        assert "mode 'a'" not in err  # an internal API: the user is told what to run instead
    code, _, err = run(capsys, command, tmp_path / "nowhere")
    assert ("check the path, or create a store there with ReplayBuffer(folder, max_episodes, max_timesteps, "
            "fields)") in err
    code, out, _ = run(capsys, command, tmp_path / "empty", "--json")
    assert code == 2 and json.loads(out)["is_store"] is False


@pytest.mark.parametrize("command", ["info", "stats"])
@pytest.mark.parametrize("damage, message", [
    ("truncate", r"steps/obs\.npy is truncated"),
    ("meta", r"meta\.json is not valid JSON"),
    ("format", r"meta\.json has format version '7\.0'"),
])
def test_a_damaged_folder_exits_1_with_a_clear_message(copy, capsys, command, damage, message):
    if damage == "truncate":
        path = copy / "steps" / "obs.npy"
        os.truncate(path, path.stat().st_size // 2)
    elif damage == "meta":
        (copy / "meta.json").write_text('{"format": "memmap_replay", "version": ')
    else:
        meta = json.loads((copy / "meta.json").read_text())
        (copy / "meta.json").write_text(json.dumps({**meta, "version": "7.0"}))
    code, out, err = run(capsys, command, copy)
    assert code == (2 if damage == "format" else 1)  # a newer format is not damage: upgrade to read it
    assert out == "" and "Traceback" not in err
    assert err.startswith(f"memmap-replay {command}: error: ") and re.search(message, err)
    assert err.count("\n") == 1
    code, out, _ = run(capsys, command, copy, "--json")
    assert json.loads(out)["ok"] is False


def test_an_empty_store(tmp_path, capsys):
    ReplayBuffer(tmp_path / "empty", 4, 10, FIELDS).close()
    code, out, err = run(capsys, "info", tmp_path / "empty")
    assert (code, err) == (0, "")
    assert re.search(r"^contents +0 episodes \(the next id is 0\), 0 steps", out, re.M)
    assert re.search(r"^length +-$", out, re.M) and re.search(r"^return +-  \(sum of reward\)$", out, re.M)
    report = json.loads(run(capsys, "info", tmp_path / "empty", "--json")[1])
    assert report["episodes"]["length"] == {"min": None, "max": None, "mean": None, "std": None}
    assert report["sizes"]["fields"]["image"]["apparent"] < 1024  # the header: no rows yet
    code, out, err = run(capsys, "stats", tmp_path / "empty", "--quantiles", "0.5")
    assert (code, err) == (0, "")
    assert table_row(out, "obs[0]") == pytest.approx([0] + [math.nan] * 5, nan_ok=True)
    report = json.loads(run(capsys, "stats", tmp_path / "empty", "--json")[1])
    assert report["fields"]["reward"] == {"count": 0, "mean": None, "std": None, "min": None, "max": None}


@pytest.mark.parametrize("command, example", [("info", "memmap-replay info replay_data --json | jq .counts"),
                                              ("stats", "memmap-replay stats replay_data obs reward --quantiles")])
def test_help_teaches_with_examples(capsys, command, example):
    with pytest.raises(SystemExit) as exit:
        main([command, "--help"])
    out = capsys.readouterr().out
    assert exit.value.code == 0 and example in out and "exit codes:" in out


def test_text_helpers():
    assert [_human_bytes(n) for n in (0, 1023, 1536, 10 << 20, 1000 << 20, 5 << 40)] == \
        ["0 B", "1023 B", "1.5 KiB", "10 MiB", "1000 MiB", "5 TiB"]
    assert [_figure(x) for x in (None, math.nan, 12345, 0.000123456789, 2.5)] == ["-", "-", "12,345", "0.000123457",
                                                                                  "2.5"]
    assert _columns([["a", "1"], ["a note that is long"], ["bbb", "22"]], right={1}) == \
        ["a     1", "a note that is long", "bbb  22"]


def test_info_of_an_edited_store_counts_no_removed_episode(tmp_path, capsys):
    """A store whose newest episode was trimmed (rows after it) and two deleted opens, and info leaves the
    removed ones out of every figure and says how many there are."""
    episodes = episodes_of(np.random.default_rng(3), LENGTHS)
    with ReplayBuffer(tmp_path / "edited", 8, 32, FIELDS) as buffer:
        for data, end in zip(episodes, ENDS):
            buffer.store_episode(**data, end=end)
        buffer.delete_episodes([1, 2])
        buffer.trim(4, stop=5)
    code, out, err = run(capsys, "info", tmp_path / "edited")
    assert (code, err) == (0, "")
    assert re.search(r"^contents +3 episodes \(ids 0\.\.4, 2 removed; the next is 5\), 11 steps", out, re.M)
    assert re.search(r"^ends +2 terminated, 1 truncated; 1 with a final observation$", out, re.M)
    report = json.loads(run(capsys, "info", tmp_path / "edited", "--json")[1])
    assert (report["counts"]["episodes"], report["counts"]["removed"], report["counts"]["steps"]) == (3, 2, 11)
    returns = [episodes[0]["reward"].astype(np.float64).sum(), episodes[3]["reward"].astype(np.float64).sum(),
               episodes[4]["reward"][:5].astype(np.float64).sum()]
    assert math.isclose(report["episodes"]["return"]["mean"], np.mean(returns), rel_tol=1e-9)
