"""Stores and a browser for the viewer's tests (tests/sharing/test_viewer*.py), and the README's screenshot.

- ``make_pixel_store``: episodes whose every frame is ``picture(e, t)`` (known pixels), a frame stack, an
  action and a reward per step, a ``seed`` meta value, ends alternating, final observations on odd ones.
- ``PixelChase``: a tiny pixel env (a red dot chasing a green one on 32 x 32 pixels), recorded with
  ``RecordEpisodes`` by a policy that improves over episodes: a learning curve to look at.
- ``browser()``: headless Chromium driven by Playwright, or ``pytest.skip`` saying what is missing.
- ``python tests/sharing/viewer_stores.py docs/viewer.png``: the README's screenshot, made by that browser
  over a recorded PixelChase store (``test_viewer_browser.py`` makes it into a temporary folder each run).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
from pathlib import Path

import numpy as np

from memmap_replay import ReplayBuffer

H, W, K = 16, 16, 4
CHROMIUM = os.environ.get("MEMMAP_REPLAY_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"


def picture(e: int, t: int) -> np.ndarray:
    """(H, W, 3) uint8, different per episode and step and never symmetric."""
    y, x = np.mgrid[0:H, 0:W]
    return np.stack([x * 15 + e * 9, y * 15 + t * 3, np.full((H, W), 250 - 7 * e - t)], axis=-1).astype(np.uint8)


def stack_of(e: int, t: int) -> np.ndarray:
    """(K, H - 4, W - 4) uint8: a frame stack whose newest frame is brightest."""
    return np.stack([picture(e, t)[2:-2, 2:-2, 1] // (K - j) for j in range(K)])


def make_pixel_store(folder: Path, episodes: int = 6, *, seed: int = 7, **kwargs) -> Path:
    """``episodes`` episodes of 10, 11, ... steps (see the module docstring); returns the folder."""
    rng = np.random.default_rng(seed)
    with ReplayBuffer(folder, max_episodes=kwargs.pop("max_episodes", max(8, episodes)), max_timesteps=40,
                      fields=dict(obs=("uint8", (H, W, 3)), stack=("uint8", (K, H - 4, W - 4)),
                                  action=("float32", (2,)), reward="float32"),
                      meta_fields=dict(seed="int"), **kwargs) as buffer:
        for e in range(episodes):
            add_episode(buffer, e, rng)
    return folder


def add_episode(buffer: ReplayBuffer, e: int, rng: np.random.Generator) -> int:
    length = 10 + e % 7
    final = e % 2 == 1
    return buffer.store_episode(
        obs=np.stack([picture(e, t) for t in range(length)]), stack=np.stack([stack_of(e, t) for t in range(length)]),
        action=rng.normal(size=(length, 2)).astype(np.float32), reward=rng.normal(size=length).astype(np.float32),
        seed=100 + e, end="terminated" if final else "truncated",
        final=dict(obs=picture(e, length), stack=stack_of(e, length)) if final else None)


def many_episodes(folder: Path, count: int, *, batch: int = 5000, image: bool = True) -> Path:
    """``count`` short episodes (1 to 3 steps; reward e % 5 a step; meta ``task`` = e % 4; a small image),
    committed ``batch`` at a time (one meta.json write per batch, not per episode)."""
    from memmap_replay.core.writer import whole_episode

    fields = dict(reward="float32", action=("float32", (2,)), **({"obs": ("uint8", (8, 8, 3))} if image else {}))
    with ReplayBuffer(folder, max_episodes=count, max_timesteps=3, fields=fields,
                      meta_fields=dict(task="int"), track_stats=False) as buffer:
        for first in range(0, count, batch):
            buffer.episode_store.commit([
                whole_episode(buffer.schema, 3, dict(reward=np.full(1 + e % 3, e % 5, np.float32),
                                                      action=np.zeros((1 + e % 3, 2), np.float32), task=e % 4,
                                                      **({"obs": np.full((1 + e % 3, 8, 8, 3), e % 256, np.uint8)}
                                                         if image else {})),
                              end=("terminated", "truncated", None)[e % 3])
                for e in range(first, min(count, first + batch))])
    return folder


# ---- a recorded pixel env ----------------------------------------------------------------------------

ENV_ID = "memmap_replay_tests/PixelChase-v0"


def pixel_chase_class():
    import gymnasium
    from gymnasium import spaces

    class PixelChase(gymnasium.Env):
        """A red dot (the agent) moves one pixel a step towards a green one; reward -0.01 a step, +1 on it."""

        metadata = {"render_modes": []}
        size = 32
        moves = np.array([[0, 0], [-1, 0], [1, 0], [0, -1], [0, 1]])

        def __init__(self):
            self.observation_space = spaces.Box(0, 255, (self.size, self.size, 3), np.uint8)
            self.action_space = spaces.Discrete(5)

        def _obs(self):
            image = np.zeros((self.size, self.size, 3), np.uint8)
            image[..., 2] = 40
            for (y, x), colour in ((self.goal, (40, 220, 90)), (self.agent, (230, 60, 50))):
                image[max(0, y - 1):y + 2, max(0, x - 1):x + 2] = colour
            return image

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            self.agent, self.goal = self.np_random.integers(2, self.size - 2, (2, 2))
            return self._obs(), {}

        def step(self, action):
            self.agent = np.clip(self.agent + self.moves[int(action)], 1, self.size - 2)
            done = bool(np.abs(self.agent - self.goal).max() <= 1)
            return self._obs(), 1.0 if done else -0.01, done, False, {}

    return PixelChase


def record_pixel_env(folder: Path, episodes: int = 40, *, seed: int = 0) -> Path:
    """``episodes`` episodes of PixelChase recorded into ``folder`` by a policy that errs less and less."""
    import gymnasium

    from memmap_replay.recording import RecordEpisodes

    if ENV_ID not in gymnasium.registry:
        gymnasium.register(ENV_ID, entry_point=pixel_chase_class(), max_episode_steps=60)
    rng = np.random.default_rng(seed)
    with RecordEpisodes(gymnasium.make(ENV_ID), folder) as env:
        for e in range(episodes):
            env.reset(seed=seed + e)
            explore, done = 0.9 * (1 - e / episodes), False
            while not done:
                inner = env.unwrapped
                dy, dx = np.sign(inner.goal - inner.agent)
                greedy = 1 if dy < 0 else 2 if dy > 0 else 3 if dx < 0 else 4
                action = int(rng.integers(5)) if rng.random() < explore else greedy
                _, _, terminated, truncated, _ = env.step(action)
                done = terminated or truncated
    from memmap_replay import update_card

    update_card(folder, name="examples/pixel-chase-v0", license="CC-BY-4.0",
                description="A red dot chasing a green one on 32 x 32 pixels, recorded by a policy that "
                            "explores less as it goes: returns rise over the episodes.")
    return folder


# ---- the browser -------------------------------------------------------------------------------------


@contextlib.contextmanager
def browser():
    """Headless Chromium through Playwright; skips the test (saying why) without either."""
    import pytest

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("the browser tests need Playwright's Python package: pip install playwright "
                    "(in the [test] extra)")
    if not Path(CHROMIUM).is_file():
        pytest.skip(f"the browser tests need Chromium at {CHROMIUM}: apt-get install chromium "
                    f"(or set MEMMAP_REPLAY_CHROMIUM to its path)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM,
                                              args=["--no-sandbox", "--force-color-profile=srgb"])
        try:
            yield launched
        finally:
            launched.close()


def readme_screenshots(out: Path, *, work: Path, launched) -> list[Path]:
    """The README's screenshots: ``out`` (an episode: frames, timeline, plots) and ``out``'s sibling
    ``<stem>-overview.png`` (the card, curves, table), over a recorded PixelChase store in ``work``."""
    from PIL import Image

    from memmap_replay import view

    folder = record_pixel_env(work / "pixel_chase", episodes=60)
    shots = [out, out.with_name(f"{out.stem}-overview{out.suffix}")]
    with view(folder, block=False) as server:
        page = launched.new_page(viewport={"width": 1100, "height": 780})
        page.goto(server.url)
        page.wait_for_selector("body[data-ready='1']")
        page.wait_for_selector("#stats-table thead")
        page.screenshot(path=str(shots[1]))
        page.goto(server.url + "#/episode/57")
        page.wait_for_selector("img.frame")
        page.wait_for_function("() => document.querySelector('img.frame').complete")
        for _ in range(9):
            page.keyboard.press("ArrowRight")
        page.wait_for_function("() => document.querySelector('img.frame').complete")
        page.screenshot(path=str(shots[0]))
        page.close()
    for shot in shots:  # a palette of 128 colours: a few tens of KB instead of a few hundred
        Image.open(shot).convert("RGB").quantize(128, method=Image.Quantize.FASTOCTREE).save(shot, optimize=True)
    return shots


if __name__ == "__main__":
    import tempfile

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/viewer.png")
    with tempfile.TemporaryDirectory() as temporary, browser() as launched:
        for path in readme_screenshots(target, work=Path(temporary), launched=launched):
            print(f"wrote {path} ({path.stat().st_size // 1024} KB)")
