"""The offline judge never contradicts the extractive generator's construction, flags a copied sentence
with one number, name or negation changed, embeds only where words do not decide, and its
answer_similarity is a signal of its own (the words of the best expected answer)."""
import json

import pytest

from conftest import SHARED_DATA, needs_shared
from ragexp.components.embedders import HashEmbedder
from ragexp.judges.offline import verbatim
from ragexp.metrics.generation import token_recall
from ragexp.types import Answer, Chunk, Hit, Question
from ragexp.config.build import from_yaml

HOTPOT = SHARED_DATA / "hotpotqa_ircot_dev500" / "dev_subsampled.jsonl"


def hits_of(paragraphs):
    return [Hit(Chunk(f"{title}#0", title, text), 1.0, rank) for rank, (title, text) in enumerate(paragraphs, 1)]


def test_fragments_joined_across_a_missing_full_stop_are_verbatim():
    context = "Quarry 2.1 added retries with backoff for failed jobs\nThe scheduler runs every minute. Other text."
    joined = "Quarry 2.1 added retries with backoff for failed jobs The scheduler runs every minute."
    assert joined not in context  # what the old `sentence in context` test missed
    assert verbatim(joined, [context])
    assert not verbatim("Quarry 2.1 added retries with a purple giraffe.", [context])
    assert not verbatim("jobs run", ["failed jobs\nThe scheduler run"])  # a piece under 12 characters is a whole sentence or nothing


QUARRY = [Hit(Chunk("quarry#0", "quarry", "The Quarry server listens on port 7400 by default. It is written in Go."), 0.9, 1),
          Hit(Chunk("vault#0", "vault", "The Vault server listens on port 9000. Vault stores secrets."), 0.8, 2)]
PORT = Question("q", "Which port does the Quarry server listen on?", ("port 7400",))


def test_a_sentence_stitched_from_two_passages_is_not_verbatim():
    """Each piece of the claim is in the context, but from two passages about two servers."""
    passages = [h.chunk.text for h in QUARRY]
    assert not verbatim("The Quarry server listens on port 9000.", passages)
    assert not verbatim("The Quarry server listens on port 9000 by default.", passages)
    assert verbatim("The Quarry server listens on port 7400 by default.", passages)
    assert verbatim("The Vault server listens on port 9000.", passages)


@pytest.mark.parametrize("support_threshold", [0.8, 0.3])
def test_the_judge_flags_a_number_taken_from_another_passage(support_threshold):
    """Every word pair of the claim is in the context, but its number and its name in two passages about
    two servers: unsupported, however low the share of words asked for."""
    judge = from_yaml("judge/offline", embedder=from_yaml("embedder/hash"), support_threshold=support_threshold)
    wrong = judge.judge(PORT, QUARRY, Answer("The Quarry server listens on port 9000."))
    assert wrong.hallucination and wrong.scores["faithfulness"] < 10
    said = from_yaml("judge/offline", embedder=from_yaml("embedder/hash")).judge(Question("s", "Summarise the documents.", ()), QUARRY, Answer(
        "The Quarry server listens on port 9000."))  # read as a claim of its own, not as a short answer
    assert said.hallucination and "not stated: 9000" in said.reasoning
    right = judge.judge(PORT, QUARRY, Answer("The Quarry server listens on port 7400 by default."))
    assert not right.hallucination and right.scores["faithfulness"] == 10


def test_a_negative_claim_about_the_subject_is_checked_not_taken_for_an_abstention():
    judge = from_yaml("judge/offline", embedder=from_yaml("embedder/hash"))
    j = judge.judge(PORT, QUARRY, Answer("The Quarry server does not provide a GUI, and it listens on port 9999."))
    assert j.hallucination and j.scores["faithfulness"] < 5 and "abstains" not in j.reasoning
    # a real abstention followed by a claim: the abstaining sentence makes no claim, the other one is checked
    k = judge.judge(PORT, QUARRY, Answer("The documents do not say. Quarry listens on port 9999 and is written in Rust."))
    assert k.hallucination and k.scores["claim_hallucination_rate"] == 1.0
    abstained = judge.judge(PORT, QUARRY, Answer("The documents do not mention which port Quarry uses."))
    assert not abstained.hallucination and abstained.scores["faithfulness"] == 10


@pytest.mark.parametrize("max_sentences,max_chars", [(2, 400), (4, 800)])
def test_extractive_answers_from_markdown_chunks_are_verbatim(max_sentences, max_chars):
    """Headings and list items end sentences at line breaks; the generator joins them with spaces, so
    the judge's splitter sees one sentence across fragments (18 of 40 answers at 2 sentences, 30 at 4,
    were not `in` the context). Verbatim context text is supported whatever its words' shares."""
    from hydra.utils import instantiate

    from conftest import compose

    cfg = compose("embedder@scoring_embedder=hash")
    dataset = instantiate(cfg.dataset).load()
    retriever = from_yaml("retriever/bm25", top_k=5)
    retriever.index(instantiate(cfg.chunker).chunk(dataset.documents))
    embedder = from_yaml("embedder/hash")
    generator = from_yaml("generator/extractive", embedder=embedder, max_sentences=max_sentences, max_chars=max_chars)
    judge = from_yaml("judge/offline", embedder=embedder)
    flagged = []
    for question, hits in zip(dataset.questions, retriever.search([q.text for q in dataset.questions])):
        j = judge.judge(question, hits, generator.generate(question.text, hits))
        if j.hallucination:
            flagged.append(question.qid)
    assert len(dataset.questions) == 40 and flagged == []


@needs_shared("hotpotqa_ircot_dev500", "dev_subsampled.jsonl")
def test_extractive_answers_on_long_documents_are_never_flagged():
    embedder = from_yaml("embedder/hash")
    generator = from_yaml("generator/extractive", embedder=embedder, max_sentences=3, max_chars=500)
    judge = from_yaml("judge/offline", embedder=embedder)
    flagged, judged = [], 0
    with HOTPOT.open() as lines:
        for line in list(lines)[:60]:
            row = json.loads(line)
            paragraphs = [(c["title"], c["paragraph_text"]) for c in row["contexts"]]
            hits = hits_of(paragraphs)
            answers = tuple(s for a in row["answers_objects"] for s in a["spans"])
            question = Question(row["question_id"], row["question_text"], answers)
            answer = generator.generate(question.text, hits)
            j = judge.judge(question, hits, answer)
            judged += 1
            if j.hallucination or j.scores["faithfulness"] != 10:
                flagged.append((question.qid, answer.text))
    assert judged == 60 and flagged == []


def test_answer_similarity_takes_the_best_expected_answer_and_is_lexical():
    judge = from_yaml("judge/offline", embedder=from_yaml("embedder/hash"))
    hits = hits_of([("a", "The Quarry server listens on port 7400 by default.")])
    question = Question("q", "Which port?", ("port 9999", "port 7400"))
    j = judge.judge(question, hits, Answer("The Quarry server listens on port 7400 by default."))
    assert j.scores["answer_similarity"] == 10  # every word of the second answer is there
    assert token_recall("listens on port 7400", ["port 9999", "port 7400"]) == 1.0
    assert token_recall("listens on port 7400", ["port 9999"]) == 0.5
    one = judge.judge(Question("q", "Which port?", ("port 9999",)), hits, Answer("It listens on port 7400."))
    assert one.scores["answer_similarity"] == pytest.approx(1 + 9 * 0.5)
    assert "holds 50% of the expected answer's words" in one.reasoning


def test_hallucination_share_flags_only_past_the_share():
    """With hallucination_share 0.2 (the tuned default) 1 unsupported claim of 5 is tolerated, 2 are
    not; with 0, any unsupported claim is a hallucination."""
    facts = ["The Quarry server listens on port 7400 by default.", "It is written in Go."]
    hits = hits_of([("quarry", " ".join(facts))])
    invented = ["Quarry was released in 1999.", "Quarry has 12 maintainers."]
    one = Answer(" ".join(facts + facts + invented[:1]))  # 4 verbatim claims, 1 invented
    two = Answer(" ".join(facts + facts[:1] + invented))  # 3 and 2
    tolerant = from_yaml("judge/offline", embedder=from_yaml("embedder/hash"), hallucination_share=0.2)
    j1, j2 = tolerant.judge(PORT, hits, one), tolerant.judge(PORT, hits, two)
    assert j1.scores["claim_hallucination_rate"] == pytest.approx(0.2) and not j1.hallucination
    assert j2.scores["claim_hallucination_rate"] == pytest.approx(0.4) and j2.hallucination
    assert from_yaml("judge/offline", embedder=from_yaml("embedder/hash"), hallucination_share=0.0).judge(PORT, hits, one).hallucination


def test_a_name_with_digits_is_stated_by_the_passage_that_spells_it():
    """"Quarry0", "GPT-4o", "S3" are names whole: the passage stating "Quarry0" states the claim's
    name (it was read as "quarry", which no passage word equals, so the claim found no support)."""
    from ragexp.judges.offline import anchors, states

    assert {"quarry0", "gpt-4o", "s3"} <= anchors("Runs on Quarry0 with GPT-4o and S3.")
    passage = "Quarry0 listens on port 7400 by default."
    assert states(passage, anchors("By default, port 7400 is where Quarry0 listens."))
    assert not states(passage, anchors("By default, port 7400 is where Quarry1 listens."))
    judge = from_yaml("judge/offline", embedder=from_yaml("embedder/hash"), support_threshold=0.3)
    hits = hits_of([("quarry", passage)])
    paraphrase = judge.judge(PORT, hits, Answer("By default, port 7400 is where Quarry0 listens."))
    assert not paraphrase.hallucination
    wrong = judge.judge(PORT, hits, Answer("By default, port 7400 is where Quarry1 listens."))
    assert wrong.hallucination


def test_a_question_without_a_reference_is_not_said_to_miss_its_words():
    """Rows without a reference got the reasoning "the answer holds 0% of the expected answer's words"."""
    judge = from_yaml("judge/offline", embedder=from_yaml("embedder/hash"))
    hits = [Hit(Chunk("c1", "d1", "quarryd listens on port 7070."), 1.0, 1)]
    unreferenced = judge.judge(Question("q", "Which port does quarryd listen on?", ()), hits, Answer("Port 7070."))
    assert "expected answer's words" not in unreferenced.reasoning
    assert "no expected answer to compare it with" in unreferenced.reasoning
    referenced = judge.judge(Question("q", "Which port does quarryd listen on?", ("Port 7070",)), hits,
                             Answer("Port 7070."))
    assert "the answer holds 100% of the expected answer's words" in referenced.reasoning


# a copied sentence with one number, name or negation changed (to one the context does not state): flagged
PASSAGES = ["The Quarry scheduler was written by Ada Lindqvist in 2019. It retries a failed job 3 times before giving up.",
            "Backups do not run on weekends. The admin console listens on port 9000 and needs the admin role."]
ORIGINAL = ["The Quarry scheduler was written by Ada Lindqvist in 2019.", "It retries a failed job 3 times before giving up.",
            "The admin console listens on port 9000 and needs the admin role.", "Backups do not run on weekends."]
CHANGED = [  # (what changed, the sentence changed, the context sentence it was copied from)
    ("number", "The Quarry scheduler was written by Ada Lindqvist in 2017.", ORIGINAL[0]),
    ("number", "It retries a failed job 5 times before giving up.", ORIGINAL[1]),
    ("number", "The admin console listens on port 9001 and needs the admin role.", ORIGINAL[2]),
    ("name", "The Quarry scheduler was written by Ada Lovelace in 2019.", ORIGINAL[0]),
    ("name", "The Gravel scheduler was written by Ada Lindqvist in 2019.", ORIGINAL[0]),
    ("name", "The admin console listens on port 9000 and needs the Quarry role.", ORIGINAL[2]),
    ("negation", "Backups run on weekends.", ORIGINAL[3]),
    ("negation", "The admin console does not listen on port 9000 and needs the admin role.", ORIGINAL[2]),
    ("negation", "It never retries a failed job 3 times before giving up.", ORIGINAL[1]),
]


@pytest.mark.parametrize("kind, claim, original", CHANGED, ids=[f"{k}-{n}" for n, (k, _, _) in enumerate(CHANGED)])
def test_a_copied_sentence_with_one_thing_changed_is_flagged(kind, claim, original):
    judge = from_yaml("judge/offline", embedder=from_yaml("embedder/hash"))
    question = Question("q", "Summarise the Quarry docs.", ())  # a summary: its sentences are claims of their own
    hits = hits_of([("a", PASSAGES[0]), ("b", PASSAGES[1])])
    j = judge.judge(question, hits, Answer(claim))
    assert j.hallucination and j.scores["claim_hallucination_rate"] == 1.0, j.reasoning
    said = {"number": "not stated", "name": "not stated", "negation": 'saying "not" where the context does not'}[kind]
    assert said in j.reasoning
    copied = judge.judge(question, hits, Answer(original))
    assert not copied.hallucination and copied.scores["faithfulness"] == 10, copied.reasoning
    if kind == "number":  # a number not stated also lowers the score (a name or "not" only flags)
        assert j.scores["faithfulness"] < 10


def test_a_one_sentence_summary_is_not_read_as_a_short_answer():
    """"Summarise the document." asks for a text: a summary of a few words is judged by its words as
    any claim, not held to one context sentence about the "question"."""
    from ragexp.judges.short_answers import instructs

    assert instructs("Summarise the document.") and instructs("Write a summary of the report")
    assert not instructs("Which port does quarryd listen on?") and not instructs("average cost of a patio roof")
    judge = from_yaml("judge/offline", embedder=from_yaml("embedder/hash"))
    hits = hits_of([("a", PASSAGES[0])])
    summary = judge.judge(Question("s", "Summarise the document.", ()), hits,
                          Answer("Ada Lindqvist wrote the Quarry scheduler in 2019."))
    assert "a short answer" not in summary.reasoning and not summary.hallucination
    short = judge.judge(Question("q", "Who wrote the Quarry scheduler?", ()), hits, Answer("It is Ada Lindqvist."))
    assert "a short answer read with its question" in short.reasoning


class Counting(HashEmbedder):
    def embed_batch(self, texts):
        self.seen = [*getattr(self, "seen", []), *texts]
        return super().embed_batch(texts)


def test_words_decide_without_embedding_the_context():
    """The context is read by its words: a long answer embeds only its own sentences (coherence), a
    one-sentence answer nothing, and a short answer the context does not state nothing either; only a
    short answer whose words the context states is embedded with the context's sentences (is that
    sentence about the question?). `texts_to_embed` lists exactly what `judge` embeds."""
    hits = hits_of([("a", PASSAGES[0]), ("b", PASSAGES[1])])
    context_sentences = {"It retries a failed job 3 times before giving up.", "Backups do not run on weekends."}
    cases = [("What do the docs say?", "The scheduler was written in 2019. It retries a failed job 3 times.", False),
             ("Summarise the docs.", "The admin console listens on port 9000 and needs the admin role.", False),
             ("Who wrote the Quarry scheduler?", "Grace Hopper.", False),
             ("Who wrote the Quarry scheduler?", "It is Ada Lindqvist.", True)]
    for text, answer, embeds_context in cases:
        embedder = from_yaml("embedder/hash", _target_=Counting)
        judge = from_yaml("judge/offline", embedder=embedder)
        question = Question("q", text, ())
        listed = judge.texts_to_embed(question, hits, Answer(answer))
        judge.judge(question, hits, Answer(answer))
        seen = getattr(embedder, "seen", [])
        assert set(seen) == set(listed), answer
        assert bool(context_sentences & set(seen)) is embeds_context, answer
        assert len(seen) <= 2 or embeds_context


def test_context_relevance_counts_the_sentences_holding_the_questions_words():
    judge = from_yaml("judge/offline", embedder=from_yaml("embedder/hash"), relevance_threshold=0.5)
    hits = hits_of([("a", PASSAGES[0]), ("b", PASSAGES[1])])  # 4 sentences
    j = judge.judge(Question("q", "Who wrote the Quarry scheduler?", ()), hits, Answer("Ada Lindqvist wrote it."))
    # content words quarry, scheduler, wrote ("who", "the" are stop words): only the first sentence holds 2 of 3
    assert j.scores["context_relevance"] == pytest.approx(1 + 9 * 1 / 4)
    assert "1 of 4 retrieved sentences hold 50% of the question's words" in j.reasoning


def test_faithfulness_ranks_an_answer_by_the_share_of_its_words_the_context_holds():
    judge = from_yaml("judge/offline", embedder=from_yaml("embedder/hash"))
    hits = hits_of([("a", PASSAGES[0])])
    question = Question("q", "Summarise the docs.", ())
    scores = [judge.judge(question, hits, Answer(a)).scores["faithfulness"] for a in (
        "The Quarry scheduler was written by Ada Lindqvist in 2019.",  # verbatim
        "Ada Lindqvist wrote the Quarry scheduler in 2019.",  # reworded
        "Ada Lindqvist wrote the Quarry scheduler in Rust for a bank.",  # reworded, with words the context lacks
        "Bananas are rich in potassium and grow in warm places.")]  # nothing of the context
    assert scores[0] == 10 and scores == sorted(scores, reverse=True) and len(set(scores)) == 4
