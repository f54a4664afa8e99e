"""Lexical rules of the textual IR: tokens, string literals, and how names, ops and keys are written.

Shared by the printer (``tlc.ir.text``) and the parser (``tlc.ir.text_parser``) so that what one writes the
other reads.
"""

from __future__ import annotations

import re

# ---------------------------------------------------------------------------- lexical rules (shared)
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*\Z")
_SIGIL_NAME = re.compile(r"[A-Za-z0-9_.]+\Z")
_OP = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
#: Words that start a trailer or end a graph; an op of the default domain with such a name is quoted.
RESERVED_OPS = frozenset({"return", "name", "doc"})
# Characters a string literal escapes: quotes, backslash, controls, and what XML or UTF-8 cannot carry.
_NEEDS_ESCAPE = re.compile('["\\\\\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff\ufffe\uffff]')
_SHORT_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_UNESCAPE = re.compile(r"\\(u[0-9a-fA-F]{4}|[\"\\/bfnrt])")
_UNESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


def quote(text: str) -> str:
    """``text`` as a double-quoted string literal (JSON-style escapes; each ``\\uXXXX`` is one code point)."""
    return '"' + _NEEDS_ESCAPE.sub(lambda m: _SHORT_ESCAPES.get(m.group(), f"\\u{ord(m.group()):04x}"),
                                   text) + '"'


def unquote(literal: str) -> str:
    body = literal[1:-1]
    if "\\" not in body:
        return body
    return _UNESCAPE.sub(lambda m: chr(int(m.group(1)[1:], 16)) if m.group(1)[0] == "u"
                         else _UNESCAPES[m.group(1)], body)


def is_word(text: str) -> bool:
    return bool(_WORD.match(text))


def format_word(text: str) -> str:
    """A key, dim symbol or attribute name: bare when it is a plain word, else quoted."""
    return text if _WORD.match(text) else quote(text)


def format_name(sigil: str, name: str) -> str:
    """``%name`` / ``@name``, quoting names that are not plain (``%"conv1/7x7_s2:0"``)."""
    return sigil + (name if _SIGIL_NAME.match(name) else quote(name))


def format_op(op: str, domain: str) -> str:
    if _OP.match(op) and (domain == "" and op not in RESERVED_OPS or _WORD.match(domain)):
        return f"{domain}.{op}" if domain else op
    return quote(op) if domain == "" else f"{quote(domain)}.{quote(op)}"


# ---------------------------------------------------------------------------- lexer
_STRING = r'"(?:[^"\\\n\r]|\\(?:u[0-9a-fA-F]{4}|["\\/bfnrt]))*"'
_TOKEN = re.compile("|".join([
    r"(?P<skip>(?:[ \t\r\n]+|#[^\n]*)+)",
    rf"(?P<string>{_STRING})",
    rf"(?P<value>%(?:[A-Za-z0-9_.]+|{_STRING}))",
    rf"(?P<symbol>@(?:[A-Za-z0-9_.]+|{_STRING}))",
    r"(?P<number>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|-(?:inf|nan)\b)",
    r"(?P<word>[A-Za-z_][A-Za-z0-9_.]*)",
    r"(?P<ellipsis>\.\.\.)",
    r"(?P<punct>[(){}\[\]<>,=:?*.])",
]))
INT = re.compile(r"-?\d+\Z")
#: the longest number literal read (the printer writes at most ~25 characters; Python refuses ints of more than
#: 4300 digits with a ValueError, and long ones cost quadratic time)
MAX_NUMBER_CHARS = 400


class Token:
    __slots__ = ("kind", "text", "pos")

    def __init__(self, kind: str, text: str, pos: int):
        self.kind, self.text, self.pos = kind, text, pos

    def describe(self) -> str:
        return "end of input" if self.kind == "eof" else f"{self.text[:40]!r}"


def tokenize(text: str, fail) -> list[Token]:
    tokens, pos, end = [], 0, len(text)
    while pos < end:
        m = _TOKEN.match(text, pos)
        if m is None:
            what = "an unterminated or malformed string" if text[pos] in '"%@' else repr(text[pos])
            fail(pos, f"unexpected {what}")
        if m.lastgroup == "number" and m.end() - pos > MAX_NUMBER_CHARS:
            fail(pos, f"a number of {m.end() - pos} characters; at most {MAX_NUMBER_CHARS} are read")
        if m.lastgroup != "skip":
            tokens.append(Token(m.lastgroup, m.group(), pos))
        pos = m.end()
    tokens.append(Token("eof", "", end))
    return tokens
