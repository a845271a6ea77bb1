"""``memmap-replay view FOLDER``: serves the viewer until Ctrl-C; not a store or a taken port is a usage error."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.request

import numpy as np
import pytest

from memmap_replay import ReplayBuffer
from memmap_replay.cli import EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE, main


@pytest.fixture
def folder(tmp_path):
    with ReplayBuffer(tmp_path / "store", max_episodes=4, max_timesteps=5, fields=dict(reward="float")) as buffer:
        buffer.store_episode(reward=np.arange(3.0), end="terminated")
    return tmp_path / "store"


def test_serves_the_store_until_interrupted(folder):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    # Ctrl-C's handler set in the child: a shell that runs this suite as a background job (``&`` without job
    # control) makes its processes ignore SIGINT, which the command would inherit
    interruptible = ("import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
                     "sys.argv[0] = 'memmap_replay'; runpy.run_module('memmap_replay', run_name='__main__')")
    process = subprocess.Popen([sys.executable, "-c", interruptible, "view", str(folder), "--port", "0"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = process.stdout.readline()
        url = re.search(r"at (http://127\.0\.0\.1:\d+/) \(Ctrl-C to stop\)", line)
        assert url, (line, process.stderr.read() if process.poll() is not None else "")
        with urllib.request.urlopen(url.group(1) + "api/episodes", timeout=30) as response:
            page = json.load(response)
        assert page["total"] == 1 and page["rows"][0][:4] == [0, 3, 3.0, "terminated"]
        process.send_signal(signal.SIGINT)
        try:
            _, stderr = process.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            pytest.fail(f"the view command did not stop on Ctrl-C within 30 s; its stderr: {process.communicate()[1]}")
        assert process.returncode == EXIT_OK, stderr
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stdout.close()
        process.stderr.close()


# the child's stdout sends SIGINT to its own process as the address line is flushed: Ctrl-C at the very instant
# the user sees the address (from a parent, after reading the line, it landed there in about half the runs)
_CTRL_C_AS_PRINTED = """
import os, runpy, signal, sys
signal.signal(signal.SIGINT, signal.default_int_handler)
class Stdout:
    def __init__(self, stream):
        self.stream, self.text, self.sent = stream, "", False
    def write(self, text):
        self.text += text
        return self.stream.write(text)
    def flush(self):
        self.stream.flush()
        if "Ctrl-C to stop" in self.text and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGINT)
    def __getattr__(self, name):
        return getattr(self.stream, name)
sys.stdout = Stdout(sys.stdout)
sys.argv[0] = "memmap_replay"
runpy.run_module("memmap_replay", run_name="__main__")
"""


def test_ctrl_c_right_after_the_address_is_printed_exits_cleanly(folder):
    """The KeyboardInterrupt landed in the print of the address, outside the try that catches it: a traceback."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    process = subprocess.run([sys.executable, "-c", _CTRL_C_AS_PRINTED, "view", str(folder), "--port", "0"],
                             capture_output=True, text=True, env=env, timeout=120)
    assert "Ctrl-C to stop" in process.stdout, (process.stdout, process.stderr)
    assert process.returncode == EXIT_OK and "Traceback" not in process.stderr, process.stderr


def test_not_a_store(tmp_path, capsys):
    assert main(["view", str(tmp_path / "nothing")]) == EXIT_USAGE
    assert "no store at" in capsys.readouterr().err


def test_a_port_in_use(folder, capsys):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["view", str(folder), "--port", str(port)]) == EXIT_USAGE
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_a_bad_port(folder, capsys):
    with pytest.raises(SystemExit, match="2"):
        main(["view", str(folder), "--port", "70000"])
    assert "must be a port number in [0, 65535]" in capsys.readouterr().err


def test_report_returns_a_few_ulps_apart(tmp_path, capsys):
    """np.histogram refused such a range ('Too many bins for data range'): the report printed a traceback."""
    with ReplayBuffer(tmp_path / "ulps", max_episodes=2, max_timesteps=10, fields=dict(reward="float64")) as buffer:
        for _ in range(2):
            buffer.store_episode(reward=np.full(10, 0.1), end="truncated")
    assert main(["report", str(tmp_path / "ulps"), str(tmp_path / "r.html")]) == EXIT_OK
    assert "wrote" in capsys.readouterr().out


def test_report_says_an_unforeseen_error_in_one_line(folder, tmp_path, capsys, monkeypatch):
    import memmap_replay.sharing.viewer  # noqa: F401 (the package's 'report' is the function; its module is below)

    report_module = sys.modules["memmap_replay.sharing.viewer.report"]
    def broken(*args, **kwargs):
        raise ValueError("values nobody foresaw")

    monkeypatch.setattr(report_module, "report", broken)
    assert main(["report", str(folder), str(tmp_path / "r.html")]) == EXIT_PROBLEMS
    err = capsys.readouterr().err
    assert "ValueError: values nobody foresaw" in err and "Traceback" not in err and "verify" in err
