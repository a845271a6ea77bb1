"""``view FOLDER [--port N] [--host H] [--open]``: serve a browser viewer of a store (see
``memmap_replay.view``); ``report FOLDER OUT.html``: the same overview as one static, self-contained file."""

from __future__ import annotations

import argparse
import sys

from ..errors import (CorruptStoreError, NotAFolderError, OptionError, ReplayError, StoreNotFoundError,
                      UnsupportedFormatError)
from . import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, not_a_store, positive_arg

_HELP = f"""\
Serve a page that shows the store in a browser: the card, counts, the end mix, return and length over
episode order and their histograms, per-field statistics, a paged episodes table (sort and filter by
length, return, end and meta values), and each episode's image fields as frames on a timeline with its
small fields plotted per step. Read-only; it follows a writer (new episodes appear on the page). Frames
need pillow: pip install 'memmap-replay[video]'. Nothing is fetched from the network: the page's scripts
ship in the package. Stop with Ctrl-C.

The server listens on 127.0.0.1 (this machine only) unless --host says otherwise; --host 0.0.0.0 shows
the store to every machine that can reach this one. A request whose Host header names another site is
refused (DNS rebinding): localhost, 127.0.0.1 and [::1] with any port (a browser through 'ssh -L
8080:127.0.0.1:PORT' sends localhost:8080), IP addresses and this machine's name are answered;
--allow-host NAME allows another name (e.g. an alias other machines use).

exit codes:
  {EXIT_OK}  stopped with Ctrl-C
  {EXIT_USAGE}  usage error: not a store, or the port cannot be used

examples:
  %(prog)s replay_data                 # then open the address it prints
  %(prog)s replay_data --port 8765 --open"""


_REPORT_HELP = f"""\
Write a static report of the store: one HTML file, self-contained (its scripts, styles, data and
thumbnails are inside it; it opens offline), to attach to a paper or an issue. It shows what the
viewer's overview shows (the card, counts, the end mix, return and length over episode order and their
histograms, per-field statistics) and --episodes episodes spread from the oldest to the newest, each with
--frames thumbnails of an image field (its first and last steps and its final observation). Thumbnails
need pillow: pip install 'memmap-replay[video]'.

exit codes:
  {EXIT_OK}  written
  {EXIT_PROBLEMS}  the store is damaged (run 'verify FOLDER' for the list)
  {EXIT_USAGE}  usage error: not a store, an unknown image field, an output path that cannot be written

examples:
  %(prog)s replay_data report.html
  %(prog)s replay_data report.html --episodes 20 --frames 12 --field pixels"""


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
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="a host name the page may be reached by besides the address, localhost, IP addresses "
                             "and this machine's name (repeatable; other names are refused: DNS rebinding)")
    parser.add_argument("--open", action="store_true", help="open the page in the default browser")
    parser.add_argument("--log", action="store_true", help="print a line per request")
    parser.set_defaults(run=run_view, json=False)
    report = commands.add_parser("report", help="write a static, self-contained HTML report of a store",
                                 description=_REPORT_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    report.add_argument("folder", metavar="FOLDER", help="the store's folder (the one holding meta.json)")
    report.add_argument("out", metavar="OUT.html", help="the file to write")
    report.add_argument("--episodes", type=positive_arg, default=12, metavar="N", help="episodes shown (default 12)")
    report.add_argument("--frames", type=positive_arg, default=8, metavar="N",
                        help="thumbnails per episode (default 8)")
    report.add_argument("--field", metavar="FIELD", help="the image field of the thumbnails (default: the first)")
    report.set_defaults(run=run_report, json=False)


def run_report(args: argparse.Namespace) -> int:
    from ..sharing.viewer.report import report

    try:
        written = report(args.folder, args.out, episodes=args.episodes, frames=args.frames, field=args.field)
    except (StoreNotFoundError, NotAFolderError) as error:
        return not_a_store(args, str(error))
    except (CorruptStoreError, UnsupportedFormatError) as error:
        print(f"{args.prog}: error: {error}", file=sys.stderr)
        return EXIT_PROBLEMS
    except ReplayError as error:
        print(f"{args.prog}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:  # the output cannot be written, or the store's files cannot be read
        print(f"{args.prog}: error: {error}", file=sys.stderr)
        return EXIT_PROBLEMS
    except Exception as error:  # data nobody foresaw (or a bug): one line, never a traceback
        print(f"{args.prog}: error: the report could not be made ({type(error).__name__}: {error}); run "
              f"'verify {args.folder}' to check the store, and please report it if the store is sound", file=sys.stderr)
        return EXIT_PROBLEMS
    shown = f"{len(written.episodes)} episodes" + (f" with frames of {written.field!r}" if written.field else "")
    print(f"wrote {written.path}: {shown}, {written.nbytes / 1024:.0f} KB")
    return EXIT_OK


def run_view(args: argparse.Namespace) -> int:
    from ..sharing.viewer import view

    try:
        server = view(args.folder, port=args.port, host=args.host, open_browser=args.open, block=False,
                      quiet=not args.log, allow_hosts=tuple(args.allow_host))
    except (StoreNotFoundError, NotAFolderError) as error:
        return not_a_store(args, str(error))
    except OptionError as error:
        print(f"{args.prog}: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    except OSError as error:  # the port is taken, or the address is not this machine's
        print(f"{args.prog}: error: cannot listen on {args.host}:{args.port} ({error.strerror or error}); "
              f"choose another --port (0: a free one) or --host", file=sys.stderr)
        return EXIT_USAGE
    try:  # the print too: a Ctrl-C as soon as the address shows lands in it
        print(f"serving {args.folder} at {server.url} (Ctrl-C to stop)", flush=True)
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        try:
            server.close()
        except KeyboardInterrupt:  # a second Ctrl-C while stopping: the serving thread ends with the process
            pass
    return EXIT_OK
