"""judge=offline_learned: the learned verifier's JSON is read and checked (a bad file is one clear
line, exit 2), its probability drives faithfulness and the flag, and the shipped weights rank a
supported answer above a fabricated one."""
import json

import numpy as np
import pytest

from conftest import HASH, run_app
from ragexp.errors import RagexpError
from ragexp.judges.verifier import SHIPPED, SUPPORT_FEATURES, Verifier, answer_features
from ragexp.types import Answer, Chunk, Hit, Question
from ragexp.config.build import from_yaml

QUARRY = [Hit(Chunk("quarry#0", "quarry", "The Quarry server listens on port 7400 by default. It is written in Go. "
                    "Quarry schedules batch jobs and retries failed ones with exponential backoff."), 0.9, 1),
          Hit(Chunk("vault#0", "vault", "The Vault server listens on port 9000. Vault stores secrets."), 0.8, 2)]
PORT = Question("q", "Which port does the Quarry server listen on?", ("port 7400",))
SUPPORTED = "The Quarry server listens on port 7400 by default. It is written in Go."
FABRICATED = ("The Quarry server listens on port 9000 and was created by Microsoft in 1987. "
              "Its dashboard shows elephants migrating across Antarctica every Tuesday.")


def model(features=("min_cosine_any", "claims"), weights=(-2.0, 0.0), threshold=0.5, **over) -> dict:
    n = len(features)
    return {"kind": "logistic", "features": list(features), "mean": [0.0] * n, "scale": [1.0] * n,
            "weights": list(weights), "bias": 0.0, "threshold": threshold, **over}


def test_the_shipped_weights_load_and_use_only_features_computed_here():
    verifier = Verifier.load(SHIPPED)
    assert set(verifier.features) <= set(answer_features([], "")) and len(verifier.features) == len(verifier.weights)
    assert 0 < verifier.threshold < 1 and verifier.about["fitted_on"]  # fitted on the tuning parts, named in the file
    # monotone: no support feature (cosines, shares of words found, verbatim) raises the probability of a hallucination
    assert all(w <= 0 for name, w in zip(verifier.features, verifier.weights) if name in SUPPORT_FEATURES)


def test_each_invented_sentence_raises_the_probability_of_a_hallucination():
    """Answers of four sentences, 0 to 4 of them invented (the rest verbatim from the context): the
    shipped verifier's probability rises with every invented sentence (hash vectors: lexical)."""
    from test_calibrate_outputs import CONTEXT, INVENTED

    judge = from_yaml("judge/offline_learned", embedder=from_yaml("embedder/hash"))
    context = [s.format(name="Quarry", port=7400) for s in CONTEXT]
    hits = [Hit(Chunk("quarry#0", "quarry", " ".join(context)), 1.0, 1)]
    p = [judge.judge(PORT, hits, Answer(" ".join(context[: 4 - n] + INVENTED[:n]))).scores["hallucination_probability"]
         for n in range(5)]
    assert p == sorted(p) and len(set(p)) == 5, p


@pytest.mark.parametrize("content, problem", [
    (None, "does not exist"),
    ("{not json", "cannot be read as JSON"),
    (json.dumps({"kind": "tree"}), "is not a verifier model"),
    (json.dumps(model(weights=(1.0,))), "must be 2 finite numbers each"),
    (json.dumps(model(features=("min_cosine_any", "moon_phase"))), "features this version does not compute: moon_phase"),
    (json.dumps(model(threshold=1.5)), "threshold between 0 and 1"),
    (json.dumps({**model(), "bias": "high"}), "non-numeric field"),
])
def test_a_bad_weights_file_is_one_line_naming_the_setting_and_the_file(tmp_path, content, problem):
    path = tmp_path / "verifier.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(RagexpError) as err:
        Verifier.load(path)
    assert str(err.value).startswith(f"judge.weights: {path}") and problem in str(err.value)
    assert "\n" not in str(err.value)


def test_the_probability_is_the_logistic_of_the_scaled_features():
    v = Verifier(("min_cosine_any", "claims"), np.array([0.5, 0.0]), np.array([0.25, 1.0]), np.array([-2.0, 1.0]),
                 0.5, 0.5, {})
    # z = 0.5 - 2 * (0.75 - 0.5) / 0.25 + 1 * 2 = 0.5
    assert v.probability({"min_cosine_any": 0.75, "claims": 2.0, "ignored": 9.0}) == pytest.approx(1 / (1 + np.exp(-0.5)))


def test_the_flag_and_faithfulness_follow_the_verifier_and_its_threshold(tmp_path):
    """A model that says "unsupported" when the best cosine is low: the fabricated answer is flagged,
    the supported one not; the threshold setting moves the flag, not the probability."""
    path = tmp_path / "verifier.json"
    path.write_text(json.dumps(model(weights=(-8.0, 0.0), bias=4.0)))
    judge = from_yaml("judge/offline_learned", embedder=from_yaml("embedder/hash"), weights=str(path))
    good, bad = (judge.judge(PORT, QUARRY, Answer(a)) for a in (SUPPORTED, FABRICATED))
    assert good.scores["hallucination_probability"] < 0.5 < bad.scores["hallucination_probability"]
    assert not good.hallucination and bad.hallucination and "verifier:" in bad.reasoning
    # the rule's own verdict is not stated beside the verifier's: one verdict, the one the flag follows
    assert "hallucination" not in good.reasoning and bad.reasoning.count("hallucination") == 1
    for j in (good, bad):
        assert j.scores["faithfulness"] == pytest.approx(1 + 9 * (1 - j.scores["hallucination_probability"]), abs=1e-3)
    never = from_yaml("judge/offline_learned", embedder=from_yaml("embedder/hash"), weights=str(path), hallucination_threshold=1.0)
    again = never.judge(PORT, QUARRY, Answer(FABRICATED))
    assert not again.hallucination and again.scores == bad.scores


def test_an_answered_unanswerable_question_is_still_a_hallucination():
    judge = from_yaml("judge/offline_learned", embedder=from_yaml("embedder/hash"), hallucination_threshold=1.0)
    unanswerable = Question("u", "Which port does the Zephyr server use?", (), answerable=False)
    j = judge.judge(unanswerable, QUARRY, Answer(SUPPORTED))
    assert j.hallucination and "unanswerable" in j.reasoning
    assert not judge.judge(unanswerable, QUARRY, Answer("I don't know.")).hallucination


def test_the_shipped_weights_rank_supported_answers_above_wrong_ones(minilm):
    """With MiniLM, as the weights were fitted: verbatim or paraphrased claims the context backs score
    as more faithful than a wrong number, a wrong fact or an invented story, and only these are flagged."""
    judge = from_yaml("judge/offline_learned", embedder=minilm)
    right = [SUPPORTED, "By default, Quarry listens on port 7400."]
    wrong = ["The Quarry server listens on port 9000.", "Quarry is written in Rust.", FABRICATED]
    p = {a: judge.judge(PORT, QUARRY, Answer(a)).scores["hallucination_probability"] for a in right + wrong}
    assert max(p[a] for a in right) < min(p[a] for a in wrong), p
    assert [judge.judge(PORT, QUARRY, Answer(a)).hallucination for a in right + wrong] == [False, False, True, True, True]


def test_the_app_runs_the_option_and_refuses_a_missing_weights_file(tmp_path):
    common = ("dataset.limit=3", "retriever=bm25", *HASH, "tracker=none", f"cache.dir={tmp_path / 'cache'}")
    proc = run_app("judge=offline_learned", *common, "hydra.run.dir=run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [values] = json.loads((tmp_path / "run" / "results.json").read_text()).values()
    assert 0 <= values["avg_hallucination_probability"] <= 1 and 1 <= values["avg_faithfulness"] <= 10
    missing = tmp_path / "nowhere.json"
    bad = run_app("judge=offline_learned", f"judge.weights={missing}", *common, "hydra.run.dir=bad", cwd=tmp_path)
    assert bad.returncode == 2
    assert f"judge.weights: {missing} does not exist" in bad.stderr and "Traceback" not in bad.stderr
    above = run_app("judge=offline_learned", "judge.hallucination_threshold=1.5", *common, "hydra.run.dir=above", cwd=tmp_path)
    assert above.returncode == 2 and "judge.hallucination_threshold" in above.stderr and "Traceback" not in above.stderr


def test_calibrate_fits_the_threshold_and_prints_it_as_an_override(tmp_path):
    """Answers with 0-4 invented sentences of 4, people calling 2 or more a hallucination: calibrate
    --outputs judges them with judge=offline_learned and prints judge.hallucination_threshold=..., a
    threshold on hallucination_probability that separates the held-out rows as well."""
    from test_calibrate_outputs import calibrate, labelled_outputs

    path = labelled_outputs(tmp_path / "labelled.jsonl")
    proc = calibrate("--outputs", str(path), "judge=offline_learned", "embedder@scoring_embedder=hash", "--out", "report",
                     "--resamples", "50", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    override = proc.stdout.rstrip().splitlines()[-1]
    assert override.startswith("judge.hallucination_threshold=")
    threshold = float(override.split("=")[1])
    [verdict] = json.loads((tmp_path / "report" / "calibration.json").read_text())["yes_no"]
    assert verdict["current"] == Verifier.load(SHIPPED).threshold and 0 <= threshold <= 1
    assert verdict["roc_auc"]["hallucination_probability"] > 0.9 and verdict["held_out_balanced_accuracy"] >= 0.8


def test_a_refit_at_the_same_path_changes_the_cache_key(tmp_path):
    """The stage cache keys a judgement by the judge's config and code; the weights file's content
    joins them through cache_token, so cached judgements of an older fit are not reused."""
    from ragexp.store.code_identity import key_of

    path = tmp_path / "verifier.json"
    node = {"judge": {"_target_": "ragexp.judges.learned.LearnedOfflineJudge", "weights": str(path)}}
    path.write_text(json.dumps(model()))
    first = key_of(node)
    assert key_of(node) == first
    path.write_text(json.dumps(model(threshold=0.7)))
    assert key_of(node) != first
