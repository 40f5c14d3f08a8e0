"""Racing sweeps (hydra/sweeper=racing): nested seeded question samples, the round's decisions as the
paired tests with Holm dictate, the stage cache serving a survivor's earlier questions, the race in
the report and in MLflow, bad input refused before any job, failed jobs reported, the joblib
launcher, and a killed race resumed without running its finished jobs again."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import HASH, TEST_KEY_ENV, cli_env, llm_args, mlflow_runs, run_app, run_cli

RACE = ["-m", "hydra/sweeper=racing", *HASH, "retriever=bm25,dense", "retriever.top_k=1,10",
        "hydra.sweeper.rounds=[0.5,1.0]", "hydra.sweeper.min_questions=10"]


# --- the parts -------------------------------------------------------------------------------------

def test_question_samples_are_seeded_nested_and_keep_the_dataset_order():
    from ragexp.datasets.subset import QuestionSample
    from ragexp.types import Dataset, Document, Question

    questions = tuple(Question(f"q{i}", f"question {i}", ("a",)) for i in range(50))
    data = Dataset("d", (Document("d1", "text"),), questions)
    ids = {size: [q.qid for q in QuestionSample(size, seed=3).apply(data).questions] for size in (5, 20, 50, 80)}
    assert len(ids[5]) == 5 and len(ids[20]) == 20
    assert set(ids[5]) < set(ids[20]) < set(ids[50])  # nested
    assert ids[20] == sorted(ids[20], key=lambda q: int(q[1:]))  # in the dataset's order
    assert ids[50] == ids[80] == [q.qid for q in questions]  # at or above the size: every question
    other = [q.qid for q in QuestionSample(20, seed=4).apply(data).questions]
    assert other != ids[20]  # another seed, another sample
    assert [q.qid for q in QuestionSample(20, seed=3).apply(data).questions] == ids[20]  # the same seed, the same
    assert QuestionSample(20, 3).apply(data).documents == data.documents  # the corpus is never sampled


def test_round_sizes_grow_and_bad_settings_are_named():
    from ragexp.sweep.racing.plan import Settings, round_sizes

    assert round_sizes((0.1, 0.25, 0.5, 1.0), 20, 500) == [50, 125, 250, 500]
    assert round_sizes((0.1, 0.25, 0.5, 1.0), 20, 100) == [20, 25, 50, 100]
    assert round_sizes((0.05, 0.1, 1.0), 20, 100) == [20, 100]  # the minimum merges the first two rounds
    assert Settings().problems() == []
    assert "must grow" in Settings(rounds=(0.5, 0.25, 1.0)).problems()[0]
    assert "must be 1.0" in Settings(rounds=(0.25, 0.5)).problems()[0]
    assert "(0, 1]" in Settings(rounds=(0.5, 1.5)).problems()[0]
    assert "keep_top" in Settings(keep_top=0).problems()[0]


def test_the_round_level_is_pocock_s_and_keeps_the_race_at_alpha():
    """control=race: every dropping round tests at one level such that ANY round falling below it has
    chance alpha under the null. Pocock's published levels for equally spaced looks (Jennison &
    Turnbull 2000, table 2.1: 0.0294, 0.0221, 0.0158 for 2, 3, 5 looks at alpha 0.05); and a race of
    nested samples of sign-flip nulls (what the paired permutation test assumes) crosses it about
    alpha of the time, where testing each round at alpha crosses far more often."""
    from ragexp.sweep.racing.plan import Plan, Settings
    from ragexp.sweep.racing.sequential import round_level

    assert round_level((50,), 0.05) == 0.05  # one dropping round: nothing to share
    for looks, pocock in ((2, 0.0294), (3, 0.0221), (5, 0.0158)):
        assert round_level(tuple(range(20, 20 * looks + 1, 20)), 0.05) == pytest.approx(pocock, abs=0.0006)
    assert round_level((25, 50, 100, 200), 0.05) == round_level((25, 50, 100, 200), 0.05)  # seeded: the same
    # with 23 comparisons a round, Holm's L / m0 must keep each of m0 wrong-drop chances at alpha / m0: lower still
    grid = [[f"retriever.top_k={k}"] for k in range(24)]
    race = Plan(Settings(control="race"), grid, [], 500, [25, 50, 100, 200, 500], 0)
    assert race.round_alpha == round_level((25, 50, 100, 200), 0.05, 23) < round_level((25, 50, 100, 200), 0.05) < 0.05
    assert race.any_round_rate <= 0.05
    rounds = Plan(Settings(), grid, [], 500, [50, 125, 250, 500], 0)  # the default: each round at alpha
    assert rounds.round_alpha == 0.05 and 0.10 < rounds.any_round_rate < 0.13  # what 3 looks at 0.05 add up to
    assert "hydra.sweeper.control" in Settings(control="each").problems()[0]

    from math import erfc, sqrt

    sizes, races = (25, 50, 100, 200), 4000
    rng = np.random.default_rng(11)
    magnitude = rng.gamma(2.0, 1.0, (races, sizes[-1]))  # skewed per-question |differences|
    signs = rng.choice([-1.0, 1.0], (races, sizes[-1]))  # the null: each question's sign a fair coin
    d = magnitude * signs
    two_sided = np.vectorize(lambda z: erfc(abs(z) / sqrt(2)))
    # each round's two-sided p-value, from the sign-flip test's normal approximation on its questions
    p = np.stack([two_sided(d[:, :n].sum(1) / np.sqrt((d[:, :n] ** 2).sum(1))) for n in sizes], axis=1)
    level = round_level(sizes, 0.05)
    race_wide = float(np.mean((p <= level).any(axis=1)))
    per_round = float(np.mean((p <= 0.05).any(axis=1)))
    assert 0.035 <= race_wide <= 0.065
    assert per_round > 0.09  # four looks at 0.05 each


def synthetic_run(config: int, scores: np.ndarray):
    """A run whose objective avg_x is the mean of its per-question column x."""
    from ragexp.store.reader import Run

    table = pd.DataFrame({"question_id": [f"q{i}" for i in range(len(scores))], "x": scores,
                          "status": ["judged"] * len(scores)})
    spec = {"name": "avg_x", "inputs": ["x"], "kind": "mean", "rows": "judged"}
    return Run(str(config), f"c{config}", "", 0, {}, {"avg_x": float(scores.mean())}, {}, table=table, aggregation=[spec])


def expected_drops(runs: dict, alpha: float, keep_top: int, resamples: int, seed: int) -> set[int]:
    """What the statistics dictate, computed here from ragexp.stats.inference directly: each run against
    the best by mean, paired permutation p-values Holm-corrected together."""
    from ragexp.stats.inference import holm, paired_test

    order = sorted(runs, key=lambda c: -runs[c].table["x"].mean())
    best = runs[order[0]].table["x"].to_numpy()
    tests = [paired_test(runs[c].table["x"].to_numpy(), best, resamples=resamples, seed=seed) for c in order[1:]]
    adjusted = holm([t.p_value for t in tests])
    return {c for rank, (c, t, p) in enumerate(zip(order[1:], tests, adjusted), start=2)
            if p < alpha and t.difference.estimate < 0 and rank > keep_top}


def test_a_round_drops_what_holm_corrected_paired_tests_dictate():
    from ragexp.sweep.racing.decide import BEST, DROPPED, KEPT, decide

    rng = np.random.default_rng(7)
    base = rng.normal(6, 1, 60)
    shifts = {0: 0.0, 1: -0.05, 2: -0.9, 3: -0.35, 4: -1.5}  # 1: close; 2, 4: clearly worse; 3: in between
    runs = {c: synthetic_run(c, base + shift + rng.normal(0, 0.8, 60)) for c, shift in shifts.items()}
    names = {c: f"c{c}" for c in runs}
    decisions = decide(runs, names, "avg_x", alpha=0.05, resamples=1000, seed=0)
    by_config = {d.config: d for d in decisions}
    assert [d.rank for d in decisions] == [1, 2, 3, 4, 5]
    assert by_config[0].verdict == BEST
    dropped = {d.config for d in decisions if d.verdict == DROPPED}
    assert dropped == expected_drops(runs, 0.05, 1, 1000, 0)
    assert {2, 4} <= dropped and by_config[1].verdict == KEPT  # the statistics are not vacuous here
    for d in decisions[1:]:
        assert d.against == "c0" and d.questions == 60
        assert d.low <= d.difference <= d.high and d.p_value <= d.p_holm <= 1
        assert d.effect_size < 0


def test_a_configuration_as_good_as_the_best_is_rarely_dropped_though_one_of_many_may_be():
    """What alpha does and does not bound in a round (docs/how-to/racing.md, the report's caveat): 24
    configurations, all equally good, on 20 questions scored as judges score (rounded, clipped,
    often 0). Each one's chance of a drop stays near alpha / 2 (the drop is one-sided); but the
    round's best is chosen on the same questions, so the chance that SOME of them is dropped is far
    above alpha (simulated at 0.14-0.24 in bench/racing_tests.py). The liberal tests
    there (bootstrap max-T, sign-flip best-of-all: 0.054 and 0.096 per configuration on these rounds)
    fail the first assertion."""
    from ragexp.sweep.racing.decide import DROPPED, decide

    rng = np.random.default_rng(5)
    rounds, configurations, questions = 40, 24, 20
    drops, rounds_with_a_drop = 0, 0
    for _ in range(rounds):
        scores = np.clip(np.round(5 + rng.normal(0, 2, (questions, 1)) + rng.normal(0, 1.5, (questions, configurations))),
                         1, 10) * (rng.random((questions, configurations)) > 0.2)
        runs = {c: synthetic_run(c, scores[:, c]) for c in range(configurations)}
        dropped = sum(d.verdict == DROPPED for d in decide(runs, {c: f"c{c}" for c in runs}, "avg_x", seed=int(rng.integers(1000))))
        drops, rounds_with_a_drop = drops + dropped, rounds_with_a_drop + (dropped > 0)
    assert drops / (rounds * configurations) <= 0.04
    assert rounds_with_a_drop / rounds > 0.05


def test_a_large_round_gets_the_permutations_holm_needs():
    """With 200 configurations, 2000 permutations cannot give a Holm-corrected p below 0.1 (199/2001):
    the test takes more, so that a configuration far worse than the best is dropped."""
    from ragexp.sweep.racing.decide import DROPPED, decide, enough_resamples

    assert enough_resamples(2000, 24, 0.05) == 2000
    assert enough_resamples(2000, 200, 0.05) == 4 * 199 * 20
    rng = np.random.default_rng(2)
    runs = {c: synthetic_run(c, rng.normal(6 if c == 0 else 5.99, 0.2, 30)) for c in range(200)}
    runs[199] = synthetic_run(199, rng.normal(3, 0.2, 30))  # far worse than all
    decisions = {d.config: d for d in decide(runs, {c: f"c{c}" for c in runs}, "avg_x", resamples=2000)}
    assert decisions[199].verdict == DROPPED and decisions[199].p_holm < 0.05


def test_keep_top_keeps_the_best_n_whatever_the_tests_say():
    from ragexp.sweep.racing.decide import DROPPED, KEPT_TOP, decide

    rng = np.random.default_rng(1)
    runs = {c: synthetic_run(c, rng.normal(6 - c, 0.3, 40)) for c in range(4)}  # each clearly worse than the last
    names = {c: f"c{c}" for c in runs}
    plain = {d.config: d.verdict for d in decide(runs, names, "avg_x", keep_top=1, resamples=500)}
    assert plain == {0: "best", 1: DROPPED, 2: DROPPED, 3: DROPPED}
    kept = {d.config: d.verdict for d in decide(runs, names, "avg_x", keep_top=3, resamples=500)}
    assert kept == {0: "best", 1: KEPT_TOP, 2: KEPT_TOP, 3: DROPPED}
    minimised = decide(runs, names, "avg_x", maximize=False, resamples=500)
    assert minimised[0].config == 3 and {d.config for d in minimised if d.verdict == DROPPED} == {0, 1, 2}



def cascade_run(config: int, scores: np.ndarray, drawn: int):
    """A run judged by a cascade: x is each question's term of the corrected mean, x_cheap the cheap
    judge's score, `drawn` of the questions judged by the expensive judge too."""
    run = synthetic_run(config, scores)
    run.table["x_cheap"] = scores
    run.table["judged_by"] = ["cheap+expensive" if i < drawn else "cheap" for i in range(len(scores))]
    return run


def test_a_cascade_configuration_is_tested_only_on_enough_expensive_judgements():
    """A corrected mean resting on few expensive judgements has an interval too often wrong: the
    round keeps such a configuration, untested, and says why; from min_expensive on it is tested."""
    from ragexp.sweep.racing.decide import DROPPED, NOT_TESTED, decide

    rng = np.random.default_rng(3)
    best, worse = rng.normal(8, 0.5, 40), rng.normal(4, 0.5, 40)
    few = {0: cascade_run(0, best, 12), 1: cascade_run(1, worse, 3)}
    [_, kept] = decide(few, {0: "c0", 1: "c1"}, "avg_x", resamples=500)
    assert kept.verdict == NOT_TESTED and "c1: 3 expensive judgement(s) of avg_x" in kept.note
    assert "hydra.sweeper.min_expensive=10" in kept.note
    enough = {0: cascade_run(0, best, 12), 1: cascade_run(1, worse, 10)}
    assert decide(enough, {0: "c0", 1: "c1"}, "avg_x", resamples=500)[1].verdict == DROPPED
    few_best = {0: cascade_run(0, best, 4), 1: cascade_run(1, worse, 12)}
    assert "c0: 4 expensive" in decide(few_best, {0: "c0", 1: "c1"}, "avg_x", resamples=500)[1].note
    assert decide(few, {0: "c0", 1: "c1"}, "avg_x", resamples=500, min_expensive=3)[1].verdict == DROPPED



def test_the_leaderboard_says_which_cascade_rests_on_too_few_expensive_judgements():
    from ragexp.compare import leaderboard
    from ragexp.store.reader import Selection

    rng = np.random.default_rng(4)
    runs = [cascade_run(0, rng.normal(8, 0.5, 40), 12), cascade_run(1, rng.normal(4, 0.5, 40), 3), synthetic_run(2, rng.normal(5, 0.5, 40))]
    board = leaderboard.build(Selection("", "grid", runs), "avg_x", resamples=200)
    [note] = [n for n in board.notes if "expensive" in n]
    assert note.startswith("c1 rests on 3 expensive judgement(s)") and "fewer than 10" in note
    assert "c0" not in note and "c2" not in note

def test_a_race_of_cascades_starts_where_its_share_draws_min_expensive_judgements():
    from ragexp.sweep.racing.plan import Settings, first_cascade_round, round_sizes

    assert first_cascade_round([0.1, 0.1], 10) == 100 and first_cascade_round([0.25, 0.5, None], 10) == 40
    assert first_cascade_round([None, None], 10) == 0 and first_cascade_round([30.0], 10) == 0  # a count: any round
    assert round_sizes(Settings().rounds, max(20, first_cascade_round([0.1], 10)), 500) == [100, 150, 225, 338, 500]
    assert "min_expensive" in Settings(min_expensive=1).problems()[0]


# --- a race, end to end ------------------------------------------------------------------------------

def round_jobs(state: dict, number: int) -> list[dict]:
    return state["rounds"][number - 1]["jobs"]


def question_ids(folder: str) -> list[str]:
    lines = (Path(folder) / "questions.jsonl").read_text().splitlines()
    return [json.loads(line)["question_id"] for line in lines]


def check_race(state: dict, sizes: list[int]) -> None:
    """What every race must hold: nested rounds, survivors = the last round's kept, the statistics'
    drops (the comparison's own leaderboard over the round's runs, its verdicts and Holm p-values)."""
    from ragexp.compare import leaderboard
    from ragexp.store.reader import Selection
    from ragexp.sweep.racing.jobs import read_run

    from ragexp.sweep.racing.sequential import round_level

    settings = state["definition"]["settings"]
    assert state["finished"] and state["sizes"] == sizes
    # the level every dropping round tested at: alpha over the whole race (control=race), else alpha per round
    comparisons = len(state["definition"]["points"]) - 1
    level = (round_level(tuple(sizes[:-1]), settings["alpha"], comparisons) if settings["control"] == "race"
             else settings["alpha"])
    assert state["round_alpha"] == pytest.approx(level)
    previous: dict[int, set] = {}
    # with one configuration left, the rounds between are skipped: its last round is on every question
    ran = sizes if len(state["rounds"]) == len(sizes) else [*sizes[:len(state["rounds"]) - 1], sizes[-1]]
    for index, r in enumerate(state["rounds"], start=1):
        assert r["questions"] == ran[index - 1]
        ok = [j for j in r["jobs"] if j["status"] == "ok"]
        for job in ok:
            ids = set(question_ids(job["folder"]))
            assert len(ids) == r["questions"]
            assert previous.get(job["config"], set()) < ids  # this round's questions contain the last round's
            previous[job["config"]] = ids
        if index > 1:
            before = state["rounds"][index - 2]["decisions"]
            assert sorted(j["config"] for j in r["jobs"]) == sorted(d["config"] for d in before if d["verdict"] != "dropped")
        if index == len(state["rounds"]):
            assert not any(d["verdict"] == "dropped" for d in r["decisions"])  # the last round drops nothing
            continue
        runs = [read_run(Path(j["folder"]), str(j["config"])) for j in ok]
        board = leaderboard.build(Selection("", "racing", runs), settings["objective"], settings["maximize"],
                                  alpha=level, resamples=settings["resamples"], seed=settings["seed"])
        worse = {int(e.run.run_id) for rank, e in enumerate(board.entries, start=1)
                 if e.verdict == "worse" and rank > settings["keep_top"]}
        decisions = {d["config"]: d for d in r["decisions"]}
        assert {c for c, d in decisions.items() if d["verdict"] == "dropped"} == worse
        for entry in board.entries[1:]:
            assert decisions[int(entry.run.run_id)]["p_holm"] == pytest.approx(entry.comparison.p_holm)


def test_a_race_with_the_basic_launcher(tmp_path):
    proc = run_app(*RACE, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [sweep_dir] = tmp_path.glob("multirun/*/*")
    state = json.loads((sweep_dir / "racing.json").read_text())
    check_race(state, [20, 40])
    dropped = [d for d in state["rounds"][0]["decisions"] if d["verdict"] == "dropped"]
    assert dropped, "the grid is chosen so that top_k=10 loses in round 1"
    # the stage cache: a survivor's second round computes only its 20 new questions' retrieval and answers
    def work(job):
        return json.loads((Path(job["folder"]) / "run.json").read_text())["work"]

    for job in round_jobs(state, 2):
        done = work(job)
        assert done.get("answers_cached", 0) >= 20 and done.get("answers_computed", 0) <= 20
        assert done["answers_cached"] + done.get("answers_computed", 0) == 40
        assert done["question_hits_cached"] >= 20 and done.get("question_hits_computed", 0) <= 20
    # and a configuration that differs from one before it only in top_k searches nothing
    first = {j["name"]: work(j) for j in round_jobs(state, 1)}
    assert first["bm25 · top_k=1"]["question_hits_computed"] == 20
    assert first["bm25 · top_k=10"]["question_hits_cached"] == 20
    assert first["bm25 · top_k=10"].get("question_hits_computed", 0) == 0
    # MLflow: child runs tagged with round and question count; the parent's cost against the full grid
    client, runs = mlflow_runs(tmp_path)
    [parent] = [r for r in runs if r.data.tags.get("ragexp.role") == "sweep"]
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    jobs = [j for r in state["rounds"] for j in r["jobs"]]
    assert len(children) == len(jobs) == 4 + 4 - len(dropped)
    assert sorted((c.data.tags["ragexp.racing.round"], c.data.tags["ragexp.racing.questions"]) for c in children) == \
        sorted((str(j["round"]), str(j["questions"])) for j in jobs)
    metrics = parent.data.metrics
    assert metrics["racing_full_grid_question_evaluations"] == 4 * 40
    assert metrics["racing_question_evaluations"] == 4 * 20 + (4 - len(dropped)) * 20
    assert metrics["racing_jobs"] == len(jobs) and metrics["racing_dropped"] == len(dropped)
    # the report: the race, the dropped configurations' partial scores, the survivors' leaderboard, the caveat
    race = (sweep_dir / "report" / "race.md").read_text()
    for d in dropped:
        assert d["name"] in race.split("## Dropped configurations")[1]
    assert "## Final leaderboard: the" in race and "## Caveat" in race and "keep_top" in race
    assert (sweep_dir / "report" / "report.html").exists()
    merged = json.loads((sweep_dir / "results.json").read_text())
    assert sorted(v["racing_status"] for v in merged.values()).count("dropped in round 1") == len(dropped)
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert "report/race.md" in artifacts
    check_places(proc.stdout, client, parent, children, state, sweep_dir)


def check_places(stdout: str, client, parent, children: list, state: dict, sweep_dir: Path) -> None:
    """A race's places on its runs, as a basic sweep's (ragexp.compare.report.log_places): the survivors'
    last runs ranked as the race's final leaderboard ranks them, with its verdicts and the objective's
    interval; a dropped configuration's last run says where it was dropped and has no rank; the earlier
    rounds' runs of a survivor have no place; the printed link opens one row per configuration, with
    the swept settings as short values."""
    last = stdout.rstrip().splitlines()[-1]
    assert "viewStateShareKey=" in last
    tags = client.get_experiment(parent.info.experiment_id).tags
    view = json.loads(tags["mlflow.sharedViewState." + last.rsplit("viewStateShareKey=", 1)[1]])
    assert {"params.`retriever`", "params.`retriever.top_k`", "tags.`ragexp.verdict`",
            "metrics.`overall_score_ci_low`"} <= set(view["selectedColumns"])
    assert view["orderByKey"] == "metrics.`leaderboard_rank`"
    shown = client.search_runs([parent.info.experiment_id], view["searchFilter"])
    configurations = len(state["definition"]["points"])
    assert len(shown) == configurations and len({r.data.tags["ragexp.racing.configuration"] for r in shown}) == configurations
    final = json.loads((sweep_dir / "report" / "leaderboard.json").read_text())["entries"]
    ranked = sorted((r for r in shown if "leaderboard_rank" in r.data.metrics), key=lambda r: r.data.metrics["leaderboard_rank"])
    assert [r.info.run_name for r in ranked] == [e["label"] for e in final]  # the race's final leaderboard
    assert [r.data.metrics["leaderboard_rank"] for r in ranked] == list(range(1, len(final) + 1))
    assert [r.data.tags["ragexp.verdict"] for r in ranked] == [e["verdict"] for e in final]
    total = state["total"]
    for run in ranked:
        assert run.data.tags["ragexp.racing.questions"] == str(total)
        low, high = run.data.metrics["overall_score_ci_low"], run.data.metrics["overall_score_ci_high"]
        assert low <= run.data.metrics["overall_score"] <= high
    decisions = {d["name"]: d for d in state["rounds"][0]["decisions"]}
    dropped = [r for r in shown if "leaderboard_rank" not in r.data.metrics]
    assert sorted(r.info.run_name for r in dropped) == sorted(n for n, d in decisions.items() if d["verdict"] == "dropped")
    for run in dropped:
        assert run.data.tags["ragexp.verdict"].startswith(
            f"dropped after round 1 ({state['sizes'][0]} of {total} questions): worse than {decisions[run.info.run_name]['against']}, p (Holm) ")
        assert not {"overall_score_ci_low", "overall_score_ci_high"} & set(run.data.metrics)
    shown_ids = {r.info.run_id for r in shown}
    for run in children:
        if run.info.run_id not in shown_ids:  # a survivor's round 1: no place
            assert run.data.tags["ragexp.racing.round"] == "1" and run.info.run_name in {r.info.run_name for r in ranked}
            assert "ragexp.verdict" not in run.data.tags and "leaderboard_rank" not in run.data.metrics
        assert run.data.params["retriever"] in ("bm25", "dense")  # the option chosen, beside retriever._target_
    # `python -m ragexp.compare PARENT` compares what the race's final leaderboard does, the last round's runs, and
    # writes their places again, the same
    from ragexp.compare import make

    board, _, _ = make([parent.info.run_id], f"sqlite:///{sweep_dir.parents[2] / 'mlflow.db'}", resamples=2000,
                       out_dir=sweep_dir / "compared", plots=False)
    assert [e.run.run_id for e in board.entries] == [r.info.run_id for r in ranked]
    assert any(f"{len(children) - len(ranked)} runs of its earlier rounds" in note for note in board.selection.notes)
    again = client.search_runs([parent.info.experiment_id], view["searchFilter"])
    assert sorted((r.info.run_id, r.data.metrics.get("leaderboard_rank"), r.data.tags["ragexp.verdict"]) for r in again) == \
        sorted((r.info.run_id, r.data.metrics.get("leaderboard_rank"), r.data.tags["ragexp.verdict"]) for r in shown)


def test_one_configuration_left_runs_on_every_question_and_ends_with_its_leaderboard(tmp_path):
    """A 2-dimensional hash embedder is dropped after round 1 of 3: the winner skips round 2, runs on
    all 40 questions, and the race ends with a leaderboard and report.html; the console shows the
    cost and the leaderboard, the report every round's decisions under that round's heading."""
    proc = run_app("-m", "hydra/sweeper=racing", *HASH, "retriever=dense", "embedder.dimension=384,2",
                   "hydra.sweeper.rounds=[0.5,0.75,1.0]", "hydra.sweeper.min_questions=10",
                   "hydra.sweeper.objective=mrr", "tracker=none", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [sweep_dir] = tmp_path.glob("multirun/*/*")
    state = json.loads((sweep_dir / "racing.json").read_text())
    check_race(state, [20, 30, 40])
    assert [(r["questions"], [j["name"] for j in r["jobs"]]) for r in state["rounds"]] == [
        (20, ["dimension=384", "dimension=2"]), (40, ["dimension=384"])]
    assert "one configuration left, dimension=384: it runs on all 40 questions" in proc.stdout
    assert "round 2, the last, (40 questions): 1 ran" in proc.stdout
    race = (sweep_dir / "report" / "race.md").read_text()
    assert "## Final leaderboard: the one survivor on every question" in race
    assert (sweep_dir / "report" / "report.html").exists()
    headings = [line for line in race.splitlines() if line.startswith("## Decisions")]
    assert headings == ["## Decisions of round 1 (20 questions): 2 ran, 1 dropped",
                        "## Decisions of round 2 (40 questions): 1 ran, 0 dropped"]
    # the console: the race's opening and its final leaderboard, not every round's decisions
    assert "## Final leaderboard" in proc.stdout and "## Decisions" not in proc.stdout
    assert "report/race.md" in proc.stdout.splitlines()[-1]


@pytest.mark.parametrize("args, message", [
    (["retriever=bm25"], "at least two configurations"),
    (["retriever=bm25,dense", "hydra.sweeper.objective=total_cost_usd"], "is not a per-question score"),
    (["retriever=bm25,dense", "hydra.sweeper.rounds=[0.5,0.25,1.0]"], "the rounds must grow"),
    (["retriever=bm25,dense", "hydra.sweeper.min_questions=41"], "above the dataset's 40 questions"),
    (["retriever=bm25,dense", "+hydra.sweeper.keep_tops=2"], "hydra.sweeper.keep_tops: unknown setting"),
])
def test_bad_input_exits_2_before_any_job(tmp_path, args, message):
    proc = run_app("-m", "hydra/sweeper=racing", *HASH, *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert message in proc.stderr and "no job was started" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list(tmp_path.glob("multirun/*/*/*/results.json")) and not list(tmp_path.glob("multirun/*/*/0"))
    assert not (tmp_path / "mlflow.db").exists()  # no parent run either


def test_a_failed_job_is_reported_not_dropped(tmp_path, server):
    """A configuration whose judge refuses the key fails in round 1: listed as failed (race.md,
    racing.json, its child run, whose verdict says so), not as dropped, not raced further; the sweep
    exits 4."""
    from openai_server import auto_reply

    server.chat = lambda body: {"status": 401} if body.get("model") == "revoked" else auto_reply(body)
    args = [a for a in llm_args(server, generator=False) if not a.startswith("judge.endpoint.model=")]
    proc = run_app("-m", "hydra/sweeper=racing", *args, "judge.endpoint.max_retries=0",
                   "judge.endpoint.model=ok-model,revoked", "retriever.top_k=1,3",
                   "hydra.sweeper.rounds=[0.5,1.0]", "hydra.sweeper.min_questions=10",
                   cwd=tmp_path, env={"RAGEXP_TEST_LLM_KEY": "test-key"})
    assert proc.returncode == 4, proc.stderr[-3000:]
    [sweep_dir] = tmp_path.glob("multirun/*/*")
    state = json.loads((sweep_dir / "racing.json").read_text())
    first = state["rounds"][0]
    failed = [j for j in first["jobs"] if j["status"] == "failed"]
    assert sorted(j["name"] for j in failed) == ["revoked · top_k=1", "revoked · top_k=3"]
    assert all("refused the key" in j["reason"] for j in failed)
    assert {d["config"] for d in first["decisions"]}.isdisjoint(j["config"] for j in failed)  # not tested, not dropped
    assert {j["config"] for j in round_jobs(state, 2)}.isdisjoint(j["config"] for j in failed)  # not raced further
    race = (sweep_dir / "report" / "race.md").read_text()
    assert "## Failed jobs" in race and "refused the key" in race.split("## Failed jobs")[1]
    jobs = sum(len(r["jobs"]) for r in state["rounds"])
    assert f"2 of {jobs} jobs failed" in proc.stderr
    _, runs = mlflow_runs(tmp_path)
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId")]
    verdicts = {r.info.run_name: r.data.tags.get("ragexp.verdict") for r in children if r.info.status == "FAILED"}
    assert verdicts == {j["name"]: "failed in round 1 (20 of 40 questions)" for j in failed}
    assert not any("leaderboard_rank" in r.data.metrics for r in children if r.info.status == "FAILED")
    assert sorted(r.data.metrics.get("leaderboard_rank") for r in children if r.info.status == "FINISHED"
                  and r.data.tags["ragexp.racing.round"] == "2") == [1.0, 2.0]


def test_a_race_of_cascades_tests_only_on_enough_expensive_judgements(tmp_path, server):
    """judge=cascade at judge.sample=0.5 on 40 questions: the race starts on 20 (10 expected expensive
    judgements each, hydra.sweeper.min_expensive), not 10 (5 each); the share stays 0.5, so round 2's
    draw holds round 1's; a configuration is tested only when it and the best got 10 or more."""
    args = ["judge=cascade", "judge.sample=0.5", f"judge.expensive.endpoint.base_url={server.base_url}",
            f"judge.expensive.endpoint.api_key_env={TEST_KEY_ENV}", "judge.expensive.endpoint.backoff_s=0.01"]
    proc = run_app("-m", "hydra/sweeper=racing", "retriever=bm25", *HASH, *args, "retriever.top_k=1,3,5",
                   "hydra.sweeper.rounds=[0.25,0.5,1.0]", "hydra.sweeper.min_questions=10", "tracker=none",
                   cwd=tmp_path, env={TEST_KEY_ENV: "k"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "rounds of 20, 40 questions: 1 of the 3 rounds merged, as judge=cascade: judge.sample=0.5 draws the 10" in proc.stdout
    [sweep_dir] = tmp_path.glob("multirun/*/*")
    state = json.loads((sweep_dir / "racing.json").read_text())
    drawn: dict[int, list[set]] = {}
    for r in state["rounds"]:
        for job in r["jobs"]:
            table = json.loads((Path(job["folder"]) / "questions.json").read_text())
            by, qid = table["columns"].index("judged_by"), table["columns"].index("question_id")
            drawn.setdefault(job["config"], []).append({row[qid] for row in table["data"] if row[by] == "cheap+expensive"})
    for rounds in drawn.values():
        if len(rounds) == 2:
            assert len(rounds[0] - rounds[1]) <= 2, "round 2's draw holds round 1's, but for chances that moved"
    decisions = state["rounds"][0]["decisions"]
    best = next(d for d in decisions if d["verdict"] == "best")
    for d in decisions:
        if d is not best:
            few = len(drawn[d["config"]][0]) < 10 or len(drawn[best["config"]][0]) < 10
            assert ("min_expensive" in d["note"]) == few and (d["p_value"] is None) == few


def test_a_race_refuses_a_cascade_count_below_min_expensive(tmp_path):
    proc = run_app("-m", "hydra/sweeper=racing", "retriever=bm25", *HASH, "judge=cascade", "judge.sample=5",
                   "retriever.top_k=1,3", "tracker=none", cwd=tmp_path)
    assert proc.returncode == 2 and "judge.sample=5 expensive judgements per job is below hydra.sweeper.min_expensive=10" \
        in proc.stderr and "no job was started" in proc.stderr


# --- the process tier: parallel jobs, a kill -------------------------------------------------------------

@pytest.mark.process
def test_a_race_with_the_joblib_launcher(tmp_path):
    proc = run_cli(*RACE, "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [sweep_dir] = tmp_path.glob("multirun/*/*")
    state = json.loads((sweep_dir / "racing.json").read_text())
    check_race(state, [20, 40])
    client, runs = mlflow_runs(tmp_path)
    children = [r for r in runs if "ragexp.racing.round" in r.data.tags]
    assert len(children) == sum(len(r["jobs"]) for r in state["rounds"])
    assert all(c.info.status == "FINISHED" for c in children)


@pytest.mark.process
def test_a_killed_race_resumes_without_running_finished_jobs_again(tmp_path):
    """Killed (SIGKILL, the whole process group) once round 2 has begun; the same command with
    hydra.sweep.dir=<its folder> reads round 1's jobs from their folders and finishes the race."""
    sweep_dir = tmp_path / "multirun" / "race"
    args = [*RACE, "hydra.sweeper.rounds=[0.25,0.5,1.0]", "hydra.sweeper.control=race", f"hydra.sweep.dir={sweep_dir}",
            "tracker=none"]
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen([sys.executable, "-m", "ragexp", *args], cwd=tmp_path, env=cli_env(), stdout=log,
                             stderr=subprocess.STDOUT, start_new_session=True)
    state_file = sweep_dir / "racing.json"
    deadline = time.monotonic() + 600
    try:
        while time.monotonic() < deadline and first.poll() is None:
            state = json.loads(state_file.read_text()) if state_file.exists() else {"rounds": []}
            if len(state["rounds"]) >= 2:  # round 1 decided, round 2 planned
                break
            time.sleep(0.2)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        log.close()
    killed = json.loads(state_file.read_text())
    assert len(killed["rounds"]) >= 2 and not killed["finished"], (tmp_path / "first.log").read_text()[-2000:]
    round_one = killed["rounds"][0]
    stamps = {j["folder"]: os.stat(Path(j["folder"]) / "results.json").st_mtime_ns for j in round_one["jobs"]}

    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "resumed" in proc.stdout
    state = json.loads(state_file.read_text())
    check_race(state, [10, 20, 40])
    assert state["rounds"][0]["reused"] == len(round_one["jobs"])  # read, not run
    assert state["rounds"][0]["decisions"] == round_one["decisions"]  # the same decisions from the same folders
    assert {f: os.stat(Path(f) / "results.json").st_mtime_ns for f in stamps} == stamps
    launched = [line for line in proc.stdout.splitlines() if "question_sample.size=10 " in line and "#" in line]
    assert launched == []  # no round-1 job was launched again
