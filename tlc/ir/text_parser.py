"""The parser of the textual IR (the grammar is documented in ``tlc.ir.text``).

Also ``add_exact_node``, which restores a node exactly as it was saved (the GraphML reader uses it too).

NOTE: the parser never evaluates anything it reads: names and strings become data, never code. Text is untrusted
input (SECURITY.md): every way it can nest (graphs in attributes, lists in lists, ``opt<seq<...>>``) is bounded, so
that hostile text gets an ``InvalidModelError`` naming line and column, never a ``RecursionError``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Mapping, Sequence
from typing import Any

import ml_dtypes
import numpy as np

from ..errors import InvalidModelError
from .graph import Graph, Node, Value
from .text_lexer import INT, Token, tokenize, unquote
from .types import DTYPES, ML_INT_DTYPES, OptionalType, SequenceType, TensorType, ValueType, np_dtype
from .verify import MAX_BODY_DEPTH

#: lists nested in lists in an attribute value (ONNX attributes are flat lists; GraphML may nest one more)
MAX_LIST_DEPTH = 8


# ---------------------------------------------------------------------------- building
def add_exact_node(graph: Graph, op: str, domain: str, name: str, attrs: dict[str, Any],
                   inputs: Sequence[Value | None], output_names: Sequence[str],
                   output_types: Sequence[TensorType | None], doc: str = "") -> Node:
    """Add a node exactly as described: no renaming, no inference, ``len(inputs)`` input ports.

    For readers that restore a saved graph (text, GraphML): ``Graph.add_node`` would make names unique and
    drop trailing missing inputs, which a round trip must not do.
    """
    seen = set()
    for out in output_names:
        if graph.has_value(out) or out in seen:
            raise InvalidModelError(f"value name {out!r} is defined twice in graph {graph.name!r}")
        seen.add(out)
    node = graph._new_node(op, domain, name, dict(attrs), len(inputs), list(output_names), doc)
    node.output_types = list(output_types)
    for port, v in enumerate(inputs):
        if v is not None:
            graph.nx.add_edge(v.node, node.id, key=port, src_port=v.port)
    return node


# ---------------------------------------------------------------------------- parser
class Parser:
    """A recursive-descent parser over the token list; every error names line:column and what it expected."""

    def __init__(self, text: str, tensors: Mapping[str, np.ndarray] | None, source: str = "<text>"):
        self.text, self.tensors, self.source = text, tensors, source
        self._line_starts = [0] + [m.end() for m in re.finditer("\n", text)]
        self.tokens = tokenize(text, self._fail_at)
        self.i = 0
        self.graph_depth = -1   # 0 while parsing the outermost graph, 1 in its bodies, ...
        self.list_depth = 0

    # -- plumbing
    def _fail_at(self, pos: int, message: str):
        line = bisect.bisect_right(self._line_starts, pos)
        col = pos - self._line_starts[line - 1] + 1
        raise InvalidModelError(f"{self.source}:{line}:{col}: {message}")

    def fail(self, message: str, tok: Token | None = None):
        tok = tok or self.peek()
        self._fail_at(tok.pos, message)

    def peek(self) -> Token:
        return self.tokens[self.i]

    def next(self) -> Token:
        tok = self.tokens[self.i]
        if tok.kind != "eof":  # NOTE: the end stays the current token, however often a caller asks past it
            self.i += 1
        return tok

    def at(self, text: str, kind: str | None = None) -> bool:
        tok = self.tokens[self.i]
        return tok.text == text and tok.kind in ((kind,) if kind else ("punct", "word", "ellipsis"))

    def accept(self, text: str, kind: str | None = None) -> bool:
        if self.at(text, kind):
            self.i += 1
            return True
        return False

    def expect(self, text: str, what: str = "") -> Token:
        if not self.at(text):
            self.fail(f"expected {text!r}{what}, got {self.peek().describe()}")
        return self.next()

    def expect_kind(self, kind: str, what: str) -> Token:
        if self.peek().kind != kind:
            self.fail(f"expected {what}, got {self.peek().describe()}")
        return self.next()

    def string(self, what: str = "a string literal") -> str:
        return unquote(self.expect_kind("string", what).text)

    def sigil_name(self, kind: str, what: str) -> str:
        tok = self.expect_kind(kind, what)
        return unquote(tok.text[1:]) if tok.text[1] == '"' else tok.text[1:]

    def key(self, what: str) -> str:
        tok = self.peek()
        if tok.kind in ("word", "string"):
            self.next()
            return tok.text if tok.kind == "word" else unquote(tok.text)
        self.fail(f"expected {what} (a word or a string), got {tok.describe()}")

    def comma_list(self, close: str, item) -> list:
        items = []
        if self.accept(close):
            return items
        while True:
            items.append(item())
            if self.accept(close):
                return items
            self.expect(",", f" or {close!r}")

    # -- graphs
    def parse(self) -> Graph:
        graph = self.graph()
        if self.peek().kind != "eof":
            self.fail(f"expected end of input after the graph, got {self.peek().describe()}")
        return graph

    def graph(self) -> Graph:
        start = self.expect("graph", " (a graph starts with `graph @name`)")
        if self.graph_depth >= MAX_BODY_DEPTH:
            self.fail(f"graphs are nested more than {MAX_BODY_DEPTH} levels deep", start)
        self.graph_depth += 1
        try:
            return self.graph_rest()
        finally:
            self.graph_depth -= 1

    def graph_rest(self) -> Graph:
        graph = Graph(self.sigil_name("symbol", "the graph name (@name)"))
        seen = set()
        while self.peek().kind == "word" and self.peek().text in ("opset", "producer", "metadata", "doc"):
            tok = self.next()
            if tok.text in seen:
                self.fail(f"{tok.text!r} given twice in the graph header", tok)
            seen.add(tok.text)
            if tok.text == "opset":
                graph.opset = self.dict(self.int_literal)
            elif tok.text == "metadata":
                graph.metadata = self.dict(self.string)
            elif tok.text == "doc":
                graph.doc = self.string()
            else:
                graph.producer_name, graph.producer_version = self.string(), self.string()
        self.expect("{", " to open the graph body (or opset/producer/metadata/doc)")
        while not self.at("return", "word"):
            self.statement(graph)
        self.next()
        while self.peek().kind == "value":
            tok = self.peek()
            value = self.operand(graph)
            name = self.string() if self.accept("as", "word") else graph.value_name(value)
            if any(n == name for _, n in graph.outputs):
                self.fail(f"graph output name {name!r} is used twice", tok)
            graph.outputs.append((value, name))
            if not self.accept(","):
                break
        self.expect("}", " to close the graph (after `return` and its values)")
        return graph

    def dict(self, value_fn) -> dict:
        self.expect("{")

        def item():
            key = self.key("a dictionary key")
            self.expect(":")
            return key, value_fn()

        return dict(self.comma_list("}", item))

    def int_literal(self) -> int:
        tok = self.expect_kind("number", "an integer")
        if not INT.match(tok.text):
            self.fail(f"expected an integer, got {tok.describe()}", tok)
        return int(tok.text)

    # -- statements
    def statement(self, graph: Graph) -> None:
        start = self.peek()
        names = []
        if start.kind == "value":
            names = self.comma_list_until("=", lambda: self.sigil_name("value", "a result (%name)"))
        op, domain = self.op_ref()
        inputs = self.comma_list(")", lambda: None if self.accept("_", "word") else self.operand(graph)) \
            if self.accept("(") else []
        attrs = {}
        if self.accept("{"):
            attrs = dict(self.comma_list("}", self.attribute))
        types: list[TensorType | None] = [None] * len(names)
        if self.accept(":"):
            at = self.peek()
            types = self.comma_list_until(None, self.type)
            if len(types) != len(names):
                self.fail(f"{len(names)} results but {len(types)} types", at)
        name, doc = names[0] if names else None, ""
        while self.peek().kind == "word" and self.peek().text in ("name", "doc"):
            if self.next().text == "name":
                name = self.string("the node name")
            else:
                doc = self.string("the node doc string")
        if name is None:
            self.fail("a node without results needs `name \"...\"`", start)
        try:
            add_exact_node(graph, op, domain, name, attrs, inputs, names, types, doc)
        except InvalidModelError as exc:
            self.fail(str(exc), start)

    def comma_list_until(self, stop: str | None, item) -> list:
        items = [item()]
        while self.accept(","):
            items.append(item())
        if stop is not None:
            self.expect(stop, " or ','")
        return items

    def op_ref(self) -> tuple[str, str]:
        tok = self.peek()
        if tok.kind == "word":
            self.next()
            domain, _, op = tok.text.rpartition(".")
            return op, domain
        if tok.kind == "string":
            first = self.string()
            return (self.string("the op name"), first) if self.accept(".") else (first, "")
        self.fail(f"expected an op name, a result (%name) or `return`, got {tok.describe()}")

    def operand(self, graph: Graph) -> Value:
        tok = self.peek()
        name = self.sigil_name("value", "an operand (%name or _)")
        if not graph.has_value(name):
            self.fail(f"value %{name} is not defined before its use in graph {graph.name!r}", tok)
        return graph.value(name)

    def attribute(self) -> tuple[str, Any]:
        key = self.key("an attribute name")
        self.expect("=", f" after attribute name {key!r}")
        return key, self.attr_value()

    def attr_value(self) -> Any:
        tok = self.peek()
        if tok.kind == "number":
            self.next()
            return int(tok.text) if INT.match(tok.text) else float(tok.text)
        if tok.kind == "string":
            return self.string()
        if tok.kind == "word" and tok.text in _WORD_LITERALS:
            self.next()
            return _WORD_LITERALS[tok.text]
        if self.accept("["):
            if self.list_depth >= MAX_LIST_DEPTH:
                self.fail(f"lists are nested more than {MAX_LIST_DEPTH} levels deep", tok)
            self.list_depth += 1
            try:
                return self.comma_list("]", self.attr_value)
            finally:
                self.list_depth -= 1
        if tok.text == "dense" and tok.kind == "word":
            return self.tensor()
        if tok.text == "graph" and tok.kind == "word":
            return self.graph()
        self.fail(f"expected an attribute value (number, string, true/false, [list], dense<...> or "
                  f"graph @...), got {tok.describe()}")

    # -- types and tensors
    def type(self) -> ValueType | None:
        tok = self.expect_kind("word", "a type (dtype[dims], seq<...>, opt<...> or _)")
        if tok.text == "_":
            return None
        if tok.text in ("seq", "opt"):
            self.expect("<", f" after {tok.text!r}")
            # NOTE: what may nest is known before recursing (a sequence of tensors, an optional of a tensor or a
            # sequence), so `opt<opt<opt<...` fails here at its second level instead of recursing on
            inner_tok = self.peek()
            if inner_tok.kind == "word" and (inner_tok.text == "opt" or inner_tok.text == "seq" == tok.text):
                what = "a sequence holds tensors" if tok.text == "seq" else "an optional holds a tensor or a sequence"
                self.fail(f"{what}, got {inner_tok.text}<...>", inner_tok)
            inner = self.type()
            self.expect(">", f" to close {tok.text}<...>")
            if tok.text == "seq" and not isinstance(inner, TensorType):
                self.fail(f"a sequence holds tensors, got {inner or '_'}", tok)
            if tok.text == "opt" and not isinstance(inner, (TensorType, SequenceType)):
                self.fail(f"an optional holds a tensor or a sequence, got {inner or '_'}", tok)
            return SequenceType(inner) if tok.text == "seq" else OptionalType(inner)
        if tok.text not in DTYPES:
            self.fail(f"unknown dtype {tok.text!r}; expected one of {', '.join(DTYPES)}", tok)
        self.expect("[", " after the dtype")
        if self.accept("*"):
            self.expect("]", " after '*' (unknown rank)")
            return TensorType(tok.text, None)
        return TensorType(tok.text, tuple(self.comma_list("]", self.dim)))

    def dim(self):
        tok = self.next()
        if tok.kind == "number" and INT.match(tok.text) and not tok.text.startswith("-"):
            return int(tok.text)
        if tok.kind == "word":
            return tok.text
        if tok.kind == "string" and tok.text != '""':
            return unquote(tok.text)
        if tok.kind == "punct" and tok.text == "?":
            return None
        self.fail(f"expected a dim (a size >= 0, a symbol or ?), got {tok.describe()}", tok)

    def tensor(self) -> np.ndarray:
        start = self.next()
        self.expect("<", " after 'dense'")
        ttype = self.type()
        self.expect(">", " after the tensor type")
        if not isinstance(ttype, TensorType) or not ttype.is_static:
            self.fail("a tensor needs a static type such as float32[2,3]", start)
        tok = self.peek()
        if tok.kind == "ellipsis":
            self.fail("this tensor was elided when printed (`...`): its data is not in the text; "
                      "print with tensors={} or save with save_text to keep it", tok)
        if tok.kind == "symbol":
            return self.external_tensor(ttype)
        self.expect("[", " (tensor elements), '@key' or '...'")
        elems = self.comma_list("]", self.next)
        if len(elems) != ttype.numel:
            self.fail(f"tensor of type {ttype} needs {ttype.numel} elements, got {len(elems)}", tok)
        return _array(self, ttype, elems)

    def external_tensor(self, ttype: TensorType) -> np.ndarray:
        tok = self.peek()
        key = self.sigil_name("symbol", "a tensor key")
        if self.tensors is None or key not in self.tensors:
            where = "no tensors were given" if self.tensors is None else "it is not among the tensors given"
            self.fail(f"tensor @{key} is stored outside the text but {where} (save_text writes them to "
                      f"an .npz beside the .tlc file)", tok)
        try:
            array = np.asarray(self.tensors[key])
        except ValueError as exc:  # e.g. an object array in an .npz read without pickle
            self.fail(f"tensor @{key} cannot be read: {exc}", tok)
        if not ttype.matches(array) or array.shape != ttype.shape:
            self.fail(f"tensor @{key} is {TensorType.of(array)} but the text declares {ttype}", tok)
        return array


_WORD_LITERALS = {"true": True, "false": False, "inf": float("inf"), "nan": float("nan")}


def _array(parser: Parser, ttype: TensorType, elems: list[Token]) -> np.ndarray:
    """Convert element tokens to an array of ``ttype``, naming the first element that does not fit."""
    kind = ttype.dtype
    values: list[Any] = []
    for tok in elems:
        if kind == "string":
            ok = tok.kind == "string"
            value = unquote(tok.text) if ok else None
        elif kind == "bool":
            ok = tok.kind == "word" and tok.text in ("true", "false")
            value = tok.text == "true"
        elif kind.startswith(("int", "uint")):
            ok = tok.kind == "number" and bool(INT.match(tok.text))
            value = int(tok.text) if ok else None
            if ok and not _fits(value, kind):
                parser.fail(f"element {tok.text} does not fit in {kind}", tok)
        else:
            ok = tok.kind == "number" or (tok.kind == "word" and tok.text in ("inf", "nan"))
            value = float(tok.text) if ok else None
        if not ok:
            parser.fail(f"expected an element of dtype {kind}, got {tok.describe()}", tok)
        values.append(value)
    if kind.startswith("float"):
        # NOTE: parsing the shortest decimal as float64 then rounding is exact for float32/float16
        # (53 >= 2*24 + 2), so the printed shortest form round-trips bit for bit.
        with np.errstate(over="ignore"):
            array = np.array(values, dtype=np.float64).astype(kind)
    else:  # integers were checked against their range above: numpy would wrap int4 silently
        array = np.array(values, dtype=np_dtype(kind))
    return array.reshape(ttype.shape)


def _fits(value: int, dtype: str) -> bool:
    info = ml_dtypes.iinfo(dtype) if dtype in ML_INT_DTYPES else np.iinfo(dtype)
    return int(info.min) <= value <= int(info.max)
