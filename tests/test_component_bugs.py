"""Bugs are bugs (docs/concepts/failures.md): an unexpected exception in a component ends the run with
exit status 1 and its traceback; the expected per-question failures (the `QuestionFailed` family:
endpoint errors, unreadable replies, missing fields, the budget) fail only their question."""
import json
import sys

from conftest import run_app

from ragexp.components.rerankers import Reranker
from ragexp.errors import QuestionFailed
from ragexp.judges.offline import OfflineJudge
from ragexp.types import Answer

FAST = ["embedder=hash", "embedder@scoring_embedder=hash", "retriever=bm25", "dataset.limit=4", "tracker=none"]
HERE = __name__  # this module, as a `_target_` (tests/ is on the path)


class GeneratorWithABug:
    """Answers with the first hit, but raises `error` (a bug, or an expected failure) on its
    `fail_at`-th question (it runs in the calling thread: one question after another)."""

    def __init__(self, fail_at: int = 2, error: str = "bug", **_):
        self.fail_at, self.error, self.calls = fail_at, error, 0

    def generate(self, question: str, hits) -> Answer:
        self.calls += 1
        if self.calls == self.fail_at:
            if self.error == "expected":
                raise QuestionFailed("generator: HTTP 503 after 3 attempts")
            return Answer(str({}["missing"]))  # KeyError: a bug in the component
        return Answer(hits[0].chunk.text if hits else "")


class JudgeWithABug(OfflineJudge):
    """The offline judge, with a bug on every question: an unexpected exception of the judge."""

    def judge(self, question, hits, answer):
        return 1 / 0


class RerankerWithABug(Reranker):
    """A reranker with a bug on every question (no model needed)."""

    candidates = 5

    def rerank(self, question, hits):
        return [hits[len(hits)]]  # IndexError: a bug in the component


class GeneratorThatExits:
    """A generator with sys.exit() left in it."""

    def __init__(self, **_):
        pass

    def generate(self, question: str, hits) -> Answer:
        sys.exit(3)


def ragexp(tmp_path, *args: str):
    """`python -m ragexp ARGS` in `tmp_path`, in this process (conftest.run_app): its exit status and output."""
    return run_app(*args, f"hydra.run.dir={tmp_path}/run", f"cache.dir={tmp_path}/cache", cwd=tmp_path)


def test_a_bug_in_the_generator_ends_the_run_with_1_and_its_traceback(tmp_path):
    done = ragexp(tmp_path, *FAST, f"generator._target_={HERE}.GeneratorWithABug")
    code, err = done.returncode, done.stderr
    assert code == 1
    assert "Traceback" in err and "KeyError: 'missing'" in err and "GeneratorWithABug" in err
    assert not (tmp_path / "run" / "results.json").exists()  # no numbers from a run with a bug


def test_a_bug_in_the_judge_ends_the_run_with_1(tmp_path):
    done = ragexp(tmp_path, *FAST, f"judge._target_={HERE}.JudgeWithABug")
    code, err = done.returncode, done.stderr
    assert code == 1 and "ZeroDivisionError" in err and "Traceback" in err
    assert not (tmp_path / "run" / "results.json").exists()


def test_an_expected_failure_fails_its_question_only(tmp_path):
    done = ragexp(tmp_path, *FAST, f"generator._target_={HERE}.GeneratorWithABug", "+generator.error=expected")
    code, out = done.returncode, done.stdout
    assert code == 0  # 1 of 4 failed: within max_failed_share
    [results] = json.loads((tmp_path / "run" / "results.json").read_text()).values()
    assert results["failed_questions"] == 1 and results["total_questions"] == 4
    assert "failed (1): generator: HTTP 503 after 3 attempts" in out


def test_a_bug_in_the_reranker_ends_the_run_with_1(tmp_path):
    done = ragexp(tmp_path, *FAST, f"reranker._target_={HERE}.RerankerWithABug")
    code, err = done.returncode, done.stderr
    assert code == 1
    assert "Traceback" in err and "IndexError" in err and "RerankerWithABug" in err
    assert not (tmp_path / "run" / "results.json").exists()


def test_sys_exit_in_a_component_ends_the_run_with_4_naming_it(tmp_path):
    """Not a bug but code that ends the run (docs/concepts/failures.md): exit 4, one line naming it."""
    done = ragexp(tmp_path, *FAST, f"generator._target_={HERE}.GeneratorThatExits")
    assert done.returncode == 4, done.stderr
    [line] = done.stderr.strip().splitlines()
    assert line.startswith("ragexp: error: SystemExit(3) was raised in generate() at ") and "test_component_bugs.py:" in line
    assert not (tmp_path / "run" / "results.json").exists()
