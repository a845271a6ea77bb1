"""RandomShift's two paths: numpy for CPU tensors, torch's gathers for the rest (gradients, devices)."""

import torch

from memmap_replay.views.augment import RandomShift, _shifted_by_torch


def test_the_torch_path_equals_the_numpy_path():
    generator = torch.Generator().manual_seed(0)
    shift = RandomShift("image", pad=3)
    for shape in [(5, 3, 7, 9), (4, 2, 3, 6, 6), (3, 1, 2, 2)]:
        value = torch.randint(0, 255, shape, generator=generator, dtype=torch.uint8)
        offsets = torch.randint(0, 7, (shape[0], 2), generator=generator)
        assert torch.equal(shift.shifted("image", value, offsets), _shifted_by_torch(value, offsets, 3))


def test_a_tensor_needing_gradients_keeps_them():
    value = torch.rand(4, 3, 8, 8, requires_grad=True)
    out = RandomShift("image", pad=2, seed=1)({"image": value})["image"]
    assert out.requires_grad and out.shape == value.shape
    out.sum().backward()
    assert value.grad is not None and float(value.grad.sum()) == 4 * 3 * 8 * 8


def test_empty_images_come_back_as_they_are():
    for shape in [(0, 3, 8, 8), (4, 0, 8, 8), (4, 3, 0, 8)]:
        value = torch.zeros(shape, dtype=torch.uint8)
        assert RandomShift("image", pad=2)({"image": value})["image"].shape == shape
