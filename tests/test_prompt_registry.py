"""Prompt settings given as prompts:/NAME/VERSION or prompts:/NAME@ALIAS are read from MLflow's
prompt registry (a real store: SQLite, and `mlflow server`): the template with MLflow's {{variables}} as ragexp's fields,
the version an alias pointed to recorded in prompts_used, a variable the setting lacks and a prompt
the registry lacks refused with one line naming the setting."""
import pytest
import yaml

from conftest import TEST_KEY_ENV, compose, llm_args

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
