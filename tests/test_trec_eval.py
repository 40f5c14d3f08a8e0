"""Retrieval metrics against NIST trec_eval's own expected outputs (../shared/data/trec_eval_tests),
through `python -m ragexp.trec_eval` (run in this process) and through the pipeline's relevance rule."""
import math

import pytest

from conftest import ROOT, SHARED_DATA, call_in, needs_shared
from ragexp import trec_eval
from ragexp.metrics.retrieval import Ranking, measure
from ragexp.types import Chunk, Hit, Question
from ragexp.config.build import from_yaml

TESTS = SHARED_DATA / "trec_eval_tests" / "test"
needs_tests = needs_shared("trec_eval_tests", "test")

# the measure families ragexp implements, as trec_eval names them, and the ragexp family
FAMILIES = {"map": "map", "recip_rank": "mrr", "P": "precision", "recall": "recall", "ndcg_cut": "ndcg",
            "success": "hit_rate", "map_cut": "map"}
ALL = ["-m", "all", "-m", "map_cut"]


def parse(text: str) -> dict[tuple[str, str], str]:
    """trec_eval output -> {(measure, qid): printed value}."""
    values = {}
    for line in text.splitlines():
        fields = line.split("\t")
        if len(fields) == 3:
            values[(fields[0].strip(), fields[1])] = fields[2]
    return values


def family(label: str) -> str:
    for name in sorted(FAMILIES, key=len, reverse=True):
        if label == name or label.startswith(name + "_") and label[len(name) + 1:].isdigit():
            return name
    return ""


def trec_eval_cli(*args: str):
    """`python -m ragexp.trec_eval ARGS`, run in this process."""
    return call_in(lambda: trec_eval.main(list(args)), ["python -m ragexp.trec_eval", *args], ROOT)


def run(*args: str) -> str:
    proc = trec_eval_cli(*args)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@needs_tests
@pytest.mark.parametrize("qrels,expected,flags", [
    ("qrels.test", "out.test.a", []),                       # binary relevance, averages
    ("qrels.test", "out.test.aq", ["-q"]),                  # and per query
    ("qrels.rel_level", "out.test.aql", ["-q", "-l2"]),     # graded (-1..4), relevance level 2
    ("qrels.test", "out.test.meas_params",                  # cutoffs given as parameters
     ["-q", "-m", "P.5,7,3", "-m", "recall.20,2000", "-m", "ndcg_cut.10,20,23", "-m", "success.2,5,20"]),
])
def test_every_implemented_measure_equals_trec_eval(qrels, expected, flags):
    reference = parse((TESTS / expected).read_text())
    measures = flags if "-m" in flags else [*flags, *ALL]
    ours = parse(run(str(TESTS / qrels), str(TESTS / "results.test"), *measures))
    # every line trec_eval prints for a measure ragexp implements is printed, with the same 4 decimals
    expected_lines = {k: v for k, v in reference.items() if family(k[0])}
    assert expected_lines, "the reference file has none of the measures"
    assert ours == expected_lines
    compared = {family(label) for label, _ in ours}
    if "-m" not in flags:
        assert compared == set(FAMILIES)


def test_ties_are_broken_by_docno_descending_and_ranks_ignored(tmp_path):
    (tmp_path / "qrels").write_text("q1 0 a 1\nq1 0 b 0\nq1 0 c 1\n")
    # a and b tie: trec_eval ranks b (greater docno) first; the rank column says otherwise and is ignored
    (tmp_path / "run").write_text("q1 Q0 a 1 0.5 x\nq1 Q0 b 2 0.5 x\nq1 Q0 c 3 0.9 x\n")
    out = parse(run(str(tmp_path / "qrels"), str(tmp_path / "run"), "-q", "-m", "recip_rank", "-m", "P.2", "-m", "map"))
    # order: c (0.9), b, a -> relevant at ranks 1 and 3
    assert out[("recip_rank", "q1")] == "1.0000"
    assert out[("P_2", "q1")] == "0.5000"
    assert out[("map", "q1")] == f"{(1 / 1 + 2 / 3) / 2:.4f}"


def test_malformed_run_line_names_file_and_line(tmp_path):
    (tmp_path / "qrels").write_text("q1 0 a 1\n")
    (tmp_path / "run").write_text("q1 Q0 a 1 0.5 x\nq1 Q0 b 2\n")
    proc = trec_eval_cli(str(tmp_path / "qrels"), str(tmp_path / "run"))
    assert proc.returncode == 2
    assert f"{tmp_path / 'run'}:2: a run line is 'qid Q0 docno rank score tag'" in proc.stderr


def test_specification_examples_with_exponential_gain():
    # 6.3.3: ranked doc5 (2), doc1 (3), doc8 (1), doc3 (0), doc2 (unjudged): NDCG@5 = 7.92 / 9.39 = 0.84
    ranking = Ranking(grades=(2, 3, 1, 0, -1), pool=(3, 2, 1, 0))
    log2 = math.log2
    assert measure("ndcg@5", gain="exponential").value(ranking) == pytest.approx(0.84, abs=0.005)
    assert measure("ndcg@5", gain="exponential").value(ranking) == pytest.approx(
        (3 / 1 + 7 / log2(3) + 1 / 2) / (7 / 1 + 3 / log2(3) + 1 / 2))
    # trec_eval's linear gain: the grade itself
    assert measure("ndcg@5").value(ranking) == pytest.approx((2 + 3 / log2(3) + 1 / 2) / (3 + 2 / log2(3) + 1 / 2))
    # 6.3.2: first relevant at ranks 5, 1 and 4: MRR = (0.2 + 1.0 + 0.25) / 3 = 0.48
    rankings = [Ranking((0, 0, 0, 0, 1), (1,)), Ranking((1, 0, 0), (1, 1)), Ranking((0, 0, 0, 1, 1), (1, 1))]
    assert sum(measure("mrr").value(r) for r in rankings) / 3 == pytest.approx(0.4833, abs=1e-4)
    # 6.3.1: one of two queries has a relevant doc in the top 5
    assert measure("hit_rate@5").value(Ranking((1, 0, 1, 0, 0), (1, 1, 1))) == 1
    assert measure("hit_rate@5").value(Ranking((0, 0, 0, 0, 0), (1, 1))) == 0


@needs_tests
@pytest.mark.parametrize("qrels,expected,level", [("qrels.test", "out.test.aq", 1), ("qrels.rel_level", "out.test.aql", 2)])
def test_the_doc_rule_on_chunks_scores_like_trec_eval(qrels, expected, level):
    """A run's documents as chunks (two chunks each, the second ranked later): the doc rule's
    ranking of documents by their best chunk must give trec_eval's per-query values."""
    judged, ranked = trec_eval.read_qrels(TESTS / qrels), trec_eval.read_run(TESTS / "results.test")
    reference = parse((TESTS / expected).read_text())
    metrics = from_yaml("metrics/default", retrieval=["map", "mrr", "precision@10", "recall@100", "ndcg@20", "hit_rate@5"], depth=10_000, embedder=None)
    labels = {"map": "map", "mrr": "recip_rank", "precision@10": "P_10", "recall@100": "recall_100",
              "ndcg@20": "ndcg_cut_20", "hit_rate@5": "success_5"}
    for qid, docs in ranked.items():
        chunks = [Chunk(f"{d}#{n}", d, "text") for n in (0, 1) for d in docs]  # all first chunks, then all second ones
        hits = [Hit(c, 1.0, rank) for rank, c in enumerate(chunks, 1)]
        ranking = from_yaml("relevance/doc", level=level).grade(Question(qid, "q", ("a",), judged[qid]), hits).ranking
        scores = metrics.retrieval_scores(ranking, level)
        for name, label in labels.items():
            assert f"{scores[name]:.4f}" == reference[(label, qid)], (qid, name)


def test_a_bom_is_read_and_bytes_that_are_not_utf8_name_their_line(tmp_path):
    from ragexp.errors import RagexpError
    from ragexp.trec_eval import read_qrels

    bom = tmp_path / "bom.qrels"
    bom.write_bytes("\ufeffq1 0 d1 1\nq1 0 d2 0\n".encode())
    assert read_qrels(bom) == {"q1": {"d1": 1, "d2": 0}}
    latin = tmp_path / "latin.qrels"
    latin.write_bytes("q1 0 d1 1\nq1 0 caf\u00e9 1\n".encode("latin-1"))
    with pytest.raises(RagexpError, match=r"latin.qrels:2: bytes that are not UTF-8"):
        read_qrels(latin)
    with pytest.raises(RagexpError, match="is a folder"):
        read_qrels(tmp_path)


def test_queries_in_one_file_only_are_skipped_and_named(tmp_path):
    # q2 is judged but absent from the run, q3 is ranked but unjudged: both are left out of the means
    (tmp_path / "qrels").write_text("q1 0 a 1\nq2 0 b 1\n")
    (tmp_path / "run").write_text("q1 Q0 a 1 0.5 x\nq3 Q0 c 1 0.5 x\n")
    proc = trec_eval_cli(str(tmp_path / "qrels"), str(tmp_path / "run"), "-m", "recip_rank")
    assert proc.returncode == 0, proc.stderr
    assert parse(proc.stdout) == {("recip_rank", "all"): "1.0000"}
    assert "1 query of the qrels has no results in the run (q2)" in proc.stderr
    assert "1 query of the run has no relevance judgements (q3)" in proc.stderr
    assert "skipped" in proc.stderr and "NIST trec_eval" in proc.stderr
