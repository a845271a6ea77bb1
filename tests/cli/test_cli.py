"""The command line's start: no torch on import, and a quiet end when the reader of its output goes away."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap

import pytest

import memmap_replay
from memmap_replay.cli import _EXIT_BROKEN_PIPE, EXIT_OK


def python(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, **kwargs)


def imported_modules(importtime_log: str) -> set[str]:
    """The modules named by ``python -X importtime`` (its report goes to stderr)."""
    return {match.group(1) for match in re.finditer(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$", importtime_log, re.M)}


def test_import_does_not_import_torch():
    code = """
        import sys
        import memmap_replay, memmap_replay.cli
        from memmap_replay import ReplayBuffer
        from memmap_replay.sharing import verify
        from memmap_replay.sharing import pack
        from memmap_replay import DatasetCard
        from memmap_replay import StoreStats
        from memmap_replay import export_d4rl
        heavy = sorted(name for name in sys.modules if name.split(".")[0] in ("torch", "gymnasium", "h5py"))
        assert not heavy, heavy
        assert callable(verify) and callable(pack)  # the functions, not the modules of the same name
    """
    result = python("-c", textwrap.dedent(code))
    assert result.returncode == 0, result.stderr


def test_help_and_version_do_not_import_torch():
    for option in ("--help", "--version"):
        result = python("-X", "importtime", "-m", "memmap_replay", option)
        assert result.returncode == 0, result.stderr
        modules = imported_modules(result.stderr)
        assert "memmap_replay.cli" in modules  # the log was parsed
        assert not {name for name in modules if name.split(".")[0] == "torch"}
    assert memmap_replay.__version__ in result.stdout


def test_torch_names_load_on_first_use():
    code = """
        import sys
        import memmap_replay
        assert "memmap_replay.views.kinds" not in sys.modules
        from memmap_replay import TrajectoryView
        from memmap_replay.views.kinds import TrajectoryView as same
        assert TrajectoryView is same and "torch" in sys.modules
        assert memmap_replay.ShardSet is sys.modules["memmap_replay.distributed.shards"].ShardSet
        assert "TrajectoryView" in dir(memmap_replay) and "Sample" in dir(memmap_replay)
        try:
            memmap_replay.NoSuchName
        except AttributeError as error:
            assert "NoSuchName" in str(error)
        else:
            raise AssertionError("no AttributeError")
    """
    result = python("-c", textwrap.dedent(code))
    assert result.returncode == 0, result.stderr


def test_star_import_gives_all():
    namespace: dict = {}
    exec("from memmap_replay import *", namespace)
    assert set(memmap_replay.__all__) <= set(namespace)


# a command that writes far more than a pipe holds (64 KiB), so that the writer outlives `head -1`
NOISY = """
import sys
import memmap_replay.cli as cli

def add(commands):
    command = commands.add_parser("noisy")
    command.set_defaults(run=run_noisy)

def run_noisy(args):
    for number in range(200_000):
        print(f"line {number}")
    return 0

cli._commands = lambda: [add]
sys.exit(cli.main(["noisy"]))
"""


@pytest.mark.skipif(shutil.which("head") is None, reason="needs head")
def test_broken_pipe_exits_quietly():
    writer = subprocess.Popen([sys.executable, "-c", NOISY], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reader = subprocess.Popen(["head", "-1"], stdin=writer.stdout, stdout=subprocess.PIPE)
    writer.stdout.close()  # only head holds the read end: when head exits, the writer's next write fails
    head_output, _ = reader.communicate(timeout=120)
    _, stderr = writer.communicate(timeout=120)
    assert head_output == b"line 0\n"
    assert stderr == b""  # no traceback, no 'Exception ignored ... BrokenPipeError'
    assert writer.returncode == _EXIT_BROKEN_PIPE


@pytest.mark.skipif(shutil.which("head") is None, reason="needs head")
def test_help_into_head():
    result = subprocess.run(f"'{sys.executable}' -m memmap_replay --help | head -1", shell=True, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == EXIT_OK
    assert result.stdout.startswith("usage:") and result.stderr == ""
