"""Export lines as the user's shell reads them: POSIX sh, Windows cmd.exe, or PowerShell.

Each word is quoted only where the shell would otherwise change it, so a word comes back exactly as the
program must receive it (tests/test_shells.py parses every form back by the shell's documented rules):

- posix: ``shlex.quote`` (single quotes); a variable for one command goes before it on its line
  (``NAME=VALUE cmd``), ``export NAME=VALUE`` sets it for the lines after; ``cmd &`` runs in the
  background.
- cmd: double quotes around a word with a space or one of ``^ & | < > ( ) , ; =`` and the like (inside
  them cmd.exe takes every character as it is, ``^`` too), then the program's own C runtime splits
  the line, where backslashes are literal unless they come before a double quote (doubled there);
  ``set "NAME=VALUE" && cmd`` (the variable stays set in that window), ``start "" cmd`` for the
  background, ``REM`` for comments. ``%`` and ``"`` cannot be quoted for cmd.exe and are refused.
- powershell: single quotes around a word with anything but letters, digits and ``_ . / : = + - \\``
  (a comma would make an array, ``$`` a variable, ``(`` an expression); a quote inside is doubled;
  ``$env:NAME='VALUE'; cmd`` (the variable stays set in that window), ``Start-Process`` for the
  background, ``#`` for comments. An empty word and ``"`` are refused (Windows PowerShell 5.1 drops
  the one and mangles the other on the way to a program).
"""

from __future__ import annotations

import re
import shlex

from solver.engines.export import Command, Comment, Flags, Line, SetEnv, Text

SHELLS = ("posix", "cmd", "powershell")
DEFAULT_SHELL = "posix"

#: Words cmd.exe and the C runtime pass through unchanged without quotes.
_CMD_BARE = re.compile(r"[A-Za-z0-9_@+:./\\-]+")
#: Characters no cmd.exe quoting keeps: ``%`` expands variables even inside double quotes.
_CMD_NEVER = '%"\n\r'
#: Words PowerShell passes to a program unchanged without quotes (in argument mode) ...
_PS_BARE = re.compile(r"[A-Za-z0-9_.:/=+\\-]+")
#: ... unless PowerShell reads them as a number (``1kb``, ``0x10``, ``1.50``, ``.5``): digits alone pass.
_PS_NUMBER = re.compile(r"-?[.0-9]")
#: The characters PowerShell reads as a single quote: ASCII and the typographic ones.
_PS_QUOTES = "'\u2018\u2019\u201a\u201b"


def quote(word: str, shell: str) -> str:
    """``word`` as ``shell`` must be given it for the program to receive it unchanged."""
    if shell == "posix":
        return shlex.quote(word)
    if shell == "cmd":
        return _cmd_quote(word)
    if shell == "powershell":
        return _ps_quote(word)
    raise ValueError(f"unknown shell {shell!r}; choose one of {', '.join(SHELLS)}")


def _cmd_refuse(word: str) -> None:
    bad = next((c for c in word if c in _CMD_NEVER), None)
    if bad is not None:
        raise ValueError(f"cannot quote {word!r} for cmd.exe: it holds {bad!r}")


def _cmd_quote(word: str) -> str:
    """Double quotes for cmd.exe, with the C runtime's rule for backslashes before a quote."""
    _cmd_refuse(word)
    if _CMD_BARE.fullmatch(word):
        return word
    backslashes = len(word) - len(word.rstrip("\\"))
    return '"' + word + "\\" * backslashes + '"'


def _ps_literal(word: str) -> str:
    """A single-quoted PowerShell string: every quote character inside doubled."""
    return "'" + "".join(c * 2 if c in _PS_QUOTES else c for c in word) + "'"


def _ps_quote(word: str) -> str:
    """``word`` bare where PowerShell passes it unchanged, else single-quoted. Windows PowerShell 5.1
    drops an empty argument and mangles a double quote in one: both are refused."""
    if not word or '"' in word:
        raise ValueError(f"cannot pass {word!r} to a program from PowerShell")
    bare = _PS_BARE.fullmatch(word) and (not _PS_NUMBER.match(word) or word.lstrip("-").isdigit())
    return word if bare else _ps_literal(word)


def _words(words: tuple[str, ...] | list[str], shell: str) -> str:
    return " ".join(quote(w, shell) for w in words)


def render(lines: list[Line], shell: str = DEFAULT_SHELL) -> list[str]:
    """Each line as ``shell`` reads it; ValueError for a word the shell cannot be given."""
    if shell not in SHELLS:
        raise ValueError(f"unknown shell {shell!r}; choose one of {', '.join(SHELLS)}")
    return [_line(line, shell) for line in lines]


def _line(line: Line, shell: str) -> str:
    if isinstance(line, Comment):
        return f"REM {line.text}" if shell == "cmd" else f"# {line.text}"
    if isinstance(line, Text):
        return line.text
    if isinstance(line, Flags):
        return _words(line.words, shell)
    if isinstance(line, SetEnv):
        return (
            "export " + _set(line.name, line.value, shell)
            if shell == "posix"
            else _set(line.name, line.value, shell)
        )
    return _command(line, shell)


def _set(name: str, value: str, shell: str) -> str:
    """``NAME=VALUE`` in the shell's form (posix: without ``export``, which a prefix does not take)."""
    if shell == "posix":
        return f"{name}={shlex.quote(value)}"
    if not value:  # cmd.exe and PowerShell delete a variable set to nothing
        raise ValueError(f"cannot set {name} to nothing in {shell}")
    if shell == "cmd":
        _cmd_refuse(value)
        return f'set "{name}={value}"'
    return f"$env:{name}={_ps_literal(value)}"


def _command(c: Command, shell: str) -> str:
    argv = _words(c.argv, shell)
    if shell == "posix":
        env = "".join(f"{_set(n, v, shell)} " for n, v in c.env)
        return env + argv + (" &" if c.background else "")
    if shell == "cmd":
        env = "".join(f"{_set(n, v, shell)} && " for n, v in c.env)
        return env + ('start "" ' if c.background else "") + argv
    env = "".join(f"{_set(n, v, shell)}; " for n, v in c.env)
    if not c.background:
        return env + argv
    program, *args = c.argv
    spaced = next((a for a in args if not a or re.search(r'[\s"]', a)), None)
    if spaced is not None:  # Start-Process joins its arguments with spaces, unquoted
        raise ValueError(f"cannot pass {spaced!r} through PowerShell's Start-Process")
    return f"{env}Start-Process {quote(program, shell)} -ArgumentList {','.join(map(_ps_literal, args))}"
