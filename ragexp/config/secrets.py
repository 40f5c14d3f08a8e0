"""Secrets never written: a command line that carries one is refused before Hydra writes anything
(`.hydra/*.yaml`), and so is a config file's (`RefuseSecrets`, ragexp.config.callbacks), by the
same rule (`secret_in_setting`); whatever is written is masked by ragexp.base.redact.
Imported by `python -m ragexp` before Hydra starts: keep it light (Hydra's override parser is
imported only to read a command line that has overrides)."""
from __future__ import annotations

import re
import sys
from typing import Any

from ragexp.base.redact import KEY_SHAPES, credential_header, credential_name, has_credentials, literal_query

ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
BAD_INPUT = 2
FIX = "put it in an environment variable"


def secret_in_setting(key: str, value: Any) -> str | None:
    """Why setting `key` (dotted) to `value` (a string, a number, or a mapping or list of them, as
    the command line or a config file gives it) would write a secret, or None; the value itself is
    never echoed. Refused: a literal value under a credential-named key (`credential_name`: api_key,
    token, password, key, ...), a URL with credentials or with values in its query string, a value
    shaped like an API key, a credential in a header, an `api_key_env` that is not a variable's
    name. A value read from the environment (`${oc.env:NAME}`) is written as that interpolation, never
    resolved: it passes (except in a header, which takes its value from `headers_env`)."""
    if isinstance(value, dict):
        return next((why for k, v in value.items() if (why := secret_in_setting(f"{key}.{k}", v))), None)
    if isinstance(value, (list, tuple)):
        return next((why for v in value if (why := secret_in_setting(key, v))), None)
    text = "" if value is None else str(value).strip()
    if text.lower() in ("", "null", "none") or isinstance(value, bool):
        return None
    if key.endswith("api_key_env"):
        if not all(ENV_NAME.fullmatch(v.strip()) for v in text.split(",")):
            return (f"{key} must be the NAME of an environment variable (such as OPENAI_API_KEY) that holds the "
                    "key, not the key itself")
        return None
    if ".headers_env." in f".{key}" and "$" not in text and not ENV_NAME.fullmatch(text):
        return (f"{key} must be the NAME of an environment variable that holds the header's value, or a template "
                "naming it ('Bearer $NAME'), not the value itself")
    owner, dot, header = key.rpartition(".headers.")
    if dot and header and "." not in header:
        why = credential_header(header, text)
        if why:
            return f"{owner}.{why}"
    if has_credentials(text):
        return (f"{key}: the URL carries credentials (user:password@ or a token before @); {FIX} and give "
                f"{key}='${{oc.env:NAME}}' (the URL from the variable NAME), or use the server's own key setting")
    if literal_query(text):
        return (f"{key}: the URL has values in its query string (a key there would be written to .hydra/ and MLflow); "
                f"{FIX} and give {key}='${{oc.env:NAME}}' (the URL from the variable NAME)")
    if KEY_SHAPES.search(text):
        return f"{key}: the value looks like an API key; {FIX} and name that variable in the *.api_key_env setting"
    if credential_name(key) and not text.startswith("${"):
        return (f"{key}: secrets are not given on the command line or in a config file; {FIX} and give "
                f"{key}='${{oc.env:NAME}}' (an LLM endpoint's key: name the variable in its api_key_env)")
    return None


def parsed(override: str) -> tuple[str, list[Any]] | None:
    """An override's key and the values it sets (each value of a sweep), as Hydra parses it; None for
    one Hydra cannot parse (it reports that itself): then its text after `=`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import ChoiceSweep

    try:
        override_ = OverridesParser.create().parse_override(override)
    except Exception:  # noqa: BLE001 - Hydra reports the syntax error itself
        return None
    value = override_.value()
    return override_.key_or_group, list(value.list) if isinstance(value, ChoiceSweep) else [value]


def secret_in_override(override: str) -> str | None:
    """Why a command-line `key=value` override must not be used (it would be written to .hydra/ and
    logged), or None. The value itself is never echoed."""
    if "=" not in override or override.startswith("-"):
        return None
    given = parsed(override)
    if given is None:
        key, value = override.split("=", 1)
        given = key.lstrip("+~"), [value.strip().strip("'\"")]
    key, values = given
    return next((why for value in values if (why := secret_in_setting(key, value))), None)


def refuse_secret_overrides(argv: list[str]) -> None:
    """Exits with status 2 (bad input) and one line per offending override, before Hydra writes
    the overrides to `.hydra/overrides.yaml`."""
    problems = [why for arg in argv if (why := secret_in_override(arg))]
    if problems:
        for why in problems:
            print(f"ragexp: error: {why} (nothing was written)", file=sys.stderr)
        sys.exit(BAD_INPUT)
