"""`python -m ragexp.ui`: MLflow's UI over the runs' store, started light, and the link to the last
run or sweep.

On a local store (`sqlite:///mlflow.db`, the default run's, or a folder of runs) it starts `mlflow
server` on 127.0.0.1 with one worker and MLflow's job runner off (MLFLOW_SERVER_ENABLE_JOB_EXECUTION=
false; `mlflow ui` as MLflow starts it runs four workers and a job runner, and answered after minutes
on a busy laptop), waits until it answers, prints the link to the last run (its questions) or sweep
(its runs), and serves until Ctrl-C. A tracking server (http://, https://) serves its own UI: the link
is printed and nothing is started."""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

from ragexp.base.redact import scrub_url
from ragexp.config.cli_settings import parse_args
from ragexp.errors import RagexpError

LOCAL_STORE = "sqlite:///mlflow.db"  # where `python -m ragexp` logs by default, in the folder it runs in


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ragexp.ui", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    p.add_argument("--tracking-uri", help=f"MLflow store (default: $MLFLOW_TRACKING_URI, else {LOCAL_STORE} here)")
    p.add_argument("--experiment", default="ragexp", help="MLflow experiment whose last run or sweep to open (default ragexp)")
    p.add_argument("--port", type=int, default=5000, help="port of the UI on 127.0.0.1 (default 5000)")
    return p


def last_link(uri: str, experiment: str, address: str) -> str:
    """The address of the experiment's last run (its questions) or sweep (its runs), at `address`
    (the UI's http://host:port); the experiment's runs when it has no run yet."""
    import mlflow

    from ragexp.store.ui_links import SHARED_VIEW, page

    from ragexp.store.sqlite_store import database_of

    database = database_of(uri)
    if database is not None and not database.is_file():  # never an empty store made in its place
        raise RagexpError(f"--tracking-uri: no MLflow store at {database}; run `python -m ragexp` there first, or "
                          "name the store with --tracking-uri")
    client = mlflow.MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise RagexpError(f"--experiment: no experiment {experiment!r} in {scrub_url(uri)}; run `python -m ragexp` "
                          f"there first, or name another with --experiment")
    runs = client.search_runs([found.experiment_id], "", order_by=["attributes.start_time DESC"], max_results=200)
    last = next((r for r in runs if "mlflow.parentRunId" not in r.data.tags), None)
    if last is None:
        return f"{address}/{page(found.experiment_id)}"
    if last.data.tags.get("ragexp.role") != "sweep":
        return f"{address}/{page(found.experiment_id, last.info.run_id)}"
    views = [key.removeprefix(SHARED_VIEW) for key, value in found.tags.items() if key.startswith(SHARED_VIEW)
             and last.info.run_id in json.loads(value).get("searchFilter", "")]  # the view the sweep printed
    return f"{address}/{page(found.experiment_id, view=views[0] if views else None, sweep=last.info.run_id)}"


def serve(uri: str, port: int, log) -> subprocess.Popen:
    """`mlflow server` over the store `uri` on 127.0.0.1:`port`, light: one worker, no job runner; its
    output (a line per request) to the file `log`."""
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri, "--host", "127.0.0.1",
                             "--port", str(port), "--workers", "1"], env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)


def answering(server: subprocess.Popen, address: str) -> bool:
    """Waits until the server answers (True) or exits (False), saying so every 15 s."""
    import urllib.request

    started = last_said = time.monotonic()
    while server.poll() is None:
        try:
            with urllib.request.urlopen(f"{address}/health", timeout=2) as response:
                if response.status == 200:
                    return True
        except OSError:
            pass
        if time.monotonic() - last_said >= 15:
            last_said = time.monotonic()
            print(f"  MLflow's UI still starting ({last_said - started:.0f} s)", flush=True)
        time.sleep(0.5)
    return False


def main(argv: list[str] | None = None) -> int:
    args = parse_args(parser(), argv)  # also tracker.tracking_uri=URI tracker.experiment=NAME
    uri = args.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or LOCAL_STORE
    remote = uri.startswith(("http://", "https://"))
    address = scrub_url(uri.rstrip("/")) if remote else f"http://127.0.0.1:{args.port}"
    try:
        link = last_link(uri, args.experiment, address)
    except RagexpError as err:
        print(f"ragexp.ui: error: {err}", file=sys.stderr)
        return 2
    if remote:
        print(f"MLflow UI: {link}")
        return 0
    import tempfile

    log_path = os.path.join(tempfile.gettempdir(), f"ragexp-ui-{args.port}.log")
    print(f"starting MLflow's UI on {scrub_url(uri)} (one worker, no job runner), at {address}; its log: {log_path}",
          flush=True)
    log = open(log_path, "w")
    server = serve(uri, args.port, log)
    try:
        if not answering(server, address):
            print(f"ragexp.ui: error: mlflow server exited with status {server.returncode} (is port {args.port} taken? "
                  f"--port N chooses another; its log: {log_path})", file=sys.stderr)
            return 1
        print(f"MLflow UI: {link}\n(Ctrl-C stops it)", flush=True)
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if server.poll() is None:
            os.killpg(server.pid, 15)
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, 9)
                server.wait()
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
