"""Evaluating your own RAG system: recorded outputs (dataset=outputs), a Python function
(system=python) and an HTTP service (system=http) as the system under test, with and without
reference answers."""
import importlib.util
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from conftest import ROOT, compose, mlflow_runs, run_app
import ragexp
from ragexp.errors import RagexpError
from ragexp.config.build import from_yaml

EXAMPLES = ROOT / "examples"
RECORDED = EXAMPLES / "recorded_outputs.jsonl"
SCORING = "embedder@scoring_embedder=hash"  # model-free offline judge (the only embedder a system=... run has)


def example(name: str):
    """A module of examples/ (scripts, not a package), imported from its file."""
    spec = importlib.util.spec_from_file_location(f"examples_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def records(folder: Path) -> dict[str, dict]:
    return {r["question_id"]: r for r in map(json.loads, (folder / "questions.jsonl").read_text().splitlines())}


def test_recorded_outputs_half_without_reference_run_with_no_corpus(tmp_path):
    rows = [json.loads(line) for line in RECORDED.read_text().splitlines()]
    referenced = {r["id"] for r in rows if r.get("reference")}
    unanswerable = {r["id"] for r in rows if r.get("answerable") is False}
    assert len(referenced) == len(rows) // 2 and len(unanswerable) == 1  # the example is what the test says
    proc = run_app("dataset=outputs", f"dataset.path={RECORDED}", SCORING, "tracker=none", "slices=[channel]",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [folder] = [p.parent for p in tmp_path.glob("outputs/*/*/results.json")]
    [results] = json.loads((folder / "results.json").read_text()).values()
    assert results["total_questions"] == len(rows) and results["failed_questions"] == 0
    # reference-free metrics over every row (no n_ count), reference metrics over the referenced ones
    assert "avg_faithfulness" in results and "n_faithfulness" not in results and "n_context_relevance" not in results
    assert results["n_answer_similarity"] == len(referenced | unanswerable)  # abstaining is the reference of the other
    assert results["n_token_f1"] == len(referenced) and results["n_mrr"] == len(referenced)
    assert f"over {len(referenced)} of {len(rows)} questions" in proc.stdout
    assert "avg_faithfulness/channel/web" in results  # any other column slices the questions
    # no corpus: nothing chunked, indexed, retrieved or generated; the recorded answers were judged
    timings = json.loads((folder / "run.json").read_text())["timings_s"]
    assert not {"chunking", "indexing", "retrieval", "generation"} & set(timings) and "judging" in timings
    judged = records(folder)
    assert all(r["status"] == "judged" for r in judged.values())
    for row in rows:
        assert judged[row["id"]]["answer"] == row["answer"]
        assert [c["doc_id"] for c in judged[row["id"]]["context"]] == [c["doc_id"] for c in row["contexts"]]
        assert ("answer_similarity" in judged[row["id"]]["judge_scores"]) == (row["id"] in referenced | unanswerable)
    # the recorded retrieval scored against the golden documents: q003's retriever missed its document
    assert judged["q003"]["retrieval_metrics"]["hit_rate@5"] == 0.0 and judged["q001"]["retrieval_metrics"]["mrr"] == 1.0


def write_formats(tmp_path: Path, rows: list[dict]) -> list[Path]:
    import pandas as pd

    jsonl, csv, parquet = tmp_path / "o.jsonl", tmp_path / "o.csv", tmp_path / "o.parquet"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in rows))
    frame = pd.DataFrame(rows)
    frame.assign(**{c: frame[c].map(json.dumps) for c in ("retrieved_contexts", "reference_context_ids")}).to_csv(
        csv, index=False)
    frame.to_parquet(parquet)
    return [jsonl, csv, parquet]


def test_ragas_columns_read_without_mapping_from_jsonl_csv_and_parquet(tmp_path):

    rows = [{"user_input": "Which port?", "retrieved_contexts": ["It listens on 7070.", "UID 10001."],
             "response": "7070.", "reference": "Port 7070", "reference_context_ids": ["installation"], "team": "a"},
            {"user_input": "Who?", "retrieved_contexts": ["Nobody knows."], "response": "Nobody.", "reference": "",
             "reference_context_ids": [], "team": "b"}]
    loaded = [from_yaml("dataset/outputs", path=str(p)).load() for p in write_formats(tmp_path, rows)]
    for dataset in loaded:
        first, second = dataset.questions
        assert (first.qid, first.text, first.answers, first.golden) == ("q1", "Which port?", ("Port 7070",), {"installation": 1})
        assert second.answers == () and second.golden == {} and first.attributes == {"team": "a"}
        assert dataset.outputs["q1"].answer.text == "7070."
        assert [h.chunk.text for h in dataset.outputs["q1"].hits] == ["It listens on 7070.", "UID 10001."]
        assert dataset.documents == ()
    assert loaded[0].questions == loaded[1].questions == loaded[2].questions


def test_the_mlflow_preset_reads_evaluation_datasets_and_traces(tmp_path):

    rows = [{"inputs": {"question": "Which port?"}, "outputs": {"answer": "7070.", "contexts": ["Port 7070."]},
             "expectations": {"expected_response": "Port 7070"}, "dataset_record_id": "r1"},
            {"trace_id": "tr-2", "request": json.dumps({"messages": [{"role": "user", "content": "Which UID?"}]}),
             "response": json.dumps({"choices": [{"message": {"content": "10001."}}]})}]
    dataset = from_yaml("dataset/outputs", preset="mlflow").with_rows(rows).load()
    first, second = dataset.questions
    assert (first.qid, first.text, first.answers) == ("r1", "Which port?", ("Port 7070",))
    assert (second.qid, second.text, second.answers) == ("tr-2", "Which UID?", ())
    assert dataset.outputs["r1"].answer.text == "7070." and dataset.outputs["tr-2"].answer.text == "10001."
    assert [h.chunk.text for h in dataset.outputs["r1"].hits] == ["Port 7070."]


@pytest.mark.parametrize("row,settings,message", [
    ({"answer": "x"}, {}, ":1: no question (column question or user_input; set dataset.columns.question=...)"),
    ({"question": "q", "contexts": "one string"}, {}, ":1: the contexts (contexts) must be a list"),
    ({"question": "q", "contexts": [3]}, {}, ":1: the contexts (contexts): context 1 is int"),
    ({"question": "q", "answer": {"text": "x"}}, {}, ":1: the answer (answer) must be text, got dict"),
    ({"question": "q", "answer": "x"}, {"columns": {"answer": "reply"}}, ":1: no column 'reply' (dataset.columns.answer)"),
])
def test_a_bad_row_is_one_line_naming_file_line_and_field(tmp_path, row, settings, message):
    from ragexp.errors import RagexpError

    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(row) + "\n")
    with pytest.raises(RagexpError) as err:
        from_yaml("dataset/outputs", path=str(path), **settings).load()
    assert str(err.value).startswith(f"{path}{message}") and "\n" not in str(err.value)
    skipped = from_yaml("dataset/outputs", path=str(path), on_error="skip", **settings).load()  # or left out, counted, reported
    assert skipped.questions == () and len(skipped.skipped_rows) == 1


def test_a_retrieval_only_file_has_no_failed_question(tmp_path):
    from ragexp.run.pipeline import run

    path = tmp_path / "retrieved.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": "a", "question": "Which port?", "contexts": [{"text": "x", "doc_id": "d2"}, {"text": "y", "doc_id": "d1"}],
         "golden_docs": ["d1"]},
        {"id": "b", "question": "Which UID?", "contexts": [{"text": "z", "doc_id": "d3"}], "golden_docs": ["d3"]}]))
    result = run(compose("dataset=outputs", f"dataset.path={path}", SCORING, "tracker=none",
                         f"cache.dir={tmp_path / 'cache'}"))
    assert [r.status for r in result.questions] == ["retrieved", "retrieved"]
    assert result.aggregates["failed_questions"] == 0 and result.aggregates["mrr"] == pytest.approx(0.75)
    assert "avg_faithfulness" not in result.aggregates
    assert any("retrieval only" in note for note in result.notes)


def test_a_python_system_answers_cached_under_its_params_and_version(tmp_path, monkeypatch):
    from ragexp.run.pipeline import run

    monkeypatch.syspath_prepend(str(EXAMPLES))
    import my_rag

    calls = []
    monkeypatch.setattr(my_rag, "answer", lambda q, p, real=my_rag.answer: calls.append(p) or real(q, p))
    base = ("system=python", "system.function=my_rag:answer", "dataset=outputs", f"dataset.path={RECORDED}", SCORING,
            "tracker=none", f"cache.dir={tmp_path / 'cache'}")
    result = run(compose(*base, "+system.params.top_k=1"))
    n = len(result.questions)
    assert calls == [{"top_k": 1}] * n and all(len(r.hits) == 1 for r in result.questions)
    assert result.aggregates["failed_questions"] == 0
    assert any("are ignored" in note for note in result.notes)  # the file's recorded answers were not used
    assert result.counters["system_calls"] == n
    run(compose(*base, "+system.params.top_k=1"))  # the same params and version: answered from the cache
    assert len(calls) == n
    run(compose(*base, "+system.params.top_k=1", "system.version=2"))  # a new version asks again
    assert len(calls) == 2 * n


def test_a_python_system_that_raises_fails_its_question_with_the_reason(tmp_path, monkeypatch):
    from ragexp.run.pipeline import run

    module = tmp_path / "flaky_rag.py"
    module.write_text("def answer(question, params):\n"
                      "    if 'port' in question:\n        raise ValueError('index offline')\n"
                      "    if 'user ID' in question:\n        return {'answer': 42}\n"
                      "    return {'answer': 'ok', 'contexts': ['c']}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    result = run(compose("system=python", "system.function=flaky_rag:answer", "dataset=outputs",
                         f"dataset.path={RECORDED}", SCORING, "tracker=none", "cache.enabled=false"))
    failures = {r.question.qid: r.failure for r in result.questions if r.failed}
    assert failures == {"q007": "system: flaky_rag:answer raised ValueError: index offline",
                        "q002": "system: the answer is int, not text"}
    assert result.aggregates["failed_questions"] == 2 and result.counters["system_failures"] == 1


@pytest.mark.parametrize("args,message", [
    (["system=python", "system.function=nowhere_at_all:answer"],
     "ragexp: error: system.function: cannot import 'nowhere_at_all:answer' (ModuleNotFoundError"),
    (["system=python", "system.function=my_rag:answer", "chunker=fixed"],
     "ragexp: error: chunker: system=python does not use ragexp's chunker"),
    (["system=python", "system.function=my_rag:answer", "+retriever=bm25"],
     "ragexp: error: retriever: the system under test (PythonSystem) is not ragexp's pipeline"),
    (["system=http"], "ragexp: error: system.url: not set"),
    (["system=http", "system.url=http://127.0.0.1:9/x", "system.body={q: '{query}'}"],
     "ragexp: error: system.body: unknown placeholder {query}"),
])
def test_a_system_setting_to_fix_is_one_line_exit_2(tmp_path, args, message):
    proc = run_app(*args, "dataset=outputs", f"dataset.path={RECORDED}", SCORING, "tracker=none", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(message) and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_an_http_sweep_is_one_child_run_per_point_and_a_comparison(tmp_path):
    server = example("http_service").serve(0)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/answer"
        proc = run_app("-m", "system=http", f"system.url={url}", "system.params.top_k=1,2", "dataset=outputs",
                       f"dataset.path={RECORDED}", SCORING, cwd=tmp_path)
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stderr
    n = len(RECORDED.read_text().splitlines())
    assert sorted(p["top_k"] for p in server.seen) == [1] * n + [2] * n  # the service saw each param value
    client, runs = mlflow_runs(tmp_path)
    parents = [r for r in runs if r.data.tags.get("ragexp.role") == "sweep"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(parents) == 1 and {c.info.run_name for c in children} == {"top_k=1", "top_k=2"}
    assert {c.data.params["system.params.top_k"] for c in children} == {"1", "2"}
    assert all(c.data.metrics["failed_questions"] == 0 and c.data.metrics["total_questions"] == n for c in children)
    assert "leaderboard (" in proc.stdout and list(tmp_path.glob("multirun/*/*/report/*.html"))


class Faulty(BaseHTTPRequestHandler):
    """A service that fails per question: 500 once then answers (`flaky`), 500 always (`down`), a
    reply without the answer field (`nofield`), a reply that is not JSON (`html`); a question that
    starts with `nocontexts` gets an answer without contexts."""

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        question = body["question"]
        self.server.asked.append(question)
        status, reply = 200, {"answer": "fine", "contexts": ["c"]}
        if question == "down" or (question == "flaky" and self.server.asked.count("flaky") == 1):
            status, reply = 500, {"error": "boom"}
        elif question == "nofield":
            reply = {"text": "no answer field"}
        elif question.startswith("nocontexts"):
            reply = {"answer": "fine"}
        data = b"<html>" if question == "html" else json.dumps(reply).encode()
        self.send_response(status)
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


def test_an_http_service_failing_is_counted_per_question_with_its_reason(tmp_path):
    from ragexp.run.pipeline import run

    server = ThreadingHTTPServer(("127.0.0.1", 0), Faulty)
    server.asked = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    path = tmp_path / "questions.jsonl"
    path.write_text("".join(json.dumps({"id": q, "question": q}) + "\n" for q in ("ok", "flaky", "down", "nofield", "nocontexts", "html")))
    try:
        result = run(compose("system=http", f"system.url=http://127.0.0.1:{server.server_address[1]}/a",
                             "system.max_retries=1", "system.backoff_s=0", "system.max_concurrency=1",
                             "dataset=outputs", f"dataset.path={path}", SCORING, "tracker=none", "cache.enabled=false"))
    finally:
        server.shutdown()
    url = f"http://127.0.0.1:{server.server_address[1]}/a"
    failures = {r.question.qid: r.failure for r in result.questions}
    assert failures["ok"] == failures["flaky"] == ""  # flaky: answered on its retry
    assert failures["down"] == f'system: {url}: HTTP 500 ({{"error": "boom"}}) after 2 attempts'
    assert failures["nofield"] == f"system: the reply of {url} has no field 'answer' (system.answer_field)"
    assert failures["nocontexts"] == (f"system: the reply of {url} has no field 'contexts' "
                                      "(system.contexts_field; null if the service returns no contexts)")
    assert failures["html"].startswith(f"system: {url} answered HTTP 200 with a body that is not JSON")
    assert server.asked.count("down") == 2 and server.asked.count("flaky") == 2
    assert {k: result.counters[k] for k in ("system_requests", "system_retries", "system_failures")} == {
        "system_requests": 8, "system_retries": 2, "system_failures": 4}
    assert result.aggregates["failed_questions"] == 4


def test_http_credentials_come_from_the_environment_only(tmp_path, monkeypatch):
    from ragexp.errors import RagexpError
    from ragexp.types import Dataset

    system = from_yaml("system/http", url="http://127.0.0.1:9/x", headers_env={"Authorization": "Bearer $RAGEXP_TEST_TOKEN"})
    monkeypatch.delenv("RAGEXP_TEST_TOKEN", raising=False)
    with pytest.raises(RagexpError, match="system.headers_env.Authorization: environment variable 'RAGEXP_TEST_TOKEN' is not set"):
        system.start(Dataset("d", (), ()))
    assert "RAGEXP_TEST_TOKEN" not in json.dumps(system.settings())  # nor its value in the cache key


def test_evaluate_gives_the_same_aggregates_as_the_command_line(tmp_path):
    import pandas as pd

    import ragexp

    proc = run_app("dataset=outputs", f"dataset.path={RECORDED}", SCORING, "tracker=none", f"cache.dir={tmp_path / 'c'}",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [cli] = json.loads(next(tmp_path.glob("outputs/*/*/results.json")).read_text()).values()
    overrides = [SCORING, f"cache.dir={tmp_path / 'c'}"]
    from_path = ragexp.evaluate(RECORDED, overrides=overrides, output_dir=tmp_path / "api")
    assert from_path.aggregates == cli and from_path.folder == tmp_path / "api"
    assert from_path.gate == "targets" and from_path.passed == (not from_path.warnings)  # no gate set: the targets decide
    rows = [json.loads(line) for line in RECORDED.read_text().splitlines()]
    from_rows = ragexp.evaluate(rows, judge="offline", overrides=overrides, output_dir=tmp_path / "rows")
    from_frame = ragexp.evaluate(pd.DataFrame(rows), overrides=overrides, output_dir=tmp_path / "frame")
    assert from_rows.aggregates == from_frame.aggregates == cli
    table = from_frame.table
    assert list(table["question_id"]) == [r["id"] for r in rows] and (table["status"] == "judged").all()
    assert list(table["answer"]) == [r["answer"] for r in rows]  # the answer under the input's name
    assert table["generated_answer"].equals(table["answer"])  # the run folder's name, an alias for one release
    assert table["faithfulness"].notna().all() and table["answer_similarity"].notna().sum() == cli["n_answer_similarity"]


def test_system_params_are_spelled_plainly_on_the_command_line_and_in_evaluate(tmp_path, monkeypatch):
    import ragexp
    from ragexp.config.overrides import for_hydra, point_name

    # plain, swept, already prefixed, and a config-dir value left alone
    assert for_hydra(["system.params.top_k=3", "-m", "system.params.mode=a,b", "+system.params.x=1",
                      "-cd", "system.params.d=1"]) == [
        "++system.params.top_k=3", "-m", "++system.params.mode=a,b", "+system.params.x=1", "-cd", "system.params.d=1"]
    # a sweep job's run name: the swept values in the sweep's order, a `++` key found, Hydra's escapes undone
    assert point_name(["++system.params.top_k=3", "retriever=bm25", "generator.user_prompt=prompts\\:/rag/2"],
                      ["generator.user_prompt", "++system.params.top_k"]) == "prompts:/rag/2 · top_k=3"
    monkeypatch.syspath_prepend(str(EXAMPLES))
    result = ragexp.evaluate(RECORDED, overrides=["system=python", "system.function=my_rag:answer", "system.params.top_k=1",
                                                  SCORING, f"cache.dir={tmp_path / 'c'}"], output_dir=tmp_path / "api")
    assert result.aggregates["failed_questions"] == 0
    assert result.table["retrieved_chunk_ids"].map(lambda ids: len(json.loads(ids))).eq(1).all()  # top_k=1 reached it


def test_evaluate_passes_the_gate_verdict_and_raises_settings_errors(tmp_path, monkeypatch):
    import ragexp
    from ragexp.errors import RagexpError

    monkeypatch.chdir(tmp_path)
    gate = [SCORING, "gate=production", "~gate.thresholds.answer_relevance"]
    failing = ragexp.evaluate(RECORDED, overrides=gate, output_dir=tmp_path / "g")  # faithfulness 0.9: missed
    assert not failing.passed and failing.aggregates["gate_passed"] == 0 and failing.failure is None
    passing = ragexp.evaluate(RECORDED, overrides=[*gate, "gate.thresholds.faithfulness.min=0.1",
                                                    "gate.thresholds.mrr.min=0.5"], output_dir=tmp_path / "p")
    assert passing.passed and passing.aggregates["gate_passed"] == 1
    with pytest.raises(RagexpError, match="^chunker: system=recorded does not use ragexp's chunker"):
        ragexp.evaluate(RECORDED, overrides=["chunker=fixed"])
    with pytest.raises(RagexpError, match="^weights: .* the weights must sum to 1"):
        ragexp.evaluate(RECORDED, overrides=[SCORING, "weights.faithfulness=0.9"])


def test_import_ragexp_stays_light():
    import subprocess
    import sys

    code = ("import sys, ragexp, ragexp.api; ragexp.SystemOutput; "
            "print(sorted(m for m in ('torch', 'mlflow', 'pandas', 'sentence_transformers', 'hydra') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


class Slow(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        self.server.asked += 1
        self.server.release.wait(10)  # answers only once the test lets it (after the client gave up)
        self.send_response(200)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.mark.process  # timing is its subject: a 0.5 s deadline against a service that holds its reply
def test_an_http_service_that_times_out_fails_the_question_naming_the_setting():
    from ragexp.errors import QuestionFailed
    from ragexp.types import Dataset, Question

    server = ThreadingHTTPServer(("127.0.0.1", 0), Slow)
    server.asked, server.release = 0, threading.Event()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    system = from_yaml("system/http", url=f"http://127.0.0.1:{server.server_address[1]}/a", timeout_s=0.5, max_retries=0)
    try:
        system.start(Dataset("d", (), ()))
        with pytest.raises(QuestionFailed) as err:
            system.respond(Question("q1", "Which port?", ()))
    finally:
        server.release.set()
        system.close()
        server.shutdown()
    assert str(err.value) == f"system: {system.url}: no whole reply within 0.5 s (system.timeout_s)"
    assert server.asked == 1 and system.counters() == {"system_requests": 1, "system_retries": 0, "system_failures": 1}


def test_llm_judges_over_recorded_outputs_judge_the_unreferenced_without_a_reference(tmp_path, server, monkeypatch):
    from conftest import TEST_KEY_ENV

    endpoint = [f"judge.endpoint.base_url={server.base_url}", f"judge.endpoint.api_key_env={TEST_KEY_ENV}"]
    results = {}
    for judge in ("llm", "triad"):
        proc = run_app(f"judge={judge}", "dataset=outputs",
                       f"dataset.path={RECORDED}", SCORING, *endpoint, "tracker=none", f"run_name={judge}",
                       cwd=tmp_path, env={TEST_KEY_ENV: "test-key"})
        assert proc.returncode == 0, proc.stderr
        [results[judge]] = [json.loads(p.read_text())[judge] for p in tmp_path.glob("outputs/*/*/results.json")
                            if judge in json.loads(p.read_text())]
    assert all(r["failed_questions"] == 0 and r["total_questions"] == 8 for r in results.values())
    assert results["llm"]["n_answer_similarity"] == 5 and "n_faithfulness" not in results["llm"]
    assert "avg_answer_relevance" in results["triad"] and "n_answer_relevance" not in results["triad"]
    # the single-call judge was told there is no reference, never shown an empty one
    prompts = [m["content"] for r in server.chat_requests() for m in r["body"]["messages"] if m["role"] == "user"]
    unreferenced = [p for p in prompts if "<expected_answer>" in p and "Which port does quarryd listen on?" in p]
    assert unreferenced and all("(no reference answer given" in p for p in unreferenced)


def test_a_judge_sweep_over_recorded_outputs_is_one_child_run_per_judge(tmp_path, server):
    from conftest import TEST_KEY_ENV

    rows = [json.loads(line) for line in RECORDED.read_text().splitlines()[:3]]
    recorded = tmp_path / "recorded.jsonl"
    recorded.write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the endpoint settings are spelled as for one judge, though the sweep first composes the default judge
    proc = run_app("-m", "judge=llm,triad", f"judge.endpoint.base_url={server.base_url}",
                   f"judge.endpoint.api_key_env={TEST_KEY_ENV}", "dataset=outputs", f"dataset.path={recorded}", SCORING,
                   # no weights given: each judge weighs its own metrics (judge=triad brings weights=triad)
                   cwd=tmp_path, env={TEST_KEY_ENV: "test-key"})
    assert proc.returncode == 0, proc.stderr
    client, runs = mlflow_runs(tmp_path)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert sorted(c.info.run_name for c in children) == ["llm", "triad"]
    assert all(c.data.metrics["failed_questions"] == 0 and c.data.metrics["total_questions"] == 3 for c in children)
    [sweep] = [json.loads(p.read_text()) for p in tmp_path.glob("multirun/*/*/results.json")]
    assert {point: r["judge"] for point, r in sweep.items()} == {"llm": "llm-gpt-4o-mini",
                                                                 "triad": "triad-gpt-4o-mini"}
    assert "avg_answer_similarity" in sweep["llm"] and "avg_answer_relevance" in sweep["triad"]
    # each overall_score is its own judge's composite: the triad's on 0-1, the single-call judge's on 1-10
    assert 0 <= sweep["triad"]["overall_score"] <= 1 and "overall_score" in sweep["llm"]


def test_only_plain_settings_under_a_group_swept_by_choices_are_forced():
    from ragexp.config.overrides import under_swept_groups

    args = ["-m", "judge=llm,triad", "judge.endpoint.base_url=U", "judge.temperature=0,0.5", "+judge.name=x",
            "embedder@scoring_embedder=hash,minilm", "scoring_embedder.batch_size=8", "retriever.top_k=5,10",
            "retriever.bm25_k1=1.2", "dataset.path=judge.jsonl"]
    assert under_swept_groups(args) == ["-m", "judge=llm,triad", "++judge.endpoint.base_url=U", "judge.temperature=0,0.5",
                                        "+judge.name=x", "embedder@scoring_embedder=hash,minilm",
                                        "++scoring_embedder.batch_size=8", "retriever.top_k=5,10", "retriever.bm25_k1=1.2",
                                        "dataset.path=judge.jsonl"]
    assert under_swept_groups(args[1:]) == args[1:]  # a single run composes the chosen option itself


EXITING = ("import sys\n\n\ndef answer(question, params):\n    if 'port' in question:\n        sys.exit({code})\n"
           "    return {{'answer': 'ok', 'contexts': ['c']}}\n")


@pytest.mark.parametrize("code,concurrency", [("", 1), ("0", 4), ("'done'", 1)])
def test_a_user_function_that_exits_fails_the_run_naming_it(tmp_path, monkeypatch, code, concurrency):
    """sys.exit() inside a system=python function (in the calling thread or a worker thread) is never
    a pass: one line naming the function, exit 4 (also with max_failed_share=0), no results."""
    module = f"exiting_rag_{concurrency}_{len(code)}"  # a module of its own: an imported one stays in sys.modules
    (tmp_path / f"{module}.py").write_text(EXITING.format(code=code))
    monkeypatch.syspath_prepend(str(tmp_path))
    args = ("system=python", f"system.function={module}:answer", f"system.concurrency={concurrency}",
            "dataset=outputs", f"dataset.path={RECORDED}", SCORING, "cache.enabled=false",
            "max_failed_share=0")
    proc = run_app(*args, "tracker=none", "hydra.run.dir=run", cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("ragexp: error: SystemExit(") and "in answer() at" in line and f"{module}.py:6" in line
    assert not (tmp_path / "run" / "results.json").exists()
    with pytest.raises(RagexpError, match=rf"SystemExit\(.*in answer\(\) at .*{module}.py"):
        ragexp.evaluate(RECORDED, overrides=[*args[:3], SCORING, "cache.enabled=false"], output_dir=tmp_path / "api")


def test_a_sweep_whose_user_function_exits_records_the_job_and_goes_on(tmp_path, monkeypatch):
    (tmp_path / "exiting_sweep_rag.py").write_text(EXITING.format(code=""))
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLES))
    proc = run_app("-m", "system=python", "system.function=exiting_sweep_rag:answer,my_rag:answer", "dataset=outputs",
                   f"dataset.path={RECORDED}", SCORING, "cache.enabled=false", cwd=tmp_path)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # a job failed: the sweep's status
    assert "failed: SystemExit(None) was raised in answer() at" in proc.stderr
    assert "1 of 2 jobs failed" in proc.stderr
    client, runs = mlflow_runs(tmp_path)
    statuses = {("exiting" if "exiting_sweep_rag" in r.info.run_name else "mine" if "my_rag" in r.info.run_name
                 else r.data.tags.get("ragexp.role")): r.info.status for r in runs}
    assert statuses == {"exiting": "FAILED", "mine": "FINISHED", "sweep": "FAILED"}


class Busy(BaseHTTPRequestHandler):
    """429 with Retry-After as an HTTP date 2 s ahead on the first request, then the answer."""

    def do_POST(self):  # noqa: N802
        import email.utils
        import time

        self.rfile.read(int(self.headers["content-length"]))
        self.server.asked.append(time.monotonic())
        first = len(self.server.asked) == 1
        data = json.dumps({"error": "busy"} if first else {"answer": "fine", "contexts": ["c"]}).encode()
        self.send_response(429 if first else 200)
        if first:
            self.send_header("retry-after", email.utils.formatdate(time.time() + 2, usegmt=True))
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.mark.process  # timing is its subject: a wait of at least 1 s that a Retry-After date asks for
def test_the_http_system_waits_as_long_as_a_retry_after_date_asks(tmp_path):
    """Retry-After as an HTTP date (RFC 9110 allows both forms) was ignored by the HTTP system (retried
    after its backoff, 0.4 s); one reader serves the LLM clients and it."""
    from ragexp.run.pipeline import run

    server = ThreadingHTTPServer(("127.0.0.1", 0), Busy)
    server.asked = []
    threading.Thread(target=server.serve_forever, daemon=True).start()
    path = tmp_path / "questions.jsonl"
    path.write_text(json.dumps({"id": "q", "question": "Which port?"}) + "\n")
    try:
        result = run(compose("system=http", f"system.url=http://127.0.0.1:{server.server_address[1]}/a",
                             "system.backoff_s=0.01", "dataset=outputs", f"dataset.path={path}", SCORING,
                             "tracker=none", "cache.enabled=false"))
    finally:
        server.shutdown()
    assert result.aggregates["failed_questions"] == 0
    assert len(server.asked) == 2 and server.asked[1] - server.asked[0] >= 1.0  # a date to the second: >= 1 s left


def test_a_csv_that_pandas_wrote_is_read_with_its_python_style_lists(tmp_path):
    """A ragas user's DataFrame saved with `to_csv` writes list columns as Python's repr (['a', 'b']):
    read as the lists they are (as literals: no code runs); text that is no list says what would work."""
    import pandas as pd


    path = tmp_path / "ragas.csv"
    pd.DataFrame([{"user_input": "Which port?", "retrieved_contexts": ["It listens on 7070.", "UID's 10001."],
                   "response": "7070.", "reference": "Port 7070"}]).to_csv(path, index=False)
    assert "['It listens on 7070.'" in path.read_text()
    [question] = (dataset := from_yaml("dataset/outputs", path=str(path)).load()).questions
    assert [h.chunk.text for h in dataset.outputs[question.qid].hits] == ["It listens on 7070.", "UID's 10001."]
    bad = tmp_path / "bad.csv"
    bad.write_text("user_input,retrieved_contexts,response\nWhich port?,[__import__('os').getcwd()],7070.\n")
    from ragexp.errors import RagexpError

    with pytest.raises(RagexpError, match=r"bad.csv:2.* must be a list .*\['first passage', 'second'\] \(as pandas"):
        from_yaml("dataset/outputs", path=str(bad)).load()


@pytest.mark.parametrize("score", ["NaN", "Infinity", "-Infinity"])
def test_a_context_score_that_is_not_finite_is_one_line_naming_the_row(tmp_path, score):
    """NaN and Infinity scores (which Python's json reads) were kept and written as non-standard JSON
    into questions.jsonl; they are bad input, named by file:line."""
    from ragexp.errors import RagexpError

    path = tmp_path / "outputs.jsonl"
    path.write_text('{"question": "Which port?", "answer": "7070", "contexts": [{"text": "port 7070", "score": '
                    + score + '}]}\n')
    with pytest.raises(RagexpError, match=r"outputs.jsonl:1: .*context 1: score must be a finite number"):
        from_yaml("dataset/outputs", path=str(path)).load()


@pytest.mark.process  # timing is its subject: a 1 s deadline on a call that hangs, the run done within 30 s
def test_a_python_system_call_that_hangs_fails_its_question_at_the_deadline(tmp_path, monkeypatch):
    """system.timeout_s: a call that hangs fails its question at the deadline, the others are answered,
    and the run does not wait for the hung call (it had no per-question limit)."""
    import time

    from ragexp.run.pipeline import run

    (tmp_path / "hanging_rag.py").write_text("import time\n\n\ndef answer(question, params):\n"
                                             "    if 'port' in question:\n        time.sleep(120)\n"
                                             "    return {'answer': 'ok', 'contexts': ['c']}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    started = time.monotonic()
    result = run(compose("system=python", "system.function=hanging_rag:answer", "system.timeout_s=1",
                         "dataset=outputs", f"dataset.path={RECORDED}", SCORING, "tracker=none", "cache.enabled=false"))
    assert time.monotonic() - started < 30
    failures = {r.question.qid: r.failure for r in result.questions if r.failed}
    assert failures == {"q007": "system: hanging_rag:answer did not answer within system.timeout_s=1 s "
                                "(the call goes on in the background; the run does not wait for it)"}
    assert result.counters["system_failures"] == 1 and len(result.questions) > 1
