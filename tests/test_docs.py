"""The documentation site builds: ``mkdocs build --strict`` (mkdocs.yml at the project root, the `docs` extra).

Strict mode refuses any warning: a link to a missing page or heading, a page the nav does not name, a
``:::`` block naming an object the package does not have, a docstring mkdocstrings cannot read. The
snippets of the pages run in ``tests/test_readme.py``.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parent.parent


def require_mkdocs():
    for module in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python"):
        pytest.importorskip(module, reason=f"the site needs {module}: pip install -e '.[docs]'")


def test_the_site_builds_strict(tmp_path):
    require_mkdocs()
    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    result = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                            cwd=ROOT, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-6000:]
    for page in ("index.html", "getting-started/index.html", "reference/api/buffer/index.html",
                 "reference/format/index.html", "reference/read-options/index.html"):
        assert (site / page).is_file(), page
    # the API reference is generated from the docstrings, the format page from core/format.py's
    assert "ReplayBuffer" in (site / "reference/api/buffer/index.html").read_text(encoding="utf-8")
    assert "Commit protocol" in (site / "reference/format/index.html").read_text(encoding="utf-8")


def test_the_read_options_page_is_the_option_table(tmp_path):
    """The hook writes reference/read-options.md from memmap_replay.reading.options_markdown(), verbatim."""
    require_mkdocs()
    sys.path.insert(0, str(ROOT / "docs"))
    try:
        import hooks
    finally:
        sys.path.remove(str(ROOT / "docs"))
    page = hooks.read_options_page()
    assert page.startswith("# Read options\n\n"), page[:200]
    try:
        from memmap_replay.reading import options_markdown
    except ImportError:
        pytest.skip("memmap_replay.reading.options_markdown is not in this checkout yet: the page says so")
    assert page == options_markdown().strip() + "\n"
