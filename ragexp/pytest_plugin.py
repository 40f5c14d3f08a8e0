"""ragexp's pytest plugin: a team's test suite checks its RAG system as it checks any other code.

    def test_answers_hold(ragexp_evaluate):
        evaluation = ragexp_evaluate("outputs.jsonl", overrides=["gate=production"])
        assert_passed(evaluation)                      # or: assert evaluation.passed

    def test_no_worse_than_last_release(ragexp_evaluate):
        assert_no_regression(ragexp_evaluate("outputs.jsonl"), margin=0.5)   # baseline: --ragexp-baseline

`ragexp_evaluate` is `ragexp.evaluate` with the run folder under the test's own temporary folder
(so tests run side by side under pytest-xdist) and `--ragexp-track` applied (log every evaluation
to the configured tracker, MLflow by default). `assert_no_regression` is the quality gate's paired
regression check (ragexp.metrics.regression: one-sided per metric, Holm across them) against
`baseline=` or `--ragexp-baseline` (a run folder or an MLflow run id), paired by question id (a
row without one by its question's text). It never passes silently: with no margin, a metric whose
questions detect only drops above a tenth of its scale fails as "too few questions to tell" unless
`accept_low_power=True`. A failure's message lists the checks, each metric's difference with its
CI and the drop it detects, and the worst questions, so pytest's report and its JUnit XML carry them.
The notes of the runs (what the command line prints as `note:`, such as the metrics not judged
because the system gave no contexts) end pytest's report once each, under "ragexp notes", and are
the tests' `ragexp_note` properties in the JUnit XML.

pytest loads this module in every session of an environment where ragexp is installed: it imports
the standard library and pytest only; ragexp, hydra and mlflow are imported when a test evaluates.
"""
from __future__ import annotations

from itertools import count
from typing import Any

import pytest

WORST = 3  # questions named in a failure message
NOTE = "ragexp_note"  # the user property that carries a run's note to pytest's summary and JUnit XML

_options: dict[str, Any] = {"baseline": None}


def pytest_addoption(parser) -> None:
    group = parser.getgroup("ragexp", "ragexp: evaluate a RAG system in tests")
    group.addoption("--ragexp-baseline", default=None, metavar="RUN",
                    help="the run assert_no_regression compares with when given no baseline= (a run folder or an MLflow run id)")
    group.addoption("--ragexp-track", action="store_true", default=False,
                    help="log every ragexp_evaluate to the configured tracker (MLflow by default)")


def pytest_configure(config) -> None:
    _options["baseline"] = config.getoption("ragexp_baseline", None)


@pytest.fixture
def ragexp_evaluate(request, tmp_path):
    """`ragexp.evaluate(data, **settings)` with the run folder in the test's temporary folder (one per
    call) and `track` from `--ragexp-track` unless given."""
    calls = count(1)

    def evaluate(data: Any = None, **settings: Any):
        import ragexp

        settings.setdefault("output_dir", tmp_path / f"ragexp-run-{next(calls)}")
        settings.setdefault("track", bool(request.config.getoption("ragexp_track")))
        evaluation = ragexp.evaluate(data, **settings)
        request.node.user_properties.extend((NOTE, note) for note in evaluation.result.notes)
        return evaluation

    return evaluate


def pytest_terminal_summary(terminalreporter) -> None:
    """The notes of the runs the tests made (what the command line prints as `note:`, e.g. the
    metrics not judged because the system gave no contexts), each once with the tests that gave it.
    They travel as the tests' user properties, so pytest-xdist's workers hand them over and the
    JUnit XML carries them too."""
    tests: dict[str, list[str]] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, note in getattr(report, "user_properties", ()):
                if name == NOTE and report.nodeid not in tests.setdefault(note, []):
                    tests[note].append(report.nodeid)
    if tests:
        terminalreporter.section("ragexp notes")
        for note, nodeids in tests.items():
            more = f" and {len(nodeids) - 1} more" if len(nodeids) > 1 else ""
            terminalreporter.write_line(f"{note} ({nodeids[0]}{more})")


def assert_passed(evaluation) -> None:
    """Fails unless `evaluation.passed`, saying which gate decided, its checks (or the aggregates its
    targets rate warning) and the worst questions."""
    if evaluation.passed:
        return
    gate = evaluation.result.gate
    lines = [f"ragexp: {evaluation!r}"]
    if evaluation.failure:
        lines.append(f"the run failed as a whole: {evaluation.failure}")
    if gate is not None:
        lines += [f"gate {gate.name}:"] + [f"  {check}" for check in gate.checks]
    else:
        lines += ["no gate set: the targets decide; rated warning:"] + [f"  {w}" for w in evaluation.warnings]
    lines += worst_questions(evaluation)
    pytest.fail("\n".join(lines), pytrace=False)


def assert_no_regression(evaluation, baseline: str | None = None, margin: float | dict[str, float] = 0.0,
                         metrics: list[str] | None = None, alpha: float = 0.05, accept_low_power: bool = False) -> None:
    """Fails when `evaluation` is significantly worse than `baseline` (default `--ragexp-baseline`)
    on one of `metrics` (default the judge's, with hallucination) by more than `margin` (a number, or
    one per metric, on each metric's own scale): paired by question id (a row without one by its
    question's text), one-sided at `alpha`, Holm across the metrics, as `gate.baseline` checks a run.
    It also fails when the questions are too few to tell: with no margin for a metric, a drop
    they detect (80% power) above a tenth of its scale; `accept_low_power=True` lets that pass."""
    from ragexp.base.pairing import pairing_id, shared_question
    from ragexp.errors import RagexpError
    from ragexp.metrics.regression import GIVE_IDS, baseline_table, failed, paired_with
    from ragexp.metrics.scoring import score_row

    target = baseline or _options["baseline"]
    if not target:
        pytest.fail("assert_no_regression: no baseline: pass baseline=RUN or run pytest with --ragexp-baseline RUN "
                    "(a run folder or an MLflow run id)", pytrace=False)
    judged = [r for r in evaluation.result.questions if r.judgement is not None]
    questions = [r.question for r in judged]
    same = shared_question([q.qid for q in questions], [q.text for q in questions], [q.id_from_row for q in questions])
    if same is not None:
        pytest.fail(f"assert_no_regression: the rows have no id and pair by their question's text, and rows {same[0]} "
                    f"and {same[1]} both ask {same[2][:80]!r}: {GIVE_IDS}", pytrace=False)
    rows = {pairing_id(r.question.qid, r.question.text, r.question.id_from_row): score_row(r) for r in judged}
    if metrics is None:
        metrics = sorted({m for r in judged for m in r.judgement.scores})
        metrics += ["hallucination"] if any(r.judgement.hallucination is not None for r in judged) else []
    margins = margin if isinstance(margin, dict) else {"*": float(margin)}
    try:
        base = baseline_table(str(target))
        shared, found = paired_with(rows, base, str(target), metrics, margins, alpha, evaluation.result.scales)
    except RagexpError as err:
        pytest.fail(f"assert_no_regression: {err}", pytrace=False)
    failing = failed(found, alpha, accept_low_power)
    if not failing:
        return
    worse = [r for r in failing if r.worse(alpha)]
    how = f"({shared} shared questions, paired, one-sided at alpha {alpha:g}, Holm across {len(found)} metrics)"
    if worse:
        lines = [f"ragexp: {evaluation!r} is significantly worse than {target} on {', '.join(r.metric for r in worse)} {how}:"]
    else:
        lines = [f"ragexp: {evaluation!r} against {target}: too few questions to tell on "
                 f"{', '.join(r.metric for r in failing)} {how}: they detect only drops above a tenth of the metric's "
                 "scale; give a margin (margin=...), more questions (python -m ragexp.plan says how many), or "
                 "accept it: accept_low_power=True"]
    lines += [f"  {r.line(alpha, 0.95, accept_low_power)}" for r in found]
    for r in worse:
        lines += dropped_most(rows, base, r.metric)
    pytest.fail("\n".join(lines), pytrace=False)


def worst_questions(evaluation) -> list[str]:
    """The questions that failed, then the lowest on overall or faithfulness, as lines."""
    table = evaluation.table
    if table.empty:
        return []
    failed = table[table["status"] != "judged"] if "status" in table else table.iloc[:0]
    lines = [f"  {q}: {reason}" for q, reason in zip(failed["question_id"], failed.get("failure_reason", failed["status"]))]
    score = next((c for c in ("overall_score", "faithfulness") if c in table), None)
    if score is not None:
        lowest = table[table["status"] == "judged"].sort_values([score, "question_id"]).head(WORST)
        lines += [f"  {q}: {score} {value:.3g}: {str(question)[:100]}"
                  for q, value, question in zip(lowest["question_id"], lowest[score], lowest["question"])]
    return [f"worst questions (of {len(table)}):", *lines[: 2 * WORST]] if lines else []


def dropped_most(rows: dict, base, metric: str) -> list[str]:
    """The questions whose `metric` moved most the wrong way against the baseline, as lines."""
    from ragexp.base.names import higher_is_worse
    from ragexp.metrics.regression import present

    sign = -1.0 if higher_is_worse(metric) else 1.0
    moves = sorted(((sign * (float(row[metric]) - float(base.at[q, metric])), q, float(base.at[q, metric]), float(row[metric]))
                    for q, row in rows.items() if q in base.index and present(row.get(metric)) and present(base.at[q, metric])))
    shown = {q: base.at[q, "question_id"] if "question_id" in base.columns else q for _, q, _, _ in moves}
    return [f"questions that dropped most on {metric}:"] + [f"  {shown[q]}: {old:.3g} -> {new:.3g}"
                                                           for move, q, old, new in moves[:WORST] if move < 0]
