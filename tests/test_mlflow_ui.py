"""The MLflow UI in a real browser: `mlflow server` over the store of a small real sweep, opened in
headless Debian Chromium driven by Playwright. The experiment page must list the sweep's parent and
child runs with their differing params and overall_score, and the parent's report must open.
Screenshots are saved in the test's tmp dir (mlflow-ui-runs.png, mlflow-ui-report.png; the path is
printed, `pytest -s` shows it). The browser only talks to 127.0.0.1: anything else is blocked."""
import os
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

from conftest import logged_sweep, mlflow_server
from ragexp.config.build import from_yaml

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]
TIMEOUT_MS = 60_000

pytestmark = [pytest.mark.browser, pytest.mark.process]


def need(condition: bool, what: str) -> None:
    if not condition:
        if os.environ.get("CI"):
            pytest.fail(f"{what} is missing: .ci/run installs it")
        pytest.skip(f"{what} is missing (apt-get install chromium; pip install -e '.[test]')")


@pytest.fixture
def ui_server(small_sweep, tmp_path):
    with mlflow_server(small_sweep.uri, tmp_path, artifacts=False) as url:
        yield url


@pytest.fixture
def page(tmp_path):
    need(Path(CHROMIUM).exists(), CHROMIUM)
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        need(False, "playwright (Python package)")
    blocked = []

    def local_only(route):
        host = urlparse(route.request.url).hostname
        if route.request.url.startswith(("data:", "blob:")) or host == "127.0.0.1":
            route.continue_()
        else:
            blocked.append(route.request.url)
            route.abort()

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        context = browser.new_context(viewport={"width": 1800, "height": 1000})
        context.route("**/*", local_only)
        # MLflow (3.17.2 and 3.18) opens its Assistant panel (380 px wide) on a browser's first visit to a server on this
        # machine, once; the tests are a user who closed it then (docs/how-to/tracing.md says so)
        context.add_init_script("localStorage.setItem('mlflow.assistant.fab.autoOpenedOnFirstLoad_v1', 'true');"
                                "localStorage.setItem('mlflow.assistant.panelOpen_v1', 'false');")
        context.set_default_timeout(TIMEOUT_MS)
        page = context.new_page()
        page.blocked = blocked
        try:
            yield page
        finally:
            context.close()
            browser.close()


def row_texts(page) -> dict[str, str]:
    """Row index -> the text of its whole table row (ag-grid splits a row over pinned and scrolled parts)."""
    by_index: dict[str, list[str]] = {}
    for row in page.locator(".ag-row[row-index]").all():
        by_index.setdefault(row.get_attribute("row-index"), []).append(row.inner_text())
    return {index: "\n".join(parts) for index, parts in by_index.items()}


def cut_off(page, text: str) -> list[list]:
    """The boxes that clip `text` where the page shows it (a cell that ends it with "…"): each
    [tag, the width its content needs, the width it has], from the element that holds the text up
    to its table cell; [] when it is shown whole."""
    return page.get_by_text(text, exact=True).first.evaluate("""(element) => {
        const clipped = [];
        for (let e = element; e; e = e.parentElement) {
            if (e.clientWidth && e.scrollWidth > e.clientWidth) clipped.push([e.tagName, e.scrollWidth, e.clientWidth]);
            if (e.classList.contains('ag-cell')) break;
        }
        return clipped;
    }""")


def test_experiment_page_lists_the_sweep_and_the_report_opens(ui_server, page, small_sweep, tmp_path):
    _, parent, children_by_id = logged_sweep(small_sweep.uri)
    experiment_id, children = parent.info.experiment_id, list(children_by_id.values())
    # the link the sweep printed at its end, on this test's server: it must open the runs table with the
    # sweep's runs only, ranked as its leaderboard ranks them, with the swept setting as its option and
    # each run's rank, verdict, objective and interval as columns, without a click
    [printed] = [line.rsplit("http://127.0.0.1:5000/", 1)[1] for line in small_sweep.proc.stdout.splitlines()
                 if line.startswith("MLflow UI: ")]
    assert printed.startswith(f"#/experiments/{experiment_id}/runs?workflowType=machine_learning&viewStateShareKey=")
    page.set_viewport_size({"width": 1600, "height": 900})
    page.goto(f"{ui_server}/{printed}")
    for child in children:
        page.locator(".ag-row", has_text=child.info.run_name).first.wait_for()
    for column in ("leaderboard_rank", "ragexp.verdict", "overall_score", "retriever"):
        page.locator(".ag-header-cell", has_text=column).first.wait_for()
    page.screenshot(path=str(tmp_path / "sweep-runs.png"))
    texts = row_texts(page)
    assert len(texts) == len(children) and not any(parent.info.run_name in t for t in texts.values())  # its N runs only
    ranked = sorted(children, key=lambda c: c.data.metrics["leaderboard_rank"])
    order = [next(i for i, t in texts.items() if c.info.run_name in t) for c in ranked]
    assert order == sorted(order, key=int)  # by leaderboard rank, best first
    for child in children:
        [text] = [t for t in texts.values() if child.info.run_name in t]
        assert child.data.params["retriever"] in text.split()  # the option swept, whole (bm25, dense)
        assert child.data.tags["ragexp.verdict"] in text and f"{child.data.metrics['overall_score']:g}" in text

    page.goto(f"{ui_server}/#/experiments/{experiment_id}/runs/{parent.info.run_id}/artifacts")
    page.get_by_text("report", exact=True).first.click()
    page.get_by_text("report.html", exact=True).click()
    title = f"ragexp leaderboard: {parent.info.run_name}"
    found = None
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while found is None and time.monotonic() < deadline:  # the viewer may render it inline or in a frame
        for frame in page.frames:
            if frame.get_by_text(title).count():
                found = frame
                break
        else:
            time.sleep(0.5)
    assert found is not None, f"report title {title!r} not shown"
    assert found.get_by_text("Paired comparisons with the best").count()
    assert found.locator("img[src^='data:image/png;base64,']").count() >= 2
    page.screenshot(path=str(tmp_path / "mlflow-ui-report.png"))
    print(f"screenshots: {tmp_path / 'sweep-runs.png'}, {tmp_path / 'mlflow-ui-report.png'}; "
          f"requests to other hosts blocked: {len(page.blocked)}")


README_SWEEP = "python -m ragexp -m "  # how the README's sweep command starts


@pytest.mark.slow
def test_the_readmes_own_sweep_opens_ranked_in_the_runs_table(tmp_path, page):
    """The sweep the README prints, run as printed (the bundled sample, MiniLM): the link it prints
    opens, at 1600x900, its runs only, ranked, each with its short settings, rank, verdict and
    interval, and a name of its own shown whole (its swept values, `recursive · bm25`: the names
    the override strings made were cut alike, `chunker=recursive,retrie…`). Screenshot:
    mlflow-ui-runs.png (the README's, the tour's and compare.md's)."""
    import shlex

    from conftest import ROOT, run_app

    [command] = [line.split("#")[0].strip() for line in (ROOT / "README.md").read_text().splitlines()
                 if line.startswith(README_SWEEP)]
    proc = run_app(*shlex.split(command)[3:], cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _, parent, children_by_id = logged_sweep(uri)
    swept = [arg.split("=")[0] for arg in shlex.split(command)[4:]]
    [printed] = [line.rsplit("http://127.0.0.1:5000/", 1)[1] for line in proc.stdout.splitlines()
                 if line.startswith("MLflow UI: ")]
    with mlflow_server(uri, tmp_path / "server", artifacts=False) as url:
        page.set_viewport_size({"width": 1600, "height": 900})
        page.goto(f"{url}/{printed}")
        for child in children_by_id.values():
            page.locator(".ag-row", has_text=child.info.run_name).first.wait_for()
        for column in ("leaderboard_rank", "ragexp.verdict", "overall_score_ci_low", *swept):
            page.locator(".ag-header-cell", has_text=column).first.wait_for()
        texts = row_texts(page)
        page.screenshot(path=str(tmp_path / "mlflow-ui-runs.png"))
        names = [child.info.run_name for child in children_by_id.values()]
        cut = {name: boxes for name in names if (boxes := cut_off(page, name))}
    assert len(set(names)) == 4 and not cut, cut  # the rows told apart by their names, each shown whole
    assert len(texts) == len(children_by_id) == 4 and not any(parent.info.run_name in t for t in texts.values())
    for child in children_by_id.values():
        [text] = [t for t in texts.values() if child.info.run_name in t]
        assert all(child.data.params[key] in text.split() for key in swept)
    print(f"screenshot: {tmp_path / 'mlflow-ui-runs.png'}")

def test_a_races_link_opens_one_row_per_configuration_the_dropped_said_so(tmp_path, page):
    """A racing sweep's printed link opens, at 1600x900, one row per configuration (the last run of
    each, not every round's): the survivors ranked with their verdicts and intervals, the one dropped
    after round 1 saying so, with the short settings. Screenshot: mlflow-ui-race.png."""
    from conftest import HASH, run_app

    proc = run_app("-m", "hydra/sweeper=racing", *HASH, "retriever=bm25,dense", "retriever.top_k=1,10",
                   "hydra.sweeper.rounds=[0.5,1.0]", "hydra.sweeper.min_questions=10", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    _, parent, children_by_id = logged_sweep(uri)
    placed = [c for c in children_by_id.values() if "ragexp.verdict" in c.data.tags]
    dropped = [c for c in placed if c.data.tags["ragexp.verdict"].startswith("dropped after round 1")]
    assert len(placed) == 4 < len(children_by_id) and dropped  # every round's runs logged, one placed per configuration
    [printed] = [line.rsplit("http://127.0.0.1:5000/", 1)[1] for line in proc.stdout.splitlines()
                 if line.startswith("MLflow UI: ")]
    with mlflow_server(uri, tmp_path / "server", artifacts=False) as url:
        page.set_viewport_size({"width": 1600, "height": 900})
        page.goto(f"{url}/{printed}")
        page.locator(".ag-row", has_text="dropped after round 1").first.wait_for()
        for column in ("leaderboard_rank", "ragexp.verdict", "overall_score_ci_low", "retriever", "retriever.top_k"):
            page.locator(".ag-header-cell", has_text=column).first.wait_for()
        page.get_by_text("4 matching runs").wait_for()
        texts = row_texts(page)
        page.screenshot(path=str(tmp_path / "mlflow-ui-race.png"))
    assert len(texts) == 4 and not any(parent.info.run_name in t for t in texts.values())
    ranked = sorted((c for c in placed if c not in dropped), key=lambda c: c.data.metrics["leaderboard_rank"])
    rows = [texts[str(i)] for i in range(len(texts))]  # sorted by rank: the ranked first, best first
    for row, child in zip(rows, ranked):
        assert child.data.tags["ragexp.verdict"] in row and child.data.params["retriever"] in row.split()
    assert all("dropped after round 1" in row for row in rows[len(ranked):])
    print(f"screenshot: {tmp_path / 'mlflow-ui-race.png'}")


def test_two_runs_of_a_sweep_compare_question_by_question(ui_server, page, small_sweep, tmp_path):
    """MLflow's evaluation view comparing two of the sweep's runs pairs their per-question records
    (by the question, the records' request): one row per question, each run's trace and answer in it."""
    from mlflow.tracing.client import TracingClient

    import mlflow

    _, parent, children_by_id = logged_sweep(small_sweep.uri)
    experiment_id = parent.info.experiment_id
    first, second = sorted(children_by_id)
    page.goto(f"{ui_server}/#/experiments/{experiment_id}/evaluation-runs?selectedRunUuid={first}&compareToRunUuid={second}")
    body = wait_for_text(page, "6 of 6")
    assert "6 of 6" in body and "Comparing" in body
    mlflow.set_tracking_uri(small_sweep.uri)
    traces = {run_id: {t.info.request_preview: t.info.trace_id for t in TracingClient().search_traces(
        locations=[experiment_id], run_id=run_id, include_spans=False, max_results=50)} for run_id in (first, second)}
    assert set(traces[first]) == set(traces[second]) and len(traces[first]) == 6
    for request in traces[first]:  # a question's row holds both runs' traces
        row = page.locator(".ag-row, [role=row]", has_text=traces[first][request]).first
        row.wait_for()
        assert traces[second][request] in row.inner_text()
    page.screenshot(path=str(tmp_path / "mlflow-ui-compare.png"))
    print(f"screenshot: {tmp_path / 'mlflow-ui-compare.png'}")


@pytest.fixture(scope="module")
def traced_sweep(tmp_path_factory):
    """A small sweep run with tracing=on (3 questions per job), in its own store."""
    from types import SimpleNamespace

    from conftest import HASH, run_app

    cwd = tmp_path_factory.mktemp("traced-sweep")
    proc = run_app("-m", "retriever=dense,bm25", "dataset.limit=3", "tracing=on", *HASH, cwd=cwd)
    assert proc.returncode == 0, proc.stderr
    return SimpleNamespace(cwd=cwd, uri=f"sqlite:///{cwd / 'mlflow.db'}")


def wait_for_text(page, text: str) -> str:
    """The page's text once it contains `text` (the charts and tables fill in after the page loads)."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while True:
        body = page.inner_text("body")
        if text in body or time.monotonic() > deadline:
            return body
        time.sleep(0.5)


def test_experiment_opens_on_the_sweeps_traces_and_a_run_lists_its_traces(traced_sweep, page, tmp_path):
    """Clicking the experiment (MLflow 3.18's GenAI view) lands on an Overview that counts the
    sweep's traces instead of "No data"; its Evaluation runs list the sweep's runs; the Traces tab of
    a run lists the run's traces with their scores, and a trace shows its three stage spans."""
    _, parent, children_by_id = logged_sweep(traced_sweep.uri)
    experiment_id = parent.info.experiment_id
    child = next(iter(children_by_id.values()))
    with mlflow_server(traced_sweep.uri, tmp_path, artifacts=False) as url:
        page.goto(f"{url}/#/experiments")
        page.get_by_role("link", name="ragexp", exact=True).first.click()
        page.get_by_text("Traces", exact=True).first.wait_for()
        import mlflow

        counted = "6\ntraces" if tuple(int(p) for p in mlflow.__version__.split(".")[:2]) >= (3, 18) else "Traces\n6\n"
        body = wait_for_text(page, counted)  # 2 jobs x 3 questions (3.18's overview says TRACE 6 traces, 3.17's Traces 6)
        page.screenshot(path=str(tmp_path / "mlflow-ui-landing.png"))
        assert f"/experiments/{experiment_id}/overview" in page.url and counted in body

        runs_link = page.get_by_text("Evaluation runs", exact=True).first  # a tip pop-up covers the side bar
        page.goto(f"{url}/{runs_link.get_attribute('href')}")
        for run in (parent, *children_by_id.values()):
            page.get_by_text(run.info.run_name, exact=True).first.wait_for()

        page.goto(f"{url}/#/experiments/{experiment_id}/runs/{child.info.run_id}/traces")
        page.get_by_text("tr-").first.wait_for()
        body = wait_for_text(page, "3 of 3")
        assert "3 of 3" in body and "Assessments" in body and "Expected output" in body
        page.screenshot(path=str(tmp_path / "mlflow-ui-run-traces.png"))
        page.get_by_text('"question"').first.click()
        for span in ("retrieve", "generate", "judge"):
            page.get_by_text(span, exact=True).first.wait_for()
        page.screenshot(path=str(tmp_path / "mlflow-ui-trace.png"))
    print(f"screenshots: {tmp_path / 'mlflow-ui-landing.png'}, {tmp_path / 'mlflow-ui-run-traces.png'}, "
          f"{tmp_path / 'mlflow-ui-trace.png'}")


def test_a_runs_printed_link_opens_its_per_question_table(tmp_path, page):
    """A default single run (no tracing=on): the link it prints opens the run's per-question table in
    MLflow (its Traces tab) without a click: its questions as rows, the expected answers, and at
    1600x900, without scrolling or choosing columns, each of the judge's scores and hallucination as a
    column headed by its average (numbers, not text); a question's assessments show the judge's
    rationale. Screenshots: mlflow-ui-evaluation.png, mlflow-ui-rationale.png."""
    import json

    from conftest import HASH, run_app

    proc = run_app("dataset.limit=5", "retriever=bm25", *HASH, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [printed] = [line.rsplit("http://127.0.0.1:5000/", 1)[1] for line in proc.stdout.splitlines()
                 if line.startswith("MLflow UI: ")]
    assert printed.endswith("/traces") and "/runs/" in printed
    records = [json.loads(line) for line in next(tmp_path.glob("outputs/*/*/questions.jsonl")).read_text().splitlines()]
    with mlflow_server(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "server", artifacts=False) as url:
        page.set_viewport_size({"width": 1600, "height": 900})
        page.goto(f"{url}/{printed}")
        body = wait_for_text(page, "5 of 5")
        assert "5 of 5" in body and "Assessments" in body and "Expected output" in body
        for record in records:
            page.get_by_text(record["question"][:40]).first.wait_for()  # each question is a row of the run's table
        metrics = {"context_relevance", "answer_similarity", "faithfulness", "hallucination"}  # what overall_score weighs
        assert metrics - {"hallucination"} <= set(records[0]["judge_scores"])
        in_view = {h.inner_text().splitlines()[0].lower(): h.inner_text() for h in page.locator("[role=columnheader]").all()
                   if h.inner_text() and (box := h.bounding_box()) and box["x"] + box["width"] <= 1600}
        scores = {name: text for name, text in in_view.items() if name in metrics}
        assert set(scores) == metrics and {"faithfulness", "hallucination"} <= set(scores), in_view  # in view as it opens
        assert all("AVG" in text for name, text in scores.items() if name != "hallucination"), scores  # numbers
        page.screenshot(path=str(tmp_path / "mlflow-ui-evaluation.png"))

        page.get_by_text(records[0]["question"][:40]).first.click()  # the question's record, its assessments
        page.get_by_role("button", name="Assess").first.click()
        card = page.locator("div", has=page.get_by_text("faithfulness", exact=True)).filter(
            has=page.locator("[data-component-id='shared.model-trace-explorer.toggle-assessment-expanded']")).last
        card.locator("[data-component-id='shared.model-trace-explorer.toggle-assessment-expanded']").first.click()
        page.get_by_text("Rationale", exact=True).first.wait_for()
        assert " ".join(card.inner_text().split()).count(" ".join(records[0]["reasoning"].split())) == 1
        page.screenshot(path=str(tmp_path / "mlflow-ui-rationale.png"))
    print(f"screenshots: {tmp_path / 'mlflow-ui-evaluation.png'}, {tmp_path / 'mlflow-ui-rationale.png'}")


def test_a_reviewer_answers_in_the_review_tab_and_calibrate_reads_it(tmp_path, page, monkeypatch):
    """`calibrate --export N --to mlflow` over an `mlflow server`: the link it prints opens the review
    queue; a reviewer answers one question there (faithfulness 3, grounded) and the answer is the label
    `calibrate --labels-from mlflow` reads. Screenshot: mlflow-ui-review.png."""
    import json

    from conftest import compose
    from ragexp.calibrate.__main__ import main as calibrate
    from ragexp.run.pipeline import run as run_pipeline

    monkeypatch.chdir(tmp_path)
    cfg = compose("embedder=hash", "embedder@scoring_embedder=hash", "retriever=bm25", "dataset.limit=6",
                  f"cache.dir={tmp_path / 'cache'}")
    result = run_pipeline(cfg, "judged")
    with mlflow_server(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "server") as url:
        run_id = from_yaml("tracker/mlflow", experiment="review", tracking_uri=url).log_run(result, {"judge": {"_target_": "ragexp.judges.offline.OfflineJudge"}})
        printed = printed_by(calibrate, [run_id, "--tracking-uri", url, "--export", "2", "--to", "mlflow"])
        [link] = [line.split(": ", 1)[1] for line in printed.splitlines() if line.startswith("answer them in the Review tab: ")]
        assert link.startswith(f"{url}/#/experiments/") and "selectedQueueId=rq-" in link
        page.goto(link)
        page.get_by_role("button", name="Start review").click()
        numeric = "[data-component-id='mlflow.experiment-review-queue.focused-review.question.numeric']"
        question = page.locator("div", has=page.get_by_text("faithfulness", exact=True)).filter(has=page.locator(numeric)).last
        question.locator("input[type=number]").fill("3")
        page.get_by_text("Grounded", exact=True).click()
        page.screenshot(path=str(tmp_path / "mlflow-ui-review.png"))
        page.locator("[data-component-id='mlflow.experiment-review-queue.focused-review.complete']").click()
        page.get_by_text("1 of 2 reviewed").first.wait_for()
        out = tmp_path / "report"
        assert calibrate([run_id, "--tracking-uri", url, "--labels-from", "mlflow", "--out", str(out),
                          "--resamples", "20", "--no-log"]) == 0
    rows = {r["metric"]: r for r in json.loads((out / "calibration.json").read_text())["metrics"]}
    assert rows["faithfulness"]["questions"] == 1 and rows["hallucination"]["questions"] == 1
    assert any(rows["faithfulness"]["mae"] == pytest.approx(abs(r.judgement.scores["faithfulness"] - 3))
               for r in result.questions if not r.failed)
    print(f"screenshot: {tmp_path / 'mlflow-ui-review.png'}")


def printed_by(main, argv: list[str]) -> str:
    """What `main(argv)` prints, checking it succeeds."""
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(argv) == 0
    return buffer.getvalue()
