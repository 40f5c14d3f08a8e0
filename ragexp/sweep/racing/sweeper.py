"""The racing sweeper: `python -m ragexp -m hydra/sweeper=racing retriever=bm25,dense retriever.top_k=3,5,10`.

Each round runs the surviving configurations on the round's questions (`question_sample.size` =
the round's size, one seed, so every round's questions contain the last round's), through the
configured launcher (basic, joblib, Ray, SLURM: Hydra's `launcher.launch`), reads each job's run
folder and drops what `ragexp.sweep.racing.decide` finds significantly worse than the round's best.
When one configuration is left, the rounds between are skipped: it runs on every question. The
stage cache makes a survivor's next round compute only its new questions' answers and judgements.

The race's state is `racing.json` in the sweep folder, written before and after every round: run
the same command with `hydra.sweep.dir=<that folder>` after a kill and the jobs that finished
are read from their folders, not run again (the decisions are recomputed from them, the same)."""
from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from hydra.plugins.sweeper import Sweeper

log = logging.getLogger("ragexp")

STATE = "racing.json"


class RacingSweeper(Sweeper):
    """Hydra instantiates it from conf/hydra/sweeper/racing.yaml; the settings are read (and
    checked, with the grid, the objective and the dataset: ragexp.sweep.racing.plan) from that config."""

    def __init__(self, params: dict[str, str] | None, **settings: Any):
        self.params = params or {}
        self.settings = settings
        self.config: Any = None
        self.launcher: Any = None
        self.hydra_context: Any = None

    def setup(self, *, hydra_context, task_function, config) -> None:
        from hydra.core.plugins import Plugins

        self.hydra_context, self.config = hydra_context, config
        self.launcher = Plugins.instance().instantiate_launcher(hydra_context=hydra_context,
                                                                task_function=task_function, config=config)

    def sweep(self, arguments: list[str]) -> Any:
        from ragexp.sweep.racing.plan import planned

        race = Race(planned(self.config, keep=False), self.config, self.launcher, self.hydra_context.config_loader)
        return race.run()


class Race:
    def __init__(self, plan, config, launcher, loader):
        self.plan, self.config, self.launcher, self.loader = plan, config, launcher, loader
        self.sweep_dir = Path(str(config.hydra.sweep.dir))
        self.rounds: list[dict] = []
        self.returns: list = []

    def run(self) -> list:
        from omegaconf import OmegaConf

        from ragexp.sweep.racing.decide import DROPPED, decide
        from ragexp.sweep.racing.jobs import Job, job_folder, read_outcome, round_overrides
        from ragexp.sweep.racing.report import write_report

        plan, settings = self.plan, self.plan.settings
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        OmegaConf.save(self.config, self.sweep_dir / "multirun.yaml")
        resumed = self.resume_check()
        print(f"racing {len(plan.points)} configurations in rounds of {', '.join(map(str, plan.sizes))} of "
              f"{plan.total} questions ({settings.objective}, {'max' if settings.maximize else 'min'}imised; "
              f"sweep folder {self.sweep_dir}; each round tests at {plan.round_alpha:.3g}, control={settings.control})" + (": resumed, finished jobs are read from their folders" if resumed else ""))
        for note in plan.notes:
            print(f"  note: {note}")
        survivors, number, step = list(range(len(plan.points))), 0, 0
        while step < len(plan.sizes):
            index, size, final = len(self.rounds) + 1, plan.sizes[step], step == len(plan.sizes) - 1
            jobs = [Job(c, plan.names[c], index, size, number + i,
                        round_overrides(plan.points[c], size, plan.sample_seed)) for i, c in enumerate(survivors)]
            number += len(jobs)
            for job in jobs:
                job.folder = job_folder(self.loader, self.config, job.overrides, job.number)
            self.rounds.append({"round": index, "questions": size, "jobs": jobs, "decisions": []})
            self.save()
            self.tag(jobs)
            reused = self.launch(jobs)
            for job in jobs:
                read_outcome(job)
            ran = {j.config: j.run for j in jobs if j.status == "ok" and j.run is not None}
            decisions = decide(ran, {c: plan.names[c] for c in ran}, settings.objective, settings.maximize,
                               plan.round_alpha, settings.keep_top, settings.resamples, settings.seed,
                               min_expensive=settings.min_expensive) if ran else []
            if final:  # the last round drops nothing: its ranking is the final leaderboard's
                for d in decisions:
                    d.verdict = "worse than the best" if d.verdict == DROPPED else d.verdict
            self.rounds[-1].update(decisions=decisions, reused=reused)
            self.save()
            dropped = [d for d in decisions if d.verdict == DROPPED]
            failed = [j for j in jobs if j.status == "failed"]
            of = f"/{len(plan.sizes)}" if index == step + 1 else ", the last,"
            print(f"round {index}{of} ({size} questions): {len(jobs)} ran"
                  + (f" ({reused} read from a finished job)" if reused else "")
                  + f", {len(dropped)} dropped" + (f", {len(failed)} failed" if failed else ""))
            for d in dropped:
                print(f"  dropped {d.name}: {d.estimate:.3f} vs {d.against} (difference {d.difference:+.3f} "
                      f"[{d.low:+.3f}, {d.high:+.3f}], p_holm={d.p_holm:.3g})")
            survivors = [d.config for d in decisions if d.verdict != DROPPED]
            if not survivors:
                break
            if len(survivors) == 1 and not final:  # nothing left to race: the winner runs on every question
                print(f"  one configuration left, {plan.names[survivors[0]]}: it runs on all {plan.total} questions")
                step = len(plan.sizes) - 1
            else:
                step += 1
        self.save(finished=True)
        write_report(self.sweep_dir)
        return self.returns

    def resume_check(self) -> bool:
        """A racing.json already in the sweep folder: the same race resumes; another race is an error."""
        from ragexp.errors import RagexpError

        path = self.sweep_dir / STATE
        if not path.exists():
            return False
        try:
            before = json.loads(path.read_text()).get("definition")
        except (OSError, json.JSONDecodeError):
            before = None
        if before != json.loads(json.dumps(self.plan.definition())):
            raise RagexpError(f"hydra.sweep.dir={self.sweep_dir} holds another race ({path}: other configurations, "
                              "settings or dataset); resume a race with its own command line, or choose a new folder")
        return True

    def launch(self, jobs: list) -> int:
        """Runs the jobs that have not finished already (a resumed race), in runs of consecutive job
        numbers (as Hydra numbers a launch), at most max_batch_size at a time; returns how many were
        read instead of run."""
        from hydra.core.utils import JobStatus

        from ragexp.sweep.racing.jobs import finished

        todo = [j for j in jobs if not finished(j)]
        batch_size = self.plan.settings.max_batch_size or len(todo) or 1
        batches: list[list] = []
        for job in todo:
            if batches and batches[-1][-1].number == job.number - 1 and len(batches[-1]) < batch_size:
                batches[-1].append(job)
            else:
                batches.append([job])
        for batch in batches:
            results = self.launcher.launch([j.overrides for j in batch], initial_job_idx=batch[0].number)
            self.returns.append(results)
            for job, result in zip(batch, results):
                if result.status == JobStatus.FAILED:
                    error = result._return_value
                    job.reason = f"the job raised {type(error).__name__}: {error}".splitlines()[0]
        return len(jobs) - len(todo)

    def tag(self, jobs: list) -> None:
        """Each job's round and question count, where the job finds them (sweep.json: ragexp.run.app)."""
        from ragexp.store.run_folder import SWEEP_FILE, read_sweep

        info = read_sweep(self.sweep_dir)
        info.setdefault("job_tags", {}).update({str(j.number): j.tags() for j in jobs})
        write_atomic(self.sweep_dir / SWEEP_FILE, info)

    def save(self, finished: bool = False) -> None:
        state = {"definition": self.plan.definition(), "names": self.plan.names, "total": self.plan.total,
                 "sizes": self.plan.sizes, "round_alpha": self.plan.round_alpha,
                 "any_round_rate": self.plan.any_round_rate, "notes": self.plan.notes, "finished": finished,
                 "rounds": [{**r, "jobs": [j.record() for j in r["jobs"]],
                             "decisions": [d.record() for d in r["decisions"]]} for r in self.rounds]}
        write_atomic(self.sweep_dir / STATE, state)


def write_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)
