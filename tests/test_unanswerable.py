"""Questions the corpus cannot answer: marked by the loaders, abstained from by the generator,
scored by the judges (an abstention is right, a confident answer is a hallucination) and measured
(abstention rate, precision and recall, answered-unanswerable rate)."""
import json

import pytest

from conftest import HASH, run_app
from ragexp.judges.llm import expected_text
from ragexp.metrics.generation import abstains, abstention_scores
from ragexp.types import Question

DOCS = {"port": "The Quarry server listens on port 7400 by default.",
        "dlq": "Failed jobs go to the dead-letter queue after five attempts.",
        "auth": "Clients send a bearer token that rotates every thirty days.",
        "cron": "Scheduled runs use cron expressions in the UTC time zone.",
        "logs": "Logs are written as JSON lines to standard error."}
QUESTIONS = [
    {"id": "a1", "question": "Which port does the Quarry server listen on?", "answer": "port 7400"},
    {"id": "a2", "question": "When do failed jobs go to the dead-letter queue?", "answer": "after five attempts"},
    {"id": "u1", "question": "What colour is the mascot?", "answerable": False},
    {"id": "u2", "question": "Who founded the company?", "answerable": "false"},
]


@pytest.mark.parametrize("answer", ["I don't know.", "", "The documents do not mention the mascot.",
                                    "There is not enough information to answer.", "I do not know"])
def test_abstentions_are_recognised(answer):
    assert abstains(answer)


@pytest.mark.parametrize("answer", ["Port 7400.", "It listens on port 7400, as the docs say.",
                                    "X does not provide a GUI, and it listens on port 9999.",
                                    "Quarry stores no information about its users. It listens on port 9999.",
                                    "The GUI is not available.", "I'm sorry, but Quarry listens on port 9999.",
                                    "The documents do not mention it. It listens on port 9999. It is written in Rust."])
def test_answers_are_not_abstentions(answer):
    """A negative phrase is not an abstention unless it is about knowing or about the documents,
    and an answer whose first sentence declines but which goes on to claim more is an answer."""
    assert not abstains(answer)


def test_the_extractive_generators_abstention_is_one():
    """One definition: what the extractive generator says when it abstains counts as abstaining."""
    from conftest import compose

    assert abstains(compose("generator=extractive").generator.abstention)  # its YAML holds it, once


def test_abstention_scores_per_question():
    assert abstention_scores("I don't know", answerable=False) == {
        "abstention": 1.0, "abstention_recall": 1.0, "answered_unanswerable": 0.0, "abstention_precision": 1.0}
    assert abstention_scores("Blue.", answerable=False) == {
        "abstention": 0.0, "abstention_recall": 0.0, "answered_unanswerable": 1.0}
    assert abstention_scores("I don't know", answerable=True) == {"abstention": 1.0, "abstention_precision": 0.0}
    # questions none of which is marked unanswerable: an abstention is neither right nor wrong
    assert abstention_scores("I don't know", answerable=True, labelled=False) == {"abstention": 1.0}
    assert abstention_scores("Port 7400.", answerable=True) == {"abstention": 0.0}


def test_the_llm_judge_is_told_what_to_expect():
    assert "UNANSWERABLE" in expected_text(Question("u", "?", (), answerable=False))
    assert expected_text(Question("q", "?", ("7400", "port 7400"))) == "any of:\n- 7400\n- port 7400"
    assert expected_text(Question("q", "?", ("7400",))) == "7400"


def dataset(tmp_path, questions=QUESTIONS):
    data = tmp_path / "data"
    data.mkdir()
    (data / "corpus.jsonl").write_text("".join(json.dumps({"doc_id": d, "text": t}) + "\n" for d, t in DOCS.items()))
    (data / "questions.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions))
    return data


def run(tmp_path, *args):
    proc = run_app("dataset=jsonl", f"dataset.path={dataset(tmp_path)}", "retriever=bm25", "retriever.top_k=1",
                   "tracker=none", "hydra.run.dir=run", *HASH, *args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [values] = json.loads((tmp_path / "run" / "results.json").read_text()).values()
    records = {r["question_id"]: r for r in map(json.loads, (tmp_path / "run" / "questions.jsonl").read_text().splitlines())}
    return proc, values, records


def test_an_abstaining_generator_is_scored_right_on_unanswerable_questions(tmp_path):
    proc, values, records = run(tmp_path, "generator.abstain_below=0.2")
    assert values["failed_questions"] == 0 and "marked unanswerable" in proc.stdout
    assert [records[q]["answer"] for q in ("u1", "u2")] == ["I don't know."] * 2
    assert all(not abstains(records[q]["answer"]) for q in ("a1", "a2"))
    assert values["avg_abstention"] == 0.5 and values["avg_abstention_precision"] == 1.0
    assert values["avg_abstention_recall"] == 1.0 and values["avg_answered_unanswerable"] == 0.0
    for q in ("u1", "u2"):
        assert records[q]["judge_scores"]["answer_similarity"] == 10 and records[q]["judge_scores"]["faithfulness"] == 10
        assert records[q]["hallucination"] is False and "rightly abstained" in records[q]["reasoning"]
    assert values["hallucination_rate"] == 0.0


def test_answering_an_unanswerable_question_counts_against_the_run(tmp_path):
    _, values, records = run(tmp_path)  # the extractive generator answers everything
    assert values["avg_answered_unanswerable"] == 1.0 and values["avg_abstention_recall"] == 0.0
    assert "avg_abstention_precision" not in values  # nothing abstained
    for q in ("u1", "u2"):
        assert records[q]["judge_scores"]["answer_similarity"] == 1 and records[q]["hallucination"] is True
    assert values["hallucination_rate"] == 0.5
    (tmp_path / "lenient").mkdir()
    _, lenient, _ = run(tmp_path / "lenient", "judge.answered_unanswerable_hallucinates=false")
    assert lenient["hallucination_rate"] == 0.0 and lenient["overall_score"] > values["overall_score"]


@pytest.mark.parametrize("row,message", [
    ({"id": "x", "question": "?", "answerable": "maybe"}, "answerable (answerable) must be true or false, got 'maybe'"),
    ({"id": "x", "question": "?", "answerable": False, "answer": "Blue"}, "a question marked unanswerable"),
])
def test_bad_answerable_fields_name_the_line(tmp_path, row, message):
    data = dataset(tmp_path, [*QUESTIONS[:1], row])
    proc = run_app("dataset=jsonl", f"dataset.path={data}", "tracker=none", *HASH, cwd=tmp_path)
    assert proc.returncode == 2 and f"questions.jsonl:2: {message}" in proc.stderr


def test_without_unanswerable_marks_abstentions_get_no_precision(tmp_path):
    """None of the questions is marked unanswerable: an abstaining generator's abstentions are
    counted, but no precision of 0 says they were wrong (there is nothing to be right about)."""
    data = dataset(tmp_path, [q for q in QUESTIONS if q.get("answerable", True) is True])
    proc = run_app("dataset=jsonl", f"dataset.path={data}", "retriever=bm25", "retriever.top_k=1", "tracker=none",
                   "hydra.run.dir=run", *HASH, "generator.abstain_below=1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [values] = json.loads((tmp_path / "run" / "results.json").read_text()).values()
    assert values["avg_abstention"] == 1.0 and "avg_abstention_precision" not in values
    assert "abstention_precision" not in proc.stdout
