"""How the CPU models' threads wait. PyTorch's OpenMP threads spin between the matrix products of
a forward pass by default: on an idle machine that saves a few microseconds, on a busy one (other
runs, a sweep's parallel jobs) the spinning threads take the cores from the work. Measured on 2
cores with 4 busy processes beside a run (30 HotpotQA rows of bench/cheap_judge.py): the offline
judge took 65 s and 39 CPU-s with spinning threads, 34 s and 16 CPU-s with waiting ones; idle, the
two were alike within the noise. So ragexp asks for waiting threads unless you set OMP_WAIT_POLICY yourself."""
from __future__ import annotations

import os


def passive_waiting() -> None:
    """OMP_WAIT_POLICY=PASSIVE unless set; to be called before torch is first imported (OpenMP reads
    it once, as it starts)."""
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
