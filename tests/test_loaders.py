"""Each dataset loader on small files written here, including malformed ones (file and line in
the message; on_error=skip counts them), TREC qrels with any loader, and the real AutoRAG sample."""
import json

import pytest

from conftest import SHARED_DATA, compose, needs_shared
from ragexp.datasets.table import TableDataset
from ragexp.errors import RagexpError
from ragexp.run.notes import data_notes
from ragexp.config.build import from_yaml


def jsonl(path, *rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


# --- BEIR --------------------------------------------------------------------------------------

def beir(root, corpus_rows=None, qrels_text=None):
    jsonl(root / "corpus.jsonl", *(corpus_rows or [
        {"_id": "d1", "title": "Alpha", "text": "Alpha is the first letter."},
        {"_id": "d2", "title": "", "text": "Beta is the second letter."},
        {"_id": "d3", "text": "Gamma is the third letter."},
    ]))
    jsonl(root / "queries.jsonl",
          {"_id": "q1", "text": "first letter?"}, {"_id": "q2", "text": "not judged in test"},
          {"_id": "q3", "text": "second letter?", "answers": ["Beta"]})
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    (root / "qrels" / "test.tsv").write_text(qrels_text or "query-id\tcorpus-id\tscore\nq1\td1\t2\nq1\td3\t1\nq3\td2\t1\nq3\td1\t0\n")
    return root


def test_beir_keeps_graded_relevance_and_the_judged_queries(tmp_path):
    data = from_yaml("dataset/beir", path=str(beir(tmp_path))).load()
    assert [d.doc_id for d in data.documents] == ["d1", "d2", "d3"]
    assert data.documents[0].text == "Alpha\n\nAlpha is the first letter." and data.documents[0].title == "Alpha"
    assert data.documents[1].text == "Beta is the second letter."
    assert [q.qid for q in data.questions] == ["q1", "q3"]  # q2 has no judgements in qrels/test.tsv
    assert data.questions[0].golden == {"d1": 2, "d3": 1} and data.questions[0].answers == ()
    assert data.questions[1].golden == {"d2": 1, "d1": 0} and data.questions[1].answers == ("Beta",)
    assert [q.qid for q in from_yaml("dataset/beir", path=str(tmp_path), limit=1).load().questions] == ["q1"]


def test_beir_malformed_rows_stop_or_are_skipped_and_counted(tmp_path):
    root = beir(tmp_path, corpus_rows=[{"_id": "d1", "text": "Alpha."}, '{"_id": "d2", "text": ', {"text": "no id"}],
                qrels_text="query-id\tcorpus-id\tscore\nq1\td1\tvery\nq3\td1\t1\n")
    with pytest.raises(RagexpError, match=rf"{root / 'qrels' / 'test.tsv'}:2: score 'very' is not an integer"):
        from_yaml("dataset/beir", path=str(root)).load()
    data = from_yaml("dataset/beir", path=str(root), on_error="skip").load()
    assert [d.doc_id for d in data.documents] == ["d1"] and [q.qid for q in data.questions] == ["q3"]
    assert len(data.skipped_rows) == 3
    assert data.skipped_rows[0].startswith(f"{root / 'qrels' / 'test.tsv'}:2: ")
    assert any(r.startswith(f"{root / 'corpus.jsonl'}:2: not valid JSON") for r in data.skipped_rows)
    assert any(r.startswith(f"{root / 'corpus.jsonl'}:3: a document needs") for r in data.skipped_rows)
    assert "3 malformed rows skipped (dataset.on_error=skip)" in data_notes(data)[0]


def test_loader_settings_are_checked_when_built(tmp_path):
    from ragexp.validation import problems

    assert problems(compose("dataset=beir", "dataset.on_error=ignore")) == [
        "dataset.on_error: 'ignore' is not one of 'stop', 'skip'"]
    assert problems(compose("dataset=mix", "dataset.on_error=ignore")) == [
        "dataset.on_error: 'ignore' is not one of 'stop', 'skip'"]
    with pytest.raises(RagexpError, match="dataset.path: not set"):
        from_yaml("dataset/beir").load()


# --- SQuAD -------------------------------------------------------------------------------------

SQUAD = {"version": "v2.0", "data": [
    {"title": "Port", "paragraphs": [
        {"context": "The server listens on port 7400.", "qas": [
            {"id": "a1", "question": "Which port?", "answers": [{"text": "7400", "answer_start": 27},
                                                                 {"text": "7400", "answer_start": 27},
                                                                 {"text": "port 7400", "answer_start": 22}]},
            {"id": "u1", "question": "Which protocol?", "answers": [], "is_impossible": True,
             "plausible_answers": [{"text": "port", "answer_start": 22}]},
        ]},
        {"context": "Logs go to stderr.", "qas": [{"id": "a2", "question": "Where do logs go?",
                                                    "answers": [{"text": "stderr", "answer_start": 11}]}]},
    ]},
    {"title": "Other", "paragraphs": [{"context": "Nothing asked here.", "qas": []}]},
]}


def test_squad_contexts_are_documents_and_unanswerable_questions_are_kept(tmp_path):
    path = tmp_path / "dev-v2.0.json"
    path.write_text(json.dumps(SQUAD))
    data = from_yaml("dataset/squad", path=str(path)).load()
    assert [d.doc_id for d in data.documents] == ["Port/0", "Port/1", "Other/0"]
    a1, u1, a2 = data.questions
    assert a1.answers == ("7400", "port 7400") and a1.golden == {"Port/0": 1} and a1.answerable
    assert not u1.answerable and u1.kind == "unanswerable" and u1.answers == ()
    assert u1.golden == {"Port/0": 1} and a2.golden == {"Port/1": 1}
    notes = " ".join(data_notes(data))
    assert "1 questions marked unanswerable: an abstention is their correct answer" in notes
    assert "questions with no expected answer" not in notes
    limited = from_yaml("dataset/squad", path=str(path), limit=1).load()
    assert [q.qid for q in limited.questions] == ["a1"] and len(limited.documents) == 3


def test_squad_malformed_entries_are_named_by_json_path(tmp_path):
    broken = json.loads(json.dumps(SQUAD))
    broken["data"][0]["paragraphs"][0]["qas"][1] = {"id": "x", "answers": []}  # no question
    path = tmp_path / "squad.json"
    path.write_text(json.dumps(broken))
    with pytest.raises(RagexpError, match=rf"{path}: data\[0\].paragraphs\[0\].qas\[1\]: a question needs"):
        from_yaml("dataset/squad", path=str(path)).load()
    data = from_yaml("dataset/squad", path=str(path), on_error="skip").load()
    assert [q.qid for q in data.questions] == ["a1", "a2"] and len(data.skipped_rows) == 1
    path.write_text('{"data": [\n{"title": "x",\n "paragraphs": [}\n]}')
    with pytest.raises(RagexpError, match=rf"{path}:3: not valid JSON"):
        from_yaml("dataset/squad", path=str(path), on_error="skip").load()


# --- AutoRAG parquet ---------------------------------------------------------------------------

def parquet(path, rows):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


def test_autorag_parquet_flattens_retrieval_gt(tmp_path):
    parquet(tmp_path / "corpus.parquet", [{"doc_id": "d1", "contents": "Alpha."}, {"doc_id": "d2", "contents": "Beta."},
                                          {"doc_id": "d3", "contents": "  "}])
    parquet(tmp_path / "qa.parquet", [
        {"qid": 7, "query": "alpha?", "generation_gt": ["Alpha", "A"], "retrieval_gt": [["d1"], ["d2", "d9"]]},
        {"qid": 8, "query": "beta?", "generation_gt": ["Beta"], "retrieval_gt": [["d2"]]},
    ])
    data = from_yaml("dataset/autorag_msmarco", path=str(tmp_path)).load()
    assert [d.doc_id for d in data.documents] == ["d1", "d2"] and data.skipped_documents == ("d3",)
    q7 = data.questions[0]
    assert q7.qid == "7" and q7.answers == ("Alpha", "A") and q7.golden == {"d1": 1, "d2": 1, "d9": 1}
    assert "1 golden document ids are not in the corpus: d9" in data_notes(data)


def test_autorag_malformed_row_names_file_and_row(tmp_path):
    parquet(tmp_path / "corpus.parquet", [{"doc_id": "d1", "contents": "Alpha."}])
    parquet(tmp_path / "qa.parquet", [
        {"qid": 1, "query": "alpha?", "generation_gt": ["Alpha"], "retrieval_gt": ["d1"]},
        {"qid": 2, "query": None, "generation_gt": ["Beta"], "retrieval_gt": ["d1"]},
    ])
    with pytest.raises(RagexpError, match=rf"{tmp_path / 'qa.parquet'}: row 2: qid and query are required"):
        from_yaml("dataset/autorag_msmarco", path=str(tmp_path)).load()
    assert [q.qid for q in from_yaml("dataset/autorag_msmarco", path=str(tmp_path), on_error="skip").load().questions] == ["1"]
    parquet(tmp_path / "qa.parquet", [{"qid": 1, "question": "alpha?"}])
    with pytest.raises(RagexpError, match=r"qa.parquet: missing column query, generation_gt, retrieval_gt"):
        from_yaml("dataset/autorag_msmarco", path=str(tmp_path)).load()


AUTORAG = SHARED_DATA / "autorag_msmarco"


@needs_shared("autorag_msmarco")
def test_autorag_msmarco_sample_loads_whole():
    data = from_yaml("dataset/autorag_msmarco", path=str(AUTORAG)).load()
    assert len(data.questions) == 1000 and len(data.documents) == 2117  # its README
    ids = {d.doc_id for d in data.documents}
    assert all(q.answers and 1 <= len(q.golden) <= 4 and set(q.golden) <= ids for q in data.questions)
    assert data_notes(data) == []


# --- generic JSONL / CSV -----------------------------------------------------------------------

def test_jsonl_fields_are_mapped_from_config(tmp_path):
    jsonl(tmp_path / "docs.jsonl", {"pid": "p1", "body": {"text": "Alpha is first."}}, {"pid": "p2", "body": {"text": "Beta."}})
    jsonl(tmp_path / "qs.jsonl",
          {"key": 1, "q": "first?", "gold": {"answers": ["Alpha", ""]}, "rel": {"p1": 2, "p2": 1}},
          {"key": 2, "q": "second?", "gold": {"answers": "Beta"}, "rel": ["p2"]})
    fields = {"question_id": "key", "question": "q", "answer": "gold.answers", "golden": "rel",
              "doc_id": "pid", "text": "body.text"}
    data = from_yaml("dataset/jsonl", path=str(tmp_path), questions="qs.jsonl", corpus="docs.jsonl", fields=fields).load()
    assert [(d.doc_id, d.text) for d in data.documents] == [("p1", "Alpha is first."), ("p2", "Beta.")]
    q1, q2 = data.questions
    assert (q1.qid, q1.answers, q1.golden) == ("1", ("Alpha",), {"p1": 2, "p2": 1})
    assert (q2.answers, q2.golden) == (("Beta",), {"p2": 1})
    assert TableDataset.constraints(fields={"gold": "x"}) == [
        "fields.gold: unknown field; the fields are question_id, question, answer, golden, kind, source, answerable, doc_id, text, title"]


def test_csv_lists_and_malformed_rows(tmp_path):
    (tmp_path / "corpus.csv").write_text('doc_id,text\nd1,"Alpha, the first letter."\nd2,Beta\n')
    (tmp_path / "questions.csv").write_text("id,question,answer,golden_docs\n"
                                            "1,first?,Alpha,d1|d2\n"
                                            "2,second?,Beta,d2,extra\n"
                                            ",third?,Gamma,d3\n")
    with pytest.raises(RagexpError, match=rf"{tmp_path / 'questions.csv'}:3: more fields than the header's 4"):
        from_yaml("dataset/jsonl", path=str(tmp_path), questions="questions.csv", corpus="corpus.csv").load()
    data = from_yaml("dataset/jsonl", path=str(tmp_path), questions="questions.csv", corpus="corpus.csv", on_error="skip").load()
    assert [q.qid for q in data.questions] == ["1"] and data.questions[0].golden == {"d1": 1, "d2": 1}
    assert data.documents[0].text == "Alpha, the first letter."
    assert [r.split(": ")[0] for r in data.skipped_rows] == [f"{tmp_path / 'questions.csv'}:3",
                                                             f"{tmp_path / 'questions.csv'}:4"]


# --- TREC qrels with any loader ----------------------------------------------------------------

def test_trec_qrels_replace_the_golden_documents_of_any_loader(tmp_path):
    (tmp_path / "docs").mkdir()
    for name in ("a", "b", "c"):
        (tmp_path / "docs" / f"{name}.txt").write_text(f"Document {name}.")
    jsonl(tmp_path / "questions.jsonl", {"id": "1", "question": "q1?", "answer": "x", "golden_docs": ["a"]},
          {"id": "2", "question": "q2?", "answer": "y", "golden_docs": ["b"]})
    (tmp_path / "qrels.txt").write_text("1 0 b 2\n1 0 c 1\n1 0 a 0\n9 0 a 1\n")
    data = from_yaml("dataset/sample", path=str(tmp_path), qrels=str(tmp_path / "qrels.txt")).load()
    assert data.questions[0].golden == {"b": 2, "c": 1, "a": 0}
    assert data.questions[1].golden == {}  # not judged in the qrels
    notes = data_notes(data)
    assert "1 questions with no golden documents: 2" in notes
    assert any("golden documents from" in n and "1 of 2 questions judged" in n for n in notes)
    (tmp_path / "qrels.txt").write_text("1 0 b 2\n1 0 c\n")
    with pytest.raises(RagexpError, match=rf"{tmp_path / 'qrels.txt'}:2: a qrels line is 'qid iter doc_id grade'"):
        from_yaml("dataset/sample", path=str(tmp_path), qrels=str(tmp_path / "qrels.txt")).load()


@pytest.mark.parametrize("on_error", ["stop", "skip"])
def test_a_jsonl_line_nested_thousands_deep_is_a_malformed_row_not_a_crash(tmp_path, on_error):
    """json.loads raises RecursionError on a line nested ~100k deep: it crashed the run with a
    traceback, even with on_error=skip. It is one malformed row, named by file:line."""
    from ragexp.errors import RagexpError

    path = tmp_path / "outputs.jsonl"
    fine = '{"question": "Which port?", "answer": "7070", "contexts": ["port 7070"]}\n'
    path.write_text(fine + '{"question": ' + "[" * 100_000 + "]" * 100_000 + "}\n" + fine.replace("port?", "host?"))
    loader = from_yaml("dataset/outputs", path=str(path), on_error=on_error)
    if on_error == "stop":
        with pytest.raises(RagexpError, match=r"outputs.jsonl:2: nested too deep to read"):
            loader.load()
    else:
        dataset = loader.load()
        assert len(dataset.questions) == 2 and "nested too deep" in dataset.skipped_rows[0]


def test_a_csv_record_is_named_by_the_line_it_starts_on(tmp_path):
    """A record with a quoted newline spans lines: its errors named the last one (csv's line_num)."""
    from ragexp.errors import RagexpError

    path = tmp_path / "outputs.csv"
    path.write_text('question,answer,contexts\n"Which\nport?",7070,"[""port 7070""]"\n"Who\nis it?",Bob,"not a list"\n')
    with pytest.raises(RagexpError, match=r"outputs.csv:4: .*contexts"):
        from_yaml("dataset/outputs", path=str(path)).load()
