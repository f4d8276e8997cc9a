"""What may enter a file that runs or is read in every user's session (modules, shell
profiles, MPI parameter files): names and values from a strict character set, paths
without control characters, comments on one line; and quoting for Tcl and Lua besides.

Every MPI variable colltune writes takes a number, an algorithm name, a list of ranges
(`2:0-1024,3:1025-+`) or a path, so a value outside [A-Za-z0-9_.,:/+=@%-] is refused
rather than escaped: such a value is either an error or an attack (`a} [exec ...] {b`,
`", os.execute(...), "`), and no escaping serves every reader at once (Tcl, Lua, bash,
Open MPI's and MVAPICH2's `NAME = VALUE` parsers)."""

from __future__ import annotations

import re

from colltune.errors import ColltuneError

SAFE_VALUE = re.compile(r"[A-Za-z0-9_.,:/+=@%-]*")
SAFE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
ALLOWED = "letters, digits and _ . , : / + = @ % -"


def check_name(name: str, where: str) -> str:
    if not SAFE_NAME.fullmatch(name):
        raise ColltuneError(f"will not write the variable name {name!r} into {where}",
                            "names are letters, digits and _, not starting with a digit")
    return name


# a value every writer quotes (the modules: tcl_quote, lua_quote; profiles: shlex.quote)
# may also hold ';', which separates the rules of an MPI variable (I_MPI_ADJUST_*)
SAFE_QUOTED = re.compile(r"[A-Za-z0-9_.,:;/+=@%-]*")


# UCC's tuning strings (`UCC_TL_UCP_TUNE`): tokens joined by '#', team sizes in '[...]';
# written quoted only (tcl_quote escapes the brackets; '#' inside a quoted Tcl word, a Lua
# string or an Open MPI `NAME = VALUE` line is text, not a comment)
UCC_TUNE = re.compile(r"UCC_(?:CL|TL)_[A-Z0-9]+_TUNE")  # a tuning string's variable
SAFE_UCC_TUNE = re.compile(r"[A-Za-z0-9_.,:@#\[\]-]*")


def check_value(name: str, value: str, where: str, quoted: bool = False) -> str:
    if quoted and UCC_TUNE.fullmatch(name) and SAFE_UCC_TUNE.fullmatch(value):
        return value
    if not (SAFE_QUOTED if quoted else SAFE_VALUE).fullmatch(value):
        raise ColltuneError(f"will not write {name}={value!r} into {where}: a value that "
                            "every user's session reads may hold only " + ALLOWED
                            + (" and ;" if quoted else ""),
                            "fix the value in the file you export (MPI variables take "
                            "numbers, algorithm names, ranges and paths)")
    return value


def check_path(path: object, what: str) -> str:
    """A path that is written into generated files: no control characters (a newline would
    become a line of code), and only the value characters (it becomes a variable's value)."""
    text = str(path)
    if _CONTROL.search(text) or not SAFE_VALUE.fullmatch(text):
        raise ColltuneError(f"{what} {text!r} has characters that cannot be written into "
                            "module files and profiles safely",
                            f"use a path of {ALLOWED} only (no spaces, quotes or newlines)")
    return text


def comment(text: str) -> str:
    """One line of comment text: control characters (a newline would end the comment and
    start code) become '?'."""
    return _CONTROL.sub("?", text)


def check_env(env: dict[str, str], where: str, quoted: bool = False) -> dict[str, str]:
    """Every name and value of `env`, checked before it is written into `where` (`quoted`:
    where every value is written quoted)."""
    for k, v in env.items():
        check_name(k, where)
        check_value(k, v, where, quoted)
    return env


def tcl_quote(value: str) -> str:
    """A Tcl word that is exactly `value` (braces and backslashes escaped, so nothing is
    substituted); values are checked first, this is the second wall."""
    return '"' + re.sub(r'([\\$\[\]{}"])', r"\\\1", value) + '"'


def lua_quote(value: str) -> str:
    """A Lua string literal that is exactly `value`."""
    out = value.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + _CONTROL.sub(lambda m: f"\\{ord(m.group()):03d}", out) + '"'
