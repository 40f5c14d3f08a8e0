"""Judging has one home (ragexp.judges.judging): every door that judges (the pipeline, calibrate
--outputs, the monitor) goes through one cached path, which keeps only whole judgements; and a judge
that needs the whole run is a judge like any other, added without touching ragexp/run/."""
import json
import threading

from conftest import run_app

from ragexp.calibrate.outputs import compose, judge_rows, labelled_rows
from ragexp.config.build import build
from ragexp.errors import QuestionFailed
from ragexp.judges.contract import Judge, Run
from ragexp.judges.judging import judged_results
from ragexp.judges.offline import OfflineJudge
from ragexp.monitor.judging import SampleJudge
from ragexp.run.work import Work
from ragexp.types import Answer, Judgement, Question, QuestionResult

HERE = __name__  # this module, as a `_target_` (tests/ is on the path)
FAST = ["embedder=hash", "embedder@scoring_embedder=hash", "retriever=bm25", "dataset.limit=5", "tracker=none"]
ASKED: dict[str, int] = {}
LOCK = threading.Lock()


class PartlyFailingJudge(OfflineJudge):
    """The offline judge, but one of its criteria always fails (as a rubric criterion whose reply
    cannot be read): its judgements are partial. It counts how often it is asked, per answer."""

    def judge(self, question, hits, answer):
        with LOCK:
            ASKED[answer.text] = ASKED.get(answer.text, 0) + 1
        judgement = super().judge(question, hits, answer)
        return Judgement(judgement.judge, judgement.scores, judgement.hallucination, judgement.reasoning,
                         {**judgement.details, "failed_criteria": {"b": "unreadable"}})


def answered(n: int = 3) -> list[QuestionResult]:
    from ragexp.components.systems import hits_from_contexts

    return [QuestionResult(Question(f"q{i}", f"Which port does component {i} use?", (f"Port {7400 + i}.",)),
                           tuple(hits_from_contexts([f"Component {i} listens on port {7400 + i}."])),
                           Answer(f"Port {7400 + i}, says answer {i}.")) for i in range(n)]


def test_a_partial_judgement_is_never_served_from_the_cache_whichever_door_judged_first(tmp_path):
    """calibrate --outputs once stored partial judgements under the pipeline's key, which a later run served
    as whole: each door now asks again for a judgement with a failed criterion, and never serves one."""
    rows = tmp_path / "labelled.jsonl"
    rows.write_text("".join(json.dumps({"id": r.question.qid, "question": r.question.text, "answer": r.answer.text,
                                        "contexts": [h.chunk.text for h in r.hits], "reference": r.question.answers[0],
                                        "hallucination": "no"}) + "\n" for r in answered()))
    cfg = compose(["embedder@scoring_embedder=hash", f"judge._target_={HERE}.PartlyFailingJudge",
                   f"cache.dir={tmp_path / 'cache'}"])
    ASKED.clear()
    labelled, _ = labelled_rows(rows, cfg)
    _, first = judge_rows(labelled, cfg)  # calibrate's door
    assert all(isinstance(j, Judgement) and j.details["failed_criteria"] == {"b": "unreadable"} for j in first)
    work = Work(build(cfg.cache))
    with work.embeddings.building():
        judge = build(cfg.judge)
    from ragexp.config.build import settings

    results, _ = judged_results(judge, answered(), work, settings(cfg.judge))  # the pipeline's door, same cache
    monitor = SampleJudge(judge, work, settings(cfg.judge))  # the monitor's door
    sampled = monitor.judge_all([(r.question.qid, r.question.text, [h.chunk.text for h in r.hits], r.answer.text)
                                 for r in answered()])
    assert all(r.judgement is not None and r.judgement.details["failed_criteria"] for r in results)
    assert all(s.judgement is not None for s in sampled)
    assert sorted(ASKED.values()) == [3, 3, 3]  # asked by every door: nothing partial was stored


class LengthRank(Judge):
    """A judge of the whole run, as a cascade is: each answer's length judged on its own (cached like
    any judgement), then ranked among the run's answers, which needs all of them at once."""

    name = "length-rank"
    metrics = ("length_rank",)
    scales = {"length_rank": (0.0, 1.0)}
    weights = {"length_rank": 1.0}
    flags_hallucination = False

    def __init__(self, **_settings):
        pass

    def judge(self, question, hits, answer):
        return Judgement(self.name, {"length_rank": 0.0}, None, "", {"length": len(answer.text)})

    def judge_all(self, items, run: Run):
        each = run.each(self, items)
        lengths = sorted({j.details["length"] for j in each if isinstance(j, Judgement)})
        run.note(f"{self.name}: {len(lengths)} distinct answer lengths ranked")
        top = max(len(lengths) - 1, 1)
        return [Judgement(self.name, {"length_rank": lengths.index(j.details["length"]) / top}, None, "ranked", j.details)
                if isinstance(j, Judgement) else j for j in each]


def test_a_judge_of_the_whole_run_is_added_without_touching_the_run(tmp_path):
    done = run_app(*FAST, f"judge._target_={HERE}.LengthRank", "weights=judge", f"hydra.run.dir={tmp_path}/run",
                   f"cache.dir={tmp_path}/cache", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "note: length-rank: 5 distinct answer lengths ranked" in done.stdout
    [aggregates] = json.loads((tmp_path / "run" / "results.json").read_text()).values()
    assert aggregates["avg_length_rank"] == 0.5 and aggregates["judge"] == "length-rank"  # ranks 0, .25, .5, .75, 1


class Failing(Judge):
    name, metrics, scales = "failing", ("x",), {"x": (0.0, 1.0)}

    def judge(self, question, hits, answer):
        raise QuestionFailed("judge: HTTP 503 after 3 attempts")


def test_a_failed_request_fails_its_question_with_the_reason_and_is_not_stored(tmp_path):
    cfg = compose([f"cache.dir={tmp_path / 'cache'}"])
    work = Work(build(cfg.cache))
    results, notes = judged_results(Failing(), [*answered(2), QuestionResult(Question("q9", "?", ()), failure="system: down")],
                                    work, {"judge": "failing"})
    assert [r.failure for r in results] == ["judge: HTTP 503 after 3 attempts"] * 2 + ["system: down"]
    assert all(r.judgement is None for r in results) and notes == []
    assert work.cache.stats["judgements_computed"] == 2 and not list((tmp_path / "cache").rglob("judgements/*/*"))
