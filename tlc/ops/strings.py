"""String operators: StringConcat, StringSplit, StringNormalizer, RegexFullMatch and TfIdfVectorizer.

String tensors are numpy object arrays of Python ``str``. The reference implementations loop in Python; these
ops are rare and small in models, and none is elementwise for the code generator (kernels hold no strings).

RegexFullMatch takes an RE2 pattern (the ONNX spec) and runs Python's ``re`` on a translation of it: RE2's
``\\d \\w \\s \\b`` and POSIX classes are ASCII, ``\\z`` is the end of text, ``$`` without ``(?m)`` too.
Features RE2 lacks (backreferences, lookaround, conditionals, atomic groups, possessive quantifiers, ``\\Z``)
are refused by name rather than run with Python's meaning; so are RE2's Unicode classes (``\\p{Greek}``),
which Python's ``re`` lacks.

StringNormalizer's ``locale`` picks the case mapping: Unicode's default mapping (Python's ``str.lower`` /
``str.upper``) for the locales Python's own table knows (``locale.locale_alias``), the Turkic dotted and
dotless i for Turkish and Azerbaijani, ASCII only for "C" and "POSIX"; Lithuanian (whose rules add and drop
combining dots) and names that are not locales are refused.
"""

from __future__ import annotations

import functools
import locale as pylocale
import re
from collections.abc import Callable

import numpy as np

from ..ir.types import TensorType
from .infer import broadcast_shapes
from .registry import REQUIRED, Attr, InferContext, OpDef, Trait, register

PURE = frozenset({Trait.PURE, Trait.FOLDABLE})


def _string_input(ctx: InferContext, i: int = 0, name: str = "X") -> TensorType:
    t = ctx.type(i)
    if t.dtype != "string":
        ctx.fail(f"{name} has dtype {t.dtype}; {ctx.node.op} takes strings")
    return t


def _strings(values, shape: tuple[int, ...]) -> np.ndarray:
    """A string tensor of ``shape`` from a flat sequence of str."""
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out.reshape(shape)


# ---------------------------------------------------------------------------- StringConcat
def _concat_infer(ctx: InferContext) -> list[TensorType]:
    x, y = _string_input(ctx, 0, "X"), _string_input(ctx, 1, "Y")
    return [TensorType("string", broadcast_shapes(x.shape, y.shape))]


def string_concat(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    x, y = np.broadcast_arrays(np.asarray(x, dtype=object), np.asarray(y, dtype=object))
    return _strings([a + b for a, b in zip(x.ravel(), y.ravel())], x.shape)


register(OpDef(name="StringConcat", infer=_concat_infer, reference=string_concat, inputs=(2, 2), traits=PURE,
               doc="Elementwise concatenation of two string tensors (numpy broadcasting)."))


# ---------------------------------------------------------------------------- StringSplit
def _split_infer(ctx: InferContext) -> list[TensorType]:
    x = _string_input(ctx)
    if ctx.node.num_outputs > 2:
        ctx.fail(f"{ctx.node.num_outputs} outputs; StringSplit has 2 (Y, Z)")
    # NOTE: the number of substrings depends on the values: the new last dim is unknown
    y = TensorType("string", None if x.shape is None else tuple(x.shape) + (None,))
    return [y, TensorType("int64", x.shape)][: max(1, ctx.node.num_outputs)]


def string_split(x: np.ndarray, *, delimiter: str | None, maxsplit: int | None) -> list[np.ndarray]:
    """Each string split on ``delimiter`` at most ``maxsplit`` times; [Y padded with "" to the longest split,
    Z = number of substrings]. Without a delimiter (or with ""), runs of whitespace (Python's ``str.isspace``)
    separate and the ends are trimmed first, so the last substring ends with no whitespace (as the spec and
    onnxruntime say). An empty string has no substrings, as in onnxruntime (Python's split would give one)."""
    limit = -1 if maxsplit is None else int(maxsplit)
    if delimiter:
        parts = [str(s).split(delimiter, limit) if s else [] for s in np.asarray(x, dtype=object).ravel()]
    else:
        parts = [str(s).strip().split(None, limit) for s in np.asarray(x, dtype=object).ravel()]
    width = max((len(p) for p in parts), default=0)
    padded = [q for p in parts for q in p + [""] * (width - len(p))]
    return [_strings(padded, x.shape + (width,)), np.array([len(p) for p in parts], np.int64).reshape(x.shape)]


register(OpDef(name="StringSplit", infer=_split_infer, reference=string_split, outputs=2,
               attrs={"delimiter": Attr("string"), "maxsplit": Attr("int")}, traits=PURE, cost=4,
               doc="Split each string on a delimiter; substrings padded with '' along a new last axis, and counts."))


# ---------------------------------------------------------------------------- StringNormalizer
CASE_ACTIONS = ("NONE", "LOWER", "UPPER")
_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_ASCII_UPPER = str.maketrans("abcdefghijklmnopqrstuvwxyz", "ABCDEFGHIJKLMNOPQRSTUVWXYZ")
_TURKIC_LOWER = str.maketrans({"I": "ı", "İ": "i"})
_TURKIC_UPPER = str.maketrans({"i": "İ"})
_LOCALE_NAME = re.compile(r"([A-Za-z]{2,3})(?:[_-][A-Za-z0-9]{2,8})*(?:\.[A-Za-z0-9_-]+)?(?:@[A-Za-z0-9_-]+)?")


@functools.cache
def _known_languages() -> frozenset[str]:
    """The language codes of Python's own locale table (no extra packages, no installed locales needed)."""
    names = list(pylocale.locale_alias) + list(pylocale.locale_alias.values())
    codes = {re.split(r"[_.@]", n, maxsplit=1)[0].lower() for n in names}
    return frozenset(c for c in codes if c.isalpha() and 2 <= len(c) <= 3)


@functools.cache
def case_mapping(locale: str | None) -> tuple[Callable[[str], str], Callable[[str], str]]:
    """(lower, upper) for a locale name such as "en_US", "tr_TR.UTF-8" or "de-DE"; ValueError when refused."""
    name = (locale or "").strip()
    if name in ("C", "POSIX") or name.startswith("C."):
        return (lambda s: s.translate(_ASCII_LOWER)), (lambda s: s.translate(_ASCII_UPPER))
    if not name:
        return str.lower, str.upper
    match = _LOCALE_NAME.fullmatch(name)
    language = match.group(1).lower() if match else ""
    if language not in _known_languages():
        raise ValueError(f"locale {name!r} is not one tlc knows (expected a name such as 'en_US' or 'de_DE.UTF-8' "
                         f"whose language is in Python's locale table)")
    if language == "lt":
        raise ValueError(f"locale {name!r}: Lithuanian case mapping (combining dot above) is not supported")
    if language in ("tr", "az"):
        return (lambda s: s.translate(_TURKIC_LOWER).lower()), (lambda s: s.translate(_TURKIC_UPPER).upper())
    return str.lower, str.upper


def _normalizer_infer(ctx: InferContext) -> list[TensorType]:
    x = _string_input(ctx)
    action = ctx.attrs["case_change_action"]
    if action not in CASE_ACTIONS:
        ctx.fail(f"case_change_action {action!r} is not one of {', '.join(CASE_ACTIONS)}")
    try:
        case_mapping(ctx.attrs["locale"])
    except ValueError as exc:
        ctx.fail(str(exc))
    if x.shape is None:
        return [x]
    if len(x.shape) not in (1, 2) or (len(x.shape) == 2 and x.shape[0] not in (1, None)):
        ctx.fail(f"X is {x}; StringNormalizer takes shape [C] or [1, C]")
    # NOTE: an empty input still gives one (empty) string, so a symbolic C does not carry over
    width = max(x.shape[-1], 1) if isinstance(x.shape[-1], int) and not ctx.attrs["stopwords"] else None
    return [TensorType("string", (width,) if len(x.shape) == 1 else (1, width))]


def string_normalizer(x: np.ndarray, *, case_change_action: str, is_case_sensitive: int,
                      stopwords: list[str] | None, locale: str | None) -> np.ndarray:
    """Drop the stopwords (compared in lower case unless case sensitive), then change case. An all-dropped input
    gives one empty string, shape [1] or [1, 1]."""
    if x.ndim not in (1, 2) or (x.ndim == 2 and x.shape[0] != 1):
        raise ValueError(f"X has shape {list(x.shape)}; StringNormalizer takes [C] or [1, C]")
    if case_change_action not in CASE_ACTIONS:
        raise ValueError(f"case_change_action {case_change_action!r} is not one of {', '.join(CASE_ACTIONS)}")
    lower, upper = case_mapping(locale)
    key = (lambda s: s) if is_case_sensitive else lower
    stop = {key(w) for w in stopwords or ()}
    kept = [s for s in map(str, x.ravel()) if key(s) not in stop]
    change = {"LOWER": lower, "UPPER": upper}.get(case_change_action)
    if change is not None:
        kept = [change(s) for s in kept]
    if not kept:
        kept = [""]
    return _strings(kept, (len(kept),) if x.ndim == 1 else (1, len(kept)))


register(OpDef(name="StringNormalizer", infer=_normalizer_infer, reference=string_normalizer,
               attrs={"case_change_action": Attr("string", "NONE"), "is_case_sensitive": Attr("int", 0),
                      "stopwords": Attr("strings"), "locale": Attr("string")}, traits=PURE, cost=4,
               doc="Remove stopwords from a [C] or [1, C] string tensor, then lower or upper its case."))


# ---------------------------------------------------------------------------- RegexFullMatch
_WORD = "0-9A-Za-z_"
_PERL_CLASSES = {"d": "0-9", "w": _WORD, "s": "\\t\\n\\f\\r "}
_POSIX_CLASSES = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "ascii": "\\x00-\\x7f", "blank": "\\t ", "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9", "graph": "!-~", "lower": "a-z", "print": " -~", "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ", "upper": "A-Z", "word": _WORD, "xdigit": "0-9A-Fa-f",
}
_BOUNDARY = {"b": f"(?:(?<=[{_WORD}])(?![{_WORD}])|(?<![{_WORD}])(?=[{_WORD}]))",
             "B": f"(?:(?<=[{_WORD}])(?=[{_WORD}])|(?<![{_WORD}])(?![{_WORD}]))"}
_GROUP_REFUSALS = (("?=", "lookahead"), ("?!", "negative lookahead"), ("?<=", "lookbehind"),
                   ("?<!", "negative lookbehind"), ("?P=", "a named backreference"), ("?(", "a conditional"),
                   ("?>", "an atomic group"), ("?#", "a comment group"))
_REPEAT = re.compile(r"\{(\d*)(?:(,)(\d*))?\}")
RE2_MAX_REPEAT = 1000


class _Re2Translator:
    """One pass over an RE2 pattern, writing the Python ``re`` pattern that means the same."""

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.out: list[str] = []
        self.multiline = re.search(r"\(\?[imsU]*m", pattern) is not None

    def refuse(self, what: str) -> None:
        raise ValueError(f"pattern {self.pattern!r} uses {what}, which RE2 (the syntax RegexFullMatch takes) "
                         f"does not support")

    def translate(self) -> str:
        p, i, in_class = self.pattern, 0, False
        while i < len(p):
            c = p[i]
            if c == "\\":
                i = self.escape(i, in_class)
            elif in_class:
                i, in_class = self.class_char(i)
            elif c == "[":
                self.out.append("[")
                i += 1
                if p.startswith("^", i):
                    self.out.append("^")
                    i += 1
                if p.startswith("]", i):
                    self.out.append("\\]")
                    i += 1
                in_class = True
            elif c == "(" and p.startswith("(?", i):
                i = self.group(i)
            elif c == "{":
                i = self.repeat(i)
            elif c in "*+?" and p.startswith("+", i + 1) and not (c == "?" and i > 0 and p[i - 1] == "("):
                self.refuse(f"the possessive quantifier {c}+")
            elif c == "$" and not self.multiline:
                self.out.append("\\Z")
                i += 1
            else:
                self.out.append(c)
                i += 1
        if in_class:
            raise ValueError(f"pattern {self.pattern!r} has an unterminated character class")
        return "".join(self.out)

    def escape(self, i: int, in_class: bool) -> int:
        p = self.pattern
        if i + 1 >= len(p):
            raise ValueError(f"pattern {p!r} ends with a lone backslash")
        e = p[i + 1]
        if e == "Q":
            end = p.find("\\E", i + 2)
            end = len(p) if end < 0 else end
            self.out.append(re.escape(p[i + 2:end]))
            return end + 2
        if e in "123456789" and not in_class:
            self.refuse(f"the backreference \\{e}")
        if e in "pP":
            raise ValueError(f"pattern {p!r} uses the Unicode class \\{e}..., which Python's re lacks")
        if e in "CZ":
            self.refuse(f"\\{e}")
        if e == "z":
            self.out.append("\\Z")
        elif e in "dws":
            self.out.append(_PERL_CLASSES[e] if in_class else f"[{_PERL_CLASSES[e]}]")
        elif e in "DWS":
            if in_class:
                raise ValueError(f"pattern {p!r} uses \\{e} inside a character class; tlc does not translate it")
            self.out.append(f"[^{_PERL_CLASSES[e.lower()]}]")
        elif e in "bB" and not in_class:
            self.out.append(_BOUNDARY[e])
        elif e == "x" and p.startswith("{", i + 2):
            end = p.find("}", i + 3)
            if end < 0:
                raise ValueError(f"pattern {p!r} has an unterminated \\x{{...}}")
            self.out.append(f"\\U{int(p[i + 3:end], 16):08x}")
            return end + 1
        else:
            self.out.append(p[i:i + 2])
        return i + 2

    def class_char(self, i: int) -> tuple[int, bool]:
        p = self.pattern
        c = p[i]
        if c == "]":
            self.out.append("]")
            return i + 1, False
        if p.startswith("[:", i):
            end = p.find(":]", i + 2)
            name = p[i + 2:end] if end >= 0 else ""
            if name not in _POSIX_CLASSES:
                raise ValueError(f"pattern {p!r}: [:{name}:] is not a POSIX class tlc translates "
                                 f"({', '.join(_POSIX_CLASSES)})")
            self.out.append(_POSIX_CLASSES[name])
            return end + 2, True
        # NOTE: Python reserves [, &&, ||, ~~ inside a class for set operations; RE2 reads them literally
        self.out.append("\\" + c if c in "[&|~" else c)
        return i + 1, True

    def group(self, i: int) -> int:
        p = self.pattern
        for prefix, what in _GROUP_REFUSALS:
            if p.startswith(prefix, i + 1):
                self.refuse(what)
        if p.startswith("?<", i + 1):  # RE2's (?<name>...) is Python's (?P<name>...)
            self.out.append("(?P<")
            return i + 3
        flags = re.match(r"\(\?([A-Za-z-]*)[:)]", p[i:])
        if flags and "U" in flags.group(1):
            raise ValueError(f"pattern {p!r} uses RE2's ungreedy flag U, which Python's re lacks")
        if flags and set(flags.group(1)) - set("ims-"):
            self.refuse(f"the flags {flags.group(1)!r} (RE2 has i, m, s and U)")
        self.out.append("(")
        return i + 1

    def repeat(self, i: int) -> int:
        p = self.pattern
        match = _REPEAT.match(p, i)
        if match is None or not match.group(1):  # RE2 reads {, {,n} and {x} as literal text
            self.out.append("\\{")
            return i + 1
        counts = [int(v) for v in (match.group(1), match.group(3)) if v]
        if max(counts) > RE2_MAX_REPEAT:
            self.refuse(f"a repeat count above {RE2_MAX_REPEAT}")
        if p.startswith("+", match.end()):
            self.refuse("a possessive quantifier {...}+")
        self.out.append(match.group(0))
        return match.end()


@functools.lru_cache(maxsize=64)
def compile_re2(pattern: str) -> re.Pattern:
    """Python's compiled form of an RE2 pattern; ValueError naming what is refused or invalid."""
    translated = _Re2Translator(pattern).translate()
    try:
        return re.compile(translated)
    except re.error as exc:
        raise ValueError(f"pattern {pattern!r} is not valid (Python's re reads it as {translated!r}: {exc})") from None


def _regex_infer(ctx: InferContext) -> list[TensorType]:
    x = _string_input(ctx)
    if ctx.attrs["pattern"] is None:
        ctx.fail("RegexFullMatch needs the pattern attribute")
    try:
        compile_re2(ctx.attrs["pattern"])
    except ValueError as exc:
        ctx.fail(str(exc))
    return [x.with_dtype("bool")]


def regex_full_match(x: np.ndarray, *, pattern: str | None) -> np.ndarray:
    if pattern is None:
        raise ValueError("RegexFullMatch needs the pattern attribute")
    compiled = compile_re2(pattern)
    return np.array([compiled.fullmatch(str(s)) is not None for s in x.ravel()], dtype=bool).reshape(x.shape)


register(OpDef(name="RegexFullMatch", infer=_regex_infer, reference=regex_full_match,
               attrs={"pattern": Attr("string")}, traits=PURE, cost=8,
               doc="True where a string matches an RE2 pattern in full."))


# ---------------------------------------------------------------------------- TfIdfVectorizer
TFIDF_MODES = ("TF", "IDF", "TFIDF")


def ngram_pool(pool: list, ngram_counts: list[int], ngram_indexes: list[int]) -> dict[tuple, int]:
    """The pool as n-gram -> its position among the pool's n-grams. ``ngram_counts[k]`` is where the
    (k+1)-grams start in the flat pool; ValueError when the attributes do not fit together."""
    starts = list(ngram_counts) + [len(pool)]
    if any(not 0 <= a <= b <= len(pool) for a, b in zip(starts, starts[1:])):
        raise ValueError(f"ngram_counts {list(ngram_counts)} are not ascending starts within the pool of "
                         f"{len(pool)}")
    table: dict[tuple, int] = {}
    position = 0
    for size, (a, b) in enumerate(zip(starts, starts[1:]), start=1):
        if (b - a) % size:
            raise ValueError(f"the pool's {size}-grams take {b - a} items, not a multiple of {size}")
        for k in range(a, b, size):
            gram = tuple(pool[k:k + size])
            if gram in table:
                raise ValueError(f"the pool repeats the {size}-gram {list(gram)}")
            table[gram] = position
            position += 1
    if len(ngram_indexes) != position:
        raise ValueError(f"ngram_indexes has {len(ngram_indexes)} entries; the pool holds {position} n-grams")
    return table


def _check_tfidf(attrs: dict, dtype: str) -> str | None:
    """Why the attributes (and input dtype) do not fit together, or None."""
    strings, ints = attrs["pool_strings"], attrs["pool_int64s"]
    if (strings is None) == (ints is None):
        return "exactly one of pool_strings and pool_int64s must be given"
    if strings is not None and dtype != "string":
        return f"X has dtype {dtype}; pool_strings needs a string input"
    if ints is not None and dtype not in ("int32", "int64"):
        return f"X has dtype {dtype}; pool_int64s needs an int32 or int64 input"
    if attrs["mode"] not in TFIDF_MODES:
        return f"mode {attrs['mode']!r} is not one of {', '.join(TFIDF_MODES)}"
    if not 1 <= attrs["min_gram_length"] <= attrs["max_gram_length"] or attrs["max_skip_count"] < 0:
        return (f"expected 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0, got "
                f"{attrs['min_gram_length']}, {attrs['max_gram_length']}, {attrs['max_skip_count']}")
    indexes, weights = attrs["ngram_indexes"], attrs["weights"]
    if not indexes or min(indexes) < 0:
        return f"ngram_indexes {list(indexes)} must be non-empty and >= 0"
    if weights is not None and len(weights) != len(indexes):
        return f"weights has {len(weights)} entries; ngram_indexes has {len(indexes)}"
    try:
        ngram_pool(strings if strings is not None else ints, attrs["ngram_counts"], indexes)
    except ValueError as exc:
        return str(exc)
    return None


def _tfidf_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.type(0)
    reason = _check_tfidf(ctx.attrs, x.dtype)
    if reason:
        ctx.fail(reason)
    width = max(ctx.attrs["ngram_indexes"]) + 1
    if x.shape is None:
        return [TensorType("float32", None)]
    if len(x.shape) not in (1, 2):
        ctx.fail(f"X is {x}; TfIdfVectorizer takes [C] or [N, C]")
    return [TensorType("float32", (width,) if len(x.shape) == 1 else (x.shape[0], width))]


def tfidf_vectorizer(x: np.ndarray, *, mode: str, min_gram_length: int, max_gram_length: int, max_skip_count: int,
                     ngram_counts: list[int], ngram_indexes: list[int], pool_int64s: list[int] | None,
                     pool_strings: list[str] | None, weights: list[float] | None) -> np.ndarray:
    """Counts of the pool's n-grams in each row: n items taken every ``skip + 1`` positions, for every skip up to
    ``max_skip_count`` (1-grams once); then TF (counts), IDF (weight where present) or TFIDF (count * weight)."""
    attrs = {"mode": mode, "min_gram_length": min_gram_length, "max_gram_length": max_gram_length,
             "max_skip_count": max_skip_count, "ngram_counts": ngram_counts, "ngram_indexes": ngram_indexes,
             "pool_int64s": pool_int64s, "pool_strings": pool_strings, "weights": weights}
    reason = _check_tfidf(attrs, "string" if x.dtype == object else x.dtype.name)
    if reason or x.ndim not in (1, 2):
        raise ValueError(reason or f"X has shape {list(x.shape)}; TfIdfVectorizer takes [C] or [N, C]")
    pool = pool_strings if pool_strings is not None else pool_int64s
    table = ngram_pool(pool, ngram_counts, ngram_indexes)
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    counts = np.zeros((rows.shape[0], len(ngram_indexes)), np.float64)
    for r, row in enumerate(rows):
        items = row.tolist()
        for size in range(min_gram_length, min(max_gram_length, len(ngram_counts)) + 1):
            for step in range(1, (max_skip_count + 2) if size > 1 else 2):
                for start in range(len(items) - (size - 1) * step):
                    found = table.get(tuple(items[start:start + (size - 1) * step + 1:step]))
                    if found is not None:
                        counts[r, found] += 1
    w = np.ones(len(ngram_indexes)) if weights is None else np.asarray(weights, np.float64)
    scores = {"TF": counts, "IDF": (counts > 0) * w, "TFIDF": counts * w}[mode]
    out = np.zeros((rows.shape[0], max(ngram_indexes) + 1), np.float32)
    out[:, ngram_indexes] = scores
    return out[0] if x.ndim == 1 else out


register(OpDef(name="TfIdfVectorizer", infer=_tfidf_infer, reference=tfidf_vectorizer,
               attrs={"mode": Attr("string", REQUIRED), "min_gram_length": Attr("int", REQUIRED),
                      "max_gram_length": Attr("int", REQUIRED), "max_skip_count": Attr("int", REQUIRED),
                      "ngram_counts": Attr("ints", REQUIRED), "ngram_indexes": Attr("ints", REQUIRED),
                      "pool_int64s": Attr("ints"), "pool_strings": Attr("strings"), "weights": Attr("floats")},
               traits=PURE, cost=16,
               doc="Count (TF), mark (IDF) or weight (TFIDF) a pool's n-grams, with skips, in each row."))
