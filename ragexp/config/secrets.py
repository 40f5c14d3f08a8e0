"""Secrets never written: a command line that carries a key is refused before Hydra writes anything
(`.hydra/*.yaml`); credentials in URLs are masked wherever a URL is logged (ragexp.base.redact).
Imported by `python -m ragexp` before Hydra starts: keep it light (standard library only)."""
from __future__ import annotations

import re
import sys

from ragexp.base.redact import KEY_SHAPES, credential_header, has_credentials

SECRET_KEY = re.compile(r"(^|[._])(api_key|secret|password|token)$", re.IGNORECASE)
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
BAD_INPUT = 2
def secret_in_override(override: str) -> str | None:
    """Why a command-line `key=value` override must not be used (it would be written to .hydra/ and
    logged), or None. The value itself is never echoed."""
    if "=" not in override or override.startswith("-"):
        return None
    key, value = override.split("=", 1)
    key = key.lstrip("+~")
    value = value.strip().strip("'\"")
    fix = "put it in an environment variable"
    if has_credentials(value):
        return (f"{key}: the URL carries credentials (user:password@ or a token before @); {fix} and give "
                f"{key}='${{oc.env:NAME}}' (the URL from the variable NAME), or use the server's own key setting")
    if key.endswith("api_key_env") and value.lower() not in ("null", "none", "") and not all(
            ENV_NAME.fullmatch(v.strip()) for v in value.split(",")):
        return (f"{key} must be the NAME of an environment variable (such as OPENAI_API_KEY) that holds the "
                "key, not the key itself")
    owner, dot, header = key.rpartition(".headers.")
    if dot and header and "." not in header:
        why = credential_header(header, value)
        if why:
            return f"{owner}.{why}"
    if KEY_SHAPES.search(value):
        return f"{key}: the value looks like an API key; {fix} and name that variable in the *.api_key_env setting"
    if SECRET_KEY.search(key) and value.lower() not in ("null", "none", ""):
        return f"{key}: secrets are not given on the command line; {fix} and name it in the *.api_key_env setting"
    return None


def refuse_secret_overrides(argv: list[str]) -> None:
    """Exits with status 2 (bad input) and one line per offending override, before Hydra writes
    the overrides to `.hydra/overrides.yaml`."""
    problems = [why for arg in argv if (why := secret_in_override(arg))]
    if problems:
        for why in problems:
            print(f"ragexp: error: {why} (nothing was written)", file=sys.stderr)
        sys.exit(BAD_INPUT)
