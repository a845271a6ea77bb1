"""``view FOLDER [--port N] [--host H] [--open]``: serve a browser viewer of a store
(see ``memmap_replay.view``)."""

from __future__ import annotations

import argparse
import sys

from ..errors import NotAFolderError, OptionError, StoreNotFoundError
from . import EXIT_OK, EXIT_USAGE, not_a_store

_HELP = f"""\
Serve a page that shows the store in a browser: the card, counts, the end mix, return and length over
episode order and their histograms, per-field statistics, a paged episodes table (sort and filter by
length, return, end and meta values), and each episode's image fields as frames on a timeline with its
small fields plotted per step. Read-only; it follows a writer (new episodes appear on the page). Frames
need pillow: pip install 'memmap-replay[video]'. Nothing is fetched from the network: the page's scripts
ship in the package. Stop with Ctrl-C.

The server listens on 127.0.0.1 (this machine only) unless --host says otherwise; --host 0.0.0.0 shows
the store to every machine that can reach this one.

exit codes:
  {EXIT_OK}  stopped with Ctrl-C
  {EXIT_USAGE}  usage error: not a store, or the port cannot be used

examples:
  %(prog)s replay_data                 # then open the address it prints
  %(prog)s replay_data --port 8765 --open"""


def _port(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = -1
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"must be a port number in [0, 65535], 0 for a free one (got {text!r})")
    return value


def add(commands) -> None:
    parser = commands.add_parser("view", help="serve a browser viewer of a store (episodes, frames, plots)",
                                 description=_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", metavar="FOLDER", help="the store's folder (the one holding meta.json)")
    parser.add_argument("--port", type=_port, default=8765, metavar="N", help="the port (default 8765; 0: a free one)")
    parser.add_argument("--host", default="127.0.0.1", metavar="H", help="the address to listen on (default 127.0.0.1)")
    parser.add_argument("--open", action="store_true", help="open the page in the default browser")
    parser.add_argument("--log", action="store_true", help="print a line per request")
    parser.set_defaults(run=run_view, json=False)


def run_view(args: argparse.Namespace) -> int:
    from ..sharing.viewer import view

    try:
        server = view(args.folder, port=args.port, host=args.host, open_browser=args.open, block=False,
                      quiet=not args.log)
    except (StoreNotFoundError, NotAFolderError) as error:
        return not_a_store(args, str(error))
    except OptionError as error:
        print(f"{args.prog}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:  # the port is taken, or the address is not this machine's
        print(f"{args.prog}: error: cannot listen on {args.host}:{args.port} ({error.strerror or error}); "
              f"choose another --port (0: a free one) or --host", file=sys.stderr)
        return EXIT_USAGE
    print(f"serving {args.folder} at {server.url} (Ctrl-C to stop)", flush=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return EXIT_OK
