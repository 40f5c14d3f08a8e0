"""An offline judge's texts are embedded for all the answers it has not judged yet, in one call
before judging (OfflineJudge.judge_all): the same judgements, the judge finds every vector
it needs waiting, and answers already judged (in the stage cache) cost no embedding."""
from ragexp.components.embedders import HashEmbedder
from ragexp.judges.offline import OfflineJudge
from ragexp.judges.judging import Judging, judged_results
from ragexp.run.work import Work
from ragexp.types import Answer, Chunk, Hit, Question, QuestionResult
from ragexp.config.build import from_yaml

CONTEXT = ("quarryd listens on port 7070. It is written in Go. Backups run nightly at 02:00 UTC. "
           "Restores need the admin role.")
ANSWERS = ["Port 7070.", "quarryd listens on port 7070 and is written in Go.", "The moon is made of cheese.",
           "Nightly, at 2 am UTC.", "I don't know.", "It listens on port 8080. It is written in Rust."]


class Counting(HashEmbedder):
    calls: list[list[str]]

    def embed_batch(self, texts):
        self.calls.append(list(texts))
        return super().embed_batch(texts)


def results() -> list[QuestionResult]:
    hits = (Hit(Chunk("ops#0", "ops", CONTEXT), 0.9, 1), Hit(Chunk("ops#1", "ops", "Quarry runs jobs."), 0.5, 2))
    return [QuestionResult(Question(f"q{i}", "Which port does quarryd listen on?", ("7070",)), hits, Answer(text))
            for i, text in enumerate(ANSWERS)] + [QuestionResult(Question("q9", "Unanswered?", ()), hits)]


def judge_in(work: Work) -> OfflineJudge:
    with work.embeddings.building():
        embedder = from_yaml("embedder/hash", _target_=Counting)
        embedder.calls = []
        return from_yaml("judge/offline", embedder=embedder, name="offline-hash")


def test_the_texts_are_embedded_in_one_call_before_judging_and_the_judgements_are_the_same(tmp_path):
    work = Work(from_yaml("cache", dir=str(tmp_path / "cache")))
    judge = judge_in(work)
    ahead, _ = judged_results(judge, results(), work, {"judge": "offline-hash"})
    assert len(judge.embedder.calls) == 1  # every text the judge embeds was in that call
    assert len(judge.embedder.calls[0]) == len(set(judge.embedder.calls[0]))  # each text once

    plain_work = Work(from_yaml("cache", dir=str(tmp_path / "plain"), enabled=False))
    plain_judge = judge_in(plain_work)
    one = Judging(plain_work, {"judge": "offline-hash"})
    plain = [one.one(plain_judge, r) if r.answer else None for r in results()]  # question by question
    assert len(plain_judge.embedder.calls) > 1  # question by question
    assert [r.judgement for r in ahead] == plain
    assert ahead[-1].judgement is None and ahead[0].judgement.scores["faithfulness"] == 10.0


def test_answers_already_judged_are_not_embedded_again(tmp_path):
    first = Work(from_yaml("cache", dir=str(tmp_path / "cache")))
    judged_results(judge_in(first), results(), first, {"judge": "offline-hash"})
    again = Work(from_yaml("cache", dir=str(tmp_path / "cache")))
    judge = judge_in(again)
    rows = results()
    rows[2] = QuestionResult(rows[2].question, rows[2].hits, Answer("A new answer about Rust. It is fast."))
    judged_results(judge, rows, again, {"judge": "offline-hash"})
    embedded = {text for call in judge.embedder.calls for text in call}
    assert "A new answer about Rust." in embedded and ANSWERS[1] not in embedded


def test_a_monitors_sample_is_embedded_ahead_too(tmp_path):
    from ragexp.monitor.judging import SampleJudge

    work = Work(from_yaml("cache", dir=str(tmp_path / "cache")))
    judge = judge_in(work)
    sample = SampleJudge(judge, work, {"judge": "offline-hash"})
    judged = sample.judge_all([(f"log:{i}", "Which port does quarryd listen on?", [CONTEXT], text)
                               for i, text in enumerate(ANSWERS)] + [("log:9", "Why?", [{"score": True}], "No.")])
    assert len(judge.embedder.calls) == 1
    assert [bool(s.failure) for s in judged] == [False] * len(ANSWERS) + [True]
