"""Progress on long work, quiet when quick: the lines a task is due by a clock the test gives (no
waiting), the items counted off a terminal, and a run's own time without model loading."""
import pytest

from ragexp.base import progress as p


def test_a_task_says_nothing_while_quick_then_a_line_every_so_often_and_when_it_ends():
    board = p.Board(quiet=10, every=30)
    task = board.start("judging", 100_000, now=0.0)
    assert board.due(5.0) == [] and board.due(9.9) == []
    task.done = 12_000
    assert board.due(10.0) == ["judging: 12,000 of 100,000 (12%), 10 s"]
    assert board.due(25.0) == []
    task.done = 40_000
    assert board.due(70.0) == ["judging: 40,000 of 100,000 (40%), 1 min 10 s"]
    task.done = 100_000
    assert board.end(task, 75.0) == "judging: 100,000 of 100,000 done in 1 min 15 s"
    assert board.tasks == [] and board.due(200.0) == []


def test_quick_work_ends_without_a_word_and_uncounted_work_says_how_long():
    board = p.Board(quiet=10, every=30)
    quick = board.start("chunking", 12, now=0.0)
    assert board.end(quick, 9.0) is None
    loading = board.start("loading the embedding model all-MiniLM-L6-v2 (torch)", None, now=100.0)
    assert board.due(112.0) == ["loading the embedding model all-MiniLM-L6-v2 (torch): 12 s so far"]
    assert board.end(loading, 3700.0) == "loading the embedding model all-MiniLM-L6-v2 (torch): done in 1 h 00 min"


@pytest.mark.parametrize("seconds, said", [(0, "0 s"), (59.9, "59 s"), (60, "1 min 00 s"), (3599, "59 min 59 s"),
                                           (7380, "2 h 03 min")])
def test_durations_read_as_people_say_them(seconds, said):
    assert p.duration(seconds) == said


def test_off_a_terminal_the_items_pass_through_counted_on_the_board():
    items = iter(p.progress(["a", "b", "c"], desc="embedding (minilm)", total=3))  # pytest's stderr is no terminal
    assert next(items) == "a"
    [task] = [t for t in p.BOARD.tasks if t.what == "embedding (minilm)"]
    assert (task.total, task.done) == (3, 0)
    assert next(items) == "b" and task.done == 1
    assert list(items) == ["c"] and task.done == 3
    assert task not in p.BOARD.tasks


def test_loading_keeps_its_seconds_and_a_block_of_work_leaves_the_board():
    before = p.loading_seconds()
    with p.loading("a model"):
        assert any(t.what == "loading a model" for t in p.BOARD.tasks)
    assert p.loading_seconds() >= before and not any(t.what == "loading a model" for t in p.BOARD.tasks)
    with pytest.raises(ValueError):
        with p.working("logging the run"):
            raise ValueError("boom")
    assert not any(t.what == "logging the run" for t in p.BOARD.tasks)


def test_a_runs_own_time_leaves_out_model_loading_and_counts_a_served_stage_as_computed(tmp_path, monkeypatch):
    from ragexp.run import work as w
    from ragexp.config.build import from_yaml

    loaded = iter([0.0, 100.0])  # the model took "100 s" to load during the stage
    monkeypatch.setattr(w, "loading_seconds", lambda: next(loaded))
    first = w.Work(from_yaml("cache", dir=str(tmp_path / "cache")))
    assert w.own_stage(first, "chunking", "k1", lambda docs: list(docs), ["d"]) == ["d"]
    assert first.seconds["own"] == 0.0 and first.seconds["chunking"] >= 0  # job_time and stage time keep their span
    first.cache.put(w.OWN_STORED_AS, "k1", 123.0)  # as if computing it had taken 123 s
    monkeypatch.setattr(w, "loading_seconds", lambda: 0.0)
    served = w.Work(from_yaml("cache", dir=str(tmp_path / "cache")))
    assert w.own_stage(served, "chunking", "k1", lambda docs: pytest.fail("served, not computed"), ["d"]) == ["d"]
    assert served.seconds["own"] == 123.0 and served.cache.stats["chunks_cached"] == 1
