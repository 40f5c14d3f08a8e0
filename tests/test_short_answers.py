"""A short answer ("Port 7070.") is read with its question by both offline judges: supported when a
context sentence about the question states it, flagged when the context does not."""
import sys

import pytest

from conftest import ROOT, SHARED_DATA, needs_shared
from ragexp.judges.short_answers import said, token, tokens
from ragexp.types import Answer, Chunk, Hit, Question
from ragexp.config.build import from_yaml


def hits(*texts):
    return [Hit(Chunk(f"c{n}", f"doc{n}", text), 1.0, n) for n, text in enumerate(texts, 1)]


# the first example of docs/get-started/own-system.md, its rows as they are there
DOCS_ROWS = [
    ("Which port does quarryd listen on?", "quarryd listens on port 7070.", "Port 7070.", False),
    ("How long can a job stay active?", "Queues have no hard limit.", "12 hours.", True),
    ("How often are the OIDC keys refreshed?", "quarryd refreshes the signing keys every 15 minutes.",
     "Every 15 minutes.", False),
]


@pytest.fixture(scope="module")
def judges(minilm):
    embedder = minilm
    return [from_yaml("judge/offline", embedder=embedder, hallucination_share=0.2), from_yaml("judge/offline_learned", embedder=embedder)]


@pytest.mark.parametrize("question, context, answer, flagged", DOCS_ROWS)
def test_the_docs_first_example_flags_only_the_answer_its_context_lacks(judges, question, context, answer, flagged):
    for judge in judges:
        j = judge.judge(Question("q", question, ()), hits(context), Answer(answer))
        assert j.hallucination is flagged, (judge.name, j.reasoning)
        assert "a short answer read with its question" in j.reasoning
        assert (j.scores["faithfulness"] <= 5.5) is flagged


def test_reworded_and_written_otherwise_a_short_answer_is_still_supported(judges):
    question = Question("q", "When did the Quarry project start?", ())
    context = hits("The Quarry project started on April 23, 1998 in Oslo. It has 1,200 contributors.")
    for judge in judges:
        for answer in ("It is April 23, 1998.", "23 April 1998.", "The answer is 23rd April 1998."):
            assert not judge.judge(question, context, Answer(answer)).hallucination, (judge.name, answer)
        assert judge.judge(question, context, Answer("April 23, 1997.")).hallucination  # a number the context lacks
        assert judge.judge(Question("n", "How many contributors does Quarry have?", ()), context,
                           Answer("1200.")).hallucination is False


def test_a_name_from_a_sentence_about_something_else_is_not_taken_for_the_answer(minilm):
    """The right name's sentence is about the question; the swapped one's, about the weather, is not
    (with a margin narrower than the default, which keeps false alarms on supported answers low)."""
    judge = from_yaml("judge/offline", embedder=minilm, question_fit_margin=0.2)
    question = Question("q", "Who founded the Quarry job queue?", ())
    context = hits("The Quarry job queue was founded by Ada Lindqvist in Oslo.",
                   "Berlin had a very rainy summer, said Tomas Berg on the radio.")
    assert not judge.judge(question, context, Answer("Ada Lindqvist.")).hallucination
    swapped = judge.judge(question, context, Answer("Tomas Berg."))
    assert swapped.hallucination and "no context sentence about the question states it" in swapped.reasoning
    assert not from_yaml("judge/offline", embedder=minilm, question_fit_margin=1.0).judge(question, context, Answer("Tomas Berg.")).hallucination


def test_a_short_answer_that_is_context_text_is_supported_as_it_stands():
    judge = from_yaml("judge/offline", embedder=from_yaml("embedder/hash"), question_fit_margin=0.0)
    j = judge.judge(Question("q", "Which port does quarryd listen on?", ()),
                    hits("quarryd listens on port 7070.", "The admin console listens on port 9000."),
                    Answer("The admin console listens on port 9000."))
    assert not j.hallucination and "1 of 1 answer sentences supported" in j.reasoning


def test_what_a_short_answer_adds_to_its_question():
    assert said("Which port does quarryd listen on?", "It is port 7070.", 12) == {"7070"}
    # an option the question names: its own words are what the context must state
    assert said("Which band has more members, Kitchens of Distinction or Royal Blood?", "Royal Blood.", 12) == {
        "royal", "blood"}
    assert said("Is Quarry written in Go?", "Yes.", 12) == set()  # yes or no: read as any other answer
    assert said("Which port?", " ".join(["word"] * 13), 12) == set()  # not short
    assert said("Which port?", "Port 7070.", 0) == set()  # short answers not read so
    assert [token(w) for w in ("1,000", "23rd", "Sept", "September", "hours", "class")] == [
        "1000", "23", "september", "september", "hour", "class"]
    assert tokens("The answer is 12 hours.") == {"answer", "12", "hour"}


def test_a_long_answer_is_judged_sentence_by_sentence_as_before():
    judge = from_yaml("judge/offline", embedder=from_yaml("embedder/hash"))
    j = judge.judge(Question("q", "Which port does quarryd listen on?", ()), hits("quarryd listens on port 7070."),
                    Answer("quarryd listens on port 7070. It was written in Rust by a team of twelve people."))
    assert "a short answer" not in j.reasoning and "1 of 2 answer sentences supported" in j.reasoning


@needs_shared("hotpotqa_ircot_dev500")
@needs_shared("autorag_msmarco")
def test_the_bench_set_has_both_kinds_in_both_parts():
    sys.path.insert(0, str(ROOT / "bench"))
    from short_answers import load

    items = load(SHARED_DATA)
    for part in ("tune", "heldout"):
        kinds = {(i.set, i.kind) for i in items if i.part == part}
        assert {("hotpotqa", "swapped"), ("msmarco", "swapped"), ("hotpotqa", "other_question"),
                ("hotpotqa", "verbatim"), ("msmarco", "reworded")} <= kinds
    assert not {i.group for i in items if i.part == "tune"} & {i.group for i in items if i.part == "heldout"}
    assert all(i.answer.strip() and i.passages for i in items)
