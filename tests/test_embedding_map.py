"""The embedding map (ragexp.run.embedding_map): questions and the chunks they ranked on 2 PCA axes,
from the vectors the run already holds, drawn for a single run and logged with it."""
import json

import numpy as np

from conftest import HASH, run_app
from ragexp.components.embedders import EmbeddingCache
from ragexp.run.embedding_map import known_vectors, projected
from ragexp.config.build import from_yaml


def test_the_projection_is_pca_and_the_same_whatever_the_rows_signs():
    rng = np.random.default_rng(1)
    line = np.outer(rng.normal(size=50), [3.0, 4.0, 0.0]) + rng.normal(scale=1e-3, size=(50, 3))
    coords, explained = projected(line)
    assert explained[0] > 0.999  # the points lie on one line: the first axis holds the variance
    np.testing.assert_allclose(np.abs(coords[:, 0]), np.abs((line - line.mean(0)) @ [0.6, 0.8, 0.0]), atol=1e-2)
    again, _ = projected(-line)  # the same cloud mirrored: each axis is signed by its largest loading
    np.testing.assert_allclose(again, -coords, atol=1e-9)


def test_only_vectors_the_run_holds_are_used_no_text_is_embedded_again():
    with EmbeddingCache().building() as cache:
        embedder = from_yaml("embedder/hash")
    embedder.embed(["a question", "a chunk"])
    before = cache.stats["embedded_texts"]
    found = known_vectors(embedder, ["a question", "a chunk", "never embedded"])
    assert set(found) == {"a question", "a chunk"} and cache.stats["embedded_texts"] == before


def test_a_single_run_draws_its_map_and_logs_it(tmp_path):
    store = f"sqlite:///{tmp_path}/mlflow.db"
    proc = run_app(*HASH, "dataset.limit=6", f"tracker.tracking_uri={store}", "hydra.run.dir=run", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    points = json.loads((tmp_path / "run" / "embedding_map.json").read_text())
    assert len(points["questions"]) == 6 and points["chunks_shown"] > 0 and points["embedder"] == "hash"
    assert all(q["hit"] in (True, False) and 0 <= q["score"] <= 1 for q in points["questions"])
    assert (tmp_path / "run" / "embedding_map.png").stat().st_size > 10_000
    import mlflow

    client = mlflow.MlflowClient(store)
    [run] = client.search_runs([client.get_experiment_by_name("ragexp").experiment_id])
    assert {"embedding_map.json", "embedding_map.png"} <= {a.path for a in client.list_artifacts(run.info.run_id)}
    again = run_app(*HASH, "dataset.limit=6", "tracker=none", "hydra.run.dir=again", cwd=tmp_path)
    assert again.returncode == 0 and json.loads((tmp_path / "again" / "embedding_map.json").read_text()) == points


def test_no_map_without_an_embedding_retriever_or_when_turned_off_and_no_image_per_sweep_job(tmp_path):
    for name, args in (("bm25", ["retriever=bm25"]), ("off", ["embedding_map=false"])):
        proc = run_app(*HASH, *args, "dataset.limit=3", "tracker=none", f"hydra.run.dir={name}", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert not list((tmp_path / name).glob("embedding_map.*")), name
    proc = run_app("-m", *HASH, "retriever.top_k=2,3", "dataset.limit=3", "tracker=none", "hydra.sweep.dir=sweep",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    jobs = sorted(p for p in (tmp_path / "sweep").iterdir() if p.is_dir() and p.name.isdigit())
    assert len(jobs) == 2 and all((j / "embedding_map.json").exists() and not (j / "embedding_map.png").exists()
                                  for j in jobs)


def test_a_sweeps_report_draws_the_map_of_its_best_configuration_only(tmp_path):
    store = f"sqlite:///{tmp_path}/mlflow.db"
    proc = run_app("-m", *HASH, "retriever.top_k=2,3", "dataset.limit=4", f"tracker.tracking_uri={store}",
                   "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    report = tmp_path / "sweep" / "report"
    assert (report / "plots" / "embedding_map.png").stat().st_size > 10_000
    assert "questions and the chunks they ranked, on 2 PCA axes" in (report / "report.html").read_text()
    assert not list((tmp_path / "sweep").glob("[0-9]*/embedding_map.png"))  # no image per job


def test_looking_for_a_runs_map_never_makes_a_store(tmp_path):
    """A leaderboard of runs given in memory names a store that is not there: the report leaves the
    map out rather than creating that store (it made test.db in the working folder of the tests)."""
    from ragexp.compare.report import map_points
    from ragexp.store.reader import Run

    run = Run(run_id="0" * 32, name="r", experiment_id="0", start_time=0, params={}, metrics={}, tags={})
    assert map_points(run, f"sqlite:///{tmp_path}/absent.db") is None
    assert not (tmp_path / "absent.db").exists()


def test_a_config_logged_before_the_setting_existed_still_runs_with_its_map():
    from conftest import compose
    from ragexp.run.settings import RunSettings
    from ragexp.validation import problems

    assert problems(compose("~embedding_map"), RunSettings) == []
