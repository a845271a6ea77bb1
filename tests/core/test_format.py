"""The on-disk format: the spec's example, round trips, plain-numpy readability, versions, sparse disk use."""

import json
import os
import re
import subprocess

import numpy as np
import pytest

from memmap_replay import CorruptStoreError, ReplayBuffer, UnsupportedFormatError
from memmap_replay.core import format as fmt
from memmap_replay.core.format import StoreMeta, read_meta

from conftest import episode_arrays


def spec_example() -> dict:
    """The JSON example embedded in the spec docstring of memmap_replay.core.format."""
    doc = fmt.__doc__
    start = doc.index("Example")
    block = doc[doc.index("{", start): doc.index("\n\n-", start)]
    return json.loads(block)


def test_spec_example_parses_with_the_reader():
    example = spec_example()
    meta = StoreMeta.from_json(example)
    assert meta.schema.fields["obs"].shape == (8,)
    assert meta.schema.fields["obs"].dtype == np.float32
    assert meta.schema.meta_fields["task_id"].dtype == np.int32
    assert meta.capacity.max_episodes == 100 and meta.state.next_episode == 3


def test_written_meta_has_exactly_the_spec_keys(make_buffer):
    buffer = make_buffer()
    buffer.store_episode(**episode_arrays(0, 5), task_id=1)
    written = json.loads((buffer.folder / "meta.json").read_text())
    example = spec_example()
    assert set(written) == set(example)
    for key in ("capacity", "state", "schema"):
        assert set(written[key]) == set(example[key])
    assert written["format"] == fmt.FORMAT_NAME and written["version"] == fmt.PLAIN_VERSION


def test_spec_layout_lists_every_file_a_store_has(make_buffer):
    buffer = make_buffer()
    buffer.store_episode(**episode_arrays(0, 5), task_id=1)
    buffer.flush()  # the running statistics are saved at most once a second, and on flush and close
    documented = set(re.findall(r"^    (\S+\.(?:npy|npz|json|lock))", fmt.__doc__, re.M)) - {"card.json"}  # optional
    on_disk = {str(p.relative_to(buffer.folder)) for p in buffer.folder.rglob("*") if p.is_file()}
    generic = {re.sub(r"/(obs|action|reward)\.npy$", "/<field>.npy", re.sub(r"^meta/task_id", "meta/<field>", p))
               for p in on_disk}
    assert generic == documented


def test_round_trip_and_plain_numpy_readability(make_buffer):
    buffer = make_buffer()
    for number in range(3):
        buffer.store_episode(**episode_arrays(number, 4 + number), task_id=number, end="terminated")
    buffer.close()
    folder = buffer.folder
    # a stranger with plain numpy: the episode table says where each episode's rows are
    start = np.load(folder / "episodes/start.npy", mmap_mode="r")
    length = np.load(folder / "episodes/length.npy", mmap_mode="r")
    obs = np.load(folder / "steps/obs.npy", mmap_mode="r")
    task = np.load(folder / "meta/task_id.npy", mmap_mode="r")
    end = np.load(folder / "episodes/end.npy", mmap_mode="r")
    for number in range(3):
        rows = obs[start[number]: start[number] + length[number]]
        np.testing.assert_array_equal(rows, episode_arrays(number, 4 + number)["obs"])
        assert task[number] == number and end[number] == fmt.END_CODES["terminated"]
    reopened = ReplayBuffer.from_folder(folder, read_only=True)
    data = reopened.get_all_data()
    np.testing.assert_array_equal(data["episode_lens"].numpy(), [4, 5, 6])
    np.testing.assert_array_equal(data["reward"][2].numpy(), episode_arrays(2, 6)["reward"])
    reopened.close()


def test_schema_round_trips_losslessly(make_buffer):
    fields = dict(a=("float16", (2, 3), 1.5), b=("uint8", 4, 7), c="bool", d=("int64", (), -3), e=("complex64", 2))
    buffer = make_buffer(fields=fields, meta_fields=dict(m=("float64", 3, 0.25)))
    buffer.close()
    reopened = ReplayBuffer.from_folder(buffer.folder, read_only=True)
    assert reopened.schema == buffer.schema
    reopened.close()


def test_no_pickle_anywhere(make_buffer):
    buffer = make_buffer()
    buffer.store_episode(**episode_arrays(0, 5), task_id=1)
    for path in buffer.folder.rglob("*.npy"):
        with open(path, "rb") as file:
            np.lib.format.read_magic(file)
            _, _, dtype = np.lib.format.read_array_header_1_0(file)
        assert not dtype.hasobject
        np.load(path, allow_pickle=False, mmap_mode="r")


def edit_meta(folder, change):
    data = json.loads((folder / "meta.json").read_text())
    change(data)
    (folder / "meta.json").write_text(json.dumps(data))


def test_unknown_major_version_is_refused_unknown_keys_ignored(make_buffer):
    buffer = make_buffer()
    buffer.store_episode(**episode_arrays(0, 5), task_id=1)
    buffer.close()
    edit_meta(buffer.folder, lambda d: d.update(version="1.9", extra={"x": 1}, state={**d["state"], "new": 2}))
    reopened = ReplayBuffer.from_folder(buffer.folder, read_only=True)
    assert reopened.num_episodes == 1
    reopened.close()
    edit_meta(buffer.folder, lambda d: d.update(version="4.0"))
    with pytest.raises(UnsupportedFormatError, match="major versions 1, 2 and 3 only"):
        ReplayBuffer.from_folder(buffer.folder, read_only=True)


def test_truncated_npy_is_detected(make_buffer):
    buffer = make_buffer()
    buffer.store_episode(**episode_arrays(0, 5), task_id=1)
    buffer.close()
    path = buffer.folder / "steps/obs.npy"
    os.truncate(path, 200)
    with pytest.raises(CorruptStoreError, match="truncated"):
        ReplayBuffer.from_folder(buffer.folder, read_only=True)


def test_disk_use_grows_with_steps_not_capacity(tmp_path):
    buffer = ReplayBuffer(tmp_path / "big", max_episodes=10_000, max_timesteps=10_000,
                          fields=dict(x=("float", (8,))))
    for number in range(10):
        buffer.store_episode(x=np.full((100, 8), number, np.float32))
    buffer.close()
    used_kib = int(subprocess.run(["du", "-sk", str(tmp_path / "big")], capture_output=True, text=True,
                                  check=True).stdout.split()[0])
    assert used_kib < 1024, f"{used_kib} KiB on disk"
    reopened = ReplayBuffer.from_folder(tmp_path / "big", read_only=True)
    assert reopened.num_episodes == 10 and reopened.num_steps == 1000
    # opening maps lazily: the step file holds far fewer rows than the 100 M-row capacity
    assert reopened.episode_store.meta.state.rows < 10_000
    reopened.close()


def test_step_file_grows_in_place_and_stays_valid_npy(make_buffer):
    buffer = make_buffer(max_episodes=400, max_timesteps=20)
    for number in range(300):
        buffer.store_episode(**episode_arrays(number, 10), task_id=number)
    rows = buffer.episode_store.meta.state.rows
    assert rows >= 3000
    array = np.load(buffer.folder / "steps/obs.npy", mmap_mode="r")
    assert array.shape[0] >= rows
    np.testing.assert_array_equal(array[2990:3000], episode_arrays(299, 10)["obs"])


def test_read_meta_of_missing_file(tmp_path):
    with pytest.raises(CorruptStoreError, match="missing"):
        read_meta(tmp_path)


def test_a_reader_opening_a_step_file_while_the_writer_grows_it_sees_a_whole_file(tmp_path, monkeypatch):
    # a writer grows a file's size, then its header; a reader whose header read lands between the two must
    # still find every row the header declares (the file's size is taken after the header is read)
    spec = fmt.FieldSpec("x", np.dtype("float32"), (3,))
    path = tmp_path / "x.npy"
    fmt._create_npy(tmp_path, path, spec, 0)
    writer = fmt.NpyFile.open(tmp_path, path, spec, 0, writable=True)
    parse = fmt.parse_npy_header

    def grown_meanwhile(file):
        writer.grow(64)  # the writer's whole grow happens while the reader is at the header
        return parse(file)

    monkeypatch.setattr(fmt, "parse_npy_header", grown_meanwhile)
    reader = fmt.NpyFile.open(tmp_path, path, spec, 64, writable=False)
    assert reader.rows == 64 and reader.size >= reader.offset + 64 * spec.row_nbytes
    writer.close()
    reader.close()


def test_a_step_file_cut_short_after_opening_is_a_corrupt_store_error(tmp_path):
    buffer = ReplayBuffer(tmp_path / "s", 4, 10, dict(x=("float", 3)))
    buffer.store_episode(x=np.ones((8, 3)))
    reader = ReplayBuffer.from_folder(tmp_path / "s", read_only=True)
    os.truncate(tmp_path / "s" / "steps" / "x.npy", 200)
    with pytest.raises(CorruptStoreError, match=r"x\.npy is shorter than the \d+ rows it held when the store was "
                                                r"opened .*truncated or replaced"):
        reader.episode(0)
    buffer.close()
    reader.close()


def test_the_spec_reads_a_compressed_field_with_numpy_and_zstandard_alone(tmp_path):
    pytest.importorskip("zstandard", reason="compressed fields need the zstd extra: pip install 'memmap-replay[zstd]'")
    images = np.random.default_rng(0).integers(0, 4, size=(7, 210, 160, 3), dtype=np.uint8)
    images[3] = np.random.default_rng(1).integers(0, 256, size=(210, 160, 3))  # noise: a frame of raw blocks
    buffer = ReplayBuffer(tmp_path / "store", max_episodes=2, max_timesteps=10,
                          fields=dict(image=dict(dtype="uint8", shape=(210, 160, 3), codec="zstd")))
    buffer.store_episode(image=images)
    buffer.close()
    doc = fmt.__doc__
    block = doc[doc.index("    import numpy as np, zstandard"): doc.index("\nEdits (3.0)")]
    source = "\n".join(line[4:] for line in block.splitlines())
    scope = {"folder": str(tmp_path / "store")}
    exec(compile(source, "the spec's example", "exec"), scope)
    np.testing.assert_array_equal(scope["first_episode"], images)
