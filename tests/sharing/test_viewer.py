"""The viewer's server (memmap_replay.sharing.viewer) over urllib, against a server on a free loopback port:
the page and its assets, the JSON answers against the stored values, frames against the stored pixels,
paging/sorting/filtering, live refresh, and safety (GET only, Host check, no paths, damaged stores)."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from memmap_replay import OptionError, ReplayBuffer, StoreNotFoundError, update_card, view
from memmap_replay.sharing.viewer import api as api_module
from memmap_replay.sharing.viewer.pictures import LruBytes, image_fields, plot_fields
from memmap_replay.sharing.viewer.server import _ASSETS, asset
from memmap_replay.sharing.viewer.table import EpisodeColumns, parse_filter

from viewer_stores import add_episode, make_pixel_store, many_episodes, picture, stack_of

Image = pytest.importorskip("PIL.Image")


@pytest.fixture
def folder(tmp_path):
    return make_pixel_store(tmp_path / "pixels", episodes=6)


@pytest.fixture
def server(folder):
    with view(folder, block=False) as running:
        yield running


def get(server, path: str, *, headers: dict | None = None, method: str = "GET"):
    """(status, headers, body) of a request to the server."""
    request = urllib.request.Request(server.url + path.lstrip("/"), headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def get_json(server, path: str):
    status, headers, body = get(server, path)
    assert headers["Content-Type"] == "application/json", (status, body[:300])
    return status, json.loads(body)


def stored(folder: Path):
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        return list(buffer.episodes())


# ---- the page --------------------------------------------------------------------------------------


def test_the_page_and_its_assets_are_served_with_a_strict_policy(server):
    for path, (name, kind) in _ASSETS.items():
        status, headers, body = get(server, path)
        assert status == 200 and headers["Content-Type"] == kind and body == asset(name)
        assert "default-src 'self'" in headers["Content-Security-Policy"]
        assert headers["X-Content-Type-Options"] == "nosniff"
    page = asset("index.html").decode()
    for script in re.findall(r'src="([^"]+)"', page) + re.findall(r'href="(/static/[^"]+)"', page):
        assert script in _ASSETS, script  # every script and sheet the page names is served


def test_nothing_comes_from_the_network():
    """No CDN, no fonts from elsewhere: the only URL in the assets is the SVG namespace."""
    for name, _ in _ASSETS.values():
        text = asset(name).decode()
        assert set(re.findall(r"https?://[^\s\"'`)]+", text)) <= {"http://www.w3.org/2000/svg"}, name
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text and "document.write" not in text, name


def test_the_assets_are_package_data():
    text = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    assert '"sharing/viewer/assets/*"' in text
    shipped = {path.name for path in (Path(api_module.__file__).parent / "assets").iterdir()}
    assert shipped == {name for name, _ in _ASSETS.values()} | {"report.js"}  # (the static report's own script)


def test_head_and_only_get(server):
    status, headers, body = get(server, "/", method="HEAD")
    assert status == 200 and body == b"" and int(headers["Content-Length"]) == len(asset("index.html"))
    for method in ("POST", "PUT", "DELETE", "PATCH"):
        status, headers, body = get(server, "/api/state", method=method)
        assert status == 405 and headers["Allow"] == "GET, HEAD" and b"read-only" in body


def test_a_request_for_another_host_is_refused(server):
    status, _, body = get(server, "/api/state", headers={"Host": "evil.example:80"})
    assert status == 403 and b"Host" in body
    assert get(server, "/api/state", headers={"Host": f"localhost:{server.port}"})[0] == 200


def test_loopback_names_are_answered_whatever_the_port(server):
    """A browser through ``ssh -L 8080:127.0.0.1:PORT`` sends ``Host: localhost:8080``: it was refused, as was
    ``127.0.0.1`` with no port."""
    for host in ("localhost:8080", "LOCALHOST:8080", "127.0.0.1", "localhost", "[::1]", "[::1]:8080",
                 "127.0.0.1:80"):
        assert get(server, "/api/state", headers={"Host": host})[0] == 200, host
    for host in ("evil.example", "evil.example:8080", f"evil.example:{server.port}", "localhost.evil.example:8080",
                 "localhost:8080x", "localhost:", "127.0.0.1:8080:1", "evil.localhost:8080", "[::1]x", ""):
        status, _, body = get(server, "/api/state", headers={"Host": host})
        assert status == 403 and b"Host header" in body, host


def test_unknown_paths_are_404_pages_and_never_files(server):
    for path in ("/etc/passwd", "/static/../server.py", "/static/api.py", "/meta.json", "/%2e%2e/meta.json"):
        status, headers, body = get(server, path)
        assert status == 404 and headers["Content-Type"].startswith("text/html"), path
        assert b"Traceback" not in body and b"store_id" not in body


# ---- overview, statistics, state ---------------------------------------------------------------------


def test_overview_says_counts_ends_card_and_curves(folder, server):
    update_card(folder, name="test/pixels-v0", license="MIT", description="made <b>here</b>")
    status, data = get_json(server, "/api/overview")
    episodes = stored(folder)
    assert status == 200 and data["episodes"] == 6 and data["steps"] == sum(map(len, episodes))
    assert data["ends"] == {"terminated": 3, "truncated": 3, "not recorded": 0}
    assert data["card"]["name"] == "test/pixels-v0" and data["card"]["description"] == "made <b>here</b>"
    assert {f["name"]: f["kind"] for f in data["fields"]} == {"obs": "image", "stack": "image", "action": "plot",
                                                              "reward": "plot"}
    assert data["series"]["length"]["mean"] == [len(e) for e in episodes]
    returns = [float(e["reward"].astype(np.float64).sum()) for e in episodes]
    np.testing.assert_allclose(data["series"]["return"]["mean"], returns, rtol=1e-4)  # 5 digits: a plot's
    assert sum(data["histograms"]["return"]["counts"]) == 6


def test_a_long_curve_is_binned():
    ids = np.arange(10_500)
    values = np.arange(10_500, dtype=np.float64)
    series = api_module._series(ids, values)
    assert series["binned"] == 11 and len(series["x"]) == len(series["mean"]) <= 1000
    assert series["min"][0] == 0 and series["max"][0] == 10 and series["mean"][0] == 5
    assert series["max"][-1] == 10_499  # the last, partial bin


def test_stats_table(server):
    status, data = get_json(server, "/api/stats")
    rows = {row["name"]: row for row in data["fields"]}
    assert status == 200 and rows["reward"]["shape"] == [] and rows["action"]["shape"] == [2]
    assert len(rows["action"]["mean"]) == 2 and isinstance(rows["obs"]["mean"], float)


def test_an_empty_store_without_rewards(tmp_path):
    with ReplayBuffer(tmp_path / "empty", max_episodes=4, max_timesteps=5, fields=dict(state=("float", 3))):
        pass
    with view(tmp_path / "empty", block=False) as running:
        assert get(running, "/")[0] == 200
        status, data = get_json(running, "/api/overview")
        assert status == 200 and data["episodes"] == 0 and data["return_field"] is None
        assert data["series"] == {"length": {"x": [], "mean": [], "min": None, "max": None, "binned": 1}}
        assert data["histograms"]["length"] == {"edges": [], "counts": []}
        page = get_json(running, "/api/episodes")[1]
        assert page["columns"] == ["id", "length", "end"] and page["rows"] == [] and page["total"] == 0
        assert get_json(running, "/api/stats")[0] == 200


def test_ipv6_loopback(folder):
    try:
        running = view(folder, host="::1", block=False)
    except OSError as error:  # a machine without IPv6
        pytest.skip(f"no IPv6 loopback here: {error}")
    with running:
        assert running.url.startswith("http://[::1]:") and get(running, "/api/state")[0] == 200


def test_a_writer_appending_is_followed(folder, server):
    assert get_json(server, "/api/state")[1]["episodes"] == 6
    with ReplayBuffer.from_folder(folder) as buffer:
        add_episode(buffer, 6, np.random.default_rng(3))
        state = get_json(server, "/api/state")[1]
        assert state["episodes"] == 7 and state["next"] == 7
        page = get_json(server, "/api/episodes?sort=id&order=desc&limit=1")[1]
        assert page["total"] == 7 and page["rows"][0][0] == 6


# ---- the episodes table ------------------------------------------------------------------------------


def test_paging_sorting_filtering(folder, server):
    episodes = stored(folder)
    returns = np.array([e["reward"].astype(np.float64).sum() for e in episodes])
    status, page = get_json(server, "/api/episodes?offset=2&limit=3")
    assert status == 200 and page["columns"] == ["id", "length", "return", "end", "seed"]
    assert [row[0] for row in page["rows"]] == [2, 3, 4] and page["total"] == page["matched"] == 6
    page = get_json(server, "/api/episodes?sort=return&order=desc&limit=50")[1]
    assert [row[0] for row in page["rows"]] == np.argsort(-returns, kind="stable").tolist()
    page = get_json(server, "/api/episodes?filter=length%3E%3D12&filter=end%20%3D%20terminated")[1]
    assert [row[0] for row in page["rows"]] == [3, 5] and page["matched"] == 2 and page["total"] == 6
    page = get_json(server, "/api/episodes?filter=seed%20!%3D%20101&sort=length&order=desc")[1]
    assert [row[0] for row in page["rows"]] == [5, 4, 3, 2, 0]


@pytest.mark.parametrize("query, message", [
    ("filter=color>1", "names no column"), ("filter=length>>1", "compared with a number"),
    ("filter=end<terminated", "end is compared"), ("sort=speed", "sort must be one of"),
    ("limit=0", r"limit must be in \[1, 500\]"), ("offset=-1", "offset must be at least 0"),
    ("limit=ten", "'limit' must be a whole number"),
])
def test_bad_table_queries_say_what_fits(server, query, message):
    status, data = get_json(server, f"/api/episodes?{query}")
    assert status == 400 and re.search(message, data["error"]), data


def test_filters_parse_and_refuse():
    columns = ("id", "length", "return", "end", "seed")
    assert parse_filter(" return <= -1.5 ", columns).value == -1.5
    assert parse_filter("end = none", columns).value == ""
    with pytest.raises(OptionError, match="must be COLUMN OP VALUE"):
        parse_filter("length", columns)
    with pytest.raises(OptionError, match="the columns are id, length"):
        parse_filter("lenght > 3", columns)


def test_descending_sort_keeps_ties_in_episode_order_and_nan_last():
    columns = EpisodeColumns.__new__(EpisodeColumns)
    columns.columns, columns.ids = ("id", "return"), np.arange(5)
    columns.values = {"id": np.arange(5), "return": np.array([1.0, np.nan, 2.0, 1.0, 2.0])}
    assert [r[0] for r in columns.query(sort="return", descending=True)["rows"]] == [2, 4, 0, 3, 1]
    assert [r[0] for r in columns.query(sort="return")["rows"]] == [0, 3, 2, 4, 1]


def test_a_table_of_many_episodes_pages_without_reading_rows(tmp_path):
    """10,000 episodes: a page is 50 rows of JSON, whatever the store holds."""
    many_episodes(tmp_path / "many", 10_000, image=False)
    with view(tmp_path / "many", block=False) as running:
        status, _, body = get(running, "/api/episodes?sort=return&order=desc&filter=task%3D1&limit=50")
        page = json.loads(body)
        assert status == 200 and page["matched"] == 2500 and len(page["rows"]) == 50 and len(body) < 5000
        assert all(row[2] == 4 * (1 + row[0] % 3) for row in page["rows"])


# ---- one episode and its frames ----------------------------------------------------------------------


def test_an_episode_has_its_values_meta_end_and_final(folder, server):
    episode = stored(folder)[3]
    status, data = get_json(server, "/api/episode?id=3")
    assert status == 200 and data["length"] == len(episode) and data["end"] == "terminated" and data["final"]
    assert (data["previous"], data["next"]) == (2, 4) and get_json(server, "/api/episode?id=0")[1]["previous"] is None
    assert data["meta"] == {"seed": 103}
    plots = {plot["name"]: plot["values"] for plot in data["plots"]}
    np.testing.assert_allclose(plots["action"], episode["action"].T.astype(np.float64))
    np.testing.assert_allclose(plots["reward"], [episode["reward"].astype(np.float64)])
    images = {image["name"]: image for image in data["images"]}
    assert images["obs"]["frames"] == len(episode) + 1 and images["stack"]["stack"] == 4
    assert data["final_values"]["action"] == [0, 0]


def test_an_episode_plots_the_priorities_a_sampler_persisted(folder):
    pytest.importorskip("torch")
    with ReplayBuffer.from_folder(folder) as buffer:
        sampler = buffer.sampler("prioritized", seed=0)
        batch = sampler.batch(8)
        keys = np.asarray(batch["_key"])
        sampler.update_priorities(keys, np.arange(1.0, 9.0))
        sampler.close()
    with view(folder, block=False) as running:
        found = {}
        for e in range(6):
            plots = {plot["name"]: plot["values"][0] for plot in get_json(running, f"/api/episode?id={e}")[1]["plots"]}
            found.update({(e, t): value for t, value in enumerate(plots["priority (steps)"])})
    assert sorted(value for value in found.values() if value != 1.0) == sorted(set(np.arange(1.0, 9.0)) - {1.0})


@pytest.mark.parametrize("query, status, message", [
    ("id=99", 404, "episode id 99 is not in the store"), ("id=x", 400, "'id' must be a whole number"),
    ("", 400, "'id' must be a whole number"),
])
def test_an_unknown_episode(server, query, status, message):
    got, data = get_json(server, f"/api/episode?{query}")
    assert got == status and message in data["error"]


def png_pixels(body: bytes) -> np.ndarray:
    return np.asarray(Image.open(io.BytesIO(body)).convert("RGB"))


def test_a_frame_is_the_stored_pixels(server):
    for e, t in ((0, 0), (3, 7), (5, 12)):
        status, headers, body = get(server, f"/api/frame?field=obs&id={e}&t={t}")
        assert status == 200 and headers["Content-Type"] == "image/png"
        np.testing.assert_array_equal(png_pixels(body), picture(e, t))
    final = png_pixels(get(server, "/api/frame?field=obs&id=3&t=13")[2])  # t = length: the final observation
    np.testing.assert_array_equal(final, picture(3, 13))
    newest = png_pixels(get(server, "/api/frame?field=stack&id=2&t=4")[2])
    np.testing.assert_array_equal(newest[..., 0], stack_of(2, 4)[-1])
    tiled = png_pixels(get(server, "/api/frame?field=stack&id=2&t=4&stack=tile")[2])
    np.testing.assert_array_equal(tiled[..., 1], np.concatenate(list(stack_of(2, 4)), axis=1))


def test_frames_are_cached(server):
    first = get(server, "/api/frame?field=obs&id=1&t=2")[2]
    assert len(server.api.frames) == 1 and get(server, "/api/frame?field=obs&id=1&t=2")[2] == first
    cache = LruBytes(entries=2, nbytes=10)
    for key in "abc":
        cache.put(key, b"1234")
    assert len(cache) == 2 and cache.get("a") is None and cache.get("c") == b"1234"
    cache.put("d", b"0123456789")
    assert len(cache) == 1


@pytest.mark.parametrize("query, status, message", [
    ("field=../../meta.json&id=1&t=0", 400, "must be one of the image fields"),
    ("field=action&id=1&t=0", 400, "must be one of the image fields"),
    ("field=obs&id=0&t=10", 404, r"step must be in \[0, 10\)"),
    ("field=obs&id=1&t=-1", 404, "step must be in"),
    ("field=obs&id=1&t=0&stack=all", 400, "stack must be 'last' or 'tile'"),
    ("field=obs&id=42&t=0", 404, "episode id 42 is not in the store"),
])
def test_bad_frame_requests(server, query, status, message):
    got, data = get_json(server, f"/api/frame?{query}")
    assert got == status and re.search(message, data["error"]), data


def test_evicted_episodes_are_gone(tmp_path):
    folder = make_pixel_store(tmp_path / "ring", episodes=4, max_episodes=4, circular=True)
    with view(folder, block=False) as running:
        assert get(running, "/api/frame?field=obs&id=0&t=0")[0] == 200
        with ReplayBuffer.from_folder(folder) as buffer:
            add_episode(buffer, 4, np.random.default_rng(0))
        status, data = get_json(running, "/api/episode?id=0")
        assert status == 404 and "live ids are 1 to 4" in data["error"]


def test_field_kinds():
    from memmap_replay import Schema

    schema = Schema.parse(dict(obs=("uint8", (3, 64, 64)), tiny=("uint8", (4, 4)), atari=("uint8", (4, 84, 84)),
                               vec=("float", 16), big=("float", 17), name=("complex64", ())))
    assert sorted(image_fields(schema)) == ["atari", "obs"] and image_fields(schema)["atari"]["stack"] == 4
    assert plot_fields(schema) == ("tiny", "vec")


# ---- stores that cannot be shown ---------------------------------------------------------------------


def test_not_a_store_is_said_at_once(tmp_path):
    with pytest.raises(StoreNotFoundError, match="no store at"):
        view(tmp_path / "nothing", block=False)


def test_a_damaged_store_is_an_error_page(tmp_path):
    folder = make_pixel_store(tmp_path / "x<b>damaged</b>", episodes=2)
    with view(folder, block=False) as running:
        (folder / "meta.json").write_text('{"format": "memmap_replay", "version": [1, 0], "schema": 3}')
        status, headers, body = get(running, "/")
        text = body.decode()
        assert status == 503 and headers["Content-Type"].startswith("text/html") and "Traceback" not in text
        assert "x&lt;b&gt;damaged&lt;/b&gt;" in text and "<b>damaged" not in text
        status, data = get_json(running, "/api/overview")
        assert status == 503 and "meta.json" in data["error"]


def test_a_damaged_card_is_said_and_the_rest_shown(folder, server):
    (folder / "card.json").write_text("{not json")
    status, data = get_json(server, "/api/overview")
    assert status == 200 and data["card"] is None and "card.json is not valid JSON" in data["card_error"]


def test_the_viewer_imports_no_torch():
    code = ("import sys, memmap_replay; memmap_replay.view; import memmap_replay.sharing.viewer; "
            "print('torch' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr


@pytest.mark.parametrize("episodes", [2, 3, 5])
def test_returns_a_few_ulps_apart_make_one_histogram_bin(tmp_path, episodes):
    """Ten rewards of 0.1 summed in different orders differ in the last bits: np.histogram refused the range."""
    folder = tmp_path / "ulps"
    with ReplayBuffer(folder, max_episodes=episodes, max_timesteps=10, fields=dict(reward="float64")) as buffer:
        for _ in range(episodes):
            buffer.store_episode(reward=np.full(10, 0.1), end="truncated")
    with view(folder, block=False) as running:
        status, overview = get_json(running, "/api/overview")
    assert status == 200, overview
    histogram = overview["histograms"]["return"]
    assert sum(histogram["counts"]) == episodes and histogram["edges"][0] <= 1.0 <= histogram["edges"][-1]
    assert all(a < b for a, b in zip(histogram["edges"], histogram["edges"][1:]))


def test_histogram_edges_and_counts():
    values = np.array([0.0, 1.0, 2.0, 3.0, 3.0])
    histogram = api_module._histogram(values)
    assert len(histogram["edges"]) == 31 and histogram["edges"][0] == 0.0 and histogram["edges"][-1] == 3.0
    assert sum(histogram["counts"]) == 5 and histogram["counts"][0] == 1 and histogram["counts"][-1] == 2
    assert np.array_equal(histogram["counts"], np.histogram(values, bins=30)[0])
    assert api_module._histogram(np.array([2.0, 2.0])) == {"edges": [1.5, 2.5], "counts": [2]}
    assert api_module._histogram(np.array([-1e308, 1e308]))["counts"] == [2]


def _store_id(folder: Path) -> str:
    return json.loads((folder / "meta.json").read_text())["store_id"]


def test_frames_and_assets_are_checked_again_and_name_their_store(tmp_path):
    """Frames were kept an hour by the browser under a URL naming no store: a store served later on the same
    port showed the first one's pictures. Now: no-cache, an ETag of the store and the bytes, the store in the URL."""
    tags = []
    for name, episodes in (("a", 2), ("b", 3)):
        folder = make_pixel_store(tmp_path / name, episodes=episodes)
        with view(folder, block=False) as running:
            store = _store_id(folder)
            status, data = get_json(running, "/api/episode?id=0")
            assert data["store"] == store and get_json(running, "/api/state")[1]["store"] == store
            status, headers, body = get(running, f"/api/frame?store={store}&field=obs&id=0&t=0")
            assert status == 200 and headers["Cache-Control"] == "no-cache" and store in headers["ETag"]
            tags.append(headers["ETag"])
            status, again, body = get(running, f"/api/frame?store={store}&field=obs&id=0&t=0",
                                      headers={"If-None-Match": headers["ETag"]})
            assert status == 304 and body == b"" and again["ETag"] == headers["ETag"]
            status, data = get_json(running, "/api/frame?store=0123abcd&field=obs&id=0&t=0")
            assert status == 410 and "replaced by a new store" in data["error"]
            assert (store, 0, "obs", 0, 0, "last") in running.api.frames._items  # (0: the edits so far)
            for path in _ASSETS:
                status, headers, _ = get(running, path)
                assert headers["Cache-Control"] == "no-cache" and headers["ETag"], path
    assert tags[0] != tags[1]


def test_a_folder_overwritten_by_a_new_store_is_served_anew(tmp_path):
    """The viewer kept the old store (and its cached frames, returns and ranges) after an overwrite."""
    folder = tmp_path / "again"

    def make(value: int, reward: float):
        with ReplayBuffer(folder, max_episodes=4, max_timesteps=4, overwrite=True,
                          fields=dict(obs=("uint8", (8, 8, 3)), reward="float32")) as buffer:
            buffer.store_episode(obs=np.full((3, 8, 8, 3), value, np.uint8), reward=np.full(3, reward, np.float32))

    make(10, 1.0)
    with view(folder, block=False) as running:
        assert np.unique(png_pixels(get(running, "/api/frame?field=obs&id=0&t=0")[2])).tolist() == [10]
        assert get_json(running, "/api/episodes")[1]["rows"][0][2] == 3.0
        old = get_json(running, "/api/state")[1]["store"]
        make(200, 5.0)
        for _ in range(2):
            status, state = get_json(running, "/api/state")
            assert status == 200 and state["store"] == _store_id(folder) != old
            assert np.unique(png_pixels(get(running, "/api/frame?field=obs&id=0&t=0")[2])).tolist() == [200]
            assert get_json(running, "/api/episodes")[1]["rows"][0][2] == 15.0
            assert get_json(running, "/api/episode?id=0")[1]["plots"][0]["values"][0] == [5.0, 5.0, 5.0]
            assert get_json(running, "/api/overview")[1]["histograms"]["return"]["counts"] == [1]


def test_long_or_many_filters_are_refused_at_once(server):
    """A filter of 60,000 characters held the server ~40 s in a backtracking regular expression."""
    import time

    started = time.monotonic()
    status, data = get_json(server, "/api/episodes?filter=a" + "+" * 60000 + "x")
    assert status == 400 and "at most 200 characters (got 60002)" in data["error"], data
    status, data = get_json(server, "/api/episodes?" + "&".join(["filter=length%3E1"] * 17))
    assert status == 400 and "at most 16 filters at a time (got 17)" in data["error"], data
    for text in ("a" + " " * 198 + "x", "length<1" + " " * 190 + "x", "=" * 200, "<" * 200, " " * 199 + "!"):
        with pytest.raises(OptionError, match="must be COLUMN OP VALUE|names no column|compared with a number"):
            parse_filter(text, ("id", "length"))
    assert time.monotonic() - started < 5
    assert parse_filter("length<=3", ("id", "length")) == parse_filter(" length <= 3 ", ("id", "length"))
    assert parse_filter("id!=3", ("id",)).op == "!=" and parse_filter("id==3", ("id",)).op == "=="
    assert parse_filter("id>-3", ("id",)).value == -3.0



def test_meta_fields_named_like_a_column_keep_the_column(tmp_path):
    """A meta field 'length' or 'id' replaced the episode's own column in the table and the overview ('return'
    and 'end' cannot be meta field names)."""
    folder = tmp_path / "collide"
    with ReplayBuffer(folder, max_episodes=4, max_timesteps=8, fields=dict(reward="float32"),
                      meta_fields=dict(length="int", id="int")) as buffer:
        buffer.store_episode(reward=np.ones(5, np.float32), end="terminated", length=999, id=-7)
        buffer.store_episode(reward=np.ones(3, np.float32), length=998, id=-8)
    with view(folder, block=False) as running:
        status, table = get_json(running, "/api/episodes?sort=meta.id&filter=meta.length%3E0")
        assert status == 200, table
        assert table["columns"] == ["id", "length", "return", "end", "meta.length", "meta.id"]
        assert table["rows"] == [[1, 3, 3.0, "", 998, -8], [0, 5, 5.0, "terminated", 999, -7]]
        status, overview = get_json(running, "/api/overview")
        assert overview["series"]["length"]["mean"] == [5.0, 3.0] and overview["series"]["return"]["mean"] == [5.0, 3.0]
        assert overview["ends"]["terminated"] == 1 and overview["columns"] == table["columns"]
        assert get_json(running, "/api/episode?id=0")[1]["meta"] == {"length": 999, "id": -7}


def test_a_long_episode_s_series_are_min_and_max_per_bucket(tmp_path):
    """A 200,000-step episode was sent whole: 50 MB of JSON for the page to plot."""
    folder, steps = tmp_path / "long", 12_345
    values = np.random.default_rng(0).normal(size=(steps, 2)).astype(np.float32)
    with ReplayBuffer(folder, max_episodes=2, max_timesteps=steps, fields=dict(action=("float32", (2,)))) as buffer:
        buffer.store_episode(action=values)
        buffer.store_episode(action=values[:100])
    with view(folder, block=False) as running:
        data = get_json(running, "/api/episode?id=0")[1]
        assert get_json(running, "/api/episode?id=1")[1]["downsampled"] is None
    shrunk, series = data["downsampled"], data["plots"][0]["values"]
    assert shrunk["bucket"] == 5 and shrunk["points"] == len(shrunk["x"]) == len(series[0]) <= 5000
    assert shrunk["x"][:4] == [0, 4, 5, 9] and shrunk["x"][-1] == steps - 1
    buckets = values[:, 1].reshape(-1, 5).astype(np.float64)
    np.testing.assert_array_equal(series[1][0::2], buckets.min(1))
    np.testing.assert_array_equal(series[1][1::2], buckets.max(1))


def test_frames_above_the_bounds_are_413_and_a_float_range_reads_a_few_rows(tmp_path, monkeypatch):
    folder = tmp_path / "big"
    with ReplayBuffer(folder, max_episodes=1, max_timesteps=400, fields=dict(obs=("float32", (16, 16, 3)))) as buffer:
        buffer.store_episode(obs=np.broadcast_to(np.float32(0.5), (400, 16, 16, 3)))
    read = []
    real = api_module.peak
    monkeypatch.setattr(api_module, "peak", lambda rows: read.append(len(np.asarray(rows).reshape(-1))) or real(rows))
    with view(folder, block=False) as running:
        status, headers, body = get(running, "/api/frame?field=obs&id=0&t=3")
        assert status == 200 and np.unique(png_pixels(body)).tolist() == [128]
        assert sum(read) <= 16 * 16 * 16 * 3
        monkeypatch.setattr(api_module, "_MAX_FRAME_PIXELS", 255)
        status, headers, body = get(running, "/api/frame?field=obs&id=0&t=4")
        assert status == 413 and "too large to show (16 x 16 pixels" in json.loads(body)["error"], body
        assert headers["X-Content-Type-Options"] == "nosniff"


@pytest.mark.parametrize("path", ["/api/episode?id=" + "9" * 30, "/api/frame?field=obs&id=" + "9" * 30 + "&t=0",
                                  "/api/episodes?offset=" + "9" * 30, "/api/frame?field=obs&id=1&t=-" + "9" * 30])
def test_huge_numbers_are_400(server, path):
    """An id of 30 digits overflowed numpy's int64: a 500 OverflowError."""
    status, data = get_json(server, path)
    assert status == 400 and "is out of range" in data["error"], data


def test_a_file_cut_short_while_served_is_503(folder, server):
    """numpy's 'mmap length is greater than file size' was a 500 asking to report a bug."""
    assert get(server, "/api/state")[0] == 200
    os.truncate(folder / "steps" / "obs.npy", 200)
    status, data = get_json(server, "/api/frame?field=obs&id=1&t=0")
    assert status == 503 and "shorter than the" in data["error"] and "verify" in data["error"], data


def _ask(port: int, host_header: str) -> int:
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/state", headers={"Host": host_header})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code


def test_the_host_check_holds_on_every_address(folder):
    """Bound to 0.0.0.0 (or 127.0.0.2), any Host header was answered: a DNS-rebinding page could read the store."""
    with view(folder, block=False, host="0.0.0.0", allow_hosts=("Replays.Lab",)) as running:
        port = running.port
        assert _ask(port, f"attacker.example:{port}") == 403
        assert _ask(port, f"attacker.example:{port + 1}") == 403
        assert _ask(port, f"10.1.2.3:{port + 1}") == 403  # an address other than loopback: the server's port only
        assert _ask(port, f"127.0.0.1:{port + 1}") == 200  # loopback: any port (a tunnel's)
        for allowed in ("127.0.0.1", "localhost", "10.1.2.3", "[::1]", "replays.lab"):
            assert _ask(port, f"{allowed}:{port}") == 200, allowed
    try:
        running = view(folder, block=False, host="127.0.0.2")
    except OSError as error:
        pytest.skip(f"no 127.0.0.2 here: {error}")
    with running:
        request = urllib.request.Request(f"http://127.0.0.2:{running.port}/api/state",
                                         headers={"Host": f"attacker.example:{running.port}"})
        with pytest.raises(urllib.error.HTTPError, match="403"):
            urllib.request.urlopen(request, timeout=30)


def test_http_server_errors_have_the_security_headers(server):
    """501 (an unknown method) and 414 (a URL too long) came from http.server without CSP or nosniff."""
    for status, (path, method) in ((501, ("/", "TRACE")), (414, ("/" + "a" * 70000, "GET"))):
        got, headers, body = get(server, path, method=method)
        assert got == status and "default-src 'self'" in headers["Content-Security-Policy"], (got, headers)
        assert headers["X-Content-Type-Options"] == "nosniff" and b"memmap-replay view" in body


def test_edits_are_followed_removed_episodes_unlisted_and_a_trimmed_one_shown_as_trimmed(folder, server):
    """delete_episodes, trim and relabel change neither the first nor the next id: the state says the edit
    (the page reloads on it), the table leaves removed episodes out, and a trimmed episode's return and
    frames are its steps' now (the cached ones were of its old steps)."""
    assert get(server, "/api/frame?field=obs&id=2&t=0")[0] == 200  # cached, of the episode before the trim
    assert get_json(server, "/api/episodes?limit=50")[1]["total"] == 6  # returns summed before the trim
    before = get_json(server, "/api/state")[1]
    with ReplayBuffer.from_folder(folder) as buffer:
        buffer.delete_episodes([1, 4])
        buffer.trim(2, start=3)
        state = get_json(server, "/api/state")[1]
        assert (state["episodes"], state["first"], state["next"]) == (4, before["first"], before["next"])
        assert state["edits"] != before["edits"]
        page = get_json(server, "/api/episodes?limit=50")[1]
        assert [row[0] for row in page["rows"]] == [0, 2, 3, 5] and page["total"] == 4
        episodes = {episode.id: episode for episode in buffer.episodes()}
    row = next(row for row in page["rows"] if row[0] == 2)
    assert row[1] == 9 and np.isclose(row[2], episodes[2]["reward"].astype(np.float64).sum(), rtol=1e-6)
    assert np.array_equal(png_pixels(get(server, "/api/frame?field=obs&id=2&t=0")[2]), picture(2, 3))
    assert get_json(server, "/api/episode?id=1")[0] == 404
