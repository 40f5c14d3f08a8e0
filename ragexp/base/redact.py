"""Credentials masked wherever a URL is logged or stored (http://user:key@host -> http://***@host).
Standard library only."""
from __future__ import annotations

import re

# scheme://userinfo@ : a URL that carries a user name, a password or a token
URL_CREDENTIALS = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s@?#]+)@")
MASK = "***"


def scrub_url(text: str) -> str:
    """`text` with the credentials of every URL in it masked: http://user:key@host -> http://***@host."""
    return URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{MASK}@", text) if isinstance(text, str) else text


def has_credentials(text: str) -> bool:
    return isinstance(text, str) and URL_CREDENTIALS.search(text) is not None
