"""The dataset card: card.json and README.md round trips, validation with clear errors, atomic and
serialized writes, gymnasium spaces as JSON, and ``python -m memmap_replay card`` as a user runs it."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import numpy as np
import pytest

from memmap_replay import (CorruptStoreError, DiskFullError, InvalidDataError, NotAFolderError, ReplayBuffer,
                           StoreNotFoundError, __version__)
from memmap_replay.sharing import card as card_module
from memmap_replay.sharing.card import (DatasetCard, add_provenance, read_card, space_from_json, space_to_json,
                                        update_card,
                                write_card)
from memmap_replay.sharing.checksums import check_manifest, write_manifest
from memmap_replay.cli import main

from memmap_replay.sharing.stats import compression_summary, ratio_text

from compressed_stores import make_compressed_store
from conftest import SMALL_FIELDS, SMALL_META, episode_arrays

FULL = dict(name="mujoco/hopper-expert-v0", description="Expert | runs.\n\nSecond paragraph.", author=["Ada", "Bo"],
            author_email="ada@example.org", license="CC-BY-4.0", code_url="https://example.org/code", algorithm="SAC",
            env_spec={"id": "Hopper-v5", "max_episode_steps": 1000},
            observation_space={"type": "Box", "dtype": "float64",
            "shape": [11], "low": "-inf", "high": "inf"}, action_space={"type": "Discrete", "n": 3, "start": 0},
            ref_min_score=-20.5, ref_max_score=3234, num_episodes_average_score=100,
            provenance=[{"kind": "minari", "source": "mujoco/hopper/expert-v0", "time": "2024-01-01T00:00:00Z",
                         "tool": "memmap_replay 0.1.0", "episodes": 10}], seeds=[0, 1, 2], extra={"note": "hi"})


@pytest.fixture
def store(tmp_path):
    folder = tmp_path / "store"
    with ReplayBuffer(folder, max_episodes=4, max_timesteps=8, fields=SMALL_FIELDS, meta_fields=SMALL_META) as buffer:
        buffer.store_episode(**episode_arrays(0, 3), task_id=0)
    return folder


def test_round_trip_of_every_key(store):
    card = DatasetCard(**FULL)
    write_card(store, card)
    assert read_card(store) == card
    assert json.loads((store / "card.json").read_text(encoding="utf-8")) == {**FULL}
    assert DatasetCard.from_json(card.to_json()) == card
    readme = (store / "README.md").read_text(encoding="utf-8")
    for words in ("# mujoco/hopper-expert-v0", "Expert | runs.", "| Author | Ada, Bo |", "`Hopper-v5`, at most 1000",
                  "Box(-inf, inf, (11,), float64)", "min -20.5, max 3234 (each an average over 100 episodes)",
                  "| obs | step | float32 | (3,) |", "| task_id | episode | int32 | () |", "## Provenance",
                  "minari from `mujoco/hopper/expert-v0`", '"note": "hi"'):
        assert words in readme, words


def front_matter(readme: str) -> dict:
    """The YAML block at the top of a README.md, parsed as the Hugging Face Hub does (PyYAML's safe loader)."""
    yaml = pytest.importorskip("yaml", reason="PyYAML parses the front matter (pip install pyyaml)")
    assert readme.startswith("---\n"), readme[:80]
    block, rest = readme[4:].split("\n---\n", 1)
    assert rest.startswith("\n# ")
    return yaml.safe_load(block)


def test_readme_has_hub_front_matter_counts_returns_and_how_to_load(tmp_path):
    rng = np.random.default_rng(3)
    folder = tmp_path / "store"
    rewards = [rng.standard_normal(n) for n in (3, 5, 9)]
    with ReplayBuffer(folder, max_episodes=4, max_timesteps=10, fields=SMALL_FIELDS, meta_fields=SMALL_META) as buffer:
        for number, reward in enumerate(rewards):
            buffer.store_episode(**dict(episode_arrays(number, len(reward)), reward=reward), task_id=number)
    write_card(folder, DatasetCard(**FULL))
    readme = (folder / "README.md").read_text(encoding="utf-8")
    assert front_matter(readme) == {
        "license": "cc-by-4.0", "pretty_name": "mujoco/hopper-expert-v0",
        "tags": ["reinforcement-learning", "memmap-replay"],
        "task_categories": ["reinforcement-learning"], "size_categories": ["n<1K"]}
    returns = np.array([r.astype(np.float32).sum(dtype=np.float64) for r in rewards])
    assert "| Episodes | 3 |" in readme and "| Steps | 17 |" in readme
    assert "| Episode length | mean 5.66667, std 2.49444, min 3, max 9 |" in readme
    assert (f"| Episode return (sum of `reward`) | mean {returns.mean():.6g}, std {returns.std():.6g}, "
            f"min {returns.min():.6g}, max {returns.max():.6g} |") in readme
    assert "pip install memmap-replay" in readme
    snippet = readme.split("```python\n", 1)[1].split("```", 1)[0]
    assert "ReplayBuffer.from_folder(" in snippet and "buffer.dataloader(" in snippet
    namespace = {}  # the snippet runs as written, on this folder
    exec(snippet.replace("path/to/this/folder", str(folder)).replace("    ...", "    namespace_batch = batch"),
         namespace)
    assert set(namespace["namespace_batch"]) >= {"obs", "action", "reward"}
    namespace["buffer"].close()


def test_readme_shows_the_codec_and_measured_ratio_of_compressed_fields(tmp_path):
    folder = make_compressed_store(tmp_path / "store")
    update_card(folder, name="pixels/compressed-v0")
    readme = (folder / "README.md").read_text(encoding="utf-8")
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        ratio = ratio_text(compression_summary(buffer.episode_store)["image"]["ratio"])
    assert "| field | per | dtype | shape | codec |" in readme
    assert f"| image | step | uint8 | (16, 16, 3) | zstd-3, {ratio} smaller |" in readme
    assert "| action | step | int32 | () | raw |" in readme and "| task_id | episode | int32 | () |  |" in readme
    assert "`steps/<field>.frames.npy`" in readme and "`steps/<field>.index.npy`" in readme
    plain = DatasetCard(name="x/plain-v0").render(fields_of={"fields": {"obs": {"dtype": "float32", "shape": [3]}}})
    assert "| field | per | dtype | shape |\n" in plain and "codec" not in plain  # (no codec column without one)


@pytest.mark.parametrize("license, expected", [
    ("MIT", {"license": "mit"}), ("apache-2.0", {"license": "apache-2.0"}),
    ("My Lab's License™ | v2", {"license": "other", "license_name": "my-lab-s-license-v2"}),
    (None, {}),
])
def test_front_matter_license_is_a_hub_id_or_other(license, expected):
    parsed = front_matter(DatasetCard(license=license).render())
    assert {key: parsed[key] for key in ("license", "license_name") if key in parsed} == expected
    assert "pretty_name" not in parsed and "size_categories" not in parsed  # no name, no counts


def test_front_matter_quotes_what_yaml_may_not_hold_raw():
    text = card_module._yaml_text('a "b": c\n\x85\x7f\u2028 #d')
    yaml = pytest.importorskip("yaml", reason="PyYAML parses the front matter (pip install pyyaml)")
    assert yaml.safe_load(f"k: {text}") == {"k": 'a "b": c\n\x85\x7f\u2028 #d'}


def test_readme_of_a_store_without_reward_or_episodes(tmp_path):
    with ReplayBuffer(tmp_path / "s", max_episodes=2, max_timesteps=3, fields=dict(obs="float")):
        pass
    update_card(tmp_path / "s", name="x/empty-v0")
    readme = (tmp_path / "s" / "README.md").read_text()
    assert front_matter(readme)["size_categories"] == ["n<1K"]
    assert "| Episodes | 0 |" in readme and "| Episode length" not in readme and "Episode return" not in readme
    assert "## How to load" in readme


@pytest.mark.parametrize("size, category", [(0, "n<1K"), (999, "n<1K"), (1000, "1K<n<10K"), (2_500_000, "1M<n<10M")])
def test_size_categories(size, category):
    assert card_module._size_category(size) == category


def test_an_empty_card_and_unknown_keys_are_kept(store):
    assert read_card(store) is None
    write_card(store, DatasetCard())
    assert read_card(store) == DatasetCard() and "\n---\n\n# Unnamed dataset\n" in (store / "README.md").read_text()
    data = json.loads((store / "card.json").read_text())
    (store / "card.json").write_text(json.dumps({**data, "from_the_future": {"a": 1}}))
    card = update_card(store, license="MIT")
    assert card.unknown == {"from_the_future": {"a": 1}}
    assert json.loads((store / "card.json").read_text())["from_the_future"] == {"a": 1}


def test_update_card_merges_and_add_provenance_appends(store):
    update_card(store, name="cartpole-v1", author="Ada")
    card = update_card(store, description="two", ref_max_score=500.0)
    assert (card.name, card.author, card.description, card.ref_max_score) == ("cartpole-v1", "Ada", "two", 500.0)
    add_provenance(store, "gymnasium", "CartPole-v1", seed=3)
    card = add_provenance(store, "memmap_replay", store, note="copied")
    assert [record["kind"] for record in card.provenance] == ["gymnasium", "memmap_replay"]
    first = card.provenance[0]
    assert first["source"] == "CartPole-v1" and first["seed"] == 3 and first["tool"] == f"memmap_replay {__version__}"
    assert first["time"].endswith("Z") and datetime.fromisoformat(first["time"].replace("Z", "+00:00")).tzinfo
    assert card.provenance[1]["source"] == str(store) and read_card(store) == card


@pytest.mark.parametrize("name", ["hopper-v0", "mujoco/hopper-expert-v0", "D4RL/door/human-v2", "a_b.c-v12"])
def test_good_names(store, name):
    assert update_card(store, name=name).name == name


DEEP: list = []
for _ in range(3000):  # deeper than json's recursion limit allows
    DEEP = [DEEP]
RECORD = {"kind": "minari", "source": "x", "time": "2024-01-01T00:00:00Z", "tool": "t"}


@pytest.mark.parametrize("values, match", [
    pytest.param(dict(name="hopper"), r"'name' must look like 'namespace/name-vN'.*got 'hopper'", id="no-version"),
    pytest.param(dict(name="mujoco/hopper-v"), r"'name' must look like", id="version-without-number"),
    pytest.param(dict(name="/hopper-v0"), r"'name' must look like", id="empty-namespace"),
    pytest.param(dict(name="../x-v0"), r"'name' must look like", id="dots"),
    pytest.param(dict(name=3), r"'name' must be a string or null \(got a number", id="name-number"),
    pytest.param(dict(author=["a", 3]), r"'author' must be a string or a list of strings", id="author-list-of-number"),
    pytest.param(dict(license=["MIT"]), r"'license' must be a string or null \(got a JSON array", id="license-list"),
    pytest.param(dict(env_spec="CartPole-v1"), r"'env_spec' must be a JSON object or null .*spec\.to_json",
                 id="env-spec-str"),
    pytest.param(dict(observation_space={"n": 3}), r"'observation_space' must describe a space with a 'type'",
                 id="space-no-type"),
    pytest.param(dict(ref_min_score="low"), r"'ref_min_score' must be a finite number or null", id="score-string"),
    pytest.param(dict(ref_max_score=float("nan")), r"'ref_max_score' must be a finite number", id="score-nan"),
    pytest.param(dict(ref_max_score=True), r"'ref_max_score' must be a finite number", id="score-bool"),
    pytest.param(dict(num_episodes_average_score=-1), r"'num_episodes_average_score' must be an integer >= 0",
                 id="count-negative"),
    pytest.param(dict(provenance={"kind": "x"}), r"'provenance' must be a JSON array of records",
                 id="provenance-object"),
    pytest.param(dict(provenance=["x"]), r"provenance record 0 must be a JSON object", id="provenance-string"),
    pytest.param(dict(provenance=[{"kind": "x", "source": "y"}]), r"record 0 must have 'time' as a string",
                 id="provenance-no-time"),
    pytest.param(dict(extra=[1]), r"'extra' must be a JSON object \(got a JSON array\)", id="extra-list"),
    pytest.param(dict(seeds={1, 2}), r"must hold plain JSON values", id="seeds-a-set"),
    pytest.param(dict(extra={"x": float("inf")}), r"must hold plain JSON values \(no NaN", id="extra-inf"),
    # found by the hostile review: each was a bare RecursionError / UnicodeEncodeError, or written as it was
    pytest.param(dict(extra={"x": DEEP}), r"card key extra\['x'\](\[0\])+ is nested more than 64 levels deep",
                 id="extra-nested-too-deep"),
    pytest.param(dict(seeds=DEEP), r"card key seeds(\[0\])+ is nested more than 64", id="seeds-nested-too-deep"),
    pytest.param(dict(extra={"x": "\ud800"}), r"card key extra\['x'\] holds a string that is not valid Unicode",
                 id="extra-lone-surrogate"),
    pytest.param(dict(description="\udcff"), r"card key description holds a string that is not valid Unicode",
                 id="description-lone-surrogate"),
    pytest.param(dict(extra={1: "one"}), r"card key extra has the key 1 of type int \(JSON keys are strings\)",
                 id="extra-int-key-would-come-back-as-a-string"),
    pytest.param(dict(extra={"n": np.int64(3)}), r"card key extra\['n'\] holds a value of type int64",
                 id="extra-numpy-int"),
    pytest.param(dict(provenance=[{**RECORD, "rows": float("nan")}]), r"card key provenance\[0\]\['rows'\] holds nan",
                 id="provenance-detail-nan"),
    pytest.param(dict(provenance=[{**RECORD, "who": object()}]), r"provenance\[0\]\['who'\] holds a "
                                                                 r"value of type object",
                 id="provenance-detail-object"),
])
def test_invalid_values_are_refused_and_change_nothing(store, values, match):
    update_card(store, name="ok-v0")
    before = (store / "card.json").read_bytes()
    with pytest.raises(InvalidDataError, match=match):
        update_card(store, **values)
    with pytest.raises(InvalidDataError, match=match):
        DatasetCard.from_json({"name": "ok-v0", **values})
    assert (store / "card.json").read_bytes() == before
    assert sorted(path.name for path in store.iterdir() if path.suffix == ".tmp") == []


def test_refusals_of_the_api(store, tmp_path):
    with pytest.raises(InvalidDataError, match=r"unknown card keys \['colour'\] .*put your own values in extra="):
        update_card(store, colour="blue")
    with pytest.raises(InvalidDataError, match=r"a dataset card must be a JSON object \(got a JSON array\)"):
        DatasetCard.from_json([1])
    with pytest.raises(InvalidDataError, match=r"card must be a DatasetCard \(got dict\)"):
        write_card(store, {"name": "x-v0"})
    with pytest.raises(InvalidDataError, match=r"kind must be a non-empty string"):
        add_provenance(store, "", "x")
    with pytest.raises(InvalidDataError, match=r"source must be a path or a dataset id"):
        add_provenance(store, "minari", 3)
    with pytest.raises(StoreNotFoundError, match=r"no store at .*nowhere: the folder does not exist"):
        write_card(tmp_path / "nowhere", DatasetCard())
    (tmp_path / "empty").mkdir()
    with pytest.raises(StoreNotFoundError, match=r"no store at .*empty: it holds no meta\.json"):
        update_card(tmp_path / "empty", name="x-v0")
    assert not (tmp_path / "empty" / "card.json").exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(NotAFolderError, match=r"file must be a folder \(got a file\)"):
        read_card(tmp_path / "file")


@pytest.mark.parametrize("content, match", [
    pytest.param(b"[1, 2]", r"card\.json must hold a JSON object \(got a JSON array\)", id="a-list"),
    pytest.param(b'"text"', r"card\.json must hold a JSON object \(got a string\)", id="a-string"),
    pytest.param(b"{oops", r"card\.json is not valid JSON", id="garbage"),
    pytest.param(b"", r"card\.json is not valid JSON", id="empty"),
    pytest.param(b"\xff\xfe", r"card\.json cannot be read as UTF-8 text", id="binary"),
    pytest.param(b'{"name": "no version"}', r"card\.json is not a valid dataset card: card key 'name' must look like",
                 id="bad-name"),
])
def test_a_damaged_card_json_is_refused_naming_the_file(store, content, match):
    (store / "card.json").write_bytes(content)
    for call in (lambda: read_card(store), lambda: update_card(store, license="MIT"),
                 lambda: add_provenance(store, "x", "y")):
        with pytest.raises(CorruptStoreError, match=match) as info:
            call()
        assert str(store / "card.json") in str(info.value)
    assert (store / "card.json").read_bytes() == content


def test_provenance_details_must_be_plain_json_and_nothing_is_written(store):
    update_card(store, name="ok-v0")
    before = (store / "card.json").read_bytes()
    with pytest.raises(InvalidDataError, match=r"card key provenance\[0\]\['rows'\] holds nan \(JSON has no NaN"):
        add_provenance(store, "d4rl", "x.hdf5", rows=float("nan"))  # was written as NaN: invalid JSON elsewhere
    with pytest.raises(InvalidDataError, match=r"provenance\[0\]\['path'\] holds a value of type PosixPath"):
        add_provenance(store, "d4rl", "x.hdf5", path=store)  # was a bare TypeError
    assert (store / "card.json").read_bytes() == before


def test_a_card_too_large_to_unpack_is_refused(store, monkeypatch):
    """unpack refuses a card.json over 64 MiB, so a card that large must not be written in the first place."""
    monkeypatch.setattr(card_module, "_TEXT_LIMIT", 4096)
    with pytest.raises(InvalidDataError, match=r"a dataset card must take at most 0 MiB as card\.json and README\.md "
                                               r"\(got [\d,]+ and [\d,]+ bytes\), so that `unpack` accepts it"):
        update_card(store, description="x" * 5000)
    assert not (store / "card.json").exists() and not (store / "README.md").exists()
    assert [path.name for path in store.iterdir() if path.suffix == ".tmp"] == []


def test_an_interrupted_write_leaves_the_old_card_whole(store, monkeypatch):
    write_card(store, DatasetCard(name="old-v0"))
    before = {name: (store / name).read_bytes() for name in ("card.json", "README.md")}

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(DiskFullError, match=r"no space left on the device \(or quota\) to write .*card\.json"):
        update_card(store, name="new-v0")
    monkeypatch.undo()
    assert {name: (store / name).read_bytes() for name in before} == before
    assert not [path.name for path in store.iterdir() if path.name.endswith(".tmp")]


def test_the_card_needs_no_writer_lock_and_keeps_checksums_current(store):
    write_manifest(store)
    with ReplayBuffer.from_folder(store) as writer:
        writer.store_episode(**episode_arrays(1, 2), task_id=1)  # holds the writer lock
        update_card(store, name="busy-v0")
        add_provenance(store, "gymnasium", "CartPole-v1")
    assert read_card(store).name == "busy-v0"
    changed = {problem.path for problem in check_manifest(store)}
    assert "card.json" not in changed and "README.md" not in changed


def test_concurrent_card_edits_lose_nothing(store):
    """Each edit reads, changes and writes the card under a lock on the folder (flock: separate open
    files exclude each other, so threads stand in for processes here)."""
    def edits(worker: int) -> None:
        for i in range(15):
            add_provenance(store, "test", f"w{worker}-{i}")

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(edits, range(4)))
    sources = [record["source"] for record in read_card(store).provenance]
    assert sorted(sources) == sorted(f"w{w}-{i}" for w in range(4) for i in range(15))
    for worker in range(4):  # each worker's records in its own order
        assert [source for source in sources if source.startswith(f"w{worker}-")] == [f"w{worker}-{i}"
                                                                                      for i in range(15)]


# ---- spaces ------------------------------------------------------------------------------------------


def spaces_to_test():
    gym = pytest.importorskip("gymnasium")
    s = gym.spaces
    return {
        "box-inf": s.Box(-np.inf, np.inf, (11,), np.float64),
        "box-mixed": s.Box(np.array([0.0, -np.inf, -1.5], np.float32), np.array([np.inf, 2.0, 1.5], np.float32),
                           dtype=np.float32),
        "box-image": s.Box(0, 255, (3, 8, 8), np.uint8),
        "box-int64": s.Box(np.array([-(2**40), 0]), np.array([2**40, 7]), dtype=np.int64),
        "discrete": s.Discrete(5, start=-2),
        "multi-discrete": s.MultiDiscrete([[2, 3], [4, 5]], start=[[0, 1], [1, 0]]),
        "multi-binary": s.MultiBinary([2, 3]),
        "multi-binary-int": s.MultiBinary(4),
        "text": s.Text(12, min_length=2, charset="abc123"),
        "dict": s.Dict({"pos": s.Box(-1, 1, (2,)), "inner": s.Dict({"k": s.Discrete(2)}),
                        "pair": s.Tuple([s.Discrete(3), s.MultiBinary(2)])}),
        "tuple": s.Tuple([s.Box(0, 1, ()), s.Text(3)]),
    }


def test_spaces_round_trip_through_strict_json():
    for name, space in spaces_to_test().items():
        data = space_to_json(space)
        text = json.dumps(data, allow_nan=False)  # plain JSON: no Infinity, no NaN
        back = space_from_json(json.loads(text))
        assert back == space, name
        assert type(back) is type(space) and getattr(back, "dtype", None) == getattr(space, "dtype", None), name
    assert space_to_json(spaces_to_test()["box-image"])["low"] == 0  # a uniform bound is one number
    assert space_to_json(spaces_to_test()["box-mixed"])["high"] == ["inf", 2.0, 1.5]


def test_minari_space_json_reads_too():
    serialization = pytest.importorskip("minari.serialization")
    for name, space in spaces_to_test().items():
        assert space_from_json(serialization.serialize_space(space, to_string=False)) == space, name


def test_space_errors():
    gym = pytest.importorskip("gymnasium")
    with pytest.raises(InvalidDataError, match=r"cannot describe Sequence .* \(supported: Box, Discrete"):
        space_to_json(gym.spaces.Sequence(gym.spaces.Discrete(2)))
    for data, match in [({"type": "Graph"}, r"must have 'type' one of Box, .*got 'Graph'"),
                        ([1], r"must have 'type' one of .*got None"),
                        ({"type": "Box", "dtype": "float32", "shape": [2]}, r"malformed Box space description .*'low'"),
                        ({"type": "Box", "dtype": "float32", "shape": [2], "low": "x", "high": 1},
                         r"a Box bound must be a number, 'inf' or '-inf'"),
                        ({"type": "Discrete", "n": "many"}, r"malformed Discrete space"),
                        ({"type": "Dict", "subspaces": {"a": {"type": "Nope"}}}, r"got 'Nope'")]:
        with pytest.raises(InvalidDataError, match=match):
            space_from_json(data)


def test_update_card_takes_gymnasium_objects(store):
    gym = pytest.importorskip("gymnasium")
    env = gym.make("CartPole-v1")
    card = update_card(store, env_spec=env.spec, observation_space=env.observation_space, action_space=env.action_space)
    env.close()
    assert card.env_spec["id"] == "CartPole-v1" and card.env_spec["max_episode_steps"] == 500
    assert gym.envs.registration.EnvSpec.from_json(json.dumps(card.env_spec)).id == "CartPole-v1"
    assert space_from_json(read_card(store).observation_space) == env.observation_space
    assert read_card(store).action_space == {"type": "Discrete", "dtype": "int64", "n": 2, "start": 0}


def test_render_escapes_table_cells():
    text = DatasetCard(author="a | b\nc",
                       provenance=[{"kind": "k", "source": "s|t", "time": "T", "tool": "x"}]).render()
    assert "| Author | a \\| b c |" in text and "`s\\|t`" in text
    assert card_module._cell(["x", "y"]) == "x, y"


# ---- the command line ----------------------------------------------------------------------------------


def run_cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "memmap_replay", *map(str, args)], capture_output=True, text=True,
                          input=stdin, timeout=120)


def cli_cases(store, tmp_path) -> dict:
    """name -> (arguments, exit code, what stderr must say)."""
    (tmp_path / "list.json").write_text("[1]")
    (tmp_path / "empty").mkdir()
    other = tmp_path / "other"
    other.mkdir()
    (other / "meta.json").write_bytes((store / "meta.json").read_bytes())
    (other / "card.json").write_text("[1]")
    return {
        "bad-name": (["card", store, "--set", "name=cartpole"], 2,
                     r"card key 'name' must look like 'namespace/name-vN'"),
        "bad-json-value": (["card", store, "--set", "ref_min_score=low"], 2,
                           r"--set ref_min_score: the value must be JSON"),
        "unknown-key": (["card", store, "--set", "colour=blue"], 2, r"--set colour: unknown card key "
                                                                    r".*use extra\.colour=VALUE"),
        "no-equals": (["card", store, "--set", "license"], 2, r"--set takes KEY=VALUE \(got 'license'\)"),
        "list-file": (["card", store, "--from-json", tmp_path / "list.json"], 2,
                      r"must hold a JSON object of card keys"),
        "missing-file": (["card", store, "--from-json", tmp_path / "nope.json"], 2,
                         r"--from-json .*nope\.json cannot be read"),
        "not-a-store": (["card", tmp_path / "empty"], 2, r"no store at .*empty: it holds no meta\.json"),
        "no-folder": (["card", tmp_path / "nowhere", "--json"], 2, r"no store at .*nowhere: the folder does not exist"),
        "damaged": (["card", other], 1, r"other/card\.json must hold a JSON object \(got a JSON array\)"),
        "no-args": (["card"], 2, r"the following arguments are required: FOLDER"),
        "too-deep": (["card", store, "--set", "seeds=" + "[" * 3000 + "]" * 3000], 2,
                     r"--set seeds: the value is JSON nested too deep to read"),  # was a RecursionError traceback
        "too-deep-extra": (["card", store, "--set", "extra.x=" + "[" * 3000 + "]" * 3000], 2,
                           r"--set extra\.x: the value is JSON nested too deep to read"),
    }


def test_cli_card(store, tmp_path):
    (tmp_path / "mine.json").write_text(json.dumps({"license": "MIT", "extra": {"a": 1}, "future": 7}))
    done = run_cli("card", store)
    assert done.returncode == 0 and "has no dataset card yet" in done.stdout
    done = run_cli("card", store, "--set", "name=cartpole/dqn-v0", "description=DQN | replay", "ref_min_score=9.5",
                   "extra.seed=[0, 1]", "extra.note=plain words")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("# cartpole/dqn-v0\n\nDQN | replay") and "min 9.5" in done.stdout
    assert read_card(store).extra == {"seed": [0, 1], "note": "plain words"}
    done = run_cli("card", store, "--from-json", tmp_path / "mine.json", "--json")
    data = json.loads(done.stdout)
    assert done.returncode == 0 and data["license"] == "MIT" and data["future"] == 7
    assert data["extra"] == {"a": 1} and data["name"] == "cartpole/dqn-v0"  # from-json replaces 'extra' whole
    assert read_card(store).to_json() == data
    # every refusal: two as a user runs them, all of them through main() (a process each costs seconds)
    cases = cli_cases(store, tmp_path)
    with ThreadPoolExecutor(2) as pool:
        runs = dict(zip(("damaged", "bad-name"),
                        pool.map(lambda name: run_cli(*cases[name][0]), ("damaged", "bad-name"))))
    for name, done in runs.items():
        assert done.returncode == cases[name][1] and re.search(cases[name][2], done.stderr), (name, done.stderr)
        assert done.stderr.startswith("python -m memmap_replay card: error: ")
    assert read_card(store).to_json() == data  # no refusal changed the card


@pytest.mark.parametrize("name", ["bad-name", "bad-json-value", "unknown-key", "no-equals", "list-file", "missing-file",
                                  "not-a-store", "no-folder", "damaged", "no-args", "too-deep", "too-deep-extra"])
def test_cli_card_refusals(store, tmp_path, capsys, name):
    update_card(store, name="kept-v0")
    arguments, code, match = cli_cases(store, tmp_path)[name]
    try:
        result = main([str(argument) for argument in arguments], prog="memmap-replay")
    except SystemExit as exit:  # argparse's own usage errors
        result = exit.code
    captured = capsys.readouterr()
    assert result == code and re.search(match, captured.err), captured.err
    assert "Traceback" not in captured.err and read_card(store).name == "kept-v0"
    if "--json" in arguments:
        assert json.loads(captured.out)["is_store"] is False


def test_cli_card_stdin_and_clearing_a_key(store):
    done = run_cli("card", store, "--from-json", "-", "--set", "license=", stdin='{"name": "x-v1", "license": "MIT"}')
    assert done.returncode == 0, done.stderr
    assert read_card(store).name == "x-v1" and read_card(store).license is None


def test_cli_card_help_teaches(capsys):
    with pytest.raises(SystemExit, match="0"):
        main(["card", "--help"], prog="memmap-replay")
    text = capsys.readouterr().out
    for words in ("--set KEY=VALUE", "KEY= clears it", "extra.NAME=VALUE", "--from-json", "exit codes:",
                  "namespace/name-vN", "memmap-replay card replay_data --set name=", "README.md"):
        assert words in text, words
