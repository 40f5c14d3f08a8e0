"""A GGUF model file served by ragexp: llama.cpp's OpenAI-compatible HTTP server (the `xllamacpp`
wheel, extra `local`) in a child process (`python -m ragexp.llm.served SETTINGS`), on 127.0.0.1 at
a free port. `serve` starts one per model file and settings in this process, waits for its health
check and returns its URL; later calls for the same file and settings (another component, the next
job of a sweep) get the same server, and so do processes this one starts afterwards (they inherit
its address through the environment: a parallel sweep starts the servers its jobs want before its
workers, `serve_for_workers`). The server stops when this process exits, and stops itself
within seconds when this process is gone (ragexp.base.children). Its log (llama.cpp's) goes to the
run's folder, or to the sweep's folder in a sweep."""
from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

from ragexp.base import children
from ragexp.errors import RagexpError

log = logging.getLogger(__name__)

SERVING = "RAGEXP_SERVED_MODELS"  # in the environment: {key: url} of the servers this process tree runs
START_TIMEOUT_S = 300.0  # loading a large model from a slow disk

_SERVERS: dict[str, str] = {}  # key -> url, in this process
_STARTED: dict[str, children.Child] = {}
_LOCK = threading.Lock()


def settings_key(settings: dict) -> str:
    return json.dumps(settings, sort_keys=True)


def server_settings(model_path: Path, threads: int, context_size: int, parallel: int, gpu_layers: int) -> dict:
    """What tells one server from another: the file and how it is served."""
    return {"model_path": str(model_path.resolve()), "threads": threads, "context_size": context_size,
            "parallel": parallel, "gpu_layers": gpu_layers}


def serve(model_path: Path, threads: int, context_size: int, parallel: int, gpu_layers: int, setting: str) -> str:
    """The base URL (…/v1) of a server of `model_path` with these settings, started if need be."""
    return serve_settings(server_settings(model_path, threads, context_size, parallel, gpu_layers), setting)


def serve_settings(settings: dict, setting: str, folder: Path | None = None) -> str:
    """`serve` of `server_settings`; a server started logs to `folder` (default: `log_folder()`)."""
    key = settings_key(settings)
    with _LOCK:
        url = _SERVERS.get(key) or inherited(key)
        if url is not None and healthy(url):
            _SERVERS[key] = url
            return url + "/v1"
        url = start(settings, setting, folder or log_folder())
        _SERVERS[key] = url
        shared = {**json.loads(os.environ.get(SERVING) or "{}"), key: url}
        os.environ[SERVING] = json.dumps(shared)  # processes started from now on use it too
    return url + "/v1"


def serve_for_workers(wanted: dict[str, tuple[dict, str]], folder: Path) -> None:
    """Starts the servers a sweep's jobs want in this process (the sweep's), logging in the sweep's
    `folder`, before its launcher starts the worker processes that run them (Hydra's joblib
    launcher): they inherit the servers' addresses, so that the sweep's process tree runs one
    server per model file, not one per worker."""
    for settings, setting in wanted.values():
        serve_settings(settings, setting, folder)


def inherited(key: str) -> str | None:
    try:
        url = json.loads(os.environ.get(SERVING) or "{}").get(key)
    except ValueError:
        return None
    return url if isinstance(url, str) else None


def healthy(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=timeout_s) as reply:
            return reply.status == 200
    except OSError:
        return False


def log_folder() -> Path:
    """The run's folder, or the sweep's in a sweep (Hydra's); outside Hydra, the temporary folder."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        if HydraConfig.initialized():
            hydra = HydraConfig.get()
            return Path(hydra.sweep.dir if hydra.mode == RunMode.MULTIRUN else hydra.runtime.output_dir)
    except ImportError:
        pass
    return Path(tempfile.gettempdir())


def start(settings: dict, setting: str, folder: Path) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    log_path = folder / f"local-model-{Path(settings['model_path']).name}.log"
    began = time.monotonic()
    with log_path.open("a") as log_file:
        try:
            child = children.start([sys.executable, "-m", __name__, json.dumps(settings)], "local model server",
                                   stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=log_file,
                                   env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
        except OSError as err:
            raise RagexpError(f"{setting}.model_path: cannot start the local model server ({err})") from None
    assert child.process.stdout is not None
    line = children.read_line(child.process.stdout, START_TIMEOUT_S)
    try:
        url = json.loads(line or "")["url"]
    except (ValueError, KeyError, TypeError):
        child.stop()
        raise RagexpError(f"{setting}.model_path: the local model server for {settings['model_path']} did not start; "
                          f"its log: {log_path}") from None
    if not healthy(url, timeout_s=START_TIMEOUT_S):
        child.stop()
        raise RagexpError(f"{setting}.model_path: the local model server at {url} failed its health check; "
                          f"its log: {log_path}")
    _STARTED[url] = child
    log.info("local model %s served at %s (started in %.1f s; its log: %s)", Path(settings["model_path"]).name, url,
             time.monotonic() - began, log_path)
    return url


def stop_all() -> None:
    """Stops the servers this process started (also done at its exit)."""
    with _LOCK:
        for url, child in list(_STARTED.items()):
            child.stop()
            _STARTED.pop(url)
            for key in [k for k, u in _SERVERS.items() if u == url]:
                _SERVERS.pop(key)
        shared = {k: u for k, u in json.loads(os.environ.get(SERVING) or "{}").items() if healthy(u, 0.5)}
        if shared:
            os.environ[SERVING] = json.dumps(shared)
        else:
            os.environ.pop(SERVING, None)


def main(settings: dict) -> None:
    """The child: loads the model, serves it, says its URL on stdout (one JSON line), and ends when
    its input closes (its parent stopped it) or its parent is gone."""
    children.watch_parent()
    import xllamacpp

    params = xllamacpp.CommonParams()
    params.model.path = settings["model_path"]
    params.n_ctx = settings["context_size"] * settings["parallel"]  # shared by the slots: each gets context_size
    params.n_parallel = settings["parallel"]
    params.n_gpu_layers = settings["gpu_layers"]
    params.cpuparams.n_threads = settings["threads"]
    params.cpuparams_batch.n_threads = settings["threads"]
    params.hostnames = ["127.0.0.1"]
    params.port = 0  # a free port, chosen by the system
    server = xllamacpp.Server(params)
    print(json.dumps({"url": server.listening_address}), flush=True)
    sys.stdin.read()  # until the parent closes it
    os._exit(0)  # no teardown of the model: the process ends


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
