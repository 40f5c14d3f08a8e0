"""Settings under a swept config group: `-m judge=llm,triad judge.endpoint.base_url=URL`.

Hydra composes a multirun's sweep-level config once without the sweep overrides, so with the
group's default option (judge=offline), which may not have the setting (no `endpoint`): the
command would fail before any job although every job's option has it. Such a setting is passed
to Hydra as `++judge.endpoint.base_url=URL` instead: each job sets it on its own option as the
plain spelling would, and the sweep-level config (never built) merely carries it."""
from __future__ import annotations

MULTIRUN = ("-m", "--multirun")


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
        if arg.startswith("-") or "=" not in arg or (i > 0 and args[i - 1] in ("-cd", "--config-dir", "-cp",
                                                                                  "--config-path", "-cn", "--config-name")):
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
