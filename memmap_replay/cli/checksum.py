"""``checksum FOLDER``: write (or, with ``--check``, check) the store's ``checksums.sha256``.

Also here, shared by the sharing commands (card, checksum, pack, unpack, compress, edit): ``_guarded``, which turns
the library's errors into a message on stderr and an exit code, ``_reported`` (``_guarded`` for a call that returns a
report to print, with the errors of rewrites and edits), and ``_show_progress``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable

from ..sharing.checksums import MANIFEST, check_manifest, read_manifest, store_folder, write_manifest
from ..errors import (BufferFullError, CorruptStoreError, DiskFullError, InvalidDataError, MissingExtraError,
                      NotAFolderError, SampleExpiredError, SchemaError, StoreLockedError, StoreIOError,
                      StoreNotFoundError, UnsupportedFormatError)
from . import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, not_a_store

_SHARE_EXIT_CODES = f"""exit codes:
  {EXIT_OK}  done
  {EXIT_PROBLEMS}  problems found: damage, a checksum mismatch, a refused archive (nothing was changed)
  {EXIT_USAGE}  usage error, the path is not a store, or a writer is writing the store"""

_CHECKSUM_HELP = f"""\
Write checksums.sha256 in a store's folder: the sha256 of every file of the store (meta.json, steps/,
meta/, episodes/, priorities/, stats/, card.json, README.md), one line each, in the format of GNU
sha256sum, so `cd FOLDER && sha256sum -c checksums.sha256` checks it without this library. Files that
are not the store's are left out. It holds the writer lock while it reads (no writer may be writing).

With --check, nothing is written: every listed file is read and compared, and store files the manifest
does not list are reported. `verify` does the same check whenever the folder has a checksums.sha256.

{_SHARE_EXIT_CODES}

examples:
  %(prog)s replay_data
  %(prog)s replay_data --check
  %(prog)s replay_data --check --json | jq .problems"""


def add(commands) -> None:
    parser = commands.add_parser("checksum", help="write or check a store's checksums.sha256",
                                 description=_CHECKSUM_HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", metavar="FOLDER", help="the store's folder (the one holding meta.json)")
    parser.add_argument("--check", action="store_true", help="only check the files against checksums.sha256")
    _add_common(parser)
    parser.set_defaults(run=run_checksum)


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")


def _show_progress(args: argparse.Namespace) -> bool:
    return not args.quiet and sys.stderr.isatty()


def _fail(args: argparse.Namespace, message: str, code: int) -> int:
    if args.json:
        print(json.dumps({"ok": False, "error": message}, indent=2))
    print(f"{args.prog}: error: {message}", file=sys.stderr)
    return code


def _guarded(args: argparse.Namespace, action: Callable[[], int], *, folder_is_store: bool = True) -> int:
    """Run ``action``; a library error becomes "<prog>: error: ..." on stderr and its exit code."""
    try:
        return action()
    except (StoreNotFoundError, NotAFolderError) as error:
        return not_a_store(args, str(error)) if folder_is_store else _fail(args, str(error), EXIT_USAGE)
    except (InvalidDataError, UnsupportedFormatError, StoreLockedError) as error:
        return _fail(args, str(error), EXIT_USAGE)
    except (CorruptStoreError, DiskFullError, StoreIOError) as error:  # damage, or the disk failed us
        return _fail(args, str(error), EXIT_PROBLEMS)
    except OSError as error:  # a path the user gave that cannot be read or written
        return _fail(args, f"{error.filename or ''}: {error.strerror or error}".lstrip(": "), EXIT_USAGE)


def _reported(args: argparse.Namespace, call: Callable, *, folder_is_store: bool = True) -> int:
    """Run ``call`` (a rewrite or an edit: it returns a report with ``to_json()``) under ``_guarded`` and print its
    report (``--json``: as JSON, with ``"ok": true``). Besides ``_guarded``'s errors: a bad option of the edit (schemas
    that differ, a level out of range, a missing extra) is a usage error; episodes a ring writer evicted while they
    were copied, or a store without the room the edit needs, are problems (nothing was changed)."""
    def action() -> int:
        try:
            report = call()
        except (SchemaError, MissingExtraError) as error:
            return _fail(args, str(error), EXIT_USAGE)
        except (SampleExpiredError, BufferFullError) as error:
            return _fail(args, str(error), EXIT_PROBLEMS)
        print(json.dumps({"ok": True, **report.to_json()}, indent=2) if args.json else report)
        return EXIT_OK
    return _guarded(args, action, folder_is_store=folder_is_store)


def run_checksum(args: argparse.Namespace) -> int:
    return _guarded(args, lambda: (_check if args.check else _write)(args))


def _write(args: argparse.Namespace) -> int:
    path = write_manifest(args.folder, progress=_show_progress(args))
    files = len(read_manifest(path.parent)[0] or {})
    if args.json:
        print(json.dumps({"folder": args.folder, "ok": True, "manifest": str(path), "files": files}, indent=2))
    else:
        print(f"{path}: {files} files")
    return EXIT_OK


def _check(args: argparse.Namespace) -> int:
    problems = check_manifest(store_folder(args.folder), progress=_show_progress(args))
    if args.json:
        print(json.dumps({"folder": args.folder, "ok": not problems, "problems": [str(p) for p in problems]}, indent=2))
    elif problems:
        print(f"{args.folder}: {len(problems)} problem{'s' if len(problems) > 1 else ''} against {MANIFEST}:")
        print("\n".join(f"  - {problem}" for problem in problems))
    else:
        files = len(read_manifest(Path(args.folder))[0] or {})
        print(f"{args.folder}: OK, {files} files match {MANIFEST}")
    return EXIT_PROBLEMS if problems else EXIT_OK
