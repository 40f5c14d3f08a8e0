"""The agreement bench (bench/judge_agreement.py): its statistics, the shipped labelled sample and
its deterministic split, and the LLM judges' request path and parsing on the sample's real texts."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
import judge_agreement as ja  # noqa: E402

SAMPLE = ROOT / "tests" / "data" / "judge_agreement_sample.jsonl"


def sample():
    return [ja.from_row(json.loads(line)) for line in SAMPLE.read_text().splitlines()]


def test_roc_auc_counts_pairs_and_halves_ties():
    # pairs (positive, negative): 0.35>0.1 yes, 0.35>0.4 no, 0.8 beats both -> 3 of 4
    assert ja.roc_auc([0.1, 0.4, 0.35, 0.8], [False, False, True, True]) == pytest.approx(0.75)
    assert ja.roc_auc([1, 1, 1, 1], [False, True, False, True]) == pytest.approx(0.5)
    assert ja.roc_auc([0.2, 0.9, 0.5], [False, True, True]) == pytest.approx(1.0)
    assert ja.roc_auc([0.2, 0.9], [True, True]) is None


def test_flag_figures_against_people():
    # supported items: 1 of 4 flagged (false alarm 0.25); unsupported: 2 of 2 caught
    got = ja.flag_figures([True, False, False, False, True, True], [True, True, True, True, False, False])
    assert got == {"balanced_accuracy": 0.875, "false_alarm": 0.25, "caught": 1.0}


def test_the_shipped_sample_is_labelled_tuning_data_of_both_kinds():
    items = sample()
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    assert len(items) == 36 and sum(i.supported for i in items) == 18
    assert all(row["part"] == "tune" == ja.from_row(row).part for row in rows)  # the split is a hash, not a draw
    assert all(i.passages and i.answer and i.set in ja.SOURCES for i in items)


@pytest.mark.parametrize("option", ["llm", "triad"])
def test_the_llm_judges_path_keeps_every_verdict_on_real_texts(option, tmp_path):
    """The scripted server repeats the people's verdicts, so any loss is the request path's or the
    parser's: every item is judged and the flags and scores reproduce the labels exactly."""
    items = sample()
    verdicts, failed = ja.llm_verdicts(option, items, tmp_path)
    got = ja.figures(verdicts, items)
    assert failed == 0 and got["roc_auc"] == 1.0 and got["balanced_accuracy"] == 1.0 and got["false_alarm"] == 0.0


def test_the_threshold_is_chosen_for_the_mean_balanced_accuracy_over_the_sets():
    import numpy as np

    # set a separates at 0.3 < t <= 0.6; set b at 0.5 < t <= 0.8: only 0.55-0.6 serves both
    p = np.array([0.1, 0.3, 0.6, 0.9, 0.2, 0.5, 0.8, 0.95])
    unsupported = np.array([False, False, True, True, False, False, True, True])
    sets = np.array(["a"] * 4 + ["b"] * 4)
    threshold, balanced = ja.best_threshold(p, unsupported, sets)
    assert threshold == 0.5 and balanced == 1.0  # the lowest of the best (p > 0.5 flags 0.6 and 0.8, not 0.5)
    assert ja.best_threshold(p[:4], unsupported[:4], sets[:4])[0] == 0.3


def test_learn_fits_a_verifier_the_judge_loads_from_the_features_that_tell_the_classes_apart(tmp_path):
    """Synthetic features where only the lowest cosine tells unsupported answers apart (in two sets
    of different base rates): the fitted model weighs it most, flags by it, and loads as the judge's."""
    import numpy as np

    from ragexp.judges.verifier import Verifier, answer_features

    rng = np.random.default_rng(0)
    names = list(answer_features([], ""))
    table = {}
    for name, share in (("a", 0.3), ("b", 0.7)):
        items, features = [], []
        for n in range(80):
            supported = bool(rng.random() > share)
            f = {k: float(rng.normal()) for k in names}
            f["min_cosine_any"] = (0.8 if supported else 0.4) + float(rng.normal(0, 0.1))
            items.append(ja.Item(name, f"{name}{n}", f"{name}-g{n % 40}", "q", ("p",), "answer", supported))
            features.append(f)
        table[name] = (items, features)
    model, seen = ja.learn(table)
    path = tmp_path / "verifier.json"
    path.write_text(json.dumps(model))
    verifier = Verifier.load(path)
    strongest = verifier.features[int(np.argmax(np.abs(verifier.weights)))]
    assert strongest == "min_cosine_any" and verifier.weights[verifier.features.index("min_cosine_any")] < 0
    assert all(v["mean_balanced_accuracy"] > 0.9 for v in seen["cross_validation"].values())
    low, high = ({**{k: 0.0 for k in names}, "min_cosine_any": c} for c in (0.4, 0.8))
    assert verifier.probability(low) > verifier.threshold > verifier.probability(high)


def test_the_monotone_fit_never_lets_more_support_raise_the_probability():
    """The same column, once as a support feature and once as a free one, where a higher value goes
    with unsupported answers: the free copy gets a positive weight, the support feature's stays at 0."""
    import numpy as np

    rng = np.random.default_rng(1)
    y = rng.random(400) < 0.5
    column = y + rng.normal(0, 0.5, 400)
    x = np.stack([column, column.copy()], axis=1)
    w, _ = ja.monotone_logistic(x, y, np.ones(400), 1.0, [True, False])
    assert w[0] == 0.0 and w[1] > 1.0
    free, _ = ja.monotone_logistic(x, y, np.ones(400), 1.0, [False, False])
    assert free[0] > 0.5  # unconstrained, the same column would have weighed in


def test_overlap_is_the_share_of_the_answers_words_found_anywhere_in_the_context():
    item = ja.Item("s", "i", "g", "Q?", ("The Quarry server listens on port 7400.", "It is written in Go."),
                   "Quarry listens on port 7400, written in Rust; Quarry!", True)
    # words: quarry listens on port 7400 written in rust quarry -> 8 of 9 (repeats counted, case ignored)
    assert ja.overlap(item) == pytest.approx(8 / 9)
    assert ja.overlap(ja.Item("s", "i", "g", "Q?", ("x",), "...", True)) == 1.0


def test_the_paired_bootstrap_interval_holds_the_difference_and_draws_groups_whole():
    import numpy as np

    rng = np.random.default_rng(1)
    items = [ja.Item("s", str(n), f"g{n // 2}", "Q?", ("c",), "a", bool(n % 3)) for n in range(120)]
    y = np.array([i.supported for i in items], dtype=float)
    better, worse = y + rng.normal(0, 0.6, len(y)), y + rng.normal(0, 1.5, len(y))
    found = ja.paired_bootstrap(better, worse, items, resamples=300)
    low, high = found["interval"]
    assert low <= found["difference"] <= high and found["difference"] > 0
    same = ja.paired_bootstrap(better, better, items, resamples=50)
    assert same == {"difference": 0.0, "interval": [0.0, 0.0]}  # paired: a score against itself differs by nothing
    assert found == ja.paired_bootstrap(better, worse, items, resamples=300)  # the same resamples every time


def test_the_labelled_sets_must_be_given_and_one_line_says_how_to_get_them(monkeypatch, tmp_path, capsys):
    from types import SimpleNamespace

    monkeypatch.delenv("RAGEXP_AGREEMENT_SOURCES", raising=False)
    for given in (None, tmp_path / "absent"):
        with pytest.raises(SystemExit) as stopped:
            ja.sources_dir_of(SimpleNamespace(sources=given))
        assert stopped.value.code == 2
        [line] = capsys.readouterr().err.splitlines()
        assert all(f"{s.repo} at {s.commit}" in line for s in ja.SOURCES.values()) and "--sources" in line
    assert ja.sources_dir_of(SimpleNamespace(sources=tmp_path)) == tmp_path
    monkeypatch.setenv("RAGEXP_AGREEMENT_SOURCES", str(tmp_path))
    assert ja.sources_dir_of(SimpleNamespace(sources=None)) == tmp_path
