"""The line walk every environment-profile reader shares: blank lines skipped, `#` comments
collected, the rest handed over with its line number."""

from __future__ import annotations

from collections.abc import Iterator


def setting_lines(text: str, comments: list[str]) -> Iterator[tuple[int, str]]:
    """(line number, stripped line) of every line that is neither blank nor a comment;
    comments (without `#`) are appended to `comments` on the way."""
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            comments.append(line[1:].strip())
            continue
        yield no, line
