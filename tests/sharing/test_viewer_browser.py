"""The viewer's page in a real browser: headless Chromium (Debian's ``chromium``) driven by Playwright,
against a server on a free loopback port. Skipped, saying why, without Playwright or Chromium (the server
tests in test_viewer.py still run). Screenshots go to each test's temporary folder."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memmap_replay import ReplayBuffer, update_card, view

from viewer_stores import add_episode, browser, make_pixel_store, picture, readme_screenshots, stack_of

pytest.importorskip("PIL.Image")

# the pixels of an <img> as the browser decoded them (drawn into a canvas at its natural size)
READ_PIXELS = """(img) => {
  const canvas = document.createElement('canvas');
  canvas.width = img.naturalWidth; canvas.height = img.naturalHeight;
  const context = canvas.getContext('2d');
  context.drawImage(img, 0, 0);
  return [canvas.width, canvas.height, Array.from(context.getImageData(0, 0, canvas.width, canvas.height).data)];
}"""


@pytest.fixture(scope="module")
def chromium():
    with browser() as launched:
        yield launched


class Page:
    """A browser tab on a viewer server; records console errors and uncaught exceptions."""

    def __init__(self, chromium, server, shots, *, bypass_csp: bool = False):
        self.server, self.shots = server, shots
        self.tab = chromium.new_page(viewport={"width": 1200, "height": 900}, bypass_csp=bypass_csp)
        self.errors: list[str] = []
        self.tab.on("console", lambda message: message.type == "error" and self.errors.append(message.text))
        self.tab.on("pageerror", lambda error: self.errors.append(str(error)))

    def open(self, hash_: str = "") -> "Page":
        self.tab.goto(self.server.url + hash_)
        self.tab.wait_for_selector("body[data-ready='1']")
        return self

    def shot(self, name: str) -> None:
        self.tab.screenshot(path=str(self.shots / f"{name}.png"), full_page=True)

    def column(self, index: int) -> list[str]:
        return self.tab.eval_on_selector_all(f"#episodes-table tbody tr td:nth-child({index + 1})",
                                             "(cells) => cells.map((cell) => cell.textContent)")

    def frame(self, field: str = "obs") -> np.ndarray:
        image = f"img.frame[data-field='{field}']"
        self.tab.wait_for_function(f"() => document.querySelector(\"{image}\").complete")
        width, height, data = self.tab.eval_on_selector(image, READ_PIXELS)
        return np.array(data, np.uint8).reshape(height, width, 4)[..., :3]

    def wait_step(self, step: int) -> None:
        self.tab.wait_for_function(f"() => document.getElementById('step-label').dataset.step === '{step}'")
        self.tab.wait_for_function("() => [...document.querySelectorAll('img.frame')].every((img) => img.complete "
                                   f"&& new URL(img.src).searchParams.get('t') === '{step}')")


@pytest.fixture
def folder(tmp_path):
    return make_pixel_store(tmp_path / "pixels", episodes=30, max_episodes=40)


@pytest.fixture
def page(chromium, folder, tmp_path):
    with view(folder, block=False) as server:
        opened = Page(chromium, server, tmp_path)
        yield opened
        opened.tab.close()
    assert not opened.errors, f"the page logged errors: {opened.errors}"


def stored_returns(folder) -> np.ndarray:
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        return np.array([e["reward"].astype(np.float64).sum() for e in buffer.episodes()])


def test_the_overview_loads_with_every_episode_in_the_table(page):
    page.open()
    tab = page.tab
    tab.select_option("#page-size", "100")
    tab.wait_for_function("() => document.querySelectorAll('#episodes-table tbody tr').length === 30")
    assert page.column(0) == [str(i) for i in range(30)]
    assert tab.text_content("#count-episodes") == "30" and tab.text_content("#count-terminated") == "15"
    assert tab.get_attribute("#table-count", "data-total") == "30"
    assert tab.locator("#curve-return path.line").count() == 1 and tab.locator("#histogram-length rect.bar").count() > 1
    tab.wait_for_selector("#stats-table thead")
    assert "reward" in tab.text_content("#stats-table")
    page.shot("overview")


def test_sorting_filtering_and_paging(page, folder):
    returns = stored_returns(folder)
    page.open()
    tab = page.tab
    tab.select_option("#page-size", "50")
    tab.click("button.sort[data-column='return']")
    tab.wait_for_selector("th[aria-sort='ascending'] button[data-column='return']")
    tab.click("button.sort[data-column='return']")
    tab.wait_for_selector("th[aria-sort='descending'] button[data-column='return']")
    assert page.column(0) == [str(i) for i in np.argsort(-returns, kind="stable")]
    tab.fill("#filter", "length >= 14, seed < 120")
    tab.press("#filter", "Enter")
    expected = [i for i in np.argsort(-returns, kind="stable") if 10 + i % 7 >= 14 and 100 + i < 120]
    tab.wait_for_function(f"() => document.getElementById('table-count').dataset.matched === '{len(expected)}'")
    assert page.column(0) == [str(i) for i in expected]
    tab.select_option("#end-filter", "terminated")
    expected = [i for i in expected if i % 2]
    tab.wait_for_function(f"() => document.getElementById('table-count').dataset.matched === '{len(expected)}'")
    assert page.column(0) == [str(i) for i in expected] and set(page.column(3)) == {"terminated"}
    page.shot("sorted-filtered")
    tab.fill("#filter", "")
    tab.select_option("#end-filter", "")
    tab.click("button.sort[data-column='id']")
    tab.select_option("#page-size", "10")
    tab.wait_for_function("() => document.querySelectorAll('#episodes-table tbody tr').length === 10")
    tab.click("#next-page")
    tab.wait_for_function("() => document.querySelector('#episodes-table tbody td').textContent === '10'")
    assert page.column(0) == [str(i) for i in range(10, 20)]
    tab.fill("#filter", "colour > 3")
    tab.press("#filter", "Enter")
    tab.wait_for_selector("#error:not([hidden])")
    assert "names no column" in tab.text_content("#error")
    page.errors = [e for e in page.errors if "400" not in e]  # the browser logs the failed fetch itself


def test_an_episode_shows_the_stored_frames_and_the_slider_drives_frames_and_plots(page):
    page.open()
    page.tab.click("a.episode-link[href='#/episode/3']")
    tab = page.tab
    tab.wait_for_selector("#timeline")
    page.wait_step(0)
    np.testing.assert_array_equal(page.frame(), picture(3, 0))
    np.testing.assert_array_equal(page.frame("stack")[..., 0], stack_of(3, 0)[-1])
    cursor = "svg[data-field='reward'] line.cursor"
    x0 = float(tab.get_attribute(cursor, "x1"))
    tab.eval_on_selector("#timeline", "(el) => { el.value = 5; el.dispatchEvent(new Event('input')); }")
    page.wait_step(5)
    np.testing.assert_array_equal(page.frame(), picture(3, 5))
    assert tab.get_attribute(cursor, "data-step") == "5" and float(tab.get_attribute(cursor, "x1")) > x0
    assert tab.get_attribute("svg[data-field='action'] line.cursor", "data-step") == "5"
    tab.keyboard.press("ArrowRight")
    page.wait_step(6)
    np.testing.assert_array_equal(page.frame(), picture(3, 6))
    tab.keyboard.press("End")  # the final observation: the timeline's last position
    page.wait_step(13)
    np.testing.assert_array_equal(page.frame(), picture(3, 13))
    assert "final observation" in tab.text_content("#step-label")
    box = tab.locator("svg[data-field='reward']").bounding_box()  # a click on a plot seeks to the step under it

    def click_step(step: int) -> None:  # the plot's area: 52 to 630 of 640 units wide; episode 3's steps 0 to 12
        tab.mouse.click(box["x"] + (52 + step / 12 * 578) / 640 * box["width"], box["y"] + box["height"] / 2)

    click_step(8)  # (a seek to 0, or to the end, would not do)
    page.wait_step(8)
    assert tab.input_value("#timeline") == "8"
    np.testing.assert_array_equal(page.frame(), picture(3, 8))
    click_step(0)
    page.wait_step(0)
    assert tab.input_value("#timeline") == "0"
    tab.select_option("select.stack[data-field='stack']", "tile")
    page.wait_step(0)
    np.testing.assert_array_equal(page.frame("stack")[..., 0], np.concatenate(list(stack_of(3, 0)), axis=1))
    tab.click("#play")
    tab.wait_for_function("() => Number(document.getElementById('step-label').dataset.step) >= 3")
    tab.click("#play")
    assert "play" in tab.text_content("#play")
    page.shot("episode")


def test_an_episode_says_its_end_meta_and_links_back(page):
    page.open("#/episode/4")
    tab = page.tab
    tab.wait_for_selector("#episode-facts")
    facts = tab.text_content("#episode-facts")
    assert "truncated" in facts and "not stored" in facts
    assert tab.text_content("#episode-facts div:has(dt:text-is('meta: seed')) dd") == "104"
    tab.click("#next-episode")
    tab.wait_for_selector("#episode-view[data-episode='5']")
    tab.click("text=← all episodes")
    tab.wait_for_selector("#overview-view:not([hidden])")
    page.open("#/episode/999")
    tab.wait_for_selector("#episode-problem")
    assert "episode id 999 is not in the store" in tab.text_content("#episode-problem")
    page.errors = [e for e in page.errors if "404" not in e]


def test_a_live_writer_s_new_episode_appears_without_a_reload(page, folder):
    page.open()
    tab = page.tab
    tab.evaluate("window.__same_page = true")
    tab.click("button.sort[data-column='id']")  # (sorted by id already) newest first
    tab.wait_for_selector("th[aria-sort='descending'] button[data-column='id']")
    with ReplayBuffer.from_folder(folder) as buffer:
        add_episode(buffer, 30, np.random.default_rng(5))
    tab.wait_for_function("() => document.getElementById('count-episodes').textContent === '31'", timeout=15_000)
    tab.wait_for_function("() => document.querySelector('#episodes-table tbody td').textContent === '30'")
    assert tab.get_attribute("#table-count", "data-total") == "31" and tab.evaluate("window.__same_page") is True
    page.shot("live")


def test_a_ring_writer_s_evictions_are_followed_without_a_reload(chromium, tmp_path):
    """A ring store: the writer's new episodes evict the oldest; the table shows the live ones only."""
    folder = make_pixel_store(tmp_path / "ring", episodes=4, max_episodes=4, circular=True)
    with view(folder, block=False) as server:
        opened = Page(chromium, server, tmp_path).open()
        tab = opened.tab
        tab.evaluate("window.__same_page = true")
        assert opened.column(0) == ["0", "1", "2", "3"]
        with ReplayBuffer.from_folder(folder) as buffer:
            rng = np.random.default_rng(5)
            for e in range(4, 7):
                add_episode(buffer, e, rng)
        tab.wait_for_function("() => [...document.querySelectorAll('#episodes-table tbody tr td:first-child')]"
                              ".map((td) => td.textContent).join(',') === '3,4,5,6'", timeout=15_000)
        assert tab.text_content("#count-episodes") == "4" and tab.evaluate("window.__same_page") is True
        tab.click("a.episode-link[href='#/episode/5']")
        tab.wait_for_selector("#timeline")
        opened.wait_step(0)
        np.testing.assert_array_equal(opened.frame(), picture(5, 0))
        tab.close()
    assert not opened.errors, opened.errors


@pytest.mark.parametrize("bypass_csp", [False, True], ids=["with-csp", "without-csp"])
def test_a_card_with_markup_renders_as_text(chromium, tmp_path, bypass_csp):
    """As text, whether or not the Content-Security-Policy is there to stop a script (escaping alone holds)."""
    folder = make_pixel_store(tmp_path / "xss", episodes=2)
    description = "<script>window.__xss = 2</script><b>bold?</b><img src=x onerror=\"window.__xss = 1\">"
    update_card(folder, name="evil/xss-v0", description=description, license="<i>MIT</i>",
                author=["<script>window.__xss = 3</script>"])
    with view(folder, block=False) as server:
        page = Page(chromium, server, tmp_path, bypass_csp=bypass_csp).open()
        tab = page.tab
        assert tab.text_content("#card-description") == description
        assert "<i>MIT</i>" in tab.text_content("#card")
        assert "<script>window.__xss = 3</script>" in tab.text_content("#card")
        assert tab.evaluate("() => window.__xss") is None
        assert tab.locator("#card img, #card script, #card b, #card i").count() == 0
        page.shot(f"xss-card-{bypass_csp}")
        # a stranger's card.json the library would not write: its name is refused, and said as text
        name = '<img src=x onerror="window.__xss = 4">'
        (folder / "card.json").write_text(json.dumps({"name": name, "description": description}))
        page.open()
        tab.wait_for_selector("#card .problem")
        assert name in tab.text_content("#card .problem") and tab.evaluate("() => window.__xss") is None
        assert tab.locator("#card img").count() == 0
        tab.close()
    assert not page.errors, page.errors


def test_an_empty_store_without_images_or_rewards(chromium, tmp_path):
    with ReplayBuffer(tmp_path / "empty", max_episodes=4, max_timesteps=5, fields=dict(state=("float", 3))) as buffer:
        with view(buffer.folder, block=False) as server:
            page = Page(chromium, server, tmp_path).open()
            tab = page.tab
            assert tab.text_content("#count-episodes") == "0"
            assert "no episode matches" in tab.text_content("#episodes-table")
            buffer.store_episode(state=np.ones((3, 3)))  # the first one appears, and has no frames to show
            tab.wait_for_function("() => document.getElementById('count-episodes').textContent === '1'", timeout=15_000)
            tab.click("a.episode-link")
            tab.wait_for_selector("svg[data-field='state']")
            assert "no image field" in tab.text_content("#episode-view")
            tab.keyboard.press("ArrowRight")
            tab.wait_for_function("() => document.getElementById('step-label').dataset.step === '1'")
            assert tab.get_attribute("svg[data-field='state'] line.cursor", "data-step") == "1"
            page.shot("empty-then-one")
            tab.close()
    assert not page.errors, page.errors


def test_a_damaged_store_shows_an_error_page(chromium, tmp_path):
    folder = make_pixel_store(tmp_path / "damaged", episodes=2)
    with view(folder, block=False) as server:
        (folder / "meta.json").write_text("{")
        page = Page(chromium, server, tmp_path)
        page.tab.goto(server.url)
        assert "meta.json" in page.tab.text_content("#error-message")
        assert page.tab.locator("h1").text_content().startswith("503")
        page.shot("damaged")
        page.tab.close()


def test_a_recorded_pixel_env_plays_with_synced_plots(chromium, tmp_path):
    """The issue's "done when": a gymnasium env recorded with RecordEpisodes, its overview, table and a
    playing episode whose frame and plot cursors show the same step."""
    pytest.importorskip("gymnasium")
    from viewer_stores import record_pixel_env

    folder = record_pixel_env(tmp_path / "chase", episodes=4)
    with ReplayBuffer.from_folder(folder, read_only=True) as buffer:
        episode = buffer.episodes()[2]
    with view(folder, block=False) as server:
        page = Page(chromium, server, tmp_path).open()
        tab = page.tab
        assert tab.text_content("#card-name") == "examples/pixel-chase-v0" and page.column(0) == ["0", "1", "2", "3"]
        tab.click("a.episode-link[href='#/episode/2']")
        tab.wait_for_selector("svg[data-field='reward']")
        tab.click("#play")
        tab.wait_for_function("() => Number(document.getElementById('step-label').dataset.step) >= 4")
        tab.click("#play")
        step = int(tab.get_attribute("#step-label", "data-step"))
        page.wait_step(step)
        np.testing.assert_array_equal(page.frame("observation"), episode.observations("observation")[step])
        for field in ("reward", "action"):
            assert tab.get_attribute(f"svg[data-field='{field}'] line.cursor",
                                     "data-step") == str(min(step, len(episode) - 1))
        page.shot("recorded-env")
        tab.close()
    assert not page.errors, page.errors


def test_the_readme_screenshots(chromium, tmp_path):
    pytest.importorskip("gymnasium")
    shots = readme_screenshots(tmp_path / "viewer.png", work=tmp_path, launched=chromium)
    for shot in shots:
        assert shot.is_file() and 5_000 < shot.stat().st_size < 200_000, shot


def test_values_a_few_ulps_apart_are_plotted(chromium, tmp_path):
    """A per-step value ranging over a few ulps (0.3 and 0.1 + 0.2): the ticks' loop (v += step) never
    advanced and the page hung."""
    folder = tmp_path / "ulps"
    with ReplayBuffer(folder, max_episodes=4, max_timesteps=10,
                      fields=dict(reward="float64", value="float64")) as buffer:
        buffer.store_episode(reward=np.full(10, 0.1), value=np.array([0.3, 0.1 + 0.2] * 5), end="terminated")
        buffer.store_episode(reward=np.array([0.7] + [0.1] * 3 + [0.0] * 6), value=np.ones(10), end="terminated")
    with view(folder, block=False) as server:
        opened = Page(chromium, server, tmp_path)
        opened.tab.set_default_timeout(15000)
        try:
            opened.open()
            assert opened.tab.locator("#overview-view svg.plot").count() >= 2
            opened.tab.evaluate("location.hash = '#/episode/0'")
            opened.tab.wait_for_selector("#episode-view svg.plot[aria-label]")
            paths = opened.tab.eval_on_selector_all("#episode-view svg.plot path.line",
                                                    "(p) => p.map((x) => x.getAttribute('d'))")
            assert len(paths) >= 2 and all(path.count("L") == 9 for path in paths), paths
            assert opened.tab.evaluate("1 + 1") == 2
        finally:
            opened.tab.close(run_before_unload=False)
    assert not opened.errors, opened.errors
