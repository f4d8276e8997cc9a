"""Where text from a store, a profile or a rules file ends up, escaped once per place: a
web page, a terminal, a spreadsheet cell, a plot label. Those files may come from another
user (docs/security.md): their text is data wherever it is shown."""

from __future__ import annotations

import html
from typing import Any

from rich.console import Console


def printable(text: object) -> str:
    """`text` with every control or otherwise unprintable character written as its escape
    (`\\x1b`), so it can neither move the cursor, retitle the window nor hide itself."""
    s = str(text)
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() or c == "\n" else repr(c)[1:-1] for c in s)


def one_line(text: object) -> str:
    """`printable`, and a line break from data written as its escape too: a stored value
    that may end up in a terminal line must not start a line of its own (a fake `error:`
    line after a newline in a stored host name)."""
    return printable(text).replace("\n", "\\n")


def html_text(value: object) -> str:
    """A value as text in HTML (element text and quoted attributes alike)."""
    return html.escape(str(value), quote=True)


# a cell a spreadsheet would read as a formula (OWASP's list, tab and CR included)
_FORMULA = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(value: object) -> object:
    """A value for a CSV cell: numbers as they are; text that a spreadsheet would evaluate
    as a formula is prefixed with ' (shown, not run)."""
    if isinstance(value, str) and value.startswith(_FORMULA):
        return "'" + value
    return value


def plot_text(value: object) -> str:
    """A value for a matplotlib label: printable, and no mathtext ($...$ is typeset, and an
    unbalanced one is an error)."""
    return printable(value).replace("$", r"\$")


class SafeConsole(Console):
    """A rich Console that shows every string as it is: markup is off (a '[/]' in a stored
    name is text, not a style that fails to parse) and unprintable characters are escaped.
    Tables, titles and prints all pass through render_str."""

    def __init__(self, **kw: Any) -> None:
        kw.setdefault("markup", False)
        kw.setdefault("emoji", False)
        kw.setdefault("highlight", False)
        super().__init__(**kw)

    def render_str(self, text: str, **kw: Any) -> Any:
        return super().render_str(printable(text), **kw)
