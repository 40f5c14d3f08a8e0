"""Secrets never written: the one module every writer of a config, a param, a tag, an artifact, a
log line, a printed URL or a trace passes what it writes through.

- `masked(value)`: plain data (a config as dicts and lists, a param, a tag, a span's attributes) as
  it may be written: the value under a credential-named key (`credential_name`) is `***`, and
  every URL in a string has its credentials and its query-string values masked
  (`http://user:key@host/a?api_key=X` -> `http://***@host/a?api_key=***`). A value read from an
  environment variable and still written as its interpolation (`${oc.env:NAME}`) is kept as it is.
- `written_config(cfg)`: a composed config as every writer writes it (config.yaml, MLflow params):
  each value that comes from `${oc.env:NAME}` written as `${oc.env:NAME}`, never resolved, then
  `masked`.
- `scrub_url(text)`: free text (a message, a log line, a failure reason) with every URL in it masked;
  `MaskedLog`, a logging filter, passes every line of a run's log and console through it.

What the command line may not carry (`ragexp.config.secrets`) is told by the same rules: a
credential-named key, a URL with credentials or a query string, the shapes of common API keys.
Standard library only (omegaconf is imported by `written_config` alone)."""
from __future__ import annotations

import logging
import re
from typing import Any

MASK = "***"
# scheme://userinfo@ : a URL that carries a user name, a password or a token
URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@?#]+)@")
# a URL in text: up to a space, a quote or an angle bracket
URL = re.compile(r"\b[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
# the shapes of common API keys: OpenAI/Anthropic sk-, GitHub, Slack, AWS, Hugging Face, Google
KEY_SHAPES = re.compile(r"\b(sk-[A-Za-z0-9_-]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}"
                        r"|xox[abposr]-[A-Za-z0-9-]{8,}|AKIA[0-9A-Z]{16}|hf_[A-Za-z0-9]{16,}|AIza[0-9A-Za-z_-]{20,})")
# the words that make a name credential-named: a config key whose LAST word is one of them
# (api_key, apiKey, access_token, client_secret, db_password, key), a header with ANY of them
# (X-Auth-User, Authorization, Cookie); docs/security.md lists them
CREDENTIAL_WORDS = ("key", "apikey", "token", "secret", "password", "passwd", "pwd", "passphrase",
                    "credential", "credentials", "auth", "authorization", "cookie", "signature")
ENV_INTERPOLATION = "${oc.env:"


def words_of(name: object) -> list[str]:
    """`X-Api-Key` -> [x, api, key]; `apiKey` -> [api, key]; `client_secret` -> [client, secret]."""
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", str(name))
    return [w for w in re.split(r"[^a-z0-9]+", spaced.lower()) if w]


def credential_name(key: object) -> bool:
    """Whether a config key names a credential: its last word is one of CREDENTIAL_WORDS
    (`api_key`, `+judge.endpoint.key`, `system.params.accessToken`), not a `*_env` setting (those
    hold the NAME of a variable, as does every key under one: `headers_env.Authorization`) and not
    `max_tokens` (the last word must match whole)."""
    parts = str(key).split(".")
    if any(part.endswith("_env") for part in parts):
        return False
    words = words_of(parts[-1])
    return bool(words) and words[-1] in CREDENTIAL_WORDS


def credential_header_name(header: object) -> bool:
    """Whether an HTTP header carries a credential: any of its words is one of CREDENTIAL_WORDS."""
    return any(w in CREDENTIAL_WORDS for w in words_of(header))


def from_environment(value: object) -> bool:
    """Whether a value is an interpolation that reads an environment variable (`${oc.env:NAME}`):
    written as it is, the variable's value never is."""
    return isinstance(value, str) and ENV_INTERPOLATION in value


def credential_header(header: str, value: object) -> str | None:
    """Why a header given as a plain value (`headers.NAME: value`) must not be: its name says it is a
    credential, or its value is read from an environment variable (`${oc.env:...}`: the resolved
    value would be sent, and a header that needs one belongs in headers_env); else None. The value
    is never echoed."""
    text = str(value).strip().strip("'\"")
    if text.lower() in ("", "null", "none"):
        return None
    if credential_header_name(header) or "oc.env" in text or KEY_SHAPES.search(text):
        return (f"headers.{header}: a credential in a header would be written to .hydra/, config.yaml and MLflow; "
                f"put its value in an environment variable and name it instead: headers_env.{header}='Bearer $NAME' "
                f"(or headers_env.{header}=NAME for the whole value)")
    return None


ENV_NAME = re.compile(r"\$([A-Za-z_][A-Za-z0-9_]*)")  # $NAME in a headers_env template


def environment_headers(headers_env: dict[str, str], setting: str) -> dict[str, str]:
    """The headers of `headers_env` (header -> `NAME`, or a template such as `Bearer $NAME`) with
    their values read from the environment, where credentials live; an unset variable is one line
    naming `setting.HEADER` (ragexp.errors.RagexpError). The values are never written."""
    import os

    from ragexp.errors import RagexpError

    headers = {}
    for header, template in headers_env.items():
        names = ENV_NAME.findall(template) or [template]
        missing = [n for n in names if not os.environ.get(n)]
        if missing:
            raise RagexpError(f"{setting}.{header}: environment variable {missing[0]!r} is not set; "
                              "export it (credentials are read from the environment only)")
        headers[header] = ENV_NAME.sub(lambda m: os.environ[m.group(1)], template) if "$" in template \
            else os.environ[template]
    return headers


def literal_query(text: str) -> bool:
    """Whether `text` is a URL with a value in its query string that is not an interpolation
    (`?api_key=X`, not `?api_key=${oc.env:K}`). A URL inside longer text (a prompt) is not asked."""
    return URL.fullmatch(text.strip()) is not None and mask_query(text.strip()) != text.strip()


def mask_query(url: str) -> str:
    """`url` with each value of its query string masked (`?a=1&b` -> `?a=***&b=***`); a value that is
    an interpolation (`${oc.env:K}`) is kept; a `?` inside the fragment (`#/runs?view=x`) is left."""
    head, sep, rest = url.partition("?")
    if not sep or "#" in head:
        return url
    query, hash_, fragment = rest.partition("#")

    def item_masked(item: str) -> str:
        name, eq, value = item.partition("=")
        if not eq:
            return MASK if item and not item.startswith("${") else item
        return item if not value or value.startswith("${") else f"{name}={MASK}"

    return f"{head}?{'&'.join(item_masked(i) for i in query.split('&'))}{hash_}{fragment}"


def scrub_url(text: str, query: bool = True) -> str:
    """`text` with every URL in it masked: its credentials (http://user:key@host -> http://***@host)
    and, unless `query=False`, its query-string values (?api_key=X -> ?api_key=***). Free text
    (messages, log lines, failure reasons, printed URLs) goes through this; data through `masked`."""
    if not isinstance(text, str):
        return text
    text = URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{MASK}@", text)
    return URL.sub(lambda m: mask_query(m.group(0)), text) if query and "?" in text else text


class MaskedLog(logging.Filter):
    """A handler's filter that masks the URLs of every record it writes (`scrub_url`): a run's log
    file and console say `http://***@host/a?key=***` whatever a message was given."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        shown = scrub_url(message)
        if shown != message:
            record.msg, record.args = shown, None
        if record.exc_info and not record.exc_text:  # the traceback, formatted once here as the handler would
            record.exc_text = scrub_url(logging.Formatter().formatException(record.exc_info))
        return True

    @classmethod
    def install(cls) -> None:
        """On every handler of the root logger (Hydra's console and file handlers of this job), once."""
        for handler in logging.getLogger().handlers:
            if not any(isinstance(f, cls) for f in handler.filters):
                handler.addFilter(cls())


def has_credentials(text: str) -> bool:
    return isinstance(text, str) and URL_CREDENTIALS.search(text) is not None


def masked(value: Any, key: object = None) -> Any:
    """`value` as it may be written anywhere (config.yaml, MLflow params, tags and artifacts,
    sweep.json, traces): under a credential-named key (`credential_name`) a value is `***` (None
    stays None, `${oc.env:NAME}` stays itself), every string has its URLs masked (`scrub_url`),
    dicts and lists are masked item by item. A `*_env` key holds names of variables (api_key_env,
    headers_env): its values are names, not secrets. The one function every writer of such data
    calls: give it what you write, never the secret's own copy."""
    if isinstance(value, dict):
        if str(key).endswith("_env"):  # header -> NAME of a variable: names, not secrets
            return {k: masked(v, k) if isinstance(v, (dict, list)) else v for k, v in value.items()}
        return {k: masked(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [masked(v, key) for v in value]
    if key is not None and credential_name(key) and value not in (None, "") and not isinstance(value, bool) \
            and not from_environment(value):
        return MASK
    return scrub_url(value) if isinstance(value, str) else value


def written_config(cfg: Any) -> dict:
    """A composed config (DictConfig) as every writer writes it (the run folder's config.yaml, MLflow
    params and the config.yaml artifact): interpolations resolved, except that each value that comes
    from `${oc.env:NAME}` (itself, or a value that refers to it) is written as its interpolation, never
    resolved; then `masked`. A config whose interpolations do not resolve is written unresolved."""
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(cfg, resolve=False)
    kept: dict[str, str] = {}

    def placeholder(node: Any) -> Any:  # each ${oc.env:...} value replaced by a token resolution leaves alone
        if isinstance(node, dict):
            return {k: placeholder(v) for k, v in node.items()}
        if isinstance(node, list):
            return [placeholder(v) for v in node]
        if isinstance(node, str) and "oc.env" in node:
            token = f"@@ragexp-env-{len(kept)}@@"
            kept[token] = node
            return token
        return node

    def restored(node: Any) -> Any:
        if isinstance(node, dict):
            return {k: restored(v) for k, v in node.items()}
        if isinstance(node, list):
            return [restored(v) for v in node]
        if isinstance(node, str) and "@@ragexp-env-" in node:
            return re.sub(r"@@ragexp-env-\d+@@", lambda m: kept[m.group(0)], node)
        return node

    try:
        resolved = OmegaConf.to_container(OmegaConf.create(placeholder(raw)), resolve=True) if "oc.env" in repr(raw) \
            else OmegaConf.to_container(cfg, resolve=True)
    except Exception:  # noqa: BLE001 - an interpolation that fails (a job that failed on it): written unresolved
        resolved = raw
    return masked(restored(resolved))
