"""``python -m memmap_replay COMMAND ...``: the command line (see ``memmap_replay.cli``)."""

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main(prog="python -m memmap_replay"))
