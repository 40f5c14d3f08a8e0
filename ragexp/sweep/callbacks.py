"""Hydra callback: a multirun gets one parent run in the tracker, its jobs nest under it."""
from __future__ import annotations

import gc
import json
import sys
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from ragexp.store.sweep_logging import SweepLogging
from ragexp.base.processes import this_process
from ragexp.base.redact import scrub_url
from ragexp.config.callbacks import not_a_warning
from ragexp.errors import GATE_FAILED, RUN_FAILED, RagexpError
from ragexp.store.logged_record import not_logged as not_logged_reason
from ragexp.run.app import Jobs
from ragexp.sweep.composed import BASIC_LAUNCHER, ComposedOnce, compose_once
from ragexp.sweep.folder import grid_points, invalid_points, swept_keys, wanted_by
from ragexp.store.run_folder import FAILURE_FILE, SWEEP_FILE
from ragexp.sweep.ending import (close_parent, counts_of, folder_leaderboard, job_name, merged_results, not_logged,
                                 record_end, sweep_leaderboard)

BASIC_SWEEPER = "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"
RACING_SWEEPER = "hydra_plugins.ragexp_racing.RacingSweeper"  # ragexp.sweep.racing: its grid is known in advance too
JOBLIB_LAUNCHER = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"  # jobs in worker processes here


class SweepTracking(Callback):
    """`on_multirun_start` checks every point of a grid (all invalid points reported, exit 2, nothing
    run), then opens the parent run and leaves its id and the swept keys in the
    sweep folder (sweep.json), where each job, in this process or another, finds them. When the
    jobs run in this process (Hydra's basic launcher), a helper process opens the parent run and
    logs each job's folder while the next job runs (ragexp.store.sweep_logging.SweepLogging);
    `on_multirun_end` attaches the jobs' results.json files, merged, to the parent run, closes it,
    makes the sweep's leaderboard report (`python -m ragexp.compare`, in the sweep folder's
    report/ and logged to the parent run), then exits with status 4 when a job failed (the sweep
    went on; failed jobs are listed with their reasons) or else 3 when a job missed a
    quality-gate threshold (`gate_passed` = 0). The parent run ends with the job counts. Jobs not
    logged (a store gone away) or a parent that cannot be ended: the leaderboard of the run folders,
    exit 4, and the end recorded for later (ragexp.sweep.ending). No exception of a callback is
    left to Hydra, which would only warn (`not_a_warning`, ragexp.config.callbacks).

    Hydra makes this callback from the config, and calls the task function with a config only: the
    sweep's jobs in this process are handed its logging helper in `on_job_start`, where Hydra
    passes a callback the task function (`ragexp.run.app.Jobs`), the one public route between the
    two. `close` lets go of what the sweep holds, at its end or when it stops before (its
    callbacks then end it; after its first job, the command does, through `Jobs.close`)."""

    composed: ComposedOnce | None = None  # the grid's points, each composed once (ragexp.sweep.composed)
    helper: SweepLogging | None = None  # the helper that logs the jobs' folders (jobs in this process)
    under_way = False  # a sweep started in this process (`on_multirun_start`): not a single run

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            with not_a_warning():
                self.started(config)
        except BaseException:  # a bad grid (exit 2), a store that does not answer: nothing is left behind
            self.close()
            raise

    @not_a_warning()
    def on_job_start(self, config: DictConfig, *, task_function: Any = None, **kwargs: Any) -> None:
        """A job of this sweep starting in this process (any job, with Hydra's basic launcher) is
        handed the sweep's logging helper and how to end the sweep (`Jobs.in_sweep`)."""
        if self.under_way and isinstance(task_function, Jobs):
            task_function.in_sweep(self.helper, self.close)

    def started(self, config: DictConfig) -> None:
        from ragexp.config.build import build
        from ragexp.llm.served import serve_for_workers

        self.under_way = True
        sweeper = config.hydra.sweeper.get("_target_")
        grid = sweeper in (BASIC_SWEEPER, RACING_SWEEPER)  # known in advance, checked before any job
        self.tracker = build(config.tracker)
        if (sweeper == BASIC_SWEEPER and config.hydra.launcher.get("_target_") == BASIC_LAUNCHER
                and self.tracker.ahead() is not None):  # its jobs run here: a helper logs them meanwhile
            self.helper = SweepLogging.start()  # (it imports MLflow while the grid is composed)
        if grid:
            self.composed = compose_once(config)  # each point composed once for the checks and its job
        if self.helper is None:
            self.tracker.imported()
        # The modules imported so far (Hydra's; MLflow when this process logs) stay to the end: set aside from the
        # garbage collector, whose full collections scanned them again and again (2.3 s of a 48-point
        # sweep; given back at the end, `close`). The grid's composed configs,
        # made next and dropped job by job, are not set aside: they would never be collected.
        gc.freeze()
        if grid:
            wanted: dict = {}  # the model files ragexp serves for the jobs (ragexp.llm.served)
            workers = config.hydra.launcher.get("_target_") == JOBLIB_LAUNCHER
            invalid = invalid_points(config, each=(lambda job: wanted.update(wanted_by(job))) if workers else None)
            # (other sweepers choose points as they go: each job checks its own)
            if invalid:
                print(f"ragexp: error: {len(invalid)} of {len(grid_points(config))} grid points are invalid; "
                      "no job was started:\n  " + "\n  ".join(invalid), file=sys.stderr)
                sys.exit(2)
            try:
                serve_for_workers(wanted, Path(config.hydra.sweep.dir))  # one server per model file for all the workers, not one each
            except RagexpError as err:
                print(f"ragexp: error: {err}; no job was started", file=sys.stderr)
                sys.exit(2)
        if sweeper == RACING_SWEEPER:  # its settings, objective and rounds against the dataset (the sweeper checks again)
            from ragexp.sweep.racing.plan import planned

            try:
                planned(config)
            except RagexpError as err:
                print(f"ragexp: error: {err}; no job was started", file=sys.stderr)
                sys.exit(2)
        sweep_dir = Path(config.hydra.sweep.dir)
        sweep_dir.mkdir(parents=True, exist_ok=True)
        # as given (an ${oc.env:...} is not resolved), and with any credentials masked
        given = OmegaConf.to_container(config.hydra.overrides.task, resolve=False)
        overrides = scrub_url(" ".join(str(o) for o in given) if isinstance(given, list) else "")
        name = f"sweep {sweep_dir.parent.name}/{sweep_dir.name}"
        launcher = this_process()  # (its start time too: the next command tells a sweep gone from a live one)
        tags = {"sweep_dir": str(sweep_dir.resolve()), "sweep_overrides": overrides, "ragexp.pid": str(launcher["pid"]),
                "ragexp.process_started": str(launcher["started"])}
        opened = self.helper.open_sweep(self.tracker, name, tags) if self.helper is not None else None
        if opened is None:  # no helper (or it is gone): this process opens the store and logs its jobs
            self.helper = None
            self.parent_id, store = self.tracker.start_sweep(name=name, tags=tags), self.tracker.store()
        else:
            self.parent_id, store = opened["parent_id"], opened["store"]
        info = {"parent_run_id": self.parent_id, "swept": swept_keys(config), "tracking_uri": store}
        (sweep_dir / SWEEP_FILE).write_text(json.dumps(info, indent=2) + "\n")

    @not_a_warning()
    def on_job_end(self, config: DictConfig, job_return: Any = None, **kwargs: Any) -> None:
        """A finished job's two configs are let go: Hydra keeps every job's JobReturn to the sweep's
        end (about 0.3 MB a job), and only its status and return value are read after the job."""
        if job_return is not None:
            job_return.cfg = job_return.hydra_cfg = None

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            with not_a_warning():
                self.ended(config)
        finally:
            self.close()

    def close(self) -> None:
        """What the sweep holds let go, however it ended (idempotent): Hydra's composition as it was
        (ragexp.sweep.composed), its logging helper stopped (what it had not logged is logged when
        the sweep is run again, its jobs then served by the stage cache), and what `started` set
        aside from the garbage collector given back, as a process that goes on (a notebook, a test
        session) needs."""
        composed, self.composed = self.composed, None
        if composed is not None:
            composed.close()
        helper, self.helper = self.helper, None
        if helper is not None:
            helper.gone()
        gc.unfreeze()

    def where(self) -> str:
        """The store the sweep logs to, in words (said by its helper when it has one)."""
        return self.helper.where if self.helper is not None and self.helper.where else self.tracker.where()

    def ended(self, config: DictConfig) -> None:
        composed, self.composed = self.composed, None
        if composed is not None:
            composed.close()
        if self.helper is not None:
            self.record_not_logged(self.helper.finish(self.tracker))

        from ragexp.sweep.racing import report as racing

        sweep_dir = Path(config.hydra.sweep.dir)
        merged, failures = merged_results(sweep_dir)
        counts: dict[str, float] = counts_of(sweep_dir, failures)
        jobs = int(counts["jobs_total"])
        race = racing.read_state(sweep_dir)
        if race is not None:  # a racing sweep: each configuration's last round, its cost against the full grid's
            merged = racing.results(race)
            counts.update(racing.counts(race))
        if merged:
            (sweep_dir / "results.json").write_text(json.dumps(merged, indent=2) + "\n")
        parent_id = getattr(self, "parent_id", None)
        unlogged = [job_name(folder) for folder in not_logged(sweep_dir)] if parent_id else []
        closed = False
        if parent_id:
            try:
                close_parent(self.tracker, parent_id, merged, bool(failures), counts, unlogged)
                closed = True
            except Exception as err:  # noqa: BLE001 - recorded for the next command; the sweep exits 4
                why = f"{type(err).__name__}: {scrub_url(str(err)).splitlines()[0][:300] if str(err).strip() else ''}"
                record_end(sweep_dir, bool(failures), unlogged, why)
                print(f"ragexp: error: the sweep's run {parent_id} could not be ended in {self.where()} ({why}); the next "
                      f"command against that store ends it FAILED, tagged with the jobs not logged; `python -m ragexp.track "
                      f"{sweep_dir.resolve()}` logs them under it and ends it as this sweep would have", file=sys.stderr)
        if race is not None:  # its summary (the sweeper made its report from the run folders)
            self.race_summary(sweep_dir)
        if parent_id:
            if closed and not unlogged:
                view = sweep_leaderboard(self.tracker, parent_id, sweep_dir)
                if self.tracker.ui_link():
                    print(self.tracker.ui_link(view=view))
            elif race is None:  # the store does not hold every job: the leaderboard of the run folders
                folder_leaderboard(sweep_dir, failures)
        if failures or unlogged or (parent_id and not closed):
            if failures:
                print(f"\nfailed jobs ({len(failures)} of {jobs}):\n" + "\n".join(
                    f"  #{f.get('job')} {f['name']}: {f['reason']}" for f in failures), file=sys.stderr)
                print(f"ragexp: error: {len(failures)} of {jobs} jobs failed (listed in {sweep_dir / 'results.json'})",
                      file=sys.stderr)
            sys.exit(RUN_FAILED)
        failed = [name for name, values in merged.items() if values.get("gate_passed") == 0]
        if any(k.startswith(REGRESSION) for values in merged.values() for k in values):
            failed = regressions_across_jobs(merged, float(OmegaConf.select(config, "gate.alpha", default=0.05)))
        if failed:
            print(f"ragexp: error: quality gate failed in {len(failed)} of {len(merged)} jobs: {', '.join(failed)}",
                  file=sys.stderr)
            sys.exit(GATE_FAILED)

    def record_not_logged(self, failed: list[dict]) -> None:
        """Jobs whose folder the helper could not log (a store gone away): failed jobs of the sweep, as a
        job that could not log itself is (failure.json, the reason and the command that logs it later)."""
        for job in failed:
            folder = Path(job["folder"])
            reason = not_logged_reason(self.where(), job["kind"], str(job["error"]), folder)
            print(f"ragexp: error: job {job['job']} ({job['name']}) failed: {reason}", file=sys.stderr)
            record = {"name": job["name"], "job": job["job"], "reason": reason, "exit_code": RUN_FAILED, "not_logged": True}
            (folder / FAILURE_FILE).write_text(json.dumps(record, indent=2) + "\n")

    def race_summary(self, sweep_dir: Path) -> None:
        """A racing sweep's report (made by the sweeper: the race and the survivors' leaderboard, from
        the run folders; a leaderboard of the parent's child runs would mix the rounds) in the console:
        its summary (the cost and the final leaderboard)."""
        from ragexp.sweep.racing.report import summary

        race = sweep_dir / "report" / "race.md"
        if race.exists():
            print("\n" + summary(race.read_text(encoding="utf-8"), race))


REGRESSION = "regression_p_"  # a job's one-sided p-value of a metric against the gate's baseline (ragexp.metrics.gate)


def regressions_across_jobs(merged: dict[str, dict], alpha: float) -> list[str]:
    """The jobs that fail the gate when its regression check is corrected across the sweep: Holm
    over every job's metrics at once (a job's own gate corrected across its metrics only), and
    the jobs whose thresholds failed."""
    from ragexp.stats.inference import holm

    tests = [(name, key.removeprefix(REGRESSION), float(p)) for name, values in merged.items()
             for key, p in values.items() if key.startswith(REGRESSION)]
    adjusted = holm([p for _, _, p in tests])
    worse: dict[str, list[str]] = {}
    for (name, metric, _), a in zip(tests, adjusted):
        if a < alpha:
            worse.setdefault(name, []).append(f"{metric} (Holm {a:.3g})")
    jobs = len({name for name, _, _ in tests})
    print(f"regression against the gate's baseline, Holm across {jobs} jobs x their metrics ({len(tests)} tests, "
          f"alpha {alpha:g}): " + ("; ".join(f"{n}: {', '.join(m)}" for n, m in worse.items()) or "no job significantly worse"))
    thresholds = {name for name, values in merged.items() if values.get("gate_thresholds_passed") == 0}
    return [name for name in merged if name in worse or name in thresholds]

