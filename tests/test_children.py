"""ragexp.base.children: a child process ends with the process that started it, at its exit (an
exit handler) and, when no handler ran (kill -9), by itself within 5 seconds; so does a program
that is not ragexp's (`mlflow server`) under its keeper, with the processes it started."""
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
    if sys.argv[1] == "keeper":  # a program that watches nothing and starts a process of its own, as mlflow server does
        child = children.start(["sh", "-c", "sleep 120 & wait"], "sleepers", keeper=True)
    else:
        child = children.start([sys.executable, "-c", watch + "import time; time.sleep(120)"], "sleeper")
    print(child.process.pid, flush=True)
    if sys.argv[1] == "keeper":
        sys.stdin.readline()  # until the test has seen the keeper's group whole
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
    starter = subprocess.Popen([sys.executable, str(script), *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               text=True, env=cli_env())
    assert starter.stdout is not None
    return starter, int(starter.stdout.readline())


def kept(tmp_path: Path, how: str) -> tuple[subprocess.Popen, list[int]]:
    """A starter of a program under a keeper, and the keeper's process group once whole; the starter
    goes on (`how`) from there."""
    starter, keeper = started(tmp_path, "keeper", how)
    group = group_of(keeper)
    assert starter.stdin is not None
    starter.stdin.write("go\n")
    starter.stdin.flush()
    return starter, group


def group_of(child: int) -> list[int]:
    """The processes of `child`'s process group (a child is the leader of its own), once the
    program under a keeper has started its own (the keeper, sh and its sleep)."""
    found: list[int] = []
    began = time.monotonic()
    while time.monotonic() - began < 30:
        found = [int(e.name) for e in os.scandir("/proc") if e.name.isdigit() and not gone(int(e.name))
                 and in_group(int(e.name), child)]
        if len(found) == 3:
            return found
        time.sleep(0.05)
    pytest.fail(f"the keeper's group never held 3 processes: {found}")


def in_group(pid: int, group: int) -> bool:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[2]) == group
    except (OSError, ValueError):
        return False


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


@pytest.mark.parametrize("how", ["exit", "quick"])
def test_a_program_under_a_keeper_is_stopped_with_what_it_started_when_its_starter_exits(tmp_path, how):
    starter, group = kept(tmp_path, how)
    assert starter.wait(30) == 0
    assert [pid for pid in group if not gone(pid)] == []  # the program's own sleep too, not only the keeper


def test_a_program_under_a_keeper_ends_with_what_it_started_within_5_s_of_a_kill_9_of_its_starter(tmp_path):
    """The shape of `python -m ragexp.ui` killed with SIGKILL: its `mlflow server` (a program that does
    not watch its parent) and the server's own process end."""
    starter, group = kept(tmp_path, "stay")
    try:
        os.kill(starter.pid, signal.SIGKILL)
        starter.wait()
        killed = time.monotonic()
        while [pid for pid in group if not gone(pid)] and time.monotonic() - killed < 10:
            time.sleep(0.05)
        assert [pid for pid in group if not gone(pid)] == [] and time.monotonic() - killed < 5
    finally:
        for pid in group:
            if not gone(pid):
                os.kill(pid, signal.SIGKILL)


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
