"""Secrets found by what they look like, shared by `tracekit scrub` and every report.

`redact_text` replaces token-shaped substrings (Hugging Face, GitHub, AWS, OpenAI/Anthropic,
Slack, Google tokens, JWTs, PEM private key blocks, `Bearer`/`Basic` credentials, passwords
in URLs, `key=value` pairs whose key says secret/token/password/key/credential/auth) with
`<redacted>` and counts what it removed by kind. `redact_command` does the same for a
command line and also redacts the word after a secret-named flag (`--hf-token XYZ`).

Every pattern is linear in its input (no nested quantifiers, bounded repeats), so a long
hostile string costs time proportional to its length.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

REDACTED = "<redacted>"

# A token starts after anything but a letter or digit: `_` too, so one joined to a word
# (`kernel_ghp_...`, `x_hf_...`, `key_AKIA...`) is found, as `\b` would not.
_START = r"(?<![A-Za-z0-9])"
# (kind, pattern): the whole match is replaced.
_TOKENS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "private key",
        re.compile(
            r"-----BEGIN [A-Z0-9 ]{0,40}PRIVATE KEY-----"
            r"(?:[^-]|-(?!----END))*(?:-----END [A-Z0-9 ]{0,40}PRIVATE KEY-----)?"
        ),
    ),
    ("jwt", re.compile(_START + r"eyJ[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}\.[A-Za-z0-9_-]{6,}")),
    ("huggingface token", re.compile(_START + r"hf_[A-Za-z0-9]{16,}")),
    ("github token", re.compile(_START + r"(?:gh[pousr]_[A-Za-z0-9]{16,}|github_pat_\w{16,})")),
    (
        "aws key",
        re.compile(
            _START + r"(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Za-z0-9])"
        ),
    ),
    ("api key", re.compile(_START + r"sk-[A-Za-z0-9_-]{8,}")),
    ("slack token", re.compile(_START + r"xox[abposre]-[A-Za-z0-9-]{8,}")),
    ("google api key", re.compile(_START + r"AIza[0-9A-Za-z_-]{30,}")),
)
# `Authorization: Bearer abc`: keep the scheme, redact the credential.
_AUTH_SCHEME = re.compile(r"(?i)\b(bearer|basic)(\s+)([A-Za-z0-9._~+/=-]{6,})")
# scheme://user:password@host: keep the scheme and host.
_URL_CREDENTIALS = re.compile(
    r"(?i)\b([a-z][a-z0-9+.-]{0,20}://)([^\s/@:'\"]{0,200}):([^\s/@'\"]{1,200})@"
)
# key=value, key: value, "key": "value" where the key says secret.
_ASSIGNMENT = re.compile(
    r"(?<![\w.-])([A-Za-z_-][\w.-]{0,80})([\"']?\s{0,4}[:=]\s{0,4})"
    r"(?!<redacted>)(\"[^\"\n]*\"?|'[^'\n]*'?|[^\s\"'&,;}\]]+)"
)
# --hf-token VALUE (a separate word after a secret-named flag), in command lines only.
_FLAG_VALUE = re.compile(r"(?<!\S)(--?[A-Za-z][\w.-]{0,80})(\s+)(?!-)(?!<redacted>)(\S+)")
_SECRET_KEY = re.compile(
    r"secret|token(?!s)|passw|passphrase|pwd|credential|auth(?!or)|api_?key|apikey|"
    r"access_?key|private_?key|(?:^|[_.-])key$|^key$",
    re.I,
)

_NOT_SECRET = {"PWD", "OLDPWD", "TOKENIZERS_PARALLELISM"}


def is_secret_key(name: str) -> bool:
    """Whether a key or flag name says its value is a secret (`hf_token`, `--password`)."""
    name = name.strip("-_ ")
    return name.upper() not in _NOT_SECRET and bool(_SECRET_KEY.search(name))


def redact_text(text: str, counts: Counter[str] | None = None) -> str:
    """`text` with secret-shaped substrings replaced by `<redacted>`; kinds counted."""
    if counts is None:
        counts = Counter()
    for kind, pattern in _TOKENS:
        text, n = pattern.subn(REDACTED, text)
        if n:
            counts[kind] += n

    def auth(m: re.Match[str]) -> str:
        credential = m.group(3)
        if not (len(credential) >= 20 or credential.endswith("=")
                or any(c.isdigit() for c in credential)):  # fmt: skip
            return m.group(0)  # "Basic Render Driver"
        counts["authorization header"] += 1
        return m.group(1) + m.group(2) + REDACTED

    if "earer" in text or "asic" in text or "EARER" in text or "ASIC" in text:
        text = _AUTH_SCHEME.sub(auth, text)
    text, n = _URL_CREDENTIALS.subn(lambda m: f"{m.group(1)}{REDACTED}@", text)
    if n:
        counts["url credentials"] += n

    def assignment(m: re.Match[str]) -> str:
        if not is_secret_key(m.group(1)):
            return m.group(0)
        counts["secret key=value"] += 1
        value = m.group(3)
        if value[:1] in "\"'":
            closed = len(value) > 1 and value[-1] == value[0]
            return m.group(1) + m.group(2) + value[0] + REDACTED + value[0] * closed
        return m.group(1) + m.group(2) + REDACTED

    if "=" in text or ":" in text:
        text = _ASSIGNMENT.sub(assignment, text)
    return text


def redact_command(text: str, counts: Counter[str] | None = None) -> str:
    """A command line with secrets redacted, including `--secret-flag VALUE` pairs."""
    if counts is None:
        counts = Counter()
    text = redact_text(text, counts)

    def flag(m: re.Match[str]) -> str:
        if not is_secret_key(m.group(1)):
            return m.group(0)
        counts["secret argument"] += 1
        return m.group(1) + m.group(2) + REDACTED

    return _FLAG_VALUE.sub(flag, text)


def redact_value(value: Any, counts: Counter[str] | None = None, depth: int = 0) -> Any:
    """A JSON-like value with secrets redacted in every string (argv-like lists of strings
    as command lines); values under secret-named keys replaced whole."""
    if counts is None:
        counts = Counter()
    if depth > 200:
        return REDACTED
    if isinstance(value, str):
        return redact_command(value, counts)
    if isinstance(value, list):
        if value and all(isinstance(v, str) for v in value):
            return redact_argv(value, counts)
        return [redact_value(v, counts, depth + 1) for v in value]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if is_secret_key(str(k)) and isinstance(v, (str, int, float)) and v != "":
                counts["secret-named keys"] += 1
                out[redact_text(str(k), counts)] = REDACTED
            else:
                out[redact_text(str(k), counts)] = redact_value(v, counts, depth + 1)
        return out
    return value


def redact_argv(argv: Sequence[str], counts: Counter[str] | None = None) -> list[str]:
    """An argv list with secrets redacted: token shapes in every word, `--password=x`, and
    the word after a secret-named flag (`--hf-token x`)."""
    if counts is None:
        counts = Counter()
    out: list[str] = []
    after_secret_flag = False
    for word in argv:
        word = str(word)
        if after_secret_flag and not word.startswith("-"):
            out.append(REDACTED)
            counts["secret argument"] += 1
            after_secret_flag = False
            continue
        after_secret_flag = word.startswith("-") and "=" not in word and is_secret_key(word)
        out.append(redact_text(word, counts))
    return out
