"""A sweep's points that choose the same options share their defaults list and composed config
(ragexp.sweep.composed.SharedDefaults): every point's config, or the error composing it gives, is
what Hydra's own composition gives, and the options are composed once each."""
from omegaconf import OmegaConf, open_dict

from conftest import CONF

GRID = ["chunker=recursive,semantic,fixed", "chunker.chunk_size=64,256", "retriever.top_k=2,3", "dataset.limit=2"]


def composed_points(loader, master, points):
    """Each point's config as a plain container (unresolved), or the error composing it gave."""
    out = []
    for point in points:
        try:
            out.append(OmegaConf.to_container(loader.load_sweep_config(master, list(point)), resolve=False))
        except Exception as err:  # noqa: BLE001 - the message is what is compared
            out.append(f"{type(err).__name__}: {err}")
    return out


def test_shared_compositions_are_hydras_own(monkeypatch):
    from hydra import compose, initialize_config_dir
    from hydra._internal import config_loader_impl
    from hydra.core.global_hydra import GlobalHydra

    from ragexp.sweep.composed import SharedDefaults
    from ragexp.sweep.folder import grid_points

    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        master = compose(config_name="config", return_hydra_config=True)
        with open_dict(master):
            master.hydra.overrides.task = GRID
        loader = GlobalHydra.instance().config_loader()
        points = grid_points(master)
        assert len(points) == 12
        hydras = composed_points(loader, master, points)

        built = []
        real = config_loader_impl.create_defaults_list
        monkeypatch.setattr(config_loader_impl, "create_defaults_list",
                            lambda **kw: built.append(1) or real(**kw))
        shared = SharedDefaults()
        try:
            ours = composed_points(loader, master, points)
        finally:
            shared.close()
        assert config_loader_impl.create_defaults_list is not shared.defaults_list  # Hydra's back
    assert len(built) == 3  # one defaults list per chunker option, not one per point
    errors = [c for c in hydras if isinstance(c, str)]
    assert len(errors) == 4 and all("chunker.chunk_size" in e for e in errors)  # semantic has no chunk_size
    for theirs, mine in zip(hydras, ours):
        assert mine == theirs
    sizes = {(c["chunker"]["_target_"], c["chunker"]["chunk_size"], c["retriever"]["top_k"]) for c in ours
             if not isinstance(c, str)}
    assert len(sizes) == 8  # the points' own values, not the first point's


def test_a_sweep_left_by_a_bad_point_gives_hydra_back(tmp_path):
    """A grid refused before any job exits from the callback: Hydra's functions are restored."""
    from hydra._internal import config_loader_impl

    from conftest import HASH, run_app

    real = config_loader_impl.create_defaults_list
    proc = run_app("-m", *HASH, "retriever=bm25", "chunker.chunk_size=64,256", "tracker=none",
                   f"cache.dir={tmp_path / 'cache'}", "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert proc.returncode == 2 and "1 of 2 grid points are invalid" in proc.stderr
    assert config_loader_impl.create_defaults_list is real


def test_a_finished_jobs_configs_are_let_go_and_its_outcome_kept():
    """Hydra keeps every job's JobReturn to the sweep's end: the sweep callback drops its two
    configs (the 192-point grid's peak memory fell from 485 to 433 MB), not what is read later."""
    from hydra.core.utils import JobReturn, JobStatus
    from omegaconf import OmegaConf

    from ragexp.sweep.callbacks import SweepTracking

    done = JobReturn(overrides=["chunker=token"], cfg=OmegaConf.create({"a": 1}),
                     hydra_cfg=OmegaConf.create({"hydra": {}}), working_dir="/x", task_name="ragexp")
    done.return_value, done.status = 6.5, JobStatus.COMPLETED
    SweepTracking().on_job_end(OmegaConf.create({}), job_return=done)
    assert done.cfg is None and done.hydra_cfg is None
    assert done.return_value == 6.5 and done.status is JobStatus.COMPLETED and done.overrides == ["chunker=token"]


def test_a_sweep_sets_its_imports_aside_from_the_garbage_collector_and_gives_them_back(tmp_path, monkeypatch):
    """Full collections scanned Hydra's and MLflow's modules again and again in a sweep; it freezes
    them before its grid is composed, and unfreezes at its end, so that a process that goes on (a
    notebook, this test session) collects as before."""
    import gc

    from conftest import HASH, run_app

    frozen = []
    real_freeze = gc.freeze
    monkeypatch.setattr(gc, "freeze", lambda: (real_freeze(), frozen.append(gc.get_freeze_count())))
    proc = run_app("-m", *HASH, "retriever=bm25", "retriever.top_k=2,3", "dataset.limit=3", "tracker=none",
                   f"cache.dir={tmp_path / 'cache'}", "hydra.sweep.dir=sweep", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert frozen and frozen[0] > 0  # set aside during the sweep
    assert gc.get_freeze_count() == 0  # and given back
