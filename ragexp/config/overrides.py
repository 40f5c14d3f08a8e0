"""The command line's overrides as Hydra needs them spelled, so that users can spell them plainly.

1. The user's own settings of the system under test, `system.params.NAME=value` (names only the
   user knows, so no YAML declares them): Hydra refuses a key its config lacks unless spelled
   `+system.params.NAME=...`, and refuses that spelling when the key exists (a user's own YAML set
   it). They are passed as `++system.params.NAME=...`, which adds or sets.

2. Settings under a swept config group: `-m judge=llm,triad judge.endpoint.base_url=URL`. Hydra
   composes a multirun's sweep-level config once without the sweep overrides, so with the group's
   default option (judge=offline), which may not have the setting (no `endpoint`): the command
   would fail before any job although every job's option has it. Such a setting is passed to Hydra
   as `++judge.endpoint.base_url=URL` instead: each job sets it on its own option as the plain
   spelling would, and the sweep-level config (never built) merely carries it.

3. A group the defaults list holds with no option (`rubric: null`) is chosen with `rubric=NAME`;
   `+rubric=NAME`, the spelling of a group that is not in the list, is taken as that too (Hydra
   would say "Multiple values for rubric")."""
from __future__ import annotations

import re

MULTIRUN = ("-m", "--multirun")
# the system under test's own settings (conf/system/python.yaml, http.yaml), the headers of its requests and of
# the spans sent (tracing=otlp): names only the user knows, so no YAML declares them
USER_PARAMS = ("system.params.", "system.headers.", "system.headers_env.", "tracing.headers.", "tracing.headers_env.")
CONFIG_FLAGS = ("-cd", "--config-dir", "-cp", "--config-path", "-cn", "--config-name")


NULL_GROUPS = ("rubric",)  # in conf/config.yaml's defaults list as `GROUP: null`


def for_hydra(args: list[str]) -> list[str]:
    """The command line `args` as Hydra takes them: the rewrites of the module."""
    return under_swept_groups(with_user_params(chosen_null_groups(args)))


def chosen_null_groups(args: list[str]) -> list[str]:
    """`args` with `+rubric=NAME` spelled `rubric=NAME` (see NULL_GROUPS)."""
    return [arg[1:] if arg.startswith("+") and not arg.startswith("++") and arg[1:].partition("=")[0] in NULL_GROUPS
            and (i == 0 or args[i - 1] not in CONFIG_FLAGS) else arg for i, arg in enumerate(args)]


SEPARATOR = " · "  # between a sweep point's values in its name (recursive · bm25)
BARE_VALUE = re.compile(r"[-+]?(\d[\d_]*\.?\d*|\.\d+)([eE][-+]?\d+)?|true|false|null|''", re.IGNORECASE)


def point_name(overrides, swept: list[str]) -> str:
    """A sweep point's name, its job's run name (ragexp.run.job.run_name) and its configuration's in a
    race: its swept keys' values in the sweep's order, "" when none is swept. An option names itself
    (`semantic · bm25` for chunker=semantic,retriever=bm25); a number, a boolean or null would not,
    so it goes with its key's last part (`semantic · top_k=5` for retriever.top_k=5, `max_tokens=501`).
    Short and distinct within the sweep where MLflow's runs table cuts a name to some 24 characters
    (two points that differ in their second key looked alike as `chunker=recursive,retrie…`); the full
    keys are the table's columns beside it (each job logs its options and settings as params). A value
    without the backslashes Hydra escapes it with (`prompts:/rag/2`, not `prompts\\:/rag/2`); an empty
    one as `''`."""
    values = dict(str(o).split("=", 1) for o in overrides if "=" in str(o))
    return SEPARATOR.join(shown(k, unescaped(values[k]) or "''") for k in swept if k in values)


def shown(key: str, value: str) -> str:
    """A swept value as a point's name shows it: alone, or after its key's last part when bare (BARE_VALUE)."""
    return f"{key.lstrip('+').rsplit('.', 1)[-1]}={value}" if BARE_VALUE.fullmatch(value) else value


def unescaped(value: str) -> str:
    """An override's value as written, without the backslashes Hydra puts before `\\()[]{}:=, ` in a sweep's values."""
    return re.sub(r"\\(.)", r"\1", value)


def with_user_params(args: list[str]) -> list[str]:
    """`args` with each plain `system.params.NAME=value` (also a sweep `=a,b`) spelled `++system.params.NAME=value`."""
    return [f"++{arg}" if arg.startswith(USER_PARAMS) and "=" in arg and (i == 0 or args[i - 1] not in CONFIG_FLAGS)
            else arg for i, arg in enumerate(args)]


def under_swept_groups(args: list[str]) -> list[str]:
    """`args` with each plain setting `GROUP.key=value` under a group swept by a choice list
    (`GROUP=a,b`, also `GROUP@package=a,b`: settings under `package.`) spelled `++GROUP.key=value`;
    `args` unchanged outside a multirun, and when an override does not parse (Hydra says why)."""
    if not any(a in MULTIRUN for a in args):
        return args
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    parser = OverridesParser.create()
    parsed = {}
    for i, arg in enumerate(args):
        if arg.startswith("-") or "=" not in arg or (i > 0 and args[i - 1] in CONFIG_FLAGS):
            continue
        try:
            parsed[i] = parser.parse_override(arg)
        except HydraException:
            return args
    swept = {o.package or o.key_or_group for o in parsed.values()
             if o.is_sweep_override() and o.type is OverrideType.CHANGE and "." not in o.key_or_group
             and "/" not in o.key_or_group}
    return [f"++{arg}" if i in parsed and parsed[i].type is OverrideType.CHANGE and not parsed[i].is_sweep_override()
            and "." in parsed[i].key_or_group and parsed[i].key_or_group.split(".")[0] in swept else arg
            for i, arg in enumerate(args)]
