"""`ragexp.evaluate(...)`: the command line in Python, for a notebook or a pytest suite.

It composes the packaged config with Hydra's compose API (the same config and overrides as
`python -m ragexp`) and runs the same job (ragexp.run.job: the config check, the run's name, the
run folder and, with `track`, the tracker), so both doors name, check, write and log a run alike."""
from __future__ import annotations

import inspect
import json
import textwrap
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from ragexp.components.systems.user_functions import given_function
from ragexp.config.compose import compose
from ragexp.config.corpus_groups import refused_override
from ragexp.errors import RagexpError
from ragexp.llm.estimate import Estimate
from ragexp.run.job import Job
from ragexp.store.code_identity import code_digest
from ragexp.datasets.outputs import plain
from ragexp.store.run_folder import question_table
from ragexp.store.run_owner import reason

if TYPE_CHECKING:
    import pandas as pd

    from ragexp.types import RunResult

TARGETS_GATE = "targets"  # with no gate set, the targets decide Evaluation.passed
DATA_FILE = "data.jsonl"  # rows given in memory, written into the run folder (so it is its own audit trail)


@dataclass(frozen=True)
class Evaluation:
    """What `evaluate` returns: `aggregates` (the keys of results.json), `table` (the per-question
    table as a pandas DataFrame), `passed` (the verdict of `gate`: the quality gate's, or with none
    set the targets', and the run not failed as a whole: see `failure`), `folder` (the run folder),
    `result` (the RunResult itself)."""

    result: RunResult
    folder: Path
    failure: str | None = None  # why the run failed as a whole (too many failed questions), else None
    run_id: str | None = None  # the tracker's run, with track=True

    @property
    def aggregates(self) -> dict[str, Any]:
        [values] = json.loads((self.folder / "results.json").read_text()).values()
        return values

    @property
    def table(self) -> pd.DataFrame:
        """The per-question table; the answer is `answer`, as in the data given (`generated_answer`, its
        name in the run folder's table, stays beside it for one release)."""
        import pandas as pd

        table = pd.DataFrame(question_table(self.result))
        return table.assign(answer=table["generated_answer"]) if "generated_answer" in table else table

    @property
    def gate(self) -> str:
        """Which gate decided `passed`: the configured quality gate's name, or `targets` when none is
        set (each aggregate's target then acts as the gate)."""
        return self.result.gate.name if self.result.gate is not None else TARGETS_GATE

    @property
    def warnings(self) -> list[str]:
        """The aggregates rated `warning` against their targets (`metric value`)."""
        return [f"{key} {self.result.aggregates.get(key)}" for key in self.result.warned]

    @property
    def passed(self) -> bool:
        """The verdict of the gate that decides (`gate`): the quality gate's when one is set, else
        no aggregate rated `warning` against its target; and the run not failed as a whole
        (`failure`). Never True by default: `assert result.passed` means something."""
        if self.failure is not None:
            return False
        gate = self.result.gate
        return gate.passed if gate is not None else not self.warnings

    def __repr__(self) -> str:
        verdict = f"gate {self.gate!r} {'passed' if self.passed else 'FAILED'}"
        return (f"Evaluation({self.result.name!r}, {self.aggregates.get('total_questions')} questions, "
                f"{verdict}{', run failed' if self.failure else ''}, folder={str(self.folder)!r})")


def rows_of(data: Any) -> list[dict] | None:
    """`data` as rows (dicts), or None when it is a path. A pandas DataFrame gives its records."""
    if data is None or isinstance(data, (str, Path)):
        return None
    if hasattr(data, "to_dict") and hasattr(data, "columns"):  # a pandas DataFrame

        return [{str(k): plain(v) for k, v in row.items()} for row in data.to_dict(orient="records")]
    if isinstance(data, Iterable) and not isinstance(data, Mapping):
        rows = list(data)
        bad = next((i for i, r in enumerate(rows, start=1) if not isinstance(r, Mapping)), None)
        if bad is not None:
            raise RagexpError(f"data: row {bad} is {type(rows[bad - 1]).__name__}, not a dict")
        return [dict(r) for r in rows]
    raise RagexpError(f"data: expected a path, a list of dicts or a pandas DataFrame, got {type(data).__name__}")


def evaluate(data: Any = None, judge: str | None = None, overrides: Sequence[str] = (), track: bool = False,
             name: str | None = None, output_dir: str | Path | None = None, config_dir: str | Path | None = None,
             system: Callable | None = None) -> Evaluation:
    """Evaluates as `python -m ragexp dataset=outputs dataset.path=DATA judge=JUDGE OVERRIDES...` would:

    - `data`: recorded outputs (a .jsonl / .csv / .parquet path, a list of dicts, or a DataFrame;
      columns as for dataset=outputs), or None for the dataset the overrides choose (with
      `system=...` or ragexp's own pipeline);
    - `judge`: a judge option (offline, llm, triad, ...); None = the config's;
    - `overrides`: any command-line overrides, e.g. ["system=python", "system.function=m:f"];
    - `track`: log the run to the configured tracker (MLflow) as a job does; False = tracker=none;
    - `output_dir`: the run folder (default outputs/<date>/<time to the microsecond> under the working directory);
    - `config_dir`: your own config folder, searched before the packaged one (as --config-dir);
    - `system`: your RAG code as a function, the system under test (`system=python`):
      `fn(question)` or `fn(question, params)`, async or not, returning the answer as text, a dict
      with `answer` and `contexts`, or a `ragexp.SystemOutput`; its answers are cached under its
      name and its code, so editing it asks again.

    Settings errors raise RagexpError (one line each, as the command line prints them)."""
    folder = Path(output_dir) if output_dir else Path("outputs") / datetime.now().strftime("%Y-%m-%d/%H-%M-%S-%f")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise RagexpError(f"output_dir: cannot write the run folder {folder} ({reason(err)}); give a folder that can "
                          "be written") from None
    rows = rows_of(data)
    given = list(overrides)
    if rows is not None:
        path = folder / DATA_FILE
        path.write_text("".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in rows), encoding="utf-8")
        given = ["dataset=outputs", f"dataset.path={path.resolve()}", *given]
    elif data is not None:
        given = ["dataset=outputs", f"dataset.path={Path(data).resolve()}", *given]
    if system is not None:
        if not callable(system):
            raise RagexpError(f"system: expected a function (your RAG code), got {type(system).__name__}")
        given = ["system=python", f"system.function={given_function(system)}",
                 f"system.version=code-{function_digest(system)}", *given]
    if judge is not None:
        given.append(f"judge={judge}")
    if not track:
        given.append("tracker=none")
    refused = refused_override(given)
    if refused:
        raise RagexpError(refused)
    cfg, choices = compose(given, config_dir)
    job = Job(cfg, choices, name=name)
    outcome = job.run(folder)
    if isinstance(outcome, Estimate):
        raise RagexpError("dry_run=true makes no request and judges nothing: call it from the command line")
    run_id = job.log(outcome) if track else None
    return Evaluation(outcome.result, folder, outcome.failure, run_id)


def function_digest(function: Callable) -> str:
    """A short digest of a function's code (its source without docstrings and comments, or its
    bytecode when the source cannot be read): the version its answers are cached under."""
    try:
        return code_digest(textwrap.dedent(inspect.getsource(function)))[:12]
    except (OSError, TypeError):
        code = getattr(function, "__code__", None)
        return code_digest(code.co_code if code is not None else repr(function).encode())[:12]
