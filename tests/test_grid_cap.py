"""A grid larger than `max_grid_points` is refused before any job and any store, with its size and
how to race it or raise the cap; every grid prints its size, and a large one its progress, before
its first job (a 10,000-point grid printed nothing for 240 s)."""
import os
import selectors
import subprocess
import sys
import time
from pathlib import Path

import pytest
from omegaconf import open_dict

from conftest import CONF, ROOT, cli_env

# a guard against a grid that says nothing, not the goal's 5 s: that is a bench figure (a test's clock fails on a
# loaded machine, where Python and Hydra alone start in 3-5 s); the lines must come before any job all the same
WITHIN_S = 60.0


@pytest.fixture
def sweep_config():
    """`sweep_config(*task)`: the multirun's master config as the SweepTracking callback gets it."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    def make(*task: str, params: dict | None = None):
        cfg = hydra_compose(config_name="config", return_hydra_config=True)
        with open_dict(cfg):
            cfg.hydra.overrides.task = list(task)
            if params:
                cfg.hydra.sweeper.params = params
        return cfg

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield make


@pytest.mark.parametrize("task,params", [
    (["chunker=recursive,semantic", "retriever.top_k=range(1,4)"], None),
    (["retriever.top_k=1,2", "retriever.top_k=3,4,5", "dataset.limit=2"], None),  # a key swept twice: its last values
    (["chunker=recursive,semantic"], {"retriever.top_k": "1,2,3"}),  # an experiment's hydra.sweeper.params
    (["retriever=bm25"], None),  # no sweep: one point
])
def test_the_grid_is_counted_as_the_basic_sweeper_enumerates_it(sweep_config, task, params):
    from ragexp.sweep.folder import grid_points, grid_size

    cfg = sweep_config(*task, params=params)
    assert grid_size(cfg)[0] == len(grid_points(cfg))


def test_a_grid_over_the_cap_is_refused_with_its_size_and_the_ways_out(sweep_config, capsys):
    from ragexp.sweep.folder import grid_size, refuse_oversized

    cfg = sweep_config("retriever.top_k=range(1,101)", "chunker.chunk_size=range(100,200)")
    size, counts = grid_size(cfg)
    assert size == 10_000 and counts == {"retriever.top_k": 100, "chunker.chunk_size": 100}
    with pytest.raises(SystemExit) as refused:
        refuse_oversized(cfg, size, counts)
    assert refused.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert "10,000 points (100 retriever.top_k x 100 chunker.chunk_size), more than max_grid_points=5,000" in line
    assert "hydra/sweeper=racing" in line and "max_grid_points=10000" in line
    with open_dict(cfg):
        cfg.max_grid_points = 10_000
    refuse_oversized(cfg, size, counts)  # the cap raised: the grid runs
    with open_dict(cfg):
        cfg.max_grid_points = 5000
        cfg.hydra.sweeper._target_ = "hydra_plugins.ragexp_racing.RacingSweeper"
    refuse_oversized(cfg, size, counts)  # raced: every point on a few questions first, so no cap


def test_the_bench_reads_a_grids_first_lines_and_a_run_without_one_has_no_median():
    """bench/input_caps.py: seconds to the size and progress lines as `lines_until` gives them, medians of 3."""
    sys.path.insert(0, str(ROOT / "bench"))
    from input_caps import line_times, medians

    size, progress = "ragexp: a grid of 1,000 points; checking each", "ragexp: checked 17 of 1,000 grid points in 1 s"
    first = line_times([(0.9, size), (1.2, "[hydra] something else"), (2.0, progress)])
    assert first == {"size_line_s": 0.9, "progress_line_s": 2.0, "progress_line": progress}
    silent = line_times([(0.4, size)])
    assert silent["size_line_s"] == 0.4 and silent["progress_line_s"] is None
    runs = [{**first, "load_1min": 3.1}, {**line_times([(0.5, size), (3.0, progress)]), "load_1min": 3.0}]
    said = medians([*runs, {**first, "load_1min": 2.0}], "size_line_s", "progress_line_s", load_at_end=2.5)
    assert (said["size_line_s"], said["progress_line_s"], said["load_1min"]) == (0.9, 2.0, [3.1, 2.5])
    unsaid = medians([*runs, {**silent, "load_1min": 2.0}], "size_line_s", "progress_line_s", load_at_end=2.5)
    assert unsaid["progress_line_s"] is None  # a run that never said it: no median that hides it


def test_the_benchs_process_tree_counts_a_child_sharing_its_parents_memory_once():
    """bench/grids.py's tree peak: a child between vfork and exec (the same virtual and resident sizes
    as its parent) is its parent's memory, not more; a child with memory of its own adds it."""
    sys.path.insert(0, str(ROOT / "bench"))
    from grids import memory_of, resident_mb

    ragexp, vforked_git, worker = (1, 900, 230), (10, 900, 230), (10, 500, 80)  # (parent, virtual, resident)
    assert resident_mb({10: ragexp, 11: vforked_git}, page_bytes=2**20) == 230
    assert resident_mb({10: ragexp, 11: vforked_git, 12: worker}, page_bytes=2**20) == 310
    assert resident_mb({11: vforked_git, 12: worker}, page_bytes=2**20) == 310  # its parent left out: counted
    [(parent, virtual, resident)] = memory_of([os.getpid()]).values()
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    assert parent == os.getppid()
    assert abs(virtual - int(status["VmSize"].split()[0]) * 1024) < 2**26  # the fields read are the sizes
    assert abs(resident * os.sysconf("SC_PAGE_SIZE") - int(status["VmRSS"].split()[0]) * 1024) < 2**26


def lines_until(proc: subprocess.Popen, wanted: str, within_s: float) -> tuple[list[tuple[float, str]], bool]:
    """The stderr lines (seconds since `proc` started, text) until one holds `wanted`, or `within_s` passes."""
    selector = selectors.DefaultSelector()
    selector.register(proc.stderr, selectors.EVENT_READ)
    started, seen, buffer = proc.started, [], b""  # type: ignore[attr-defined]
    while time.monotonic() - started < within_s:
        if not selector.select(timeout=0.1):
            if proc.poll() is not None:
                break
            continue
        chunk = os.read(proc.stderr.fileno(), 65536)
        if not chunk:
            break
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            seen.append((time.monotonic() - started, line.decode(errors="replace")))
            if wanted in seen[-1][1]:
                return seen, True
    return seen, False


def start(tmp_path, *args):
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "ragexp", "-m", *args], cwd=tmp_path, env=cli_env(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    proc.started = started  # type: ignore[attr-defined]
    return proc


@pytest.mark.process
def test_a_grid_over_the_cap_is_refused_before_any_job_and_store(tmp_path):
    proc = start(tmp_path, "retriever.top_k=range(1,101)", "chunker.chunk_size=range(100,200)")
    try:
        seen, found = lines_until(proc, "more than max_grid_points", WITHIN_S)
        assert found, seen
        assert proc.wait(timeout=30) == 2
    finally:
        proc.kill()
    assert not (tmp_path / "mlflow.db").exists() and not list(tmp_path.glob("multirun/*/*/*/.hydra"))


@pytest.mark.process
def test_a_large_grid_prints_its_size_and_progress_before_its_first_job(tmp_path):
    proc = start(tmp_path, "retriever.top_k=range(1,11)", "chunker.chunk_size=range(100,200)", "tracker=none")
    try:
        seen, found = lines_until(proc, "grid points in", WITHIN_S)
    finally:
        proc.kill()
        proc.wait()
    assert found, seen
    assert any("a grid of 1,000 points" in line for _, line in seen)
    assert "checked" in seen[-1][1] and "of 1,000 grid points" in seen[-1][1] and "s left" in seen[-1][1]
