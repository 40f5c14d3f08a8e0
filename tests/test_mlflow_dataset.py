"""dataset=mlflow reads an MLflow evaluation dataset from a real store (SQLite, and `mlflow server`): inputs, recorded outputs and
expectations mapped onto ragexp's fields; a missing dataset, a changed one and a store that keeps none
are one line naming the setting."""
import pytest

from ragexp import evaluate
from ragexp.errors import RagexpError
from ragexp.config.build import from_yaml

FAST = ["embedder@scoring_embedder=hash", "cache.enabled=false"]
RETRIEVAL = ("mrr", "hit_rate", "ndcg", "recall", "precision", "map", "context_hit", "context_recall")
RECORDS = [
    {"inputs": {"question": "Which port does quarryd listen on?"},
     "outputs": {"response": "quarryd listens on port 7070.", "retrieved_contexts": ["quarryd listens on port 7070."]},
     "expectations": {"expected_response": "Port 7070.",
                      "expected_retrieved_context": [{"doc_uri": "installation", "content": "quarryd listens on port 7070."}],
                      "guidelines": ["Name the port number."]}},
    {"inputs": {"question": "How long can a job stay active?"},
     "outputs": {"response": "A job stays active for at most 12 hours.",
                 "retrieved_contexts": ["A job stays active for at most 12 hours."]},
     "expectations": {"expected_facts": ["at most 12 hours", "then it is stopped"]}},
]


@pytest.fixture
def store(mlflow_store, monkeypatch):
    import mlflow
    from mlflow.genai import datasets

    uri = mlflow_store
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    mlflow.set_tracking_uri(uri)
    datasets.create_dataset(name="quarry-qa").merge_records(RECORDS)
    return uri, datasets.get_dataset(name="quarry-qa")  # as it is now, its digest after the records


def test_an_mlflow_dataset_is_read_as_questions_references_golden_documents_and_answers(store):
    uri, qa = store
    dataset = from_yaml("dataset/mlflow", name="quarry-qa", tracking_uri=uri).load()
    port, job = sorted(dataset.questions, key=lambda q: "port" not in q.text)  # records added at once: ordered by id
    assert (port.text, port.answers, port.golden) == ("Which port does quarryd listen on?", ("Port 7070.",), {"installation": 1})
    assert port.attributes["guidelines"] == "Name the port number."
    assert job.answers == ("at most 12 hours; then it is stopped",) and job.golden == {}
    assert port.qid.startswith("dr-") and port.qid != job.qid  # the records' own ids
    assert dataset.outputs[port.qid].answer.text == "quarryd listens on port 7070."
    assert [h.chunk.text for h in dataset.outputs[job.qid].hits] == ["A job stays active for at most 12 hours."]
    assert f"MLflow evaluation dataset 'quarry-qa', digest {qa.digest}" in dataset.notes


def test_a_run_on_an_mlflow_dataset_judges_its_recorded_answers(store, tmp_path):
    uri, _ = store
    evaluation = evaluate(overrides=["dataset=mlflow", "dataset.name=quarry-qa", f"dataset.tracking_uri={uri}", *FAST],
                          output_dir=tmp_path / "run")
    assert evaluation.aggregates["total_questions"] == 2 and evaluation.aggregates["failed_questions"] == 0
    assert evaluation.result.name == "quarry-qa-recorded"  # named after the MLflow dataset
    assert evaluation.aggregates["avg_faithfulness"] == 10.0  # each answer is its context
    # the recorded contexts carry no document ids: the retrieval metrics are not computed, not 0
    assert "mrr" not in evaluation.aggregates and "hit_rate_at_5" not in evaluation.aggregates
    assert any("its contexts carry no document ids" in note for note in evaluation.result.notes)
    assert not [w for w in evaluation.warnings if w.startswith(RETRIEVAL)]


def test_the_documented_record_with_its_contexts_doc_uri_scores_a_perfect_retrieval(mlflow_store, monkeypatch, tmp_path):
    """The own-system page's example: a context given with its `doc_uri` is that document."""
    import mlflow
    from mlflow.genai import datasets

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    mlflow.set_tracking_uri(mlflow_store)
    record = {**RECORDS[0], "outputs": {"response": "quarryd listens on port 7070.", "retrieved_contexts": [
        {"doc_uri": "installation", "content": "quarryd listens on port 7070."}]}}
    datasets.create_dataset(name="perfect").merge_records([record])
    evaluation = evaluate(overrides=["dataset=mlflow", "dataset.name=perfect", f"dataset.tracking_uri={mlflow_store}",
                                     *FAST], output_dir=tmp_path / "run")
    assert evaluation.aggregates["mrr"] == 1.0 and evaluation.aggregates["hit_rate_at_5"] == 1.0
    assert not [w for w in evaluation.warnings if w.startswith(RETRIEVAL)], evaluation.warnings


def test_a_tracked_run_records_its_test_set_as_an_mlflow_dataset_input_with_its_digest(store, tmp_path):
    import mlflow

    uri, _ = store
    evaluation = evaluate(overrides=["dataset=mlflow", "dataset.name=quarry-qa", f"dataset.tracking_uri={uri}",
                                     f"tracker.tracking_uri={uri}", *FAST], output_dir=tmp_path / "run", track=True)
    [used] = mlflow.MlflowClient(uri).get_run(evaluation.run_id).inputs.dataset_inputs
    assert (used.dataset.name, used.dataset.digest, used.dataset.source_type) == (
        "quarry-qa", evaluation.result.dataset_fingerprint, "mlflow")
    assert [(t.key, t.value) for t in used.tags] == [("mlflow.data.context", "evaluation")]


def test_a_missing_dataset_names_those_there_are_and_a_changed_one_is_refused(store, tmp_path):
    uri, qa = store
    with pytest.raises(RagexpError, match=r"dataset.name: no MLflow evaluation dataset 'nope' in .*; it has quarry-qa"):
        from_yaml("dataset/mlflow", name="nope", tracking_uri=uri).load()
    assert from_yaml("dataset/mlflow", name="quarry-qa", digest=qa.digest, tracking_uri=uri).load().questions
    with pytest.raises(RagexpError, match=rf"dataset.digest: .* is now at digest {qa.digest}, not 0000"):
        from_yaml("dataset/mlflow", name="quarry-qa", digest="0000", tracking_uri=uri).load()
    with pytest.raises(RagexpError, match="set dataset.name=NAME"):
        evaluate(overrides=["dataset=mlflow", *FAST], output_dir=tmp_path / "unnamed")


def test_a_store_that_keeps_no_datasets_says_what_to_use(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(RagexpError, match=r"dataset\.(name|tracking_uri): the MLflow store at .* (cannot|keep)"):
        from_yaml("dataset/mlflow", name="quarry-qa", tracking_uri=(tmp_path / "mlruns").as_uri()).load()
    with pytest.raises(RagexpError, match="dataset.tracking_uri: no MLflow store at"):
        from_yaml("dataset/mlflow", name="quarry-qa", tracking_uri=f"sqlite:///{tmp_path / 'typo.db'}").load()
    assert not (tmp_path / "typo.db").exists()  # reading makes no store


def test_exported_traces_give_their_retrieved_documents_as_the_contexts(tmp_path, monkeypatch):
    """dataset=outputs dataset.preset=mlflow on traces exported with mlflow.search_traces: the
    question, the answer, and the documents of the trace's RETRIEVER span (with their doc_uri)."""
    import mlflow
    from mlflow.entities import Document, SpanType


    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.chdir(tmp_path)  # a new experiment's artifacts go to ./mlruns
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = mlflow.set_experiment("team-rag")

    @mlflow.trace(span_type=SpanType.RETRIEVER)
    def retrieve(question):
        return [Document(page_content="quarryd listens on port 7070.", metadata={"doc_uri": "installation"}),
                Document(page_content="Queues have no hard limit.", metadata={"doc_uri": "faq"})]

    @mlflow.trace
    def answer(question):
        retrieve(question)
        return "Port 7070."

    answer("Which port does quarryd listen on?")
    mlflow.flush_trace_async_logging()
    exported = tmp_path / "traces.jsonl"
    mlflow.search_traces(locations=[experiment.experiment_id]).to_json(exported, orient="records", lines=True)
    evaluation = evaluate(exported, overrides=["dataset.preset=mlflow", *FAST],
                          output_dir=tmp_path / "run")
    [result] = evaluation.result.questions
    assert (result.question.text, result.answer.text) == ("Which port does quarryd listen on?", "Port 7070.")
    assert [(h.chunk.doc_id, h.chunk.text) for h in result.hits] == [
        ("installation", "quarryd listens on port 7070."), ("faq", "Queues have no hard limit.")]
    dataset = from_yaml("dataset/outputs", path=str(exported), preset="mlflow").load()
    assert [q.qid for q in dataset.questions] == [result.question.qid] and result.question.qid.startswith("tr-")
    assert dataset.questions[0].attributes == {}  # the trace's own fields are not kept as columns


def test_a_rerun_on_a_dataset_changed_in_place_says_so_in_one_line(store, tmp_path, caplog):
    from mlflow.genai import datasets

    uri, _ = store
    args = ["dataset=mlflow", "dataset.name=quarry-qa", f"dataset.tracking_uri={uri}", f"tracker.tracking_uri={uri}", *FAST]
    first = evaluate(overrides=args, output_dir=tmp_path / "first", track=True)
    with caplog.at_level("WARNING", logger="ragexp"):
        evaluate(overrides=args, output_dir=tmp_path / "same", track=True)
    assert "the test set changed" not in caplog.text
    datasets.get_dataset(name="quarry-qa").merge_records([{"inputs": {"question": "Who wrote quarryd?"},
                                                           "outputs": {"response": "Ada.", "retrieved_contexts": ["Ada wrote quarryd."]}}])
    with caplog.at_level("WARNING", logger="ragexp"):
        changed = evaluate(overrides=args, output_dir=tmp_path / "changed", track=True)
    [line] = [r.getMessage() for r in caplog.records if "the test set changed" in r.getMessage()]
    assert "last run named quarry-qa-recorded" in line and first.result.dataset_fingerprint in line
    assert changed.result.dataset_fingerprint in line and changed.aggregates["total_questions"] == 3
