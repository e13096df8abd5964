"""Export lines read back as each shell reads them, by the shells' documented rules, written afresh here.

Every parser returns statements in one form, so the three shells' readings of one export compare:
``("comment", text)``, ``("set", name, value)`` (a variable for the lines after), ``("run", env,
argv, background)`` (``env`` the variables set on the command's own line), ``("words", argv)`` (flags
to add to a command), ``("text", line)`` (a line that is no shell's, passed through). A character the
shell would read as syntax where the export meant it as data is an AssertionError: the parser does not
guess what the user's shell would have done with it.

- POSIX sh (XCU 2.2, 2.6, 2.9.1): ``'...'`` takes everything literally; ``"..."`` everything but ``$``,
  `````` ` `````` and ``\\``; ``\\`` outside quotes takes the next character; an unquoted character
  other than the ones no POSIX shell treats specially (letters, digits, ``_ @ % + = : , . / -``) is
  syntax; words are split at unquoted blanks; leading ``NAME=VALUE`` words set variables for the
  command; a trailing unquoted ``&`` runs it in the background.
- cmd.exe (``cmd /?``, ``set /?``, ``start /?``; the phases of the batch parser): ``%`` expands
  variables anywhere; a ``"`` turns quoting on and off, and inside quotes every character is plain;
  outside them ``^`` takes the next character literally and ``& | < > ( )`` are syntax; ``&&`` runs the
  next command after this one; ``set "NAME=VALUE"`` takes what lies between the first and last quote;
  ``start "TITLE" cmd`` runs cmd in a new window; ``REM`` starts a comment. The program then splits
  what cmd.exe hands it by the Microsoft C runtime's rules (``CommandLineToArgvW``): blanks outside
  quotes separate words, ``"`` toggles quoting, 2n backslashes before a ``"`` are n backslashes and the
  quote toggles, 2n+1 are n and a literal ``"``, other backslashes are literal.
- PowerShell (about_Parsing, about_Quoting_Rules): ``#`` starts a comment; ``;`` separates statements;
  in argument mode ``'...'`` is literal with ``''`` (or a typographic single quote twice) for one
  quote; unquoted words may hold letters, digits and ``_ . : / = + - \\`` only, and one that reads as
  a number must be digits alone; ``$env:NAME = 'VALUE'`` sets a variable; ``Start-Process NAME
  -ArgumentList 'a','b'`` runs NAME with those arguments in a new window.
"""

from __future__ import annotations

import re

Statement = tuple

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def parse(lines: list[str], shell: str) -> list[Statement]:
    """Every line's statements, in order."""
    one = {"posix": posix_line, "cmd": cmd_line, "powershell": ps_line}[shell]
    return [statement for line in lines for statement in one(line)]


# POSIX sh

_POSIX_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]")


def _posix_words(line: str) -> list[tuple[str, str]]:
    """(word, raw text) of each word of a line with no operators."""
    words: list[tuple[str, str]] = []
    word, raw, started, i = "", "", False, 0
    while i < len(line):
        c = line[i]
        if c in " \t":
            if started:
                words.append((word, raw))
            word, raw, started = "", "", False
            i += 1
            continue
        started = True
        if c == "'":
            end = line.index("'", i + 1)  # ValueError: an unterminated quote
            word, raw, i = word + line[i + 1 : end], raw + line[i : end + 1], end + 1
        elif c == '"':
            j, body = i + 1, ""
            while line[j] != '"':
                assert line[j] not in "$`", f"expansion inside double quotes: {line!r}"
                if line[j] == "\\" and line[j + 1] in '$`"\\':
                    j += 1
                body += line[j]
                j += 1
            word, raw, i = word + body, raw + line[i : j + 1], j + 1
        elif c == "\\":
            word, raw, i = word + line[i + 1], raw + line[i : i + 2], i + 2
        else:
            assert _POSIX_PLAIN.fullmatch(c), f"unquoted {c!r} is syntax in sh: {line!r}"
            word, raw, i = word + c, raw + c, i + 1
    if started:
        words.append((word, raw))
    return words


def posix_line(line: str) -> list[Statement]:
    if line.startswith("# "):
        return [("comment", line[2:])]
    if line.startswith('"'):
        return [("text", line)]
    background = line.endswith(" &")
    words = _posix_words(line[:-2] if background else line)
    if words[0][1] == "export":
        name, value = _assignment(words[1])
        assert len(words) == 2
        return [("set", name, value)]
    env = []
    while words and _assignment(words[0]) is not None:
        env.append(_assignment(words.pop(0)))
    argv = tuple(w for w, _ in words)
    if argv[0].startswith("-"):
        assert not env and not background
        return [("words", argv)]
    return [("run", tuple(env), argv, background)]


def _assignment(word: tuple[str, str]) -> tuple[str, str] | None:
    """NAME=VALUE when the name and ``=`` are unquoted (sh's rule for an assignment word)."""
    text, raw = word
    name, eq, _ = raw.partition("=")
    if not eq or not NAME.fullmatch(name):
        return None
    return name, text[len(name) + 1 :]


# cmd.exe

_CMD_SYNTAX = set("&|<>()")


def _cmd_segments(line: str) -> list[str]:
    """What cmd.exe hands each command of a line joined by ``&&``: carets outside quotes taken out."""
    assert "%" not in line, f"cmd.exe expands % even inside quotes: {line!r}"
    segments, current, quoted, i = [], "", False, 0
    while i < len(line):
        c = line[i]
        if c == '"':
            quoted = not quoted
            current += c
        elif quoted:
            current += c
        elif c == "^":
            current += line[i + 1]
            i += 1
        elif line.startswith(" && ", i):
            segments.append(current)
            current, i = "", i + 4
            continue
        else:
            assert c not in _CMD_SYNTAX, f"unquoted {c!r} is syntax in cmd.exe: {line!r}"
            current += c
        i += 1
    assert not quoted, f"unterminated quote: {line!r}"
    return [*segments, current]


def crt_argv(text: str) -> list[str]:
    """The Microsoft C runtime's split of a command line into argv."""
    argv: list[str] = []
    word, started, quoted, i = "", False, False, 0
    while i < len(text):
        c = text[i]
        if c in " \t" and not quoted:
            if started:
                argv.append(word)
            word, started = "", False
            i += 1
            continue
        started = True
        if c == "\\":
            n = len(text[i:]) - len(text[i:].lstrip("\\"))
            if i + n < len(text) and text[i + n] == '"':
                word += "\\" * (n // 2)
                if n % 2:
                    word += '"'
                    i += n + 1
                    continue
                i += n  # the quote toggles below
                continue
            word += "\\" * n
            i += n
            continue
        if c == '"':
            quoted = not quoted
        else:
            word += c
        i += 1
    if started:
        argv.append(word)
    return argv


def cmd_line(line: str) -> list[Statement]:
    if line.startswith("REM "):
        return [("comment", line[4:])]
    if line.startswith('"layer_split"'):
        return [("text", line)]
    statements: list[Statement] = []
    env: list[tuple[str, str]] = []
    segments = _cmd_segments(line)
    for n, segment in enumerate(segments):
        if segment.startswith("set "):
            body = segment[4:]
            assert body.startswith('"') and body.endswith('"'), segment
            name, _, value = body[1:-1].partition("=")
            assert NAME.fullmatch(name) and value, segment
            env.append((name, value))
            continue
        assert n == len(segments) - 1, f"a command before &&: {line!r}"
        background = segment.startswith('start "" ')
        argv = tuple(crt_argv(segment[len('start "" ') :] if background else segment))
        if argv[0].startswith("-"):
            assert not env and not background
            return [("words", argv)]
        return [("run", tuple(env), argv, background)]
    assert len(env) == 1, f"set alone sets one variable a line: {line!r}"
    statements.append(("set", *env[0]))
    return statements


# PowerShell

_PS_PLAIN = re.compile(r"[A-Za-z0-9_.:/=+\\-]+")
_PS_QUOTE = "'\u2018\u2019\u201a\u201b"


def _ps_tokens(statement: str) -> list[str]:
    """The argument-mode tokens of one statement, as strings; commas between quoted strings make a list
    (returned as ``[",", ...]`` markers)."""
    tokens: list[str] = []
    i = 0
    while i < len(statement):
        c = statement[i]
        if c == " ":
            i += 1
        elif c == ",":
            tokens.append(",")
            i += 1
        elif c in _PS_QUOTE:
            value, i = "", i + 1
            while True:
                if statement[i] in _PS_QUOTE:
                    if i + 1 < len(statement) and statement[i + 1] in _PS_QUOTE:
                        value, i = value + statement[i], i + 2
                        continue
                    i += 1
                    break
                value, i = value + statement[i], i + 1
            assert i == len(statement) or statement[i] in " ,", f"text after a quote: {statement!r}"
            tokens.append("'" + value)
        else:
            m = _PS_PLAIN.match(statement, i)
            assert m is not None, f"unquoted {c!r} is syntax in PowerShell: {statement!r}"
            word = m.group()
            number = re.match(r"-?[.0-9]", word)
            assert not number or word.lstrip("-").isdigit(), f"{word!r} reads as a number"
            assert m.end() == len(statement) or statement[m.end()] == " ", f"syntax after {word!r}"
            tokens.append(word)
            i = m.end()
    return tokens


def _ps_statements(line: str) -> list[str]:
    """The statements of a line: split at ``;`` outside single quotes."""
    parts, current, quoted = [], "", False
    for c in line:
        if c in _PS_QUOTE:
            quoted = not quoted  # a doubled quote toggles twice
        if c == ";" and not quoted:
            parts.append(current.strip())
            current = ""
        else:
            current += c
    return [*parts, current.strip()]


def _unquote(token: str) -> str:
    return token[1:] if token.startswith("'") else token


def ps_line(line: str) -> list[Statement]:
    if line.startswith("# "):
        return [("comment", line[2:])]
    if line.startswith('"layer_split"'):
        return [("text", line)]
    env: list[tuple[str, str]] = []
    statements = _ps_statements(line)
    for n, statement in enumerate(statements):
        m = re.fullmatch(r"\$env:([A-Za-z_][A-Za-z0-9_]*)=(.*)", statement)
        if m:
            [value] = _ps_tokens(m.group(2))
            assert value.startswith("'"), f"an assignment takes an expression: {statement!r}"
            env.append((m.group(1), value[1:]))
            continue
        assert n == len(statements) - 1, f"a command before ';': {line!r}"
        tokens = _ps_tokens(statement)
        if tokens[0] == "Start-Process":
            assert tokens[2] == "-ArgumentList" and all(t == "," for t in tokens[4:-1:2]), statement
            argv = (_unquote(tokens[1]), *(_unquote(t) for t in tokens[3::2]))
            return [("run", tuple(env), argv, True)]
        assert "," not in tokens, f"a comma makes an array: {statement!r}"
        argv = tuple(_unquote(t) for t in tokens)
        if argv[0].startswith("-"):
            assert not env
            return [("words", argv)]
        return [("run", tuple(env), argv, False)]
    assert len(env) == 1, f"one variable a line: {line!r}"
    return [("set", *env[0])]
