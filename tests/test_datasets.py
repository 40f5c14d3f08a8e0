"""Dataset loaders: the bundled sample, HotpotQA (real file in ../shared/data), malformed input."""
import json
from collections import Counter

import pytest

from conftest import SHARED_DATA, needs_shared
from ragexp.datasets import fingerprint
from ragexp.errors import RagexpError
from ragexp.config.build import from_yaml

HOTPOT = SHARED_DATA / "hotpotqa_ircot_dev500"


def test_sample_is_a_usable_golden_set():
    data = from_yaml("dataset/sample").load()
    ids = {d.doc_id for d in data.documents}
    assert len(data.documents) >= 25 and len(data.questions) >= 30
    assert sum(1 for d in data.documents if d.text.lstrip().startswith("#")) >= 5  # Markdown with headings
    kinds = Counter(q.kind for q in data.questions)
    assert set(kinds) == {"factual", "procedural", "comparative", "multi-document"}
    for q in data.questions:
        assert q.answers and q.golden and set(q.golden) <= ids, q.qid
    assert all(len(q.golden) >= 2 for q in data.questions if q.kind == "multi-document")
    assert len({q.qid for q in data.questions}) == len(data.questions)


def test_limit_keeps_the_first_questions_and_the_whole_corpus():
    full, first = from_yaml("dataset/sample").load(), from_yaml("dataset/sample", limit=3).load()
    assert [q.qid for q in first.questions] == [q.qid for q in full.questions[:3]]
    assert first.documents == full.documents
    assert fingerprint(first) != fingerprint(full) and fingerprint(first) == fingerprint(from_yaml("dataset/sample", limit=3).load())


@needs_shared("hotpotqa_ircot_dev500")
def test_hotpotqa_corpus_is_every_paragraph_and_golden_the_supporting_ones():
    data = from_yaml("dataset/hotpotqa", path=str(HOTPOT), limit=50).load()
    assert len(data.questions) == 50
    assert len(data.documents) == 4858  # the union of all paragraphs in the file (its README)
    first = json.loads((HOTPOT / "dev_subsampled.jsonl").open().readline())
    q = data.questions[0]
    assert q.qid == first["question_id"] and q.answers == tuple(first["answers_objects"][0]["spans"])
    assert set(q.golden) == {c["title"] for c in first["contexts"] if c["is_supporting"]}
    assert all(len(q.golden) == 2 for q in data.questions)
    titles = {d.doc_id for d in data.documents}
    assert all(set(q.golden) <= titles for q in data.questions)


def test_malformed_hotpotqa_row_names_the_line(tmp_path):
    good = {"question_id": "1", "question_text": "q", "answers_objects": [{"spans": ["a"]}],
            "contexts": [{"title": "T", "paragraph_text": "text", "is_supporting": True}]}
    path = tmp_path / "h.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps({"question_id": "2"}) + "\n")
    with pytest.raises(RagexpError, match=rf"{path}:2: malformed HotpotQA row"):
        from_yaml("dataset/hotpotqa", path=str(path)).load()


def test_folder_rows_need_id_and_question(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\ntext")
    (tmp_path / "questions.jsonl").write_text('\n{"question": "no id"}\n')
    with pytest.raises(RagexpError, match=r"questions.jsonl:2: each row needs \"id\" and \"question\""):
        from_yaml("dataset/sample", path=str(tmp_path)).load()


def test_missing_folder_names_the_setting(tmp_path):
    with pytest.raises(RagexpError, match=r"dataset.path: .*nope does not exist .*set dataset.path="):
        from_yaml("dataset/sample", path=str(tmp_path / "nope")).load()
