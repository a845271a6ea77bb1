"""The reference's "Read options" page lists every option of the table, once per owner."""

from __future__ import annotations

from memmap_replay.reading import options_markdown
from memmap_replay.reading.table import HINDSIGHT, OPTIONS


def test_every_option_has_its_row_with_type_and_default():
    page = options_markdown()
    for option in OPTIONS:
        row = next(line for line in page.splitlines() if line.startswith(f"| `{option.name}` |")
                   and f"`{option.default!r}`" in line and ("**Deprecated**" in line) == bool(option.renamed))
        if option.route != HINDSIGHT:
            assert f"`{option.annotation.replace('|', chr(92) + '|')}`" in row
        assert option.doc in row or option.doc[1:] in row
    assert page.count("\n## ") == 4  # view, sampler, loader options; hindsight's keys
