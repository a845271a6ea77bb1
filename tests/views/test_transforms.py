"""Batch transforms (views.transforms): values of the built-ins, transform= on every view and loader, in
DataLoader workers under fork and spawn, and their errors."""

import json
import os

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from memmap_replay import InvalidDataError, OptionError, ReplayBuffer, ShardSet
from memmap_replay.views.transforms import Compose, NumpyTransform, RandomShift, Rearrange, ToFloat

IMAGE = (3, 6, 5)  # channels, height, width (not square: rows and columns must not be mixed up)


# ---- module-level transforms: spawned workers import them by name -------------------------------------

class RecordProcess:
    """Adds ``_pid`` (where the batch was transformed) and ``_keys_seen`` (how many keys it had)."""

    def __call__(self, batch):
        size = len(next(iter(batch.values())))
        batch["_pid"] = torch.full((size,), os.getpid(), dtype=torch.int64)
        return batch


class KeysSeen:
    """Records the names the transform received (in the main process)."""

    def __init__(self):
        self.seen = []

    def __call__(self, batch):
        self.seen.append(sorted(batch))
        return batch


class ShiftWithOffsets(RandomShift):
    """A RandomShift that also outputs the offsets it drew (``_offsets`` (B, 2))."""

    def offsets(self, batch_size):
        drawn = super().offsets(batch_size)
        self.last = drawn
        return drawn

    def __call__(self, batch):
        batch = super().__call__(batch)
        batch["_offsets"] = self.last.clone()
        return batch


def double_reward(batch):
    batch["reward"] = batch["reward"] * 2
    return batch


def numpy_flip(batch):
    return {**batch, "image": batch["image"][..., ::-1]}


# ---- a tiny image store ------------------------------------------------------------------------------

def image_buffer(folder, episodes=4, length=6, seed=0):
    buffer = ReplayBuffer(folder, max_episodes=8, max_timesteps=10,
                          fields=dict(image=("uint8", IMAGE), reward="float", goal=("float", 2), achieved=("float", 2)))
    rng = np.random.default_rng(seed)
    for number in range(episodes):
        buffer.store_episode(image=rng.integers(0, 256, (length, *IMAGE), dtype=np.uint8),
                             reward=np.arange(length, dtype=np.float32) + 100 * number,
                             goal=rng.random((length, 2)), achieved=rng.random((length, 2)), end="terminated")
    return buffer


@pytest.fixture
def images(tmp_path):
    buffer = image_buffer(tmp_path / "images")
    yield buffer
    buffer.close()


def close_reward(achieved, goal):
    return -np.linalg.norm(achieved - goal, axis=-1)


def crop_offset(padded, out, pad):
    """The (dy, dx) in [0, 2 pad] at which ``out`` (..., H, W) is a crop of ``padded``, else None."""
    height, width = out.shape[-2:]
    for dy in range(2 * pad + 1):
        for dx in range(2 * pad + 1):
            if torch.equal(padded[..., dy:dy + height, dx:dx + width], out):
                return dy, dx
    return None


# ---- ToFloat ------------------------------------------------------------------------------------------

def test_to_float_scales_uint8_to_unit_interval_exactly():
    values = np.array([0, 1, 51, 128, 254, 255], dtype=np.uint8)
    batch = {"image": torch.from_numpy(values.reshape(2, 3, 1, 1)), "_key": torch.arange(2)}
    out = ToFloat("image")(batch)
    assert out["image"].dtype == torch.float32
    expected = (values.astype(np.float64) / 255).astype(np.float32).reshape(2, 3, 1, 1)
    assert np.array_equal(out["image"].numpy(), expected)
    assert out["image"].min() == 0 and out["image"].max() == 1
    assert torch.equal(out["_key"], torch.arange(2))  # other keys untouched


def test_to_float_normalizes_per_channel_and_in_any_leading_shape():
    rng = np.random.default_rng(1)
    raw = rng.integers(0, 256, (4, 2, 3, 5, 5), dtype=np.uint8)  # (B, T, C, H, W)
    mean, std = (0.5, 0.25, 0.0), (0.5, 0.25, 2.0)
    out = ToFloat("image", mean=mean, std=std, dtype=torch.float64)({"image": torch.from_numpy(raw)})["image"]
    expected = (raw / 255 - np.array(mean)[:, None, None]) / np.array(std)[:, None, None]
    assert out.dtype == torch.float64
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-12)
    last = ToFloat("image", mean=mean, channel_dim=-1)({"image": torch.from_numpy(raw.transpose(0, 1, 3, 4, 2))})
    np.testing.assert_allclose(last["image"].numpy(),
                               (raw / 255 - np.array(mean)[:, None, None]).transpose(0, 1, 3, 4, 2),
                               rtol=1e-6, atol=1e-6)


def test_to_float_from_stats_pools_per_channel(images):
    transform = ToFloat.from_stats(images.stats(["image"]), "image")
    stored = images.get_all_data(fields="image", meta_fields=())["image"].numpy()
    frames = stored.reshape(-1, *IMAGE).astype(np.float64) / 255  # every episode is 6 steps: no padding
    np.testing.assert_allclose(transform.mean, frames.mean(axis=(0, 2, 3)), rtol=1e-9)
    np.testing.assert_allclose(transform.std, frames.std(axis=(0, 2, 3)), rtol=1e-9)
    batch = images.dataset(timestep_level=True, transform=transform).__getitems__(np.arange(24))
    np.testing.assert_allclose(batch["image"].mean(dim=(0, 2, 3)).numpy(), 0, atol=1e-5)


def test_to_float_from_stats_takes_per_channel_and_stats_json(images):
    """The per-channel statistics of buffer.stats, a loaded stats.json (per channel (C, 1, 1), nulls as NaN) and
    a plain {'mean': [...], 'std': [...]} per channel all give the same transform as pooling per pixel."""
    stats = images.stats(["image"])
    assert stats.fields["image"].layout == "CHW" and stats.fields["image"].channels.mean.shape == (3,)
    reference = ToFloat.from_stats(stats, "image")
    per_pixel = stats.fields["image"]
    pooled = ToFloat.from_stats({"image": {"mean": per_pixel.mean, "std": per_pixel.std}}, "image")
    loaded = ToFloat.from_stats(json.loads(json.dumps(stats.to_lerobot())), "image")
    channels = per_pixel.channels
    plain = ToFloat.from_stats({"image": {"mean": channels.mean.tolist(), "std": channels.std.tolist()}}, "image")
    for made in (pooled, loaded, plain):
        np.testing.assert_allclose(made.mean, reference.mean, rtol=1e-12)
        np.testing.assert_allclose(made.std, reference.std, rtol=1e-12)


@pytest.mark.parametrize("entry, match", [
    ({"mean": [1.0, 2.0]}, r"statistics of 'image' must have numeric 'mean' and 'std'"),
    ({"mean": [1.0, 2.0], "std": [1.0]}, r"mean and std of one shape .* \(got \(2,\) and \(1,\)\)"),
    ({"mean": [None, 2.0], "std": [1.0, 1.0]}, r"statistics of 'image' are not finite"),
    ({"mean": [[1.0, 2.0]], "std": [[1.0, 1.0]]}, r"no channel axis -3; pass channel_dim="),
])
def test_to_float_from_stats_refuses_unusable_statistics(entry, match):
    with pytest.raises(OptionError, match=match):
        ToFloat.from_stats({"image": entry}, "image")


# ---- RandomShift --------------------------------------------------------------------------------------

def test_random_shift_crops_the_padded_image_at_each_items_own_offset():
    pad, size = 2, 16
    images = torch.rand(size, *IMAGE, generator=torch.Generator().manual_seed(0))
    out = RandomShift("image", pad=pad, seed=7)({"image": images.clone()})["image"]
    assert out.shape == images.shape and out.is_contiguous()
    padded = F.pad(images, (pad,) * 4, mode="replicate")
    found = [crop_offset(padded[item], out[item], pad) for item in range(size)]
    assert None not in found
    assert found == [tuple(pair) for pair in RandomShift("image", pad=pad, seed=7).offsets(size).tolist()]
    assert len(set(found)) > 1  # items draw their own offsets


def test_random_shift_same_seed_same_shifts_and_one_shift_over_time():
    pad = 3
    frames = torch.randint(0, 256, (8, 4, *IMAGE), dtype=torch.uint8, generator=torch.Generator().manual_seed(2))
    first, again = RandomShift("obs", pad=pad, seed=11), RandomShift("obs", pad=pad, seed=11)
    a = [first({"obs": frames})["obs"] for _ in range(2)]
    b = [again({"obs": frames})["obs"] for _ in range(2)]
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], a[1])  # the sequence goes on
    assert a[0].dtype == torch.uint8 and a[0].shape == frames.shape
    padded = F.pad(frames.reshape(8, -1, *IMAGE[1:]).float(), (pad,) * 4, mode="replicate").reshape(8, 4, 3, 12, 11)
    for item in range(8):
        offsets = {crop_offset(padded[item, t], a[0][item, t].float(), pad) for t in range(4)}
        assert len(offsets) == 1 and None not in offsets  # the same shift for every frame of an item


def test_random_shift_shifts_named_fields_together_and_pad_zero_is_identity():
    image = torch.rand(5, *IMAGE, generator=torch.Generator().manual_seed(3))
    out = RandomShift(("a", "b"), pad=2, seed=0)({"a": image.clone(), "b": image.clone()})
    assert torch.equal(out["a"], out["b"])
    assert torch.equal(RandomShift("a", pad=0)({"a": image})["a"], image)


# ---- Rearrange, Compose, NumpyTransform ---------------------------------------------------------------

def test_rearrange_compose_and_numpy_transform():
    raw = torch.arange(2 * 3 * 4 * 5, dtype=torch.uint8).reshape(2, 3, 4, 5)
    out = Rearrange("image", "b c h w -> b h w c")({"image": raw})
    assert torch.equal(out["image"], raw.permute(0, 2, 3, 1))
    split = Rearrange("image", "b (c k) h w -> b c k h w", k=1)({"image": raw})["image"]
    assert split.shape == (2, 3, 1, 4, 5)
    both = Compose([ToFloat("image"), Rearrange("image", "b c h w -> b h w c")])({"image": raw})
    assert torch.equal(both["image"], raw.permute(0, 2, 3, 1).float() / 255)
    flipped = NumpyTransform(numpy_flip)({"image": raw, "_key": torch.arange(2)})
    assert torch.equal(flipped["image"], raw.flip(-1)) and torch.equal(flipped["_key"], torch.arange(2))


# ---- transform= on views and loaders ------------------------------------------------------------------

VIEW_OPTIONS = [dict(), dict(timestep_level=True), dict(window=3), dict(n_steps=2),
                dict(hindsight=dict(goal_field="goal", achieved_field="achieved", reward_fn=close_reward))]


@pytest.mark.parametrize("options", VIEW_OPTIONS, ids=["trajectory", "timestep", "window", "n_step", "hindsight"])
def test_every_view_applies_its_transform_last_after_the_renames(images, options):
    seen = KeysSeen()
    view = images.dataset(fieldname_map={"reward": "r"}, transform=Compose(seen, ToFloat("image")), **options)
    batch = view.__getitems__(np.arange(3))
    assert batch["image"].dtype == torch.float32 and batch["image"].max() <= 1
    assert "r" in seen.seen[0] and "reward" not in seen.seen[0]
    assert view[0]["image"].dtype == torch.float32  # one item: the batch of one


def test_a_sampler_batch_runs_the_views_transform_with_key_and_weight(images):
    seen = KeysSeen()
    sampler = images.sampler("prioritized", seed=0, transform=seen)
    batch = sampler.batch(4)
    assert {"_key", "_weight", "image"} <= set(seen.seen[0]) and "_key" in batch


def test_dataloader_transform_and_collate_fn_leave_the_users_view_alone(images):
    view = images.dataset(timestep_level=True)
    for keyword in ("transform", "collate_fn"):
        loader = images.dataloader(4, dataset=view, **{keyword: double_reward})
        batch = next(iter(loader))
        assert torch.equal(batch["reward"], view.__getitems__(np.arange(4))["reward"] * 2)
        assert view.transform is None and loader.dataset is not view
    built = next(iter(images.dataloader(4, timestep_level=True, collate_fn=double_reward)))
    assert torch.equal(built["reward"], batch["reward"])


def test_sampler_dataloader_transform_copies_the_samplers_view(images):
    sampler = images.sampler("uniform", seed=1)
    loader = sampler.dataloader(4, num_batches=2, transform=ToFloat("image"))
    assert [batch["image"].dtype for batch in loader] == [torch.float32] * 2
    assert sampler.view.transform is None and sampler.batch(2)["image"].dtype == torch.uint8


def test_shard_concat_view_transforms_the_merged_batch(tmp_path):
    for index in range(2):
        image_buffer(tmp_path / "shards" / f"shard-{index:06d}", episodes=2, seed=index).close()
    shards = ShardSet(tmp_path / "shards")
    seen = KeysSeen()
    view = shards.dataset(timestep_level=True, transform=seen)
    batch = view.__getitems__(np.array([0, 20, 1]))  # items of both shards: one call of the transform
    assert len(seen.seen) == 1 and len(batch["reward"]) == 3
    loader = shards.dataloader(5, timestep_level=True, collate_fn=ToFloat("image"))
    assert {batch["image"].dtype for batch in loader} == {torch.float32}
    sampled = shards.sampler("uniform", seed=0, transform=ToFloat("image")).batch(6)
    assert sampled["image"].dtype == torch.float32 and len(sampled["_key"]) == 6
    shards.close()


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_transforms_run_in_the_dataloader_workers(images, context):
    transform = Compose(ToFloat("image"), ShiftWithOffsets("image", pad=2, seed=5), RecordProcess())
    options = dict(timestep_level=True, transform=transform, num_workers=2, multiprocessing_context=context)

    def run():
        generator = torch.Generator().manual_seed(9)
        return list(images.dataloader(3, generator=generator, **options))

    batches = run()
    assert {batch["image"].dtype for batch in batches} == {torch.float32}
    pids = {int(batch["_pid"][0]) for batch in batches}
    assert len(pids) == 2 and os.getpid() not in pids  # both workers transformed, the main process did not
    by_worker = {int(batch["_pid"][0]): batch["_offsets"] for batch in batches[:2]}  # batch 0 -> worker 0, 1 -> 1
    first, second = by_worker.values()
    assert not torch.equal(first, second)  # each worker draws its own shifts
    again = run()
    assert all(torch.equal(a["_offsets"], b["_offsets"]) and torch.equal(a["image"], b["image"])
               for a, b in zip(batches, again))  # the same loader seed, the same shifts


@pytest.mark.parametrize("workers", ["processes", "threads"])
@pytest.mark.parametrize("shift_seed", [5, None])
def test_the_loader_seed_makes_random_shifts_repeat_in_every_kind_of_worker(images, workers, shift_seed):
    """With workers='processes' the loader's seed= did not seed the workers: torch drew their seeds from its
    global RNG, so RandomShift (seeded or not) drew new shifts in each run; threads repeated."""
    transform = RandomShift("image", pad=2, seed=shift_seed)

    def run(global_seed):
        torch.manual_seed(global_seed)  # torch's global RNG differs between the runs: the loader's seed decides
        loaders = [images.dataloader(3, timestep_level=True, shuffle=True, seed=4, transform=transform,
                                     num_workers=2, workers=workers),
                   images.sampler("uniform", seed=4).dataloader(3, num_batches=4, transform=transform,
                                                                num_workers=2, workers=workers)]
        return [batch["image"] for loader in loaders for _ in range(2) for batch in loader]

    first, again = run(1), run(2)
    assert len(first) == len(again) > 8
    assert all(torch.equal(a, b) for a, b in zip(first, again))


def test_main_process_loader_runs_the_transform_here(images):
    batches = list(images.dataloader(8, timestep_level=True, transform=RecordProcess()))
    assert {int(batch["_pid"][0]) for batch in batches} == {os.getpid()}


# ---- errors -------------------------------------------------------------------------------------------

def test_view_and_loader_option_errors(images):
    with pytest.raises(OptionError, match="transform must be a callable"):
        images.dataset(timestep_level=True, transform="ToFloat")
    with pytest.raises(OptionError, match="collate_fn must be a callable"):
        images.dataloader(4, timestep_level=True, collate_fn=3)
    with pytest.raises(OptionError, match="not both"):
        images.dataloader(4, timestep_level=True, transform=double_reward, collate_fn=double_reward)
    view = images.dataset(timestep_level=True, transform=double_reward)
    with pytest.raises(OptionError, match="has a transform already"):
        images.dataloader(4, dataset=view, transform=ToFloat("image"))
    with pytest.raises(OptionError, match="transform must be a callable"):
        images.sampler("uniform", seed=0).dataloader(4, num_batches=1, transform=[double_reward])


def test_a_transform_must_return_a_dict_of_tensors(images):
    view = images.dataset(timestep_level=True, transform=lambda batch: list(batch))
    with pytest.raises(InvalidDataError, match="returned a list"):
        view.__getitems__([0, 1])
    view = images.dataset(timestep_level=True, transform=lambda batch: {**batch, "x": np.zeros(2)})
    with pytest.raises(InvalidDataError, match="returned 'x' as a ndarray.*torch.as_tensor"):
        view.__getitems__([0, 1])
    with pytest.raises(InvalidDataError, match="numeric numpy arrays"):
        NumpyTransform(lambda batch: {"x": np.array(["a"], dtype=object)})({"image": torch.zeros(1)})
    with pytest.raises(InvalidDataError, match="must return a dict"):
        NumpyTransform(lambda batch: None)({"image": torch.zeros(1)})


def test_missing_fields_are_named_with_the_batchs_keys(images):
    view = images.dataset(timestep_level=True, fieldname_map={"image": "obs"}, transform=ToFloat("image"))
    with pytest.raises(OptionError, match=r"transforms \['image'\].*its keys are \['achieved', 'goal', 'obs'"):
        view.__getitems__([0])
    with pytest.raises(OptionError, match="RandomShift transforms"):
        RandomShift("pixels")({"image": torch.zeros(1, 1, 2, 2)})


@pytest.mark.parametrize("make, match", [
    (lambda: ToFloat(()), "non-empty tuple/list of names"),
    (lambda: ToFloat(("a", "a")), "distinct"),
    (lambda: ToFloat("a", scale=0), "scale must be a finite number > 0"),
    (lambda: ToFloat("a", mean="grey"), "mean must be a number or a sequence"),
    (lambda: ToFloat("a", mean=[[0.5]]), "mean must be a number or a sequence"),
    (lambda: ToFloat("a", std=(1, 0, 1)), "std must be > 0"),
    (lambda: ToFloat("a", mean=(1, 2), std=(1, 2, 3)), "one value per channel each"),
    (lambda: ToFloat("a", dtype=torch.uint8), "floating torch dtype"),
    (lambda: ToFloat("a", channel_dim=1), "channel_dim must be a negative int"),
    (lambda: ToFloat.from_stats(None, "a"), "stats must be buffer.stats"),
    (lambda: ToFloat.from_stats(None, "a", mean=0), "from_stats computes mean and std"),
    (lambda: RandomShift("a", pad=-1), "pad must be an int >= 0"),
    (lambda: RandomShift("a", pad=1.5), "pad must be an int >= 0"),
    (lambda: RandomShift("a", seed=-1), "seed must be an int >= 0"),
    (lambda: Rearrange("a", "b c h w"), "pattern must be an einops pattern"),
    (lambda: Rearrange("a", "b c -> b c", c=0), "axis length c= must be a positive int"),
    (lambda: Compose(), "at least one transform"),
    (lambda: Compose(double_reward, 3), "Compose's transform 1 must be a callable"),
    (lambda: NumpyTransform(None), "NumpyTransform's fn must be a callable"),
])
def test_construction_errors(make, match):
    with pytest.raises(OptionError, match=match):
        make()


def test_call_errors_name_the_field_and_shape():
    image = torch.zeros(2, 3, 4, 4, dtype=torch.uint8)
    with pytest.raises(OptionError, match="'image' of shape \\(2, 3, 4, 4\\) has 3 channels"):
        ToFloat("image", mean=(0.5, 0.5))({"image": image})
    with pytest.raises(OptionError, match="float32 already; pass scale=1"):
        ToFloat("image")({"image": image.float()})
    assert ToFloat("image", scale=1, mean=0.5)({"image": image.float()})["image"].min() == -0.5
    with pytest.raises(OptionError, match="needs images"):
        RandomShift("r")({"r": torch.zeros(4, 2)})
    with pytest.raises(OptionError, match="share the leading batch axis"):
        RandomShift(("a", "b"))({"a": image, "b": image[:1]})
    with pytest.raises(OptionError, match="does not fit field 'image' of shape"):
        Rearrange("image", "b t c h w -> b t h w c")({"image": image})
    with pytest.raises(OptionError, match="takes a batch dict"):
        ToFloat("image")([image])


def test_from_stats_refuses_a_constant_channel(tmp_path):
    with ReplayBuffer(tmp_path / "flat", max_episodes=2, max_timesteps=4,
                      fields=dict(image=("uint8", (2, 2, 2)))) as buffer:
        buffer.store_episode(image=np.full((3, 2, 2, 2), 7, dtype=np.uint8))
        with pytest.raises(OptionError, match="constant in some channel"):
            ToFloat.from_stats(buffer.stats(["image"]), "image")
        with pytest.raises(OptionError, match="statistics of \\['image'\\]"):
            ToFloat.from_stats(buffer.stats(["image"]), "depth")
