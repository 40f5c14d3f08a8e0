"""ragexp.base.children.start while a stop comes (the fast tier; the children's ends are in
tests/test_children.py): a SIGINT or SIGTERM that reaches the command while a child is being started
waits until the child is known to the exit handler, which then stops it. Raised inside Popen, the
stop would leave a running child that nothing stops but its own watch (seen under load: the local
model server outlived a Ctrl-C of its run)."""
import signal
import subprocess
import sys

from ragexp.base import children


def test_a_stop_while_a_child_starts_is_delivered_once_the_child_is_known_to_the_exit_handler(tmp_path):
    seen: list[tuple[int, int]] = []
    previous = {s: signal.signal(s, lambda signum, frame: seen.append((signum, len(children.running()))))
                for s in (signal.SIGINT, signal.SIGTERM)}
    before = len(children.running())
    try:
        with children.stops_held():
            signal.raise_signal(signal.SIGINT)
            signal.raise_signal(signal.SIGTERM)
            signal.raise_signal(signal.SIGINT)
            assert seen == []  # held while the block runs
            child = children.start([sys.executable, "-c", "import sys; sys.stdin.read()"], "a test child",
                                   stdin=subprocess.PIPE)
        assert seen == [(signal.SIGINT, before + 1), (signal.SIGTERM, before + 1)]  # each once, the child known
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        child.stop()
    assert not child.running and child not in children.running()


class Stop(Exception):
    pass


def test_a_stop_that_comes_as_popen_returns_leaves_the_child_known_and_is_raised_after(monkeypatch):
    started = []
    real_popen = children.subprocess.Popen

    def popen_then_stop(*args, **kwargs):  # the child runs; a Ctrl-C reaches the command before Popen returns
        started.append(real_popen(*args, **kwargs))
        signal.raise_signal(signal.SIGINT)
        return started[-1]

    def stop(signum, frame):
        raise Stop(signum)

    monkeypatch.setattr(children.subprocess, "Popen", popen_then_stop)
    previous = signal.signal(signal.SIGINT, stop)
    try:
        try:
            children.start([sys.executable, "-c", "import sys; sys.stdin.read()"], "a test child", stdin=subprocess.PIPE)
        except Stop:
            pass
        else:
            raise AssertionError("the stop was lost")
        [process] = started
        assert [c.process for c in children.running()].count(process) == 1  # the exit handler would stop it
    finally:
        signal.signal(signal.SIGINT, previous)
        for child in children.running():
            if child.process in started:
                child.stop()
    assert started[0].poll() is not None
