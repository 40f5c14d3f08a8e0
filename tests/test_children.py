"""ragexp.base.children: a child process ends with the process that started it, at its exit (an
exit handler) and, when no handler ran (kill -9), by itself within 5 seconds."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import cli_env, gone

pytestmark = pytest.mark.process

STARTER = textwrap.dedent("""
    import sys, time
    from ragexp.base import children
    watch = "from ragexp.base.children import watch_parent; watch_parent(); " if sys.argv[1] == "watch" else ""
    child = children.start([sys.executable, "-c", watch + "import time; time.sleep(120)"], "sleeper")
    print(child.process.pid, flush=True)
    if sys.argv[2] == "exit":
        sys.exit(0)
    if sys.argv[2] == "quick":  # as ragexp.__main__.command ends: exit handlers, then os._exit
        import atexit, os, threading
        threading._shutdown()
        atexit._run_exitfuncs()
        os._exit(0)
    time.sleep(120)
""")


def started(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, int]:
    script = tmp_path / "starter.py"
    script.write_text(STARTER)
    starter = subprocess.Popen([sys.executable, str(script), *args], stdout=subprocess.PIPE, text=True, env=cli_env())
    assert starter.stdout is not None
    return starter, int(starter.stdout.readline())


def wait_gone(pid: int, seconds: float) -> float:
    began = time.monotonic()
    while not gone(pid) and time.monotonic() - began < seconds:
        time.sleep(0.05)
    return time.monotonic() - began


@pytest.mark.parametrize("how", ["exit", "quick"])
def test_a_child_is_stopped_when_its_starter_exits(tmp_path, how):
    starter, child = started(tmp_path, "nowatch", how)  # the child does not watch: only the exit handler stops it
    assert starter.wait(30) == 0
    assert gone(child)  # stopped before the starter's exit returned


def test_a_child_ends_itself_within_5_s_of_a_kill_9_of_its_starter(tmp_path):
    starter, child = started(tmp_path, "watch", "stay")
    try:
        assert not gone(child)
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait()
        assert wait_gone(child, 10) < 5
    finally:
        if not gone(child):
            os.kill(child, signal.SIGKILL)


def test_a_child_that_does_not_watch_outlives_a_kill_9_so_the_watch_is_what_ends_it(tmp_path):
    starter, child = started(tmp_path, "nowatch", "stay")
    try:
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait()
        time.sleep(2 * 1.0 + 0.5)  # two periods of the watch (children.WATCH_S)
        assert not gone(child)
    finally:
        os.kill(child, signal.SIGKILL)
