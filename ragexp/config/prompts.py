"""Prompts from MLflow's prompt registry: any prompt setting (`generator.user_prompt`,
`judge.system_prompt`, the triad's `judge.prompts.<step>.user`, ...) may be given as
`prompts:/NAME/VERSION` or `prompts:/NAME@ALIAS`. Before the config check, each such value is
replaced by the registered template, MLflow's `{{ variable }}` placeholders as ragexp's `{variable}`
fields (the template check then refuses a variable the setting does not have, naming it; other
braces are kept as text), and the version each one resolved to (an alias, once, as the version it
pointed to) is kept in the config's `prompts_used` (`setting: prompts:/NAME/VERSION`), logged with
the run's params. The resolved text is the setting's value from then on: it is part of the stage
cache's keys and of the config.yaml that re-runs the run. The registry is the tracker's store
(`tracker.tracking_uri`, else MLflow's default)."""
from __future__ import annotations

import re
from typing import Any

SCHEME = "prompts:/"
USED = "prompts_used"  # the top-level key that records what each prompt setting resolved to
_VARIABLE = re.compile(r"\{\{\s*(\w+)\s*\}\}")


def as_fields(template: str) -> str:
    """MLflow's `{{ name }}` placeholders as `{name}` fields, every other brace doubled (literal)."""
    pieces, at = [], 0
    for match in _VARIABLE.finditer(template):
        pieces.append(template[at:match.start()].replace("{", "{{").replace("}", "}}"))
        pieces.append("{" + match.group(1) + "}")
        at = match.end()
    pieces.append(template[at:].replace("{", "{{").replace("}", "}}"))
    return "".join(pieces)


def named(cfg) -> list[tuple[str, Any, Any]]:
    """(setting, its parent node, its key) of every string setting that names a registry prompt."""
    from omegaconf import DictConfig, ListConfig, OmegaConf

    found: list[tuple[str, Any, Any]] = []

    def visit(node, prefix: str) -> None:
        keys = range(len(node)) if isinstance(node, ListConfig) else list(node)
        for key in keys:
            if (not prefix and key in ("hydra", USED)) or OmegaConf.is_missing(node, key) \
                    or OmegaConf.is_interpolation(node, key):
                continue
            value = node[key]
            if isinstance(value, (DictConfig, ListConfig)):
                visit(value, f"{prefix}{key}.")
            elif isinstance(value, str) and value.startswith(SCHEME):
                found.append((f"{prefix}{key}", node, key))

    visit(cfg, "")
    return found


def resolve(cfg) -> list[str]:
    """Each `prompts:/...` setting of `cfg` replaced by its template, in place (see the module's
    docstring); the problems found, one line each (a prompt or version the registry lacks)."""
    settings = named(cfg)
    if not settings:
        return []
    import mlflow
    from omegaconf import OmegaConf, open_dict

    uri = OmegaConf.select(cfg, "tracker.tracking_uri", default=None)
    if uri:
        mlflow.set_tracking_uri(uri)
    problems, used = [], dict(OmegaConf.select(cfg, USED, default=None) or {})
    for setting, node, key in settings:
        given = node[key]
        try:
            prompt = mlflow.genai.load_prompt(given)
        except Exception as err:  # noqa: BLE001 - a name, version or alias the registry lacks: a setting to fix
            problems.append(f"{setting}: {given} cannot be loaded from the prompt registry at "
                            f"{mlflow.get_tracking_uri()} ({str(err).splitlines()[0][:200]})")
            continue
        if not isinstance(prompt.template, str):
            problems.append(f"{setting}: {given} is a chat prompt (a list of messages); give a text prompt")
            continue
        node[key] = as_fields(prompt.template)
        used[setting] = f"{SCHEME}{prompt.name}/{prompt.version}"
    if used:
        with open_dict(cfg):
            cfg[USED] = used
    return problems

