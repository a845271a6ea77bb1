"""The generated entry points are what the option table writes: editing the table without running
``python -m memmap_replay.reading.generate`` (or editing a generated module by hand) fails here."""

from __future__ import annotations

import pytest

from memmap_replay.reading.generate import MODULES, PACKAGE, render


@pytest.mark.parametrize("path", sorted(MODULES))
def test_the_generated_module_is_current(path):
    assert (PACKAGE / path).read_text() == render(path), (
        f"memmap_replay/{path} is not what the option table writes: run python -m memmap_replay.reading.generate")


def test_a_generated_module_compiles_and_says_it_is_generated():
    for path in MODULES:
        text = render(path)
        compile(text, path, "exec")
        assert "do\nnot edit" in text or "do not edit" in text.replace("\n", " ")
