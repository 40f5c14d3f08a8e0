"""`python -m ragexp.compare` on a real sweep read back from MLflow, the report the multirun
callback makes, the re-run command, and the one-line errors."""
import json
import logging
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import HASH, call_in, cli_env, logged_sweep, run_app
from ragexp.config.build import from_yaml

AGGREGATES = ("overall_score", "avg_context_relevance", "avg_answer_similarity", "avg_faithfulness", "hallucination_rate")


def compare_cli(*args, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m ragexp.compare ARGS` in `cwd`, run in this process."""
    from ragexp.compare.__main__ import main

    return call_in(lambda: main(list(args)), ["python -m ragexp.compare", *args], cwd)


def test_the_sweep_ends_with_a_report_in_its_folder_and_its_parent_run(small_sweep):
    report = small_sweep.sweep_dir / "report"
    for name in ("report.md", "report.html", "leaderboard.json", "plots/metrics.png", "plots/distribution.png",
                 "plots/quality_vs_cost.png"):  # quality against job_time_s, which every job logs
        assert (report / name).stat().st_size > 0, name
    assert "leaderboard (overall_score, 95% CIs; report:" in small_sweep.proc.stdout
    assert any(f"| 1 | {name} |" in small_sweep.proc.stdout for name in ("dense", "bm25"))  # named by its option
    the_console_says_why_the_winner_wins(small_sweep.proc.stdout, json.loads((report / "leaderboard.json").read_text()))
    client, parent, _ = logged_sweep(small_sweep.uri)
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "report")}
    assert {"report/report.md", "report/report.html", "report/leaderboard.json", "report/plots"} <= logged
    assert parent.data.tags["ragexp.report"] == "report/report.html"


INTERVAL = r"(\S+) \[(\S+), (\S+)\]"  # an estimate and its interval, as the console prints them


def the_console_says_why_the_winner_wins(stdout: str, board: dict) -> None:
    """Right after the leaderboard's table: the winner with its interval, those tied with it (the
    entries the report rates ≈ best), and the scores that separate it from the next, with both
    intervals, the numbers those of the report's leaderboard.json."""
    def matches(printed: tuple[str, ...], interval: list) -> bool:
        return all(float(p) == pytest.approx(v, rel=1e-3, abs=1e-3) for p, v in zip(printed, interval, strict=True))

    best, following = board["entries"]
    ending = stdout.splitlines()
    table_end = max(i for i, line in enumerate(ending) if line.startswith(("| 2 | dense |", "| 2 | bm25 |")))
    winner = re.fullmatch(rf"winner: (\S+), overall_score {INTERVAL}", ending[table_end + 1])
    assert winner and winner[1] == best["label"], ending[table_end + 1]
    assert matches(winner.groups()[1:], best["values"]["overall_score"])
    tied = "tied with it: none (every other configuration is worse, or worse before Holm)" \
        if following["verdict"] != "≈ best" else f"tied with it (≈ best, these questions cannot tell them apart): {following['label']}"
    assert ending[table_end + 2] == tied
    assert ending[table_end + 3] == f"what separates it from {following['label']} (next, {following['verdict']}):"
    separating = []
    for line in ending[table_end + 4:]:
        score = re.match(rf"  (\w+): {INTERVAL} vs {INTERVAL}", line)
        if not score:
            break
        separating.append(score[1])
        assert matches(score.groups()[1:4], best["values"][score[1]]), line
        assert matches(score.groups()[4:], following["values"][score[1]]), line
    assert separating[:1] == ["overall_score"] and 2 <= len(separating) <= 3, ending[table_end:]
    assert not {"total_questions", "job_time_s", "time_own_s"} & set(separating)  # scores only
    if best["values"]["overall_score"][0] > following["values"]["overall_score"][0]:
        assert ending[table_end + 4].endswith(" (the winner leads)")


def test_leaderboard_reads_the_logged_numbers_from_another_folder(small_sweep, tmp_path):
    proc = compare_cli("--tracking-uri", small_sweep.uri, "--out", "out", "--no-log", "--resamples", "2000",
                       cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "| # | configuration | retriever | overall_score [95% CI] |" in proc.stdout
    data = json.loads((tmp_path / "out" / "leaderboard.json").read_text())
    _, parent, children = logged_sweep(small_sweep.uri)
    assert data["parent_run_id"] == parent.info.run_id and data["param_columns"] == ["retriever"]
    assert {e["run_id"] for e in data["entries"]} == set(children)
    scores = [e["values"]["overall_score"][0] for e in data["entries"]]
    assert scores == sorted(scores, reverse=True)
    for entry in data["entries"]:
        run = children[entry["run_id"]]
        assert entry["label"] == run.info.run_name
        assert entry["params"] == {"retriever": run.info.run_name}  # a job is named by its swept option
        for metric, value in run.data.metrics.items():
            assert entry["values"][metric][0] == pytest.approx(value), metric
        for metric in AGGREGATES:  # every aggregate is reproduced from the per-question table: it has a CI
            estimate, low, high = entry["values"][metric]
            assert low is not None and low - 1e-3 <= estimate <= high + 1e-3, metric
    best, other = data["entries"]
    assert best["verdict"] == "best" and best["comparison"] is None
    assert other["verdict"] in ("≈ best", "worse", "worse before Holm") and other["comparison"]["questions_compared"] == 6
    assert other["comparison"]["failed_in_either"] == 0
    assert (tmp_path / "out" / "plots" / "metrics.png").exists()


def test_compare_keeps_the_report_a_sweep_made_and_writes_beside_it(small_sweep, tmp_path):
    """`python -m ragexp.compare --no-plots` wrote over the sweep's own report (4 plots -> 0): a folder
    that holds a report is kept, the new one goes beside it (report-2), unless --overwrite."""
    import shutil

    report = small_sweep.sweep_dir / "report"
    plots = sorted(p.name for p in (report / "plots").iterdir())
    try:
        proc = compare_cli("--tracking-uri", small_sweep.uri, "--no-log", "--no-plots", "--resamples", "200",
                           cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert sorted(p.name for p in (report / "plots").iterdir()) == plots and len(plots) >= 3
        beside = small_sweep.sweep_dir / "report-2"
        assert (beside / "report.md").exists() and not (beside / "plots").exists()
    finally:
        shutil.rmtree(small_sweep.sweep_dir / "report-2", ignore_errors=True)
    for _ in range(2):
        proc = compare_cli("--tracking-uri", small_sweep.uri, "--no-log", "--no-plots", "--resamples", "200",
                           "--out", str(tmp_path / "mine"), "--overwrite", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
    assert not (tmp_path / "mine-2").exists()


def test_default_target_is_the_latest_sweep_in_the_store_here(small_sweep, tmp_path):
    proc = compare_cli("--out", str(tmp_path / "r"), "--no-log", "--no-plots", "--resamples", "500",
                       cwd=small_sweep.cwd)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"sweep {small_sweep.sweep_dir.parent.name}/{small_sweep.sweep_dir.name}")
    assert not (tmp_path / "r" / "plots").exists()


@pytest.mark.process
def test_rerun_prints_a_command_that_reruns_the_job(small_sweep, tmp_path, capsys):
    """The README's re-run recipe (download the logged config.yaml, run it) as one printed command,
    run by a shell in another folder: same results as the logged job."""
    from ragexp.compare.__main__ import main

    _, _, children = logged_sweep(small_sweep.uri)
    [(run_id, run)] = [(i, r) for i, r in children.items() if r.info.run_name == "bm25"]
    assert main(["--rerun", run_id, "--tracking-uri", small_sweep.uri]) == 0
    out = capsys.readouterr()
    command = out.out.strip()
    assert f"--run-id {run_id}" in command and "-m ragexp --config-path" in command
    assert "re-runs 'bm25'" in out.err
    proc = subprocess.run(["bash", "-c", command], cwd=tmp_path, env=cli_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    [job] = [d for d in small_sweep.sweep_dir.iterdir() if (d / "results.json").exists()
             and "bm25" in json.loads((d / "results.json").read_text())]
    again = json.loads(next(tmp_path.glob("outputs/*/*/results.json")).read_text())
    assert again == json.loads((job / "results.json").read_text())


@pytest.mark.parametrize("target", ["experiment", "experiment --all", "parent", "run ids"])
def test_targets_experiment_parent_or_run_ids(small_sweep, tmp_path, target):
    from ragexp.compare.__main__ import main

    _, parent, children = logged_sweep(small_sweep.uri)
    args = {"experiment": ["ragexp"], "experiment --all": ["ragexp", "--all"], "parent": [parent.info.run_id],
            "run ids": list(children)}[target]
    out = tmp_path / "out"
    assert main(["--tracking-uri", small_sweep.uri, *args, "--no-log", "--no-plots", "--resamples", "200",
                 "--out", str(out)]) == 0
    data = json.loads((out / "leaderboard.json").read_text())
    assert {e["run_id"] for e in data["entries"]} == set(children)
    assert data["parent_run_id"] == (parent.info.run_id if target in ("experiment", "parent") else None)


@pytest.mark.parametrize("args,message", [
    (["--tracking-uri", "sqlite:///{tmp}/nothing.db"], "no MLflow store at sqlite:///{tmp}/nothing.db"),
    (["--tracking-uri", "{uri}", "0123456789abcdef0123456789abcdef"], "no run 0123456789abcdef0123456789abcdef in"),
    (["--tracking-uri", "{uri}", "no-such-experiment"], "no experiment or run 'no-such-experiment' in"),
    (["--tracking-uri", "{uri}", "--objective", "bogus"], "objective 'bogus' is not logged by any run"),
])
def test_mistakes_are_one_clear_line(small_sweep, tmp_path, capsys, args, message):
    from ragexp.compare.__main__ import main

    fill = {"tmp": tmp_path, "uri": small_sweep.uri}
    assert main([a.format(**fill) for a in args] + ["--no-log", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ragexp.compare: error: " + message.format(**fill)) and err.count("\n") == 1


def test_no_sweep_in_the_store(tmp_path, capsys):
    from ragexp.compare.__main__ import main

    import mlflow

    uri = f"sqlite:///{tmp_path / 'empty.db'}"
    mlflow.MlflowClient(uri).search_experiments()  # creates the empty store
    assert main(["--tracking-uri", uri]) == 2
    last = capsys.readouterr().err.splitlines()[-1]  # after MLflow's own lines about creating the store
    assert last == f"ragexp.compare: error: no sweep found in {uri}; run one (python -m ragexp -m ...) or name runs to compare"


def test_rerun_of_a_sweep_parent_says_to_give_a_job(small_sweep, capsys):
    from ragexp.compare.__main__ import main

    _, parent, _ = logged_sweep(small_sweep.uri)
    assert main(["--rerun", parent.info.run_id, "--tracking-uri", small_sweep.uri]) == 2
    assert "has no config.yaml artifact (a sweep's parent run); give the run id of one job" in capsys.readouterr().err


def test_a_failing_report_does_not_fail_the_sweep(tmp_path, caplog):
    from ragexp.sweep.ending import sweep_leaderboard

    tracker = from_yaml("tracker/mlflow", tracking_uri=f"sqlite:///{tmp_path / 'gone.db'}")
    with caplog.at_level(logging.WARNING, logger="ragexp"):
        assert sweep_leaderboard(tracker, "0" * 32, tmp_path) is None  # no exception
    assert "no leaderboard for this sweep (RagexpError: no MLflow store at" in caplog.text
    assert f"python -m ragexp.compare {'0' * 32}" in caplog.text


def test_compare_help_is_quick_and_light(tmp_path):
    code = ("import runpy, sys\nsys.argv = ['x', '--help']\n"
            "try:\n    runpy.run_module('ragexp.compare', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('HEAVY', sorted(m for m in ('mlflow', 'matplotlib', 'pandas', 'torch') if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=cli_env(), capture_output=True, text=True)
    assert "HEAVY []" in proc.stdout and "--rerun RUN_ID" in proc.stdout, proc.stdout + proc.stderr


def test_compare_prints_the_artifact_folder_it_logged_the_report_to(tmp_path):
    """Beside the sweep's own report/, a later comparison is written to report-2/ and logged to the
    parent run as report-2/: the line it prints says report-2/ (it said report/). A sweep of its own,
    as logging changes the parent run's report tag, which the shared sweep's tests read."""
    swept = run_app("-m", "retriever=dense,bm25", "dataset.limit=3", *HASH, cwd=tmp_path)
    assert swept.returncode == 0, swept.stderr
    [sweep_dir] = tmp_path.glob("multirun/*/*")
    assert (sweep_dir / "report" / "report.html").is_file()
    proc = compare_cli("--no-plots", "--resamples", "200", cwd=tmp_path)  # the latest sweep of the store here
    assert proc.returncode == 0, proc.stderr
    client, parent, _ = logged_sweep(f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert f"logged to run {parent.info.run_id} as artifacts report-2/" in proc.stdout.splitlines()
    assert (sweep_dir / "report-2" / "report.html").is_file()
    assert "report-2/report.html" in {a.path for a in client.list_artifacts(parent.info.run_id, "report-2")}
    assert parent.data.tags["ragexp.report"] == "report-2/report.html"


def test_the_artifact_folder_a_report_is_logged_as_is_the_one_printed():
    """compare printed `logged ... as artifacts report/` for a report it logged as report-2/: the printed
    name and the logged one are now the same function's."""
    from pathlib import Path

    from ragexp.compare.report import artifact_dir

    assert artifact_dir(Path("sweep/report")) == "report" and artifact_dir(Path("sweep/report-2")) == "report-2"
    assert artifact_dir(Path("elsewhere/mine")) == "report"
