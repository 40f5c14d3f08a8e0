"""What a secret looks like, so that none is written: credentials in URLs masked wherever a URL is
logged or stored (http://user:key@host -> http://***@host), the shapes of common API keys, and
headers that carry credentials. Standard library only."""
from __future__ import annotations

import re

# scheme://userinfo@ : a URL that carries a user name, a password or a token
URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@?#]+)@")
MASK = "***"
# the shapes of common API keys: OpenAI/Anthropic sk-, GitHub, Slack, AWS, Hugging Face, Google
KEY_SHAPES = re.compile(r"\b(sk-[A-Za-z0-9_-]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}"
                        r"|xox[abposr]-[A-Za-z0-9-]{8,}|AKIA[0-9A-Z]{16}|hf_[A-Za-z0-9]{16,}|AIza[0-9A-Za-z_-]{20,})")
# a header that carries a credential: Authorization, Proxy-Authorization, Cookie, X-Api-Key, X-Auth-Token, ...
CREDENTIAL_HEADER = re.compile(r"(^|[-_])(authorization|cookie|key|token|secret|password|auth)([-_]|$)|apikey",
                               re.IGNORECASE)


def credential_header(header: str, value: object) -> str | None:
    """Why a header given as a plain value (`headers.NAME: value`) must not be: its name says it is a
    credential, or its value is read from an environment variable (`${oc.env:...}`: the resolved
    value would be written to .hydra/, config.yaml and MLflow); else None. The value is never echoed."""
    text = str(value).strip().strip("'\"")
    if text.lower() in ("", "null", "none"):
        return None
    if CREDENTIAL_HEADER.search(header) or "oc.env" in text or KEY_SHAPES.search(text):
        return (f"headers.{header}: a credential in a header would be written to .hydra/, config.yaml and MLflow; "
                f"put its value in an environment variable and name it instead: headers_env.{header}='Bearer $NAME' "
                f"(or headers_env.{header}=NAME for the whole value)")
    return None


def scrub_url(text: str) -> str:
    """`text` with the credentials of every URL in it masked: http://user:key@host -> http://***@host."""
    return URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{MASK}@", text) if isinstance(text, str) else text


def has_credentials(text: str) -> bool:
    return isinstance(text, str) and URL_CREDENTIALS.search(text) is not None
