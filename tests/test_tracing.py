"""tracing=on: each question of a run as an MLflow trace of its run (spans retrieve, generate,
judge, one per LLM request), with the judge's scores as feedback and the expected answer as an
expectation, written to a real SQLite store; sampling; tracker=none; logging a folder later.
tracing=off: a light record per question, written in one transaction like start_trace writes it."""
import json

from conftest import HASH, TEST_KEY_ENV, llm_args, run_app

from ragexp.config.build import from_yaml

FAST = ("retriever=bm25", *HASH)


def store(tmp_path):
    return f"sqlite:///{tmp_path / 'mlflow.db'}"


def traces_of_run(uri: str):
    """The only run of experiment ragexp in the store, the experiment, and the run's traces (via its link)."""
    import mlflow

    client = mlflow.MlflowClient(uri)
    experiment = client.get_experiment_by_name("ragexp")
    [run] = client.search_runs([experiment.experiment_id])
    mlflow.set_tracking_uri(uri)
    traces = mlflow.search_traces(locations=[experiment.experiment_id], run_id=run.info.run_id, return_type="list")
    return experiment, run, traces


def test_traced_llm_run_has_spans_requests_and_assessments(tmp_path, server):
    args = [*llm_args(server), "dataset.limit=3", "tracing=on", f"tracker.tracking_uri={store(tmp_path)}",
            f"cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'out'}"]
    proc = run_app(*args, cwd=tmp_path, env={TEST_KEY_ENV: "sk-test"})
    assert proc.returncode == 0, proc.stderr
    experiment, run, traces = traces_of_run(store(tmp_path))
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    assert len(traces) == 3
    questions = {json.loads(line)["question_id"]: json.loads(line)
                 for line in (tmp_path / "out" / "questions.jsonl").read_text().splitlines()}
    judge = run.data.tags["judge"]
    for trace in traces:
        spans = {s.name: s for s in trace.data.spans}
        root = next(s for s in trace.data.spans if s.parent_id is None)
        assert {"question", "retrieve", "generate", "judge"} <= set(spans)
        assert all(spans[n].parent_id == root.span_id for n in ("retrieve", "generate", "judge"))
        for stage in ("generate", "judge"):  # one request each (the llm judge makes one call), a miss, tokens counted
            [request] = [s for s in trace.data.spans if s.parent_id == spans[stage].span_id]
            assert request.span_type == "CHAT_MODEL" and request.attributes["ragexp.cache"] == "miss"
            assert request.attributes["mlflow.chat.tokenUsage"]["input_tokens"] > 0
            assert request.inputs["messages"] and request.outputs
        qid = trace.info.tags["ragexp.question_id"]
        record = questions[qid]
        assert root.outputs == {"answer": record["answer"]}
        assert spans["retrieve"].outputs[0]["id"] == record["context"][0]["chunk_id"]
        feedback = {a.name: a for a in trace.info.assessments if a.feedback is not None}
        # tracker.feedback=main: the scores overall_score weighs, and hallucination (MLflow shows four in view)
        assert set(feedback) == {"context_relevance", "answer_similarity", "faithfulness", "hallucination"}
        assert {n: feedback[n].value for n in feedback if n != "hallucination"} == {
            n: record["judge_scores"][n] for n in feedback if n != "hallucination"}
        assert feedback["hallucination"].value is record["hallucination"]
        assert trace.info.tags["mlflow.eval.requestId"] == record["question_id"]  # its pairing id
        assert feedback["faithfulness"].source.source_id == judge and feedback["faithfulness"].rationale == record["reasoning"]
        [expected] = [a for a in trace.info.assessments if a.expectation is not None]
        assert expected.name == "expected_response" and expected.value == record["expected_answers"][0]
        assert trace.info.trace_metadata["mlflow.sourceRun"] == run.info.run_id


def test_second_run_is_served_from_the_caches_and_says_so(tmp_path, server):
    args = [*llm_args(server), "dataset.limit=2", "tracing=on", f"tracker.tracking_uri={store(tmp_path)}",
            f"cache.dir={tmp_path / 'cache'}"]
    for _ in range(2):
        proc = run_app(*args, cwd=tmp_path, env={TEST_KEY_ENV: "sk-test"})
        assert proc.returncode == 0, proc.stderr
    [second] = sorted(tmp_path.glob("outputs/*/*"))[-1:]
    records = [json.loads(line) for line in (second / "traces.jsonl").read_text().splitlines()]
    assert len(records) == 2
    for record in records:
        caches = {s["name"]: s["attributes"]["ragexp.cache"] for s in record["spans"]}
        assert caches == {"retrieve": "hit", "generate": "hit", "judge": "hit"}  # no LLM request span: none was made


def test_sample_rate_keeps_a_seeded_share(tmp_path):
    tracing = from_yaml("tracing/off", enabled=True, sample_rate=0.5, seed=3)
    args = [*FAST, "dataset.limit=20", "tracing=on", "tracing.sample_rate=0.5", "tracing.seed=3", "tracker=none",
            f"cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'out'}"]
    proc = run_app(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    traced = [json.loads(line)["question_id"] for line in (tmp_path / "out" / "traces.jsonl").read_text().splitlines()]
    asked = [json.loads(line)["question_id"] for line in (tmp_path / "out" / "questions.jsonl").read_text().splitlines()]
    assert traced == [qid for qid in asked if tracing.keeps(qid)]
    assert 0 < len(traced) < 20


def test_without_the_mlflow_tracker_traces_stay_in_the_folder_until_tracked(tmp_path):
    from ragexp.track import main as track

    args = [*FAST, "dataset.limit=4", "tracing=on", "tracker=none", f"cache.dir={tmp_path / 'cache'}",
            f"hydra.run.dir={tmp_path / 'out'}"]
    proc = run_app(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "tracing=on with not tracked (tracker=none): no MLflow trace is written" in proc.stderr
    assert "python -m ragexp.track" in proc.stderr
    assert not (tmp_path / "mlflow.db").exists()
    assert track([str(tmp_path / "out"), "--tracking-uri", store(tmp_path)]) == 0
    _, _, traces = traces_of_run(store(tmp_path))
    assert len(traces) == 4
    assert all({"retrieve", "generate", "judge"} <= {s.name for s in t.data.spans} for t in traces)


def test_tracing_off_logs_a_light_record_per_question(tmp_path):
    """Without tracing=on every question is still a trace of its run (for MLflow's evaluation views):
    the root span with question and answer, one RETRIEVER span with the chunks the generator saw,
    the scores as feedback with the judge's rationale, the expected answer as an expectation."""
    args = [*FAST, "dataset.limit=3", f"tracker.tracking_uri={store(tmp_path)}", f"cache.dir={tmp_path / 'cache'}",
            f"hydra.run.dir={tmp_path / 'out'}"]
    proc = run_app(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "out" / "traces.jsonl").exists()
    _, run, traces = traces_of_run(store(tmp_path))
    questions = {json.loads(line)["question_id"]: json.loads(line)
                 for line in (tmp_path / "out" / "questions.jsonl").read_text().splitlines()}
    assert sorted(t.info.tags["ragexp.question_id"] for t in traces) == sorted(questions)
    for trace in traces:
        record = questions[trace.info.tags["ragexp.question_id"]]
        root = next(s for s in trace.data.spans if s.parent_id is None)
        [retrieve] = [s for s in trace.data.spans if s.parent_id is not None]
        assert root.inputs == {"question": record["question"]} and root.outputs == {"answer": record["answer"]}
        assert retrieve.span_type == "RETRIEVER" and retrieve.parent_id == root.span_id
        assert [d["page_content"] for d in retrieve.outputs] == [c["text"] for c in record["context"]]
        feedback = {a.name: a for a in trace.info.assessments if a.feedback is not None}
        # tracker.feedback=main: the scores overall_score weighs, and hallucination (MLflow shows four in view)
        assert set(feedback) == {"context_relevance", "answer_similarity", "faithfulness", "hallucination"}
        assert {n: feedback[n].value for n in feedback if n != "hallucination"} == {
            n: record["judge_scores"][n] for n in feedback if n != "hallucination"}
        assert feedback["hallucination"].value is record["hallucination"]
        assert trace.info.tags["mlflow.eval.requestId"] == record["question_id"]  # its pairing id
        assert feedback["faithfulness"].rationale == (record["reasoning"] or None)
        [expected] = [a for a in trace.info.assessments if a.expectation is not None]
        assert expected.value == record["expected_answers"][0]
        assert trace.info.trace_metadata["mlflow.sourceRun"] == run.info.run_id


def test_question_records_can_be_switched_off(tmp_path):
    args = [*FAST, "dataset.limit=3", f"tracker.tracking_uri={store(tmp_path)}", "tracker.question_records=false",
            f"cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'out'}"]
    proc = run_app(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    _, _, traces = traces_of_run(store(tmp_path))
    assert traces == []


def test_one_transaction_writes_what_start_trace_writes(tmp_path):
    """The SQL store's batch write (ragexp.store.trace_store.start_in_one_transaction) against
    MLflow's own start_trace, on the same records: the traces read back alike, field by field."""
    import mlflow
    from mlflow.tracing.client import TracingClient

    from ragexp.store import trace_store

    proc = run_app(*FAST, "dataset.limit=4", "tracker=none", f"cache.dir={tmp_path / 'cache'}",
                   f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    mlflow.set_tracking_uri(store(tmp_path))
    client = mlflow.MlflowClient()
    read = {}
    for way in ("batch", "start_trace"):
        experiment_id = client.create_experiment(way)
        run_id = client.create_run(experiment_id).info.run_id
        questions = trace_store.read_jsonl(tmp_path / "out" / "questions.jsonl")
        infos = [trace_store.trace_of(trace_store.light_record(q, 1_700_000_000_000_000_000), {**q, "judge": "offline"},
                                      experiment_id, run_id)[0] for q in questions]
        if way == "batch":
            trace_store.start_in_one_transaction(client._tracking_client.store, infos)
        else:
            for info in infos:
                TracingClient().start_trace(info)
        found = {}
        for info in map(TracingClient().get_trace_info, [i.trace_id for i in infos]):
            tags = {k: v for k, v in info.tags.items() if k != "mlflow.artifactLocation"}  # under its experiment
            assessments = sorted((a.name, json.dumps(a.feedback.value if a.feedback else a.expectation.value),
                                  a.rationale, a.source.source_type, a.source.source_id) for a in info.assessments)
            assert info.trace_metadata.pop("mlflow.sourceRun") == run_id  # the one field that differs
            found[info.tags["ragexp.question_id"]] = (info.request_preview, info.response_preview, info.state,
                                                      info.request_time, tags, dict(info.trace_metadata), assessments)
        read[way] = found
    assert len(read["batch"]) == 4 and read["batch"] == read["start_trace"]


def test_sample_rate_out_of_range_is_named(tmp_path):
    proc = run_app(*FAST, "tracing=on", "tracing.sample_rate=1.5", "tracker=none", cwd=tmp_path)
    assert proc.returncode == 2
    assert "tracing.sample_rate" in proc.stderr


def test_a_failed_request_is_traced_with_its_reason(tmp_path, server):
    server.faults = [400]  # the first generator request is refused: that question fails, the other goes on
    args = [*llm_args(server), "dataset.limit=2", "tracing=on", "max_failed_share=1", "llm.cache_dir=null",
            f"tracker.tracking_uri={store(tmp_path)}", f"cache.dir={tmp_path / 'cache'}"]
    proc = run_app(*args, cwd=tmp_path, env={TEST_KEY_ENV: "sk-test"})
    assert proc.returncode == 0, proc.stderr
    _, _, traces = traces_of_run(store(tmp_path))
    failed = [t for t in traces if t.info.state == "ERROR"]
    assert len(traces) == 2 and len(failed) == 1
    spans = {s.name: s for s in failed[0].data.spans}
    assert "HTTP 400" in spans["generate"].attributes["ragexp.failure_reason"]
    assert spans["generate"].status.status_code == "ERROR" and "judge" not in spans
    assert "HTTP 400" in spans["generator request"].attributes["ragexp.failure_reason"]


def test_the_triads_parallel_requests_are_children_of_the_judge_span(tmp_path, server):
    args = [*llm_args(server, judge="triad", generator=False), "dataset.limit=2", "tracing=on", "tracker=none",
            f"cache.dir={tmp_path / 'cache'}", f"hydra.run.dir={tmp_path / 'out'}"]
    proc = run_app(*args, cwd=tmp_path, env={TEST_KEY_ENV: "sk-test"})
    assert proc.returncode == 0, proc.stderr
    traces = [json.loads(line) for line in (tmp_path / "out" / "traces.jsonl").read_text().splitlines()]
    assert len(traces) == 2
    sent = len(server.requests)
    for trace in traces:
        [judge] = [s for s in trace["spans"] if s["name"] == "judge"]
        requests = [s for s in trace["spans"] if s["parent"] == judge["id"]]
        assert len(requests) >= 3 and {s["type"] for s in requests} == {"CHAT_MODEL"}  # the triad's 3 first steps at least
    assert sum(1 for t in traces for s in t["spans"] if s["type"] == "CHAT_MODEL") == sent
