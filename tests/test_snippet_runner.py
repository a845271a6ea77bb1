"""tests/snippet_runner.py: a forked snippet ends as ``python -W error snippet.py`` would."""

import pytest
from snippet_runner import SnippetServer, run_fresh

CASES = {
    "ok": ("import os\nprint(os.getcwd())\n", 0, ""),
    "raises": ("raise ValueError('boom')\n", 1, "ValueError: boom"),
    "warns": ("import warnings\nwarnings.warn('careful', UserWarning)\n", 1, "UserWarning: careful"),
    "exits": ("import sys\nsys.exit(3)\n", 3, ""),
    "main": ("import sys\nassert __name__ == '__main__' and sys.argv[0].endswith('snippet.py')\n", 0, ""),
    "atexit": ("import atexit, sys\natexit.register(lambda: sys.stderr.write('at exit\\n'))\n", 0, "at exit"),
}


@pytest.fixture(scope="module")
def server():
    server = SnippetServer()
    yield server
    server.close()


@pytest.mark.parametrize("case", CASES)
def test_a_forked_snippet_ends_as_a_fresh_one(case, server, tmp_path):
    code, status, stderr = CASES[case]
    script = tmp_path / "snippet.py"
    script.write_text(code)
    forked, fresh = server.run(script, tmp_path, 60), run_fresh(script, tmp_path, 60)
    assert forked[0] == fresh[0] == status
    assert stderr in forked[1] and stderr in fresh[1]


def test_a_hung_snippet_is_killed_and_the_server_goes_on(server, tmp_path):
    script = tmp_path / "snippet.py"
    script.write_text("import time\ntime.sleep(60)\n")
    status, stderr = server.run(script, tmp_path, 1)
    assert status == -9 and "timed out" in stderr
    script.write_text("print('next')\n")
    assert server.run(script, tmp_path, 60)[0] == 0
