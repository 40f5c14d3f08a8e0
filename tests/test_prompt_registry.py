"""Prompt settings given as prompts:/NAME/VERSION or prompts:/NAME@ALIAS are read from MLflow's
prompt registry (a real store: SQLite, and `mlflow server`): the template with MLflow's {{variables}} as ragexp's fields,
the version an alias pointed to recorded in prompts_used, a variable the setting lacks and a prompt
the registry lacks refused with one line naming the setting."""
import pytest
import yaml

from conftest import TEST_KEY_ENV, compose, llm_args
from openai_server import auto_reply, user_text

from ragexp import evaluate
from ragexp.config.prompts import as_fields
from ragexp.errors import RagexpError

ROWS = [{"id": f"q{n}", "question": f"Which port does service {n} use?", "contexts": [f"Service {n} uses port {7000 + n}."],
         "answer": f"Service {n} uses port {7000 + n}."} for n in range(3)]


def judge_args(server) -> list[str]:
    """The llm judge on the test server, for recorded outputs (no pipeline groups)."""
    return [a for a in llm_args(server, generator=False) if a.startswith(("judge", "embedder@scoring_embedder"))]


@pytest.fixture
def registry(mlflow_store, monkeypatch):
    import mlflow

    uri = mlflow_store
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv(TEST_KEY_ENV, "test-key")
    mlflow.set_tracking_uri(uri)
    return mlflow


def shipped_user_prompt() -> str:
    return str(compose("judge=llm").judge.user_prompt)


def test_mlflow_placeholders_become_fields_and_other_braces_stay_text():
    assert as_fields('Answer {{question}} from {{ context }} as {"score": 1}.') == \
        'Answer {question} from {context} as {{"score": 1}}.'


def test_a_judge_prompt_from_the_registry_is_used_and_its_version_recorded(registry, server, tmp_path):
    shipped = shipped_user_prompt()
    mlflow_text = shipped.replace("{{", "\0").replace("}}", "\1").replace("{", "{{").replace("}", "}}") \
        .replace("\0", "{").replace("\1", "}")  # as a team would register it: {{variable}}
    registry.genai.register_prompt(name="judge-user", template="Rate it.")
    registry.genai.register_prompt(name="judge-user", template=mlflow_text)
    registry.genai.set_prompt_alias("judge-user", alias="prod", version=2)
    evaluation = evaluate(ROWS, overrides=[*judge_args(server), "judge.user_prompt=prompts:/judge-user@prod",
                                           "cache.enabled=false"], output_dir=tmp_path / "run")
    logged = yaml.safe_load((evaluation.folder / "config.yaml").read_text())
    assert logged["judge"]["user_prompt"] == shipped  # the text itself: what the cache keys and a re-run read
    assert logged["prompts_used"] == {"judge.user_prompt": "prompts:/judge-user/2"}  # the alias as the version it named
    assert evaluation.aggregates["failed_questions"] == 0 and len(server.chat_requests()) == 3


def test_a_variable_the_setting_lacks_and_a_prompt_the_registry_lacks_are_one_line(registry, server, tmp_path):
    registry.genai.register_prompt(name="moody", template="Judge {{question}} in a {{mood}} mood.")
    with pytest.raises(RagexpError, match=r"judge.user_prompt: unknown field \{mood\}"):
        evaluate(ROWS, overrides=[*judge_args(server), "judge.user_prompt=prompts:/moody/1"],
                 output_dir=tmp_path / "a")
    with pytest.raises(RagexpError, match=r"judge.user_prompt: prompts:/nope/1 cannot be loaded from the prompt registry"):
        evaluate(ROWS, overrides=[*judge_args(server), "judge.user_prompt=prompts:/nope/1"],
                 output_dir=tmp_path / "b")
    assert not server.chat_requests()  # refused before any work


def test_a_sweep_over_prompt_versions_compares_them_on_the_leaderboard(server, tmp_path):
    """`-m generator.user_prompt=prompts:/rag/1,prompts:/rag/2`: one job per version, each run with the
    version's text and its prompts_used, the sweep's leaderboard ranking the two (version 2 asks for
    one word, and the scripted model then answers off the documents)."""
    import json

    import mlflow

    from conftest import HASH, run_app

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    mlflow.set_tracking_uri(uri)
    question = "<context>\n{{context}}\n</context>\n\n<question>\n{{question}}\n</question>\n"
    mlflow.genai.register_prompt(name="rag", template=question + "Answer from the documents.")
    mlflow.genai.register_prompt(name="rag", template=question + "Answer in one word.")
    mlflow.set_tracking_uri(None)
    server.chat = lambda body: "Bananas." if "one word" in user_text(body) else auto_reply(body)  # from the documents
    generator = ["generator=openai", f"generator.endpoint.base_url={server.base_url}", "generator.endpoint.model=m",
                 f"generator.endpoint.api_key_env={TEST_KEY_ENV}", "generator.endpoint.backoff_s=0.01"]
    proc = run_app("-m", "retriever=bm25", *HASH, *generator, "generator.user_prompt=prompts:/rag/1,prompts:/rag/2",
                   "dataset.limit=6", f"tracker.tracking_uri={uri}", cwd=tmp_path, env={TEST_KEY_ENV: "k"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    [sweep_dir] = tmp_path.glob("multirun/*/*")
    used = {}
    for folder in sorted(p.parent for p in sweep_dir.glob("*/config.yaml")):
        config = yaml.safe_load((folder / "config.yaml").read_text())
        used[config["prompts_used"]["generator.user_prompt"]] = config["generator"]["user_prompt"]
    assert set(used) == {"prompts:/rag/1", "prompts:/rag/2"}
    assert used["prompts:/rag/2"].endswith("Answer in one word.") and "{question}" in used["prompts:/rag/2"]
    board = json.loads((sweep_dir / "report" / "leaderboard.json").read_text())
    ranked = [e["label"] for e in board["entries"]]
    assert len(ranked) == 2 and ranked[0].endswith("prompts:/rag/1") and ranked[1].endswith("prompts:/rag/2"), ranked
    requests = [user_text(r["body"]) for r in server.chat_requests()]
    assert sum("one word" in text for text in requests) == 6 and len(requests) == 12
