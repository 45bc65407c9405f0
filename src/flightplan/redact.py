"""Secrets out of every line flightplan writes: the one redaction of credentials in URIs.

A tracking store's URI may carry a credential: user info (``http://alice:pw@host``,
``postgresql://user:pw@db/mlflow``) or a secret query parameter (``?token=…``,
``&api_key=…``). Every line flightplan prints or logs that may hold such a URI goes
through :func:`redact` (the CLI's error line, the live mirror's lines and its log, the
export's report): the credential becomes ``***`` and the rest stays, so the line still
names the store::

    >>> redact("MLflow at http://alice:pw@127.0.0.1:5000 failed")
    'MLflow at http://***@127.0.0.1:5000 failed'
    >>> redact("sqlite:///m.db?mode=ro&access_token=abc")
    'sqlite:///m.db?mode=ro&access_token=***'
"""

from __future__ import annotations

import re

__all__ = ["redact", "MASK", "SECRET_PARAMETERS"]

MASK = "***"

#: a query parameter whose name holds one of these words (any case) carries a secret
SECRET_PARAMETERS = ("token", "key", "password", "passwd", "pwd", "secret", "auth",
                     "credential", "signature", "sig")

# scheme://userinfo@ : the user info is anything up to the first "@" before the host's
# path, query or fragment (RFC 3986 3.2.1), in a URI of any scheme
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<info>[^\s/?#@'\"]+)@")
# ?name=value or &name=value (or ;) whose name holds a secret word: the value up to the
# next separator, quote or white space (a colon just before one ends a sentence's URI)
_QUERY_SECRET = re.compile(
    r"(?P<head>[?&;](?P<name>[^\s=&;#'\"]*(?:" + "|".join(SECRET_PARAMETERS)
    + r")[^\s=&;#'\"]*)=)(?P<value>[^\s&;#'\"]*?)(?=:?(?:[\s&;#'\"]|$))", re.IGNORECASE)


def redact(text: str) -> str:
    """``text`` with the user info and secret query values of every URI in it replaced by
    :data:`MASK`.

    Args:
        text: any line (a message, a URI, a log line); text without a URI is returned as
            it is.

    Returns:
        The same text, credentials masked: ``scheme://user:password@host`` →
        ``scheme://***@host``; ``?token=abc`` → ``?token=***`` (parameter names in
        :data:`SECRET_PARAMETERS`, matched as parts of the name in any case).
    """
    masked = _USERINFO.sub(lambda m: f"{m.group('scheme')}{MASK}@", text)
    return _QUERY_SECRET.sub(lambda m: f"{m.group('head')}{MASK}" if m.group("value") else
                             m.group(0), masked)
