"""Which process a record names, and whether it still runs: the host, the pid and the process's
start time (pids are reused: a pid alone may name another, newer process)."""
from __future__ import annotations

import os
import socket
from pathlib import Path


def started(pid: int) -> int | None:
    """The start time of process `pid` in clock ticks since boot (Linux's /proc/PID/stat), or None
    where it cannot be read."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return int(fields[19])  # field 22 of the file; the first two (pid, name) end with ")"
    except (OSError, ValueError, IndexError):
        return None


def this_process() -> dict:
    """This process as a record: {"host", "pid", "started"}."""
    return {"host": socket.gethostname(), "pid": os.getpid(), "started": started(os.getpid())}


def alive(record: dict) -> bool:
    """Whether the process a record names may still run: True for a process on another host
    (nothing here can tell), or on this host while its pid runs with the recorded start time."""
    if record.get("host") != socket.gethostname():
        return True
    pid = record.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # it runs, as another user
    now = started(pid)
    return record.get("started") is None or now is None or now == record["started"]
