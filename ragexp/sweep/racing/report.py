"""The race in the sweep's report: `report/race.md` and `race.json` (every round, every decision
with its test, the dropped configurations' partial scores, the failed jobs, the cost against the
full grid's) and the final leaderboard of the survivors on every question, with CIs
(`report/report.md|html`, made by ragexp.compare from the last round's run folders)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from ragexp.store.run_folder import RUN_META
from ragexp.sweep.racing.jobs import read_run
from ragexp.store.reader import Selection

STATE = "racing.json"
CAVEAT = ("Racing can drop a configuration that would have been close to the best on the full set: a drop "
          "says it was significantly worse than the round's best on that round's questions, not on all of them. "
          "`alpha` bounds the chance of dropping one that is truly as good as the best (over the whole race with "
          "control=race, in each round with control=round), under a normal approximation and taking the round's "
          "best as given. It is chosen on the same questions it is tested on: each configuration as good as the "
          "best is dropped in a round with chance near or below alpha/2, but among many equally good ones the "
          "chance that some one is dropped is well above alpha (about 0.2 in a round for 24, simulated; see "
          "docs/how-to/racing.md). A configuration a little worse than the best on the full set may well be dropped. "
          "`hydra.sweeper.keep_top=N` keeps the best N of every round regardless of the tests; the dropped "
          "configurations' partial scores are listed above and their run folders (and child runs) stay.")


def read_state(sweep_dir: Path) -> dict | None:
    path = Path(sweep_dir) / STATE
    try:
        return json.loads(path.read_text()) if path.exists() else None
    except (OSError, json.JSONDecodeError):
        return None


def job_meta(folder: str | None) -> dict:
    path = Path(folder) / RUN_META if folder else None
    try:
        return json.loads(path.read_text()) if path is not None and path.exists() else {}
    except (OSError, json.JSONDecodeError):
        return {}


def job_results(folder: str | None) -> tuple[str | None, dict]:
    """The job's run name and aggregates (its results.json), or (None, {})."""
    path = Path(folder) / "results.json" if folder else None
    try:
        [(name, values)] = json.loads(path.read_text()).items() if path is not None and path.exists() else [(None, {})]
        return name, values
    except (OSError, ValueError):
        return None, {}


def counts(state: dict) -> dict[str, float]:
    """The race's cost against the full grid's (each configuration on every question): logged on the
    sweep's parent run. A question evaluation is one configuration answering and judging one
    question; the rounds are nested and cached, so a configuration's evaluations are its last round's
    size. Work counters and LLM requests are summed over the jobs' run.json / results.json."""
    jobs = [j for r in state["rounds"] for j in r["jobs"]]
    configurations, total = len(state["definition"]["points"]), state["total"]
    reached: dict[int, int] = {}
    for job in jobs:
        reached[job["config"]] = max(reached.get(job["config"], 0), job["questions"])
    evaluations = sum(reached.values())
    full = configurations * total
    last = state["rounds"][-1] if state["rounds"] else {"decisions": []}
    dropped = sum(1 for r in state["rounds"] for d in r["decisions"] if d["verdict"] == "dropped")
    failed = sum(1 for j in jobs if j["status"] == "failed")
    work = {"answers_computed": 0, "judgements_computed": 0, "answers_cached": 0, "judgements_cached": 0}
    llm = {"llm_requests": 0.0, "cost_usd": 0.0}
    cost_per_config: dict[int, float] = {}
    for job in jobs:
        meta, (_, values) = job_meta(job["folder"]), job_results(job["folder"])
        for key in work:
            work[key] += int((meta.get("work") or {}).get(key, 0))
        llm["llm_requests"] += float(values.get("llm_requests", 0) or 0)
        cost = sum(float(v) for k, v in values.items() if k.endswith("_cost_usd") and isinstance(v, (int, float)))
        llm["cost_usd"] += cost
        cost_per_config[job["config"]] = cost_per_config.get(job["config"], 0.0) + cost
    # the full grid's cost, estimated: each configuration's cost per evaluated question, on every question
    full_cost = sum(cost / reached[c] * total for c, cost in cost_per_config.items() if reached.get(c))
    return {
        "racing_configurations": configurations, "racing_rounds": len(state["rounds"]),
        "racing_jobs": len(jobs), "racing_full_grid_jobs": configurations,
        "racing_question_evaluations": evaluations, "racing_full_grid_question_evaluations": full,
        "racing_question_share": round(evaluations / full, 4) if full else math.nan,
        "racing_survivors": sum(1 for d in last["decisions"] if d["verdict"] != "dropped") if state.get("finished") else 0,
        "racing_dropped": dropped, "racing_failed_jobs": failed,
        "racing_answers_computed": work["answers_computed"], "racing_judgements_computed": work["judgements_computed"],
        "racing_answers_cached": work["answers_cached"], "racing_judgements_cached": work["judgements_cached"],
        "racing_llm_requests": llm["llm_requests"], "racing_cost_usd": round(llm["cost_usd"], 6),
        "racing_full_grid_cost_usd_estimated": round(full_cost, 6),
    }


def results(state: dict) -> dict:
    """The sweep's merged results.json for a race: each configuration's results from the last round
    it ran in, with its race status (survivor, dropped in round r, failed in round r)."""
    merged: dict = {}
    for r in state["rounds"]:
        verdicts = {d["config"]: d for d in r["decisions"]}
        for job in r["jobs"]:
            name, values = job_results(job["folder"])
            name = name or job["name"]
            decision = verdicts.get(job["config"])
            status = ("failed" if job["status"] == "failed" else
                      f"dropped in round {r['round']}" if decision and decision["verdict"] == "dropped" else "survivor")
            entry = {**values, "racing_round": r["round"], "racing_questions": r["questions"], "racing_status": status}
            if job["status"] == "failed":
                entry.update(status="failed", failure_reason=job["reason"])
            merged[name] = entry
    return merged


def fmt(value) -> str:
    from ragexp.compare.report import fmt as fmt_number

    return "—" if value is None else fmt_number(float(value))


def fmt_p(value) -> str:
    from ragexp.compare.report import fmt_p as fmt_p_value

    return fmt_p_value(math.nan if value is None else float(value))


def race_tables(state: dict) -> list[tuple[str, str]]:
    """(heading, markdown) blocks: the rounds, every decision, the dropped configurations, failed jobs."""
    from ragexp.compare.report import Table

    rounds = Table(["round", "questions", "configurations run", "read from a finished job", "dropped", "failed"], [
        [str(r["round"]), str(r["questions"]), str(len(r["jobs"])), str(r.get("reused", 0)),
         str(sum(d["verdict"] == "dropped" for d in r["decisions"])), str(sum(j["status"] == "failed" for j in r["jobs"]))]
        for r in state["rounds"]])
    blocks = [("Rounds", rounds.markdown())]
    for r in state["rounds"]:  # the decisions of each round under its own heading
        dropped_here = sum(d["verdict"] == "dropped" for d in r["decisions"])
        decisions = Table(["rank", "configuration", "objective", "verdict", "against", "difference [95% CI]",
                           "effect size d_z", "p", "p (Holm)", "questions"], [
            [str(d["rank"]), d["name"], fmt(d["estimate"]), d["verdict"], d["against"] or "—",
             "—" if d["difference"] is None else f"{fmt(d['difference'])} [{fmt(d['low'])}, {fmt(d['high'])}]",
             fmt(d["effect_size"]), fmt_p(d["p_value"]), fmt_p(d["p_holm"]), str(d["questions"] or r["questions"])]
            for d in r["decisions"]])
        blocks.append((f"Decisions of round {r['round']} ({r['questions']} questions): {len(r['jobs'])} ran, "
                       f"{dropped_here} dropped", decisions.markdown()))
    dropped = [(r, d) for r in state["rounds"] for d in r["decisions"] if d["verdict"] == "dropped"]
    if dropped:
        rows = []
        for r, d in dropped:
            job = next(j for j in r["jobs"] if j["config"] == d["config"])
            rows.append([d["name"], str(r["round"]), str(r["questions"]), partial_score(job, state), d["against"],
                         fmt_p(d["p_holm"]), f"`{job['folder']}`"])
        blocks.append(("Dropped configurations: their partial scores", Table(
            ["configuration", "dropped in round", "questions", "objective [95% CI] on them", "against", "p (Holm)",
             "run folder"], rows).markdown()))
    failed = [(r, j) for r in state["rounds"] for j in r["jobs"] if j["status"] == "failed"]
    if failed:
        blocks.append(("Failed jobs (not dropped as worse: they did not finish)", Table(
            ["round", "configuration", "job", "reason"],
            [[str(r["round"]), j["name"], str(j["job"]), j["reason"]] for r, j in failed]).markdown()))
    return blocks


def partial_score(job: dict, state: dict) -> str:
    """A dropped configuration's objective on the questions it ran, with its bootstrap CI."""
    from ragexp.compare.report import fmt_ci
    from ragexp.stats.inference import bootstrap_ci
    from ragexp.sweep.racing.decide import objective_spec

    settings = state["definition"]["settings"]
    try:
        run = read_run(Path(job["folder"]), str(job["job"]))
        spec = objective_spec(run, settings["objective"])
        if spec is None:
            return "—"
        x = spec.matrix(run.table)
        ci = bootstrap_ci(x, spec.statistic(len(x)), settings["resamples"], settings["seed"])
        return fmt_ci(ci)
    except Exception:  # noqa: BLE001 - the report lists what it can
        return "—"


def final_runs(state: dict, run_id=lambda job: str(job["job"])) -> list:
    """The last round's finished runs (the survivors on every question), each with the id `run_id`
    gives its job (its number; a job without one is left out)."""
    if not state["rounds"] or state["rounds"][-1]["questions"] != state["total"]:
        return []
    return [read_run(Path(j["folder"]), run_id(j)) for j in state["rounds"][-1]["jobs"]
            if j["status"] == "ok" and run_id(j)]


def write_report(sweep_dir: Path) -> dict[str, Path]:
    """report/race.md, report/race.json and, when a configuration reached the full set, the
    comparison report of the survivors (report/report.md|html|leaderboard.json)."""
    state = read_state(sweep_dir)
    if state is None:
        return {}
    folder = Path(sweep_dir) / "report"
    folder.mkdir(parents=True, exist_ok=True)
    settings = state["definition"]["settings"]
    figures = counts(state)
    lines = [f"# Racing sweep: {figures['racing_configurations']} configurations, {len(state['rounds'])} rounds",
             "",
             f"Objective `{settings['objective']}` ({'maximised' if settings['maximize'] else 'minimised'}), rounds of "
             f"{', '.join(map(str, state['sizes']))} of {state['total']} questions (nested samples, question_sample "
             f"seed {state['definition']['sample_seed']}). After each round but the last, each configuration is "
             f"compared with the round's best on the same questions: a paired permutation test of the difference "
             f"in the objective ({settings['resamples']} resamples, seed {settings['seed']}), the round's p-values "
             f"Holm-corrected together; dropped when the corrected p < {round_level_text(state)} and not among the "
             f"best {settings['keep_top']} (keep_top). Effect size: the difference with its paired bootstrap 95% CI, "
             f"and Cohen's d_z of the per-question values.",
             "",
             f"Cost: **{figures['racing_question_evaluations']} question evaluations of the full grid's "
             f"{figures['racing_full_grid_question_evaluations']} ({figures['racing_question_share']:.1%})**, "
             f"{figures['racing_jobs']} jobs (full grid: {figures['racing_full_grid_jobs']}), "
             f"{figures['racing_judgements_computed']} judgements computed ({figures['racing_judgements_cached']} "
             f"served by the stage cache), {figures['racing_llm_requests']:.0f} LLM requests, "
             f"${figures['racing_cost_usd']:.4f} (full grid, estimated: ${figures['racing_full_grid_cost_usd_estimated']:.4f}).",
             ""]
    lines += [f"Note: {note}" for note in state.get("notes", [])]
    if not state.get("finished"):
        lines.append("**INCOMPLETE race**: the sweep stopped before its last round; run the same command with "
                     f"`hydra.sweep.dir={sweep_dir}` to resume it.")
    for heading, table in race_tables(state):
        lines += ["", f"## {heading}", "", table]
    files = {"race": folder / "race.md", "race_json": folder / "race.json"}
    runs = final_runs(state)
    if runs:
        files.update(final_leaderboard(runs, settings, folder, lines))
    lines += ["", "## Caveat", "", CAVEAT, ""]
    files["race"].write_text("\n".join(lines), encoding="utf-8")
    files["race_json"].write_text(json.dumps({"counts": figures, **state}, indent=2, default=str) + "\n")
    return files


def round_level_text(state: dict) -> str:
    """The level the rounds tested at, and what it means over the whole race."""
    settings = state["definition"]["settings"]
    alpha, level = settings["alpha"], state.get("round_alpha", settings["alpha"])
    rounds = max(len(state["sizes"]) - 1, 1)
    rate = state.get("any_round_rate")
    if settings.get("control", "round") == "round":
        added = (f": for a configuration exactly as good as the best, tested alone, the chance of a drop in at least "
                 f"one of the {rounds} dropping rounds is up to {rate:.2f} (normal approximation); control=race holds "
                 f"the whole race to alpha") if rate is not None and rounds > 1 else ""
        return f"{alpha} (alpha, in each round: control=round{added})"
    return (f"{level:.4g} in every round: the level that keeps the chance of any wrong drop over all {rounds} dropping "
            f"rounds at alpha={alpha} (control=race: a group-sequential, Pocock-type bound for rounds on nested samples, "
            f"with Holm's correction inside each round)")


def final_board(runs: list, settings: dict):
    """The survivors compared on every question (ragexp.compare: CIs, paired tests with Holm): the
    report's final leaderboard, and the places on the survivors' runs (`ragexp.sweep.ending`)."""
    from ragexp.compare import leaderboard

    selection = Selection(tracking_uri="", experiment="racing", runs=runs)
    return leaderboard.build(selection, settings["objective"], settings["maximize"], alpha=settings["alpha"],
                             resamples=settings["resamples"], seed=settings["seed"])


def out_of_the_race(state: dict) -> list[tuple[dict, str]]:
    """Each configuration that did not run to the end: its last job, with the verdict that says so
    (`dropped after round 1 (20 of 40 questions): worse than NAME, p (Holm) 0.003`, or `failed in
    round 2 (40 of 40 questions)`). It has no place on the final leaderboard: it was not compared on
    every question."""
    last: dict[int, tuple[dict, dict]] = {}
    for r in state["rounds"]:
        for job in r["jobs"]:
            last[job["config"]] = (r, job)
    out = []
    for r, job in last.values():
        of = f"({r['questions']} of {state['total']} questions)"
        decision = next((d for d in r["decisions"] if d["config"] == job["config"]), None)
        if job["status"] == "failed":
            out.append((job, f"failed in round {r['round']} {of}"))
        elif decision is not None and decision["verdict"] == "dropped":
            out.append((job, f"dropped after round {r['round']} {of}: worse than {decision['against']}, "
                             f"p (Holm) {fmt_p(decision['p_holm'])}"))
    return out


def final_leaderboard(runs: list, settings: dict, folder: Path, lines: list[str]) -> dict[str, Path]:
    """The survivors compared on every question, in the report."""
    from ragexp.compare import report

    board = final_board(runs, settings)
    written = report.write(board, folder, with_plots=True)
    who = f"the {len(runs)} survivors" if len(runs) > 1 else "the one survivor"
    lines += ["", f"## Final leaderboard: {who} on every question ({board.level:.0%} CIs)", "",
              report.leaderboard_table(board).markdown(), "", f"(full comparison: `{written['html']}`)"]
    return written


def summary(race_md: str, path: Path) -> str:
    """What the console shows of a race's report: its opening (the race and its cost), the final
    leaderboard, and where the rest is (every round's decisions, the dropped, the caveat)."""
    opening, *sections = race_md.split("\n## ")
    final = [f"## {s.rstrip()}" for s in sections if s.startswith("Final")]
    return "\n\n".join([opening.rstrip(), *final, f"(every round's decisions, the dropped configurations and the "
                                                     f"caveat: {path})"])
