"""Telling "the store has no such run" from "the store did not answer"."""
from __future__ import annotations


def run_absent(err: BaseException) -> bool:
    """True when `err` is MLflow's answer that a run (or experiment) does not exist; False for
    every other error (a connection refused, a timeout, a 5xx, refused credentials)."""
    from mlflow.exceptions import MlflowException

    return isinstance(err, MlflowException) and err.error_code == "RESOURCE_DOES_NOT_EXIST"
