"""What every rendered page shares, report and diff alike: the one jinja environment, the
escapers for Markdown and the terminal, a table (tracekit.present_table) as Markdown, and the
inline scripts' Content-Security-Policy hashes.

Trace strings (kernel names, NVTX text) are untrusted: HTML is autoescaped by the environment,
Markdown cells and terminal text go through `md_cell` and `term_text`.
"""

from __future__ import annotations

import base64
import hashlib
import re
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2

    from tracekit.present_table import Table

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # (ESC sequences: shown as \xNN, never raw)
_MD_SPECIAL = ("\\", "|", "<", ">", "`", "[", "]", "*", "~")
# An underscore opens emphasis only at a word's start (`_em_`); one inside or closing a word
# (`flash_fwd`, the in-place `aten::copy_`) cannot without an opener, so only openers are escaped.
_OPENING_UNDERSCORE = re.compile(r"(?<![A-Za-z0-9\\])_(?=\S)")


def term_text(value: object) -> str:
    """Untrusted text for a terminal: control characters (ESC, BEL ...) shown as \\xNN."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", str(value))


def md_cell(value: object) -> str:
    """Untrusted text as an inert Markdown table cell on one line: no HTML, links, images,
    code, emphasis or strikethrough (their characters backslash-escaped; an underscore that
    cannot open emphasis, as in kernel and in-place op names, stays), no pipes, no newlines
    (whitespace runs become one space), control characters as \\xNN."""
    text = " ".join(str(value).split())
    for ch in _MD_SPECIAL:
        text = text.replace(ch, "\\" + ch)
    return term_text(_OPENING_UNDERSCORE.sub(r"\\_", text))


def md_table(t: Table) -> str:
    """A table (tracekit.present_table) as Markdown lines (header, alignment, rows), every
    label and cell through md_cell; ends with a newline."""
    lines = ["| " + " | ".join(md_cell(c.label) for c in t.columns) + " |"]
    lines.append("|" + "".join("---:|" if c.numeric else "---|" for c in t.columns))
    lines += ["| " + " | ".join(md_cell(c.text) for c in row) + " |" for row in t.rows]
    return "\n".join(lines) + "\n"


@cache
def environment() -> jinja2.Environment:
    """The one jinja environment: templates from tracekit.templates, HTML autoescaped,
    undefined names an error, `md` filter for Markdown cells, `md_table` for tables."""
    import jinja2  # lazy: jinja2 only when a page is rendered (start-up of every command)

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("tracekit.templates", "."),
        autoescape=jinja2.select_autoescape(
            enabled_extensions=("html.j2",), default_for_string=True, default=False
        ),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    env.filters["md"] = md_cell
    env.filters["md_table"] = md_table
    return env


@cache
def inline_script(name: str) -> tuple[str, str]:
    """(a template folder script's text, its CSP source 'sha256-...'): the page's only script,
    allowed by hash, so nothing injected into the page can run."""
    text = files("tracekit.templates").joinpath(name).read_text()
    digest = base64.b64encode(hashlib.sha256(text.encode()).digest()).decode()
    return text, f"sha256-{digest}"
