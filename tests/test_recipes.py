"""The recipes of docs/contributing/index.md, followed as written: a retriever and a judge of your
own, each its module and its YAML file (in your --config-dir here; in conf/ for one of ragexp's),
run end to end by `python -m ragexp`; an answer metric's three places exist as the recipe names them."""
import json
import re

from conftest import HASH, ROOT, run_app

RETRIEVER = '''
from ragexp.base.settings import PositiveInt
from ragexp.components.retrievers import Retriever
from ragexp.types import Hit


class FirstChunks(Retriever):
    """Every query gets the corpus's first chunks: a retriever in a dozen lines."""

    def __init__(self, top_k: PositiveInt = 3):
        self.top_k = top_k

    def index(self, chunks):
        self.chunks = sorted(chunks, key=lambda c: c.chunk_id)

    def search(self, queries, depth=None):
        first = self.chunks[: depth or self.top_k]
        return [[Hit(c, 1.0 / (i + 1), i + 1) for i, c in enumerate(first)] for _ in queries]
'''

JUDGE = '''
from ragexp.judges.contract import Judge
from ragexp.types import Judgement


class Brevity(Judge):
    """Scores the single-call metrics by the answer's length: a judge in a dozen lines."""

    metrics = ("context_relevance", "answer_similarity", "faithfulness")
    scales = {m: (1.0, 10.0) for m in metrics}

    def __init__(self, name: str = "brevity"):
        self.name = name

    def judge(self, question, hits, answer):
        score = 10.0 if len(answer.text.split()) <= 20 else 1.0
        return Judgement(self.name, {m: score for m in self.metrics}, False, f"{len(answer.text.split())} words")


class Cites(Judge):
    """A metric of its own, and how it makes overall_score (`weights`, chosen by weights=judge)."""

    metrics = ("cites",)
    scales = {"cites": (0.0, 1.0)}
    weights = {"cites": 1.0}

    def __init__(self, name: str = "cites"):
        self.name = name

    def judge(self, question, hits, answer):
        cited = any(h.chunk.text[:40] in answer.text for h in hits)
        return Judgement(self.name, {"cites": float(cited)}, False, "cites" if cited else "no citation")
'''


def test_a_retriever_and_a_judge_of_your_own_are_a_module_and_a_yaml_file_each(tmp_path, monkeypatch):
    (tmp_path / "my_parts.py").write_text(RETRIEVER + JUDGE)
    conf = tmp_path / "my_conf"
    (conf / "retriever").mkdir(parents=True)
    (conf / "judge").mkdir()
    (conf / "retriever" / "first.yaml").write_text("# The corpus's first chunks.\n_target_: my_parts.FirstChunks\ntop_k: 2\n")
    (conf / "judge" / "brevity.yaml").write_text("# Short answers score 10.\n_target_: my_parts.Brevity\nname: brevity\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    proc = run_app("--config-dir", str(conf), "retriever=first", "judge=brevity", *HASH, "dataset.limit=3",
                   "tracker=none", "hydra.run.dir=run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [aggregates] = json.loads((tmp_path / "run" / "results.json").read_text()).values()
    assert aggregates["judge"] == "brevity" and aggregates["total_questions"] == 3
    table = [json.loads(line) for line in (tmp_path / "run" / "questions.jsonl").read_text().splitlines()]
    assert all(len(row["context"]) == 2 for row in table)  # top_k from first.yaml
    assert all(row["reasoning"] == f"{len(row['answer'].split())} words" for row in table)  # the judge's own


def test_a_judge_with_a_metric_of_its_own_brings_its_weights(tmp_path, monkeypatch):
    """The judge recipe for new metrics: its YAML file chooses weights=judge, so overall_score is
    made of the weights the class declares, without a weights file."""
    (tmp_path / "my_judges.py").write_text(JUDGE.replace("class Brevity", "class _Brevity"))
    conf = tmp_path / "my_conf" / "judge"
    conf.mkdir(parents=True)
    (conf / "cites.yaml").write_text("# Does the answer quote its context?\ndefaults:\n"
                                     "  - override /weights@_global_.weights: judge\n  - _self_\n\n"
                                     "_target_: my_judges.Cites\nname: cites\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    proc = run_app("--config-dir", str(tmp_path / "my_conf"), "judge=cites", *HASH, "retriever=bm25", "dataset.limit=4",
                   "tracker=none", "hydra.run.dir=run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [aggregates] = json.loads((tmp_path / "run" / "results.json").read_text()).values()
    assert aggregates["overall_score"] == aggregates["avg_cites"]  # weight 1, on 0-1, no hallucination
    proc = run_app("--config-dir", str(tmp_path / "my_conf"), "judge=offline", "weights=judge", *HASH,
                   "tracker=none", cwd=tmp_path)
    assert proc.returncode == 2 and "weights=judge: judge 'offline-hash' declares no weights" in proc.stderr


def test_the_answer_metric_recipe_names_the_places_that_exist():
    recipe = (ROOT / "docs" / "contributing" / "index.md").read_text()
    section = recipe[recipe.index("### An answer metric"):]
    from ragexp.metrics.answers import ANSWER_MEASURES, AnswerMeasure

    generation = (ROOT / "ragexp" / "metrics" / "generation.py").read_text()
    assert "`ANSWER_MEASURES`" in section and "`AnswerMeasure`" in section and "metrics/answers.py" in section
    assert "metrics/generation.py" in section and "def exact_match(" in generation and "def token_f1(" in generation
    for name, kind in ANSWER_MEASURES.items():  # each name a measure of its own, which scores
        assert issubclass(kind, AnswerMeasure) and kind.value is not AnswerMeasure.value, name
    default = (ROOT / "conf" / "metrics" / "default.yaml").read_text()
    assert set(re.search(r"^answer: \[([^]]*)\]", default, re.M)[1].replace(" ", "").split(",")) == set(ANSWER_MEASURES)
