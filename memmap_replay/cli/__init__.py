"""The command line: ``python -m memmap_replay COMMAND ...``, or the ``memmap-replay`` console script.

Each command is a module of this package with a function ``add(subparsers)`` that declares its
arguments and sets ``run``, a function of the parsed arguments returning the exit code;
``_COMMAND_MODULES`` lists them, so a new command is one more module and one more entry. Shared here:
the exit codes, ``not_a_store`` (the message and exit code for a path that holds no store), and ``args.prog``,
the command's name as typed ("memmap-replay edit merge") for its messages.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys

from .._version import __version__
from ..core.format import FORMAT_VERSION

__all__ = ["main", "EXIT_OK", "EXIT_PROBLEMS", "EXIT_USAGE", "not_a_store"]

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2
# the reader of our output went away (``memmap-replay ... | head``): the shell's code for death by SIGPIPE
_EXIT_BROKEN_PIPE = 128 + 13

_EXIT_CODES = f"""exit codes:
  {EXIT_OK}  the folder is a healthy store (warnings may be printed)
  {EXIT_PROBLEMS}  problems found: the store is damaged
  {EXIT_USAGE}  usage error, or the path is not a store (does not exist, is a file, holds no store files)"""


def positive_arg(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number of at least 1 (got {text!r})")
    return value


def not_a_store(args: argparse.Namespace, message: str) -> int:
    if args.json:
        print(json.dumps({"folder": args.folder, "ok": False, "is_store": False, "error": message}, indent=2))
    print(f"{args.prog}: error: {message}", file=sys.stderr)
    return EXIT_USAGE


# one module per command, each with ``add(commands)``; the parser lists them in this order
_COMMAND_MODULES = ("info", "stats", "verify", "card", "checksum", "pack", "unpack", "import_", "export", "frames",
                    "grow", "compress", "decompress", "edit", "view", "inspect_replay_buffer")


def _commands() -> list:
    adders = []
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:  # a command still being written
            if error.name != f"{__name__}.{name}":
                raise
            continue
        adders.append(module.add)
    return adders


def _build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog or "memmap-replay",
        description="Tools for memmap_replay store folders (a store is a folder of .npy files and meta.json).",
        epilog=f"Run '%(prog)s COMMAND --help' for a command's options.\n\n{_EXIT_CODES}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__} (format {FORMAT_VERSION})")
    subparsers = parser.add_subparsers(title="commands", metavar="COMMAND")
    for add in _commands():
        add(subparsers)
    _name_commands(parser)
    return parser


def _name_commands(parser: argparse.ArgumentParser) -> None:
    """Give every command's parser, at any depth, its full name as the default of ``args.prog`` (argparse made it:
    "memmap-replay edit merge", "memmap-replay inspect-replay-buffer"); the innermost parsed one's wins, so messages
    name the command as it was typed."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in action.choices.values():
                command.set_defaults(prog=command.prog)
                _name_commands(command)


def main(argv: list[str] | None = None, prog: str | None = None) -> int:
    """Run a command; returns the exit code (argparse itself exits with 2 on a usage error).

    Output piped into a reader that stops early (``| head``) ends the command quietly with
    ``_EXIT_BROKEN_PIPE``, instead of a BrokenPipeError traceback."""
    try:
        try:
            return _run_command(argv, prog)
        finally:  # also after argparse's SystemExit (--help, --version): a broken pipe shows here, not at exit
            if sys.stdout is not None:
                sys.stdout.flush()
    except BrokenPipeError:
        _quiet_stdout()
        return _EXIT_BROKEN_PIPE


def _run_command(argv: list[str] | None, prog: str | None) -> int:
    parser = _build_parser(prog)
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    return args.run(args)  # (args.prog: the command's name, _name_commands)


def _quiet_stdout() -> None:
    """Point stdout at devnull, so that the interpreter's flush at exit does not fail again and print
    'Exception ignored ... BrokenPipeError' (the pattern of the Python docs, 'Note on SIGPIPE')."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout replaced by an object without a file descriptor
        pass
