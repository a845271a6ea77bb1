"""Runs the docs' snippets, each in a process of its own, without paying an interpreter's start and torch's
import for each (about 2 s of the 3 a snippet takes): a server process, started once per test process with
``-W error``, imports numpy, torch and the library, then forks a child per snippet. The child is what a
fresh ``python -W error snippet.py`` would be once those imports are done: the snippet runs as ``__main__``
(``runpy.run_path``) with ``sys.argv[0]`` and ``sys.path[0]`` its own, its working directory a fresh
folder, stdin empty, stdout and stderr its own files; it exits as Python exits (atexit handlers, an
uncaught exception's traceback and exit status 1, ``sys.exit``'s code). The server starts no thread before
forking.

A snippet that must start from an interpreter that imported nothing yet runs fresh instead
(``run_fresh``): the test says which (those that need Ray: its workers start from the interpreter).
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

# the server: one request per line (JSON: script, cwd, out, err); it answers the child's pid, then its status
SERVER = r"""
import json, os, runpy, sys
import numpy, torch
import memmap_replay
from memmap_replay import ReplayBuffer
import memmap_replay.views, memmap_replay.reading.entries
ready = sys.stdout
ready.write("ready\n"); ready.flush()
for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        os.chdir(request["cwd"])
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for fd, path in ((1, request["out"]), (2, request["err"])):
            os.dup2(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
        sys.stdin = open(0, closefd=False)
        sys.stdout = open(1, "w", closefd=False, buffering=1)
        sys.stderr = open(2, "w", closefd=False, buffering=1)
        sys.argv = [request["script"]]
        sys.path[0] = os.path.dirname(request["script"])
        runpy.run_path(request["script"], run_name="__main__")
        sys.exit(0)  # (an exception or sys.exit above ends this child as it would end the script)
    ready.write(f"{pid}\n"); ready.flush()
    _, status = os.waitpid(pid, 0)
    ready.write(f"{os.waitstatus_to_exitcode(status)}\n"); ready.flush()
"""


class SnippetServer:
    """The forking server of this test process (``run(script, cwd, timeout)`` -> (exit code, stderr))."""

    def __init__(self) -> None:
        self.process = subprocess.Popen([sys.executable, "-W", "error", "-c", SERVER], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, text=True, bufsize=1)
        if self._line(120) != "ready":
            raise RuntimeError("the snippet server did not start")

    def _line(self, timeout: float) -> str | None:
        stdout = self.process.stdout
        assert stdout is not None
        if not select.select([stdout], [], [], timeout)[0]:
            return None
        return stdout.readline().strip()

    def run(self, script: Path, cwd: Path, timeout: float) -> tuple[int, str]:
        out, err = script.with_suffix(".out"), script.with_suffix(".err")
        stdin = self.process.stdin
        assert stdin is not None
        stdin.write(json.dumps({"script": str(script), "cwd": str(cwd), "out": str(out), "err": str(err)}) + "\n")
        stdin.flush()
        pid = int(self._line(30) or -1)
        status = self._line(timeout)
        if status is None:  # a hung snippet: killed, and this server answers the next one
            os.kill(pid, signal.SIGKILL)
            self._line(30)
            return -9, f"timed out after {timeout} s\n" + err.read_text(errors="replace")
        return int(status), err.read_text(errors="replace")

    def close(self) -> None:
        for pipe in (self.process.stdin, self.process.stdout):  # (its end of stdin tells the server to stop)
            if pipe is not None:
                pipe.close()
        self.process.wait(30)


def run_fresh(script: Path, cwd: Path, timeout: float) -> tuple[int, str]:
    """``python -W error script`` in a new interpreter: (exit code, stderr)."""
    result = subprocess.run([sys.executable, "-W", "error", str(script)], cwd=cwd, capture_output=True, text=True,
                            timeout=timeout)
    return result.returncode, result.stderr
