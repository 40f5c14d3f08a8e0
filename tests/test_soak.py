"""Soak: a joblib sweep of 6 jobs x 100 questions in 4 processes, logging to one real `mlflow
server`, through an endpoint that gives 30% of its chat requests a random fault (seeded), with one
job's process killed (SIGKILL) mid-run and the same command started again. Afterwards: every
question of every job is judged or failed with a reason, every child run is closed with the
status its job earned (none left RUNNING: a run the killed sweep left open is KILLED, resumed by
the new sweep), and the requests the endpoint saw while the resumed sweep ran are exactly the
ones its jobs' counters report (llm_requests + llm_retries)."""
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from conftest import cli_env, llm_args, mlflow_server
from openai_server import OpenAIServer

pytestmark = pytest.mark.process
QUESTIONS, DOCS = 100, 40
SWEEP = ["judge.temperature=0,0.5,1", "retriever.top_k=3,5"]  # 6 jobs; the top_k pairs differ in their answers
JOBS = 6
SEED = 11
KILL_AFTER = 60
TOPICS = ["ports", "tokens", "backups", "quotas", "webhooks", "replicas", "indexes", "snapshots", "queues", "keys"]


def write_dataset(folder: Path) -> Path:
    """A JSON-lines dataset of DOCS documents and QUESTIONS questions (each about one document)."""
    folder.mkdir()
    docs = [{"doc_id": f"d{n}", "text": f"Service {n} keeps its {TOPICS[n % 10]} for {n + 3} days. "
             f"Its {TOPICS[(n + 3) % 10]} are checked every {n % 7 + 1} hours. Operators of service {n} "
             f"rotate {TOPICS[(n + 5) % 10]} weekly."} for n in range(DOCS)]
    questions = [{"id": f"q{n}", "question": f"How long does service {n % DOCS} keep its {TOPICS[n % DOCS % 10]}"
                  + ("?" if n < DOCS else f" (variant {n // DOCS})?"),
                  "answer": f"{n % DOCS + 3} days", "golden_docs": [f"d{n % DOCS}"], "answerable": True}
                 for n in range(QUESTIONS)]
    for name, rows in (("corpus.jsonl", docs), ("questions.jsonl", questions)):
        (folder / name).write_text("".join(json.dumps(row) + "\n" for row in rows))
    return folder


def loky_workers(parent: int) -> list[int]:
    """The joblib (loky) worker processes under `parent`: the processes that run the sweep's jobs."""
    workers = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and "loky" in cmdline and "resource_tracker" not in cmdline:
            workers.append(int(proc.name))
    return workers


def cpu_ticks(pid: int) -> int:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])  # utime + stime
    except (OSError, IndexError, ValueError):
        return -1


def busiest(workers: list[int]) -> int | None:
    """The worker that used the most CPU over half a second: one running a job, not an idle one."""
    before = {pid: cpu_ticks(pid) for pid in workers}
    time.sleep(0.5)
    used = {pid: cpu_ticks(pid) - before[pid] for pid in workers if before[pid] >= 0}
    pid = max(used, key=lambda p: used[p], default=None)
    return pid if pid is not None and used[pid] > 0 else None


def session_processes(sid: int) -> list[int]:
    """The processes of the session `sid` still alive (a sweep started with start_new_session)."""
    alive = []
    for proc in Path("/proc").iterdir():
        try:
            fields = (proc / "stat").read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if proc.name.isdigit() and int(fields[3]) == sid and fields[0] != "Z":
            alive.append(int(proc.name))
    return alive


def finished_children(url: str) -> int:
    """Child runs the store at `url` holds as FINISHED (0 while the experiment does not exist)."""
    import mlflow

    client = mlflow.MlflowClient(url)
    experiment = client.get_experiment_by_name("ragexp")
    if experiment is None:
        return 0
    runs = client.search_runs([experiment.experiment_id], "attributes.status = 'FINISHED'")
    return sum("mlflow.parentRunId" in r.data.tags for r in runs)


def run_sweep(args: list[str], cwd: Path, log: Path, llm: OpenAIServer, store: str | None = None) -> tuple[int, int | None]:
    """The sweep as a command. With `store` (the MLflow URL), once a job's child run is FINISHED
    there and the endpoint has answered KILL_AFTER more chat requests (the next jobs are mid-run),
    the worker busiest running a job is SIGKILLed. Returns the exit status and the pid killed; no
    process of the sweep outlives it."""
    with log.open("w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "ragexp", *args], cwd=cwd, env=cli_env({"RAGEXP_TEST_LLM_KEY": "k"}),
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        killed, finished_at = None, None
        try:
            deadline = time.monotonic() + 300
            while store and proc.poll() is None and time.monotonic() < deadline:
                if finished_at is None and list(cwd.glob("multirun/*/*/*/results.json")) and finished_children(store):
                    finished_at = len(llm.chat_requests())
                workers = loky_workers(proc.pid)
                if finished_at is not None and len(llm.chat_requests()) >= finished_at + KILL_AFTER and workers:
                    killed = busiest(workers)
                    if killed is not None:
                        os.kill(killed, signal.SIGKILL)
                        break
                time.sleep(0.2)
            code = proc.wait(timeout=600)
            deadline = time.monotonic() + 60
            while session_processes(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not session_processes(proc.pid), "a worker of the sweep outlived it"
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return code, killed


def test_a_parallel_sweep_through_faults_and_a_kill_accounts_for_every_question_run_and_request(tmp_path):
    data = write_dataset(tmp_path / "data")
    work = tmp_path / "work"
    work.mkdir()
    with mlflow_server(f"sqlite:///{tmp_path / 'server' / 'store.db'}", tmp_path / "server") as url, \
            OpenAIServer(fault_rate=0.3, seed=SEED) as llm:
        llm.timeout_sleep = 1.5  # a hang: past the client's 1 s timeout
        args = ["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=4", *SWEEP, "dataset=jsonl", f"dataset.path={data}",
                *llm_args(llm, **{"judge.endpoint.timeout_s": 1, "generator.endpoint.timeout_s": 1,
                                  "judge.endpoint.max_retries": 3, "generator.endpoint.max_retries": 3,
                                  "judge.endpoint.max_concurrency": 4, "generator.endpoint.max_concurrency": 4}),
                "max_failed_share=1", f"tracker.tracking_uri={url}"]
        first_code, killed = run_sweep(args, work, tmp_path / "first.log", llm, store=url)
        assert killed is not None, (tmp_path / "first.log").read_text()[-3000:]
        while llm.in_flight:  # the killed sweep's last requests are answered before the resumed sweep starts
            time.sleep(0.05)
        before = len(llm.chat_requests())
        second_code, _ = run_sweep(args, work, tmp_path / "second.log", llm)
        seen = len(llm.chat_requests()) - before
        injected = dict(llm.injected)

        assert first_code != 0, "a sweep that lost a job's process says so"
        assert second_code == 0, (tmp_path / "second.log").read_text()[-3000:]
        first_sweep, second_sweep = sorted(work.glob("multirun/*/*"))
        merged = json.loads((second_sweep / "results.json").read_text())
        assert len(merged) == JOBS and not any("status" in r for r in merged.values())

        import mlflow

        mlflow.set_tracking_uri(url)  # MlflowClient.load_table reads the global store
        client = mlflow.MlflowClient(url)
        runs = client.search_runs([client.get_experiment_by_name("ragexp").experiment_id])
        sweeps = {r.data.tags["sweep_dir"]: r for r in runs if r.data.tags.get("ragexp.role") == "sweep"}
        dead, parent = sweeps[str(first_sweep.resolve())], sweeps[str(second_sweep.resolve())]
        assert dead.info.status == "KILLED" and dead.data.tags["ragexp.resumed_by"] == parent.info.run_id
        assert parent.info.status == "FINISHED"
        assert parent.data.metrics == {"jobs_total": JOBS, "jobs_ok": JOBS, "jobs_failed": 0}
        assert not [r for r in runs if r.info.status == "RUNNING"], "every run is closed"
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        assert sorted(c.info.run_name for c in children) == sorted(merged)
        first_children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == dead.info.run_id]
        finished_first = {k: v for p in first_sweep.glob("*/results.json") for k, v in json.loads(p.read_text()).items()}
        first_folders = {k: p.parent for p in first_sweep.glob("*/results.json") for k in json.loads(p.read_text())}
        assert 1 <= len(finished_first) < JOBS, "the kill landed after a job had finished and before the last"
        logged_first = {c.info.run_name for c in first_children if c.info.status == "FINISHED"}
        assert logged_first and logged_first <= set(finished_first), [(c.info.run_name, c.info.status) for c in first_children]
        # a job killed while it was being logged left its run RUNNING: the resumed sweep closed it
        assert all(c.info.status == "KILLED" for c in first_children if c.info.run_name not in logged_first), \
            [(c.info.run_name, c.info.status, c.data.tags.get("ragexp.job_pid")) for c in first_children]

        statuses, reasons, partial = Counter(), Counter(), 0
        for child in children:
            assert child.info.status == "FINISHED"
            table = client.load_table(child.info.experiment_id, "questions.json", run_ids=[child.info.run_id])
            assert len(table) == QUESTIONS
            assert set(table["status"]) <= {"judged", "failed"}
            failed = table[table["status"] == "failed"]
            assert (failed["failure_reason"].str.len() > 0).all()
            judged = table[table["status"] == "judged"]
            assert judged["faithfulness"].dropna().between(1, 10).all()
            if judged["faithfulness"].isna().any():  # a reply unreadable twice: that metric failed, and says why
                assert judged[judged["faithfulness"].isna()]["failed_criteria"].str.contains("faithfulness").all()
            assert child.data.metrics["failed_questions"] == len(failed)
            statuses.update(table["status"])
            reasons.update(re.sub(r"\d+", "N", r)[:60] for r in failed["failure_reason"])
            before_kill = finished_first.get(child.info.run_name)
            if before_kill:  # finished before the kill: every whole judgement it made comes from the cache
                judged_before = before_kill["total_questions"] - before_kill["failed_questions"]
                partly = partly_judged(first_folders[child.info.run_name])  # a metric failed: not cached, asked again
                assert child.data.metrics.get("work_judgements_cached", 0) == judged_before - partly
            else:
                partial += int(child.data.metrics.get("work_judgements_cached", 0))
        assert partial > 0, "the jobs cut short by the kill resumed from what they had judged"
        counted = sum(r["llm_requests"] + r["llm_retries"] for r in merged.values())
        assert seen == counted, (seen, {n: (r["llm_requests"], r["llm_retries"]) for n, r in merged.items()})
    print(f"\nsoak: killed pid {killed} mid-run (first sweep exit {first_code}, "
          f"{len(finished_first)} jobs finished before it ({len(logged_first)} logged), {partial} judgements of the cut-short jobs kept); first sweep {before} chat requests, "
          f"resumed sweep {seen} = counters {counted}; injected {injected}; questions {dict(statuses)}; "
          f"failed by reason {dict(reasons)}")


def partly_judged(folder) -> int:
    """The judged questions of a run folder in which some metric failed (`failed_criteria`)."""
    table = json.loads((folder / "questions.json").read_text())
    if "failed_criteria" not in table["columns"]:
        return 0
    column, status = table["columns"].index("failed_criteria"), table["columns"].index("status")
    return sum(1 for row in table["data"] if row[status] == "judged" and row[column])
