"""What the viewer's page costs to open on a big store (issue 18): 100,000 episodes by default.

The store: ``--episodes`` episodes of 1 to 50 steps (about 25 on average), step fields ``obs`` uint8
(8, 8, 3), ``action`` float32 (2,), ``reward`` float32; meta field ``task`` int; written in commits of
5,000 episodes, running statistics kept (as a writer keeps them). Then a viewer server is started on a free
loopback port and, from a fresh server each time (nothing cached), timed with ``http.client``:

- the first request, ``GET /``: time to first byte (the server opens the store and reads its episode
  table and every episode's return, so this is the price of the first look) and bytes;
- then the page's first data: ``/api/state``, ``/api/overview``, ``/api/episodes`` (the first table page,
  25 rows), ``/api/stats``, and the static scripts: time to first byte and bytes each, and the sum;
- then warm table queries (sort by return, filter, the last page) and one episode with a frame; and the
  first table page as the first request of another fresh server (it then pays for summing the returns);
- with Playwright and Chromium (``--browser``, the default when both are there): the page opened in
  headless Chromium on a fresh server: time until the table is drawn, and the bytes of every response.

    python benchmarks/viewer.py              # 100,000 episodes (about 2.5 M steps, 0.5 GB; a minute or two)
    python benchmarks/viewer.py --quick      # 2,000 episodes: a smoke run
"""

from __future__ import annotations

import argparse
import http.client
import shutil
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import numpy as np

from memmap_replay import ReplayBuffer, view
from memmap_replay.core.writer import whole_episode

STATIC = ("/static/viewer.css", "/static/base.js", "/static/plots.js", "/static/overview.js", "/static/table.js",
          "/static/episode.js", "/static/viewer.js")
FIRST_DATA = ("/api/state", "/api/overview", "/api/episodes?offset=0&limit=25&sort=id&order=asc", "/api/stats")


def make_store(folder: Path, episodes: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 51, episodes)
    with ReplayBuffer(folder, max_episodes=episodes, max_timesteps=50, max_steps=int(lengths.sum()) + episodes,
                      fields=dict(obs=("uint8", (8, 8, 3)), action=("float32", (2,)), reward="float32"),
                      meta_fields=dict(task="int")) as buffer:
        for first in range(0, episodes, 5000):
            batch = []
            for e in range(first, min(episodes, first + 5000)):
                n = int(lengths[e])
                batch.append(whole_episode(buffer.schema, 50, dict(
                    obs=np.full((n, 8, 8, 3), e % 251, np.uint8), action=rng.normal(size=(n, 2)).astype(np.float32),
                    reward=rng.normal(e / episodes, 1, n).astype(np.float32), task=e % 10),
                    end=("terminated", "truncated")[e % 2]))
            buffer.episode_store.commit(batch)
    return folder


def timed_get(url: str, path: str) -> tuple[float, float, int, int]:
    """(time to first byte, total time, body bytes, status) of one GET on a new connection."""
    parts = urlsplit(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=600)
    start = time.perf_counter()
    connection.request("GET", path)
    response = connection.getresponse()
    first = time.perf_counter() - start
    body = response.read()
    total = time.perf_counter() - start
    connection.close()
    return first, total, len(body), response.status


def row(label: str, first: float, total: float, size: int) -> None:
    print(f"  {label:<58} {first * 1000:9.1f} ms {total * 1000:9.1f} ms {size / 1024:9.1f} KB")


def measure_http(folder: Path) -> None:
    print(f"  {'request (a fresh server: nothing cached)':<58} {'first byte':>12} {'complete':>12} {'body':>12}")
    with view(folder, block=False) as server:
        sums = [0.0, 0]
        for path in ("/", *FIRST_DATA, *STATIC):
            first, total, size, status = timed_get(server.url, path)
            assert status == 200, (path, status)
            row(path, first, total, size)
            sums[0] += total
            sums[1] += size
        print(f"  {'all of the above, one after the other':<58} {'':>12} {sums[0] * 1000:9.1f} ms "
              f"{sums[1] / 1024:9.1f} KB")
        print("  warm (the same server):")
        for path in ("/api/episodes?sort=return&order=desc&limit=25",
                     "/api/episodes?filter=task%3D3&filter=length%3E%3D40&limit=25",
                     "/api/episodes?offset=99975&limit=25", "/api/episode?id=12345",
                     "/api/frame?field=obs&id=12345&t=0"):
            first, total, size, status = timed_get(server.url, path)
            row(path + ("" if status == 200 else f" ({status})"), first, total, size)
    with view(folder, block=False) as server:  # the table first: it pays for reading the returns
        first, total, size, status = timed_get(server.url, FIRST_DATA[2])
        row("the table page first, on another fresh server", first, total, size)


def measure_browser(folder: Path) -> None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("  (no playwright: pip install playwright)")
        return
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).is_file():
        print("  (no chromium: apt-get install chromium)")
        return
    with view(folder, block=False) as server, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        page = browser.new_page()
        sizes: list[int] = []
        page.on("requestfinished", lambda request: sizes.append(request.sizes()["responseBodySize"]))
        start = time.perf_counter()
        page.goto(server.url)
        page.wait_for_selector("#episodes-table tbody tr")
        table = time.perf_counter() - start
        page.wait_for_selector("#stats-table thead", timeout=600_000)
        stats = time.perf_counter() - start
        page.wait_for_timeout(200)
        print(f"  headless Chromium, a fresh server: table drawn after {table * 1000:.0f} ms, statistics after "
              f"{stats * 1000:.0f} ms; {len(sizes)} responses, {sum(sizes) / 1024:.1f} KB in all")
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=100_000)
    parser.add_argument("--quick", action="store_true", help="2,000 episodes: a smoke run")
    parser.add_argument("--folder", type=Path, default=None, help="scratch folder (default: a temporary one)")
    parser.add_argument("--no-browser", action="store_true")
    args = parser.parse_args()
    episodes = 2000 if args.quick else args.episodes
    scratch = Path(tempfile.mkdtemp(prefix="viewer-bench-", dir=args.folder))
    try:
        start = time.perf_counter()
        folder = make_store(scratch / "store", episodes)
        with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
            steps = buffer.num_steps
        print(
            f"Viewer figures: {episodes:,} episodes, {steps:,} steps (written in {time.perf_counter() - start:.1f} s)")
        measure_http(folder)
        if not args.no_browser:
            measure_browser(folder)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
