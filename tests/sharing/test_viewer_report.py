"""The static report (memmap_replay.sharing.viewer.report, ``memmap-replay report``): one self-contained
HTML file whose data and thumbnails are the store's; opened from disk in Chromium when it is there."""

from __future__ import annotations

import base64
import html
import io
import json
import re

import numpy as np
import pytest

from memmap_replay import OptionError, StoreNotFoundError, update_card
from memmap_replay.cli import EXIT_OK, EXIT_USAGE, main
from memmap_replay.sharing.viewer.report import report

from viewer_stores import browser, make_pixel_store, picture

Image = pytest.importorskip("PIL.Image")
EVIL = "</script><script>window.__xss = 1</script><img src=x onerror=\"window.__xss = 2\">"


@pytest.fixture
def folder(tmp_path):
    folder = make_pixel_store(tmp_path / "pixels", episodes=9, max_episodes=10)
    update_card(folder, name="test/pixels-v0", description=EVIL)
    return folder


def embedded(path) -> dict:
    text = path.read_text(encoding="utf-8")
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S)
    return json.loads(match.group(1))


def test_a_report_is_self_contained_and_holds_the_store(folder, tmp_path):
    written = report(folder, tmp_path / "report.html", episodes=4, frames=5)
    text = written.path.read_text(encoding="utf-8")
    assert written.episodes == [0, 3, 5, 8] and written.field == "obs" and written.nbytes == len(text.encode())
    assert set(re.findall(r"https?://[^\s\"'`)<]+", text)) <= {"http://www.w3.org/2000/svg"}
    assert re.findall(r"<script[^>]*>", text) == ['<script type="application/json" id="report-data">', "<script>"]
    assert EVIL not in text and html.escape("test/pixels-v0") in text  # the card's text only inside the JSON, escaped
    data = embedded(written.path)
    assert data["overview"]["card"]["description"] == EVIL and data["overview"]["episodes"] == 9
    first = data["episodes"][0]
    assert first["row"][:2] == [0, 10] and [f["label"] for f in first["frames"]] == ["t 0", "t 2", "t 5", "t 7", "t 9"]
    pixels = np.asarray(Image.open(io.BytesIO(base64.b64decode(first["frames"][1]["src"].split(",", 1)[1]))))
    np.testing.assert_array_equal(pixels, picture(0, 2))
    assert data["episodes"][1]["frames"][-1]["label"] == "final"  # episode 3 has its final observation stored


def test_report_refusals(folder, tmp_path):
    with pytest.raises(OptionError, match="ending in .html"):
        report(folder, tmp_path / "report.txt")
    with pytest.raises(OptionError, match=r"must be one of the image fields \['obs', 'stack'\]"):
        report(folder, tmp_path / "report.html", field="reward")
    with pytest.raises(StoreNotFoundError, match="no store at"):
        report(tmp_path / "nothing", tmp_path / "report.html")
    assert not (tmp_path / "report.html").exists()


def test_the_report_command(folder, tmp_path, capsys):
    assert main(["report", str(folder), str(tmp_path / "r.html"), "--episodes", "2", "--field", "stack"]) == EXIT_OK
    assert "2 episodes with frames of 'stack'" in capsys.readouterr().out
    assert main(["report", str(tmp_path / "none"), str(tmp_path / "r.html")]) == EXIT_USAGE
    assert "no store at" in capsys.readouterr().err


def test_the_report_in_a_browser(folder, tmp_path):
    path = report(folder, tmp_path / "report.html", episodes=5).path
    with browser() as chromium:
        page = chromium.new_page(viewport={"width": 1200, "height": 900})
        errors = []
        page.on("console", lambda message: message.type == "error" and errors.append(message.text))
        page.on("pageerror", lambda error: errors.append(str(error)))
        page.goto(path.as_uri())
        page.wait_for_selector("body[data-ready='1']")
        assert page.locator("#episodes-table tbody tr").count() == 5
        assert page.locator("#episodes-table img").count() == 5 * 8
        assert page.text_content("#card-description") == EVIL and page.evaluate("() => window.__xss") is None
        assert page.locator("#card img, #card script").count() == 0
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
        page.close()
    assert not errors, errors


def test_a_report_names_the_folder_not_its_path(folder, tmp_path):
    """The report embedded the folder's absolute path (the user's home, their machine's layout)."""
    (folder / "card.json").write_text("{", encoding="utf-8")  # a damaged card: its error names the folder
    written = report(folder, tmp_path / "report.html", episodes=2, frames=2)
    data = embedded(written.path)
    assert data["overview"]["folder"] == "pixels" and "pixels" in data["overview"]["card_error"]
    assert str(tmp_path) not in written.path.read_text(encoding="utf-8")
