"""MkDocs hooks (``hooks:`` in mkdocs.yml): pages generated at build time.

``reference/read-options.md`` is the option table of ``memmap_replay.reading``: every read option with its
owner, type, default and one line of documentation, as ``memmap_replay.reading.options_markdown()`` renders
it. The page is never written into docs/: it exists only in the built site, so it cannot drift from the
table.
"""

from __future__ import annotations

import logging

from mkdocs.structure.files import File, Files

READ_OPTIONS = "reference/read-options.md"
log = logging.getLogger("mkdocs.hooks.read_options")


def read_options_page() -> str:
    """The page's Markdown: what ``memmap_replay.reading.options_markdown()`` renders (its title included)."""
    try:
        from memmap_replay.reading import options_markdown
    except ImportError as error:  # the option table's room is not in this checkout yet
        log.info("docs: %s is not generated: %s", READ_OPTIONS, error)
        return ("# Read options\n\nThis page is generated from `memmap_replay.reading.options_markdown()`, "
                "which this checkout does not have yet.\n")
    return options_markdown().strip() + "\n"


def on_files(files: Files, config) -> Files:
    """Add the generated pages to the site's files (nav in mkdocs.yml names them)."""
    files.append(File.generated(config, READ_OPTIONS, content=read_options_page()))
    return files
