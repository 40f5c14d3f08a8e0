"""Bad files get one line naming file:line (or the id and both places), never a traceback:
bytes that are not UTF-8, a byte-order mark, a folder given for a file, an empty corpus,
duplicate document and question ids, a truncated CSV row. With on_error=skip such rows are left
out and counted. Chunk ids are unique."""
import codecs
import json
from pathlib import Path

import pytest
from conftest import ROOT, compose, run_cli

from ragexp.components.chunkers import RecursiveChunker
from ragexp.datasets.table import TableDataset
from ragexp.errors import RagexpError
from ragexp.run.pipeline import run
from ragexp.types import Document
from ragexp.config.build import from_yaml

LATIN1 = "Café au lait".encode("latin-1")  # 0xe9: not UTF-8
FAST = ["embedder=hash", "embedder@scoring_embedder=hash", "retriever=bm25", "tracker=none"]


def lines(path: Path, *rows, raw: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows).encode() + raw)
    return path


def doc(n, text=None):
    return {"doc_id": f"d{n}", "text": text or f"Document {n} says port {7400 + n}."}


def question(n, doc_id=None):
    return {"id": f"q{n}", "question": f"Which port in {n}?", "answer": f"{7400 + n}", "golden_docs": [doc_id or f"d{n}"]}


def table(root: Path, on_error="stop", **files) -> TableDataset:
    return from_yaml("dataset/jsonl", path=str(root), questions=files.get("questions", "questions.jsonl"), corpus=files.get("corpus", "corpus.jsonl"), on_error=on_error)


# --- bytes that are not UTF-8, in every reader -----------------------------------------------

def test_latin1_in_jsonl_names_file_and_line_and_is_skipped_with_skip(tmp_path):
    lines(tmp_path / "corpus.jsonl", doc(1), doc(2))
    lines(tmp_path / "questions.jsonl", question(1), raw=b'{"id": "q2", "question": "' + LATIN1 + b'?", "answer": "x"}\n')
    with pytest.raises(RagexpError, match=r"questions.jsonl:2: byte 0xe9 at column \d+ is not UTF-8"):
        table(tmp_path).load()
    data = table(tmp_path, "skip").load()
    assert [q.qid for q in data.questions] == ["q1"]
    [skipped] = data.skipped_rows
    assert "questions.jsonl:2: byte 0xe9" in skipped


def test_latin1_in_csv_names_file_and_line_and_is_skipped_with_skip(tmp_path):
    (tmp_path / "corpus.csv").write_bytes(b"doc_id,text\nd1,Port 7401.\nd2," + LATIN1 + b"\nd3,Port 7403.\n")
    (tmp_path / "questions.csv").write_bytes(b"id,question,answer,golden_docs\nq1,Which port?,7401,d1\n")
    with pytest.raises(RagexpError, match=r"corpus.csv:3: field 'text': byte 0xe9 at column 4 is not UTF-8"):
        table(tmp_path, questions="questions.csv", corpus="corpus.csv").load()
    data = table(tmp_path, "skip", questions="questions.csv", corpus="corpus.csv").load()
    assert [d.doc_id for d in data.documents] == ["d1", "d3"] and len(data.skipped_rows) == 1


def test_latin1_in_a_sample_folder_document_and_in_beir_qrels(tmp_path):
    folder = tmp_path / "folder"
    (folder / "docs").mkdir(parents=True)
    (folder / "docs" / "good.md").write_text("Port 7400.")
    (folder / "docs" / "bad.txt").write_bytes(b"first line\n" + LATIN1)
    lines(folder / "questions.jsonl", question(1, "good"))
    with pytest.raises(RagexpError, match=r"bad.txt:2: byte 0xe9 at column 4 is not UTF-8"):
        from_yaml("dataset/sample", path=str(folder)).load()
    assert [d.doc_id for d in from_yaml("dataset/sample", path=str(folder), on_error="skip").load().documents] == ["good"]

    beir = tmp_path / "beir"
    lines(beir / "corpus.jsonl", {"_id": "d1", "text": "Port 7400."})
    lines(beir / "queries.jsonl", {"_id": "q1", "text": "port?"})
    (beir / "qrels").mkdir()
    (beir / "qrels" / "test.tsv").write_bytes(b"query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\t" + LATIN1 + b"\t1\n")
    with pytest.raises(RagexpError, match=r"test.tsv:3: byte 0xe9"):
        from_yaml("dataset/beir", path=str(beir)).load()
    assert from_yaml("dataset/beir", path=str(beir), on_error="skip").load().questions[0].golden == {"d1": 1}


def test_latin1_in_squad_names_the_entry(tmp_path):
    squad = {"data": [{"title": "T", "paragraphs": [
        {"context": "Port 7400 is used.", "qas": [{"id": "a", "question": "Which port?", "answers": [{"text": "7400"}]},
                                                   {"id": "b", "question": "QQQ", "answers": [{"text": "7400"}]}]}]}]}
    file = tmp_path / "squad.json"
    file.write_bytes(json.dumps(squad).encode().replace(b"QQQ", LATIN1))
    with pytest.raises(RagexpError, match=r"squad.json: data\[0\].paragraphs\[0\].qas\[1\]: .*byte 0xe9"):
        from_yaml("dataset/squad", path=str(file)).load()
    assert [q.qid for q in from_yaml("dataset/squad", path=str(file), on_error="skip").load().questions] == ["a"]


# --- a byte-order mark is not part of the first field -----------------------------------------

def test_a_utf8_bom_is_read_as_utf8_sig(tmp_path):
    bom = codecs.BOM_UTF8
    (tmp_path / "corpus.csv").write_bytes(bom + b"doc_id,text\nd1,Port 7401.\n")
    (tmp_path / "questions.csv").write_bytes(bom + b"id,question,answer,golden_docs\nq1,Which port?,7401,d1\n")
    data = table(tmp_path, questions="questions.csv", corpus="corpus.csv").load()
    assert data.documents[0].doc_id == "d1" and data.questions[0].qid == "q1"
    lines(tmp_path / "j" / "corpus.jsonl", doc(1))
    (tmp_path / "j" / "questions.jsonl").write_bytes(bom + json.dumps(question(1)).encode() + b"\n")
    assert table(tmp_path / "j").load().questions[0].qid == "q1"
    beir = tmp_path / "beir"
    lines(beir / "corpus.jsonl", {"_id": "d1", "text": "Port 7400."})
    (beir / "queries.jsonl").write_bytes(bom + b'{"_id": "q1", "text": "port?"}\n')
    (beir / "qrels").mkdir()
    (beir / "qrels" / "test.tsv").write_bytes(bom + b"query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert from_yaml("dataset/beir", path=str(beir)).load().questions[0].golden == {"d1": 1}
    (tmp_path / "squad.json").write_bytes(bom + json.dumps({"data": []}).encode())
    with pytest.raises(RagexpError, match="no documents"):  # read, then found empty (not a JSON error)
        from_yaml("dataset/squad", path=str(tmp_path / "squad.json")).load()


# --- a folder for a file, a file for a folder, an empty corpus -----------------------------------

def test_a_folder_given_for_a_file_and_a_file_for_a_folder(tmp_path):
    (tmp_path / "corpus.jsonl").mkdir()
    lines(tmp_path / "questions.jsonl", question(1))
    with pytest.raises(RagexpError, match=r"^dataset.corpus: .*corpus.jsonl is a folder, not a file"):
        table(tmp_path).load()
    with pytest.raises(RagexpError, match=r"^dataset.path: .* is a folder, not a file"):
        from_yaml("dataset/squad", path=str(tmp_path)).load()
    with pytest.raises(RagexpError, match=r"^dataset.path: .*questions.jsonl is a file, not a folder"):
        from_yaml("dataset/beir", path=str(tmp_path / "questions.jsonl")).load()


def test_an_empty_corpus_is_one_line_also_with_bm25(tmp_path):
    lines(tmp_path / "corpus.jsonl", {"doc_id": "d1", "text": "   "})
    lines(tmp_path / "questions.jsonl", question(1))
    with pytest.raises(RagexpError, match=r"^dataset.path: no documents in .* \(1 empty\)"):
        table(tmp_path).load()
    (tmp_path / "corpus.jsonl").write_text("")
    proc = run_cli("dataset=jsonl", f"dataset.path={tmp_path}", *FAST, "hydra.run.dir=out", cwd=tmp_path,
                   env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "no documents in" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


# --- duplicate ids: one line naming the id and both places ---------------------------------------

def test_duplicate_document_ids_name_both_lines_and_are_skipped_with_skip(tmp_path):
    lines(tmp_path / "corpus.jsonl", doc(1), doc(2), doc(1, "Another text under the same id."))
    lines(tmp_path / "questions.jsonl", question(1), question(2))
    corpus = tmp_path / "corpus.jsonl"
    with pytest.raises(RagexpError, match=rf"^{corpus}:3: duplicate document id 'd1' \(first at {corpus}:1\)"):
        table(tmp_path).load()
    data = table(tmp_path, "skip").load()
    assert [d.doc_id for d in data.documents] == ["d1", "d2"] and data.documents[0].text.startswith("Document 1")
    assert data.skipped_rows == (f"{corpus}:3: duplicate document id 'd1' (first at {corpus}:1)",)


def test_duplicate_question_ids_name_both_lines_and_are_skipped_with_skip(tmp_path):
    lines(tmp_path / "corpus.jsonl", doc(1), doc(2))
    lines(tmp_path / "questions.jsonl", question(1), question(2), {**question(2), "question": "again?"})
    source = tmp_path / "questions.jsonl"
    with pytest.raises(RagexpError, match=rf"^{source}:3: duplicate question id 'q2' \(first at {source}:2\)"):
        table(tmp_path).load()
    data = table(tmp_path, "skip").load()
    assert [q.text for q in data.questions] == ["Which port in 1?", "Which port in 2?"] and len(data.skipped_rows) == 1


def test_duplicate_document_ids_in_a_sample_folder_and_beir(tmp_path):
    folder = tmp_path / "folder"
    (folder / "docs").mkdir(parents=True)
    (folder / "docs" / "a.md").write_text("Port 7400.")
    (folder / "docs" / "a.txt").write_text("Port 7401.")
    lines(folder / "questions.jsonl", question(1, "a"))
    with pytest.raises(RagexpError, match=r"a.txt: duplicate document id 'a' \(first at .*a.md\)"):
        from_yaml("dataset/sample", path=str(folder)).load()
    beir = tmp_path / "beir"
    lines(beir / "corpus.jsonl", {"_id": "d1", "text": "x"}, {"_id": "d1", "text": "y"})
    lines(beir / "queries.jsonl", {"_id": "q1", "text": "port?"}, {"_id": "q1", "text": "again?"})
    (beir / "qrels").mkdir()
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    data = from_yaml("dataset/beir", path=str(beir), on_error="skip").load()
    assert [d.text for d in data.documents] == ["x"] and [q.text for q in data.questions] == ["port?"]
    assert [r.split(": ", 1)[1] for r in data.skipped_rows] == [
        f"duplicate document id 'd1' (first at {beir / 'corpus.jsonl'}:1)",
        f"duplicate query id 'q1' (first at {beir / 'queries.jsonl'}:1)"]


def test_duplicate_ids_no_longer_swap_passages_under_hybrid(tmp_path):
    """The issue's case: two documents under one id gave hit_rate@1 1.0 with bm25 and 0.333 with
    hybrid; now the run stops naming the id and both lines, or (skip) keeps the first."""
    lines(tmp_path / "corpus.jsonl", doc(1), doc(2), doc(3), doc(1, "An unrelated text about cooking pasta."))
    lines(tmp_path / "questions.jsonl", question(1), question(2), question(3))
    base = ["dataset=jsonl", f"dataset.path={tmp_path}", f"cache.dir={tmp_path / 'cache'}",
            "embedder=hash", "embedder@scoring_embedder=hash", "tracker=none"]
    with pytest.raises(RagexpError, match="duplicate document id 'd1'"):
        run(compose(*base, "retriever=bm25"))
    scores = {r: run(compose(*base, f"retriever={r}", "dataset.on_error=skip")).aggregates["hit_rate_at_1"]
              for r in ("bm25", "hybrid")}
    assert scores["bm25"] == scores["hybrid"]


# --- a truncated CSV row -----------------------------------------------------------------------

def test_a_truncated_last_csv_row_is_not_a_question_without_an_answer(tmp_path):
    (tmp_path / "corpus.csv").write_text("doc_id,text\nd1,Port 7401.\n")
    (tmp_path / "questions.csv").write_text("id,question,answer,golden_docs\nq1,Which port?,7401,d1\nq2,Which po")
    source = tmp_path / "questions.csv"
    with pytest.raises(RagexpError, match=rf"^{source}:3: 2 fields, fewer than the header's 4 \(a truncated row\?\)"):
        table(tmp_path, questions="questions.csv", corpus="corpus.csv").load()
    data = table(tmp_path, "skip", questions="questions.csv", corpus="corpus.csv").load()
    assert [q.qid for q in data.questions] == ["q1"] and len(data.skipped_rows) == 1
    source.write_text('id,question,answer,golden_docs\nq1,Which port?,7401,d1\nq2,"Which po')  # cut inside quotes
    with pytest.raises(RagexpError, match=rf"^{source}:3: 2 fields, fewer than the header's 4"):
        table(tmp_path, questions="questions.csv", corpus="corpus.csv").load()


# --- chunk ids ---------------------------------------------------------------------------------

def test_chunk_ids_are_unique_even_when_document_ids_look_like_chunk_ids():
    documents = [Document("a", "one two three four five six seven eight nine ten " * 3),
                 Document("a#1", "eleven twelve thirteen fourteen fifteen " * 3), Document("a#1#0", "x y z")]
    chunks = RecursiveChunker(chunk_size=20, chunk_overlap=0).chunk(documents)
    assert len(chunks) > 5 and len({c.chunk_id for c in chunks}) == len(chunks)
    with pytest.raises(RagexpError, match="document id 'a' appears twice"):
        RecursiveChunker(chunk_size=20, chunk_overlap=0).chunk([Document("a", "x"), Document("a", "y")])
