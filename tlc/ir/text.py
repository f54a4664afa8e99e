"""The textual IR: a readable, stable text form of a ``Graph`` that parses back exactly.

Example::

    graph @mlp opset {"": 21, tlc: 1} {
      %x = Input : float32[N,784]
      %w = Constant {value = dense<float32[784,10]> @w} : float32[784,10]
      %b = Constant {value = dense<float32[3]> [0.5, 1.0, 2.0]} : float32[3]
      %h = MatMul(%x, %w) : float32[N,10]
      %c = Clip(%h, _, %b) : float32[N,10]
      %s0, %s1 = Split(%h) {axis = 1, num_outputs = 2} : float32[N,5], float32[N,5] name "split"
      %y = Softmax(%h) {axis = -1} : float32[N,10] doc "the head"
      return %y as "probs", %s0
    }

Grammar (``#`` starts a comment, so FileCheck ``# CHECK:`` lines can sit in a .tlc file)::

    graph     ::= 'graph' @NAME header* '{' statement* 'return' outputs? '}'
    header    ::= 'opset' '{' (key ':' INT),* '}' | 'producer' STRING STRING
                | 'metadata' '{' (key ':' STRING),* '}' | 'doc' STRING
    statement ::= (%NAME,+ '=')? op ('(' operand,+ ')')? ('{' (key '=' attr),+ '}')?
                  (':' type,+)? ('name' STRING)? ('doc' STRING)?
    operand   ::= %NAME | '_'                        # `_`: a missing optional input
    op        ::= WORD | STRING | STRING '.' STRING  # `tlc.Fused`: domain `tlc`, op `Fused` (last dot)
    attr      ::= INT | FLOAT | 'true' | 'false' | STRING | '[' attr,* ']' | tensor | graph
    tensor    ::= 'dense' '<' type '>' ('[' element,* ']' | @KEY | '...')
    type      ::= '_' | DTYPE '[' ('*' | dim,*) ']'  # `_`: untyped; `[*]`: unknown rank
                | 'seq' '<' type '>' | 'opt' '<' type '>'   # a sequence of tensors; an optional
    dim       ::= INT | WORD | STRING | '?'          # size, symbol, unknown
    outputs   ::= (%NAME ('as' STRING)?),+          # `as`: output name differing from the value's
    NAME      ::= [A-Za-z0-9_.]+ | STRING          key ::= WORD | STRING
    FLOAT     ::= shortest repr that round-trips, `inf`, `-inf`, `nan`

Rules that keep the text stable and exact: nodes print in ``graph.nodes()`` order; attributes sort by name;
opset and metadata keep their order; a node's name prints (``name "..."``) only where it differs from its
first result's name; strings use JSON-style escapes where each ``\\uXXXX`` is one code point; tensors print
flat in C order (floats in numpy's shortest round-trip form). Tensors with more than ``inline_limit``
elements go to the ``tensors`` dict as ``@key`` (string tensors always stay inline, so no pickle is ever
needed); without a dict they print elided (``...``), which is for humans and refuses to parse.
"""

from __future__ import annotations

import math
import os
import re
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InvalidModelError, ValidationError
from .fileutil import atomic_write
from .graph import Graph, Node
from .text_lexer import format_name, format_op, format_word, is_word, quote
from .text_parser import Parser, add_exact_node
from .types import OptionalType, SequenceType, TensorType, ValueType

__all__ = ["add_exact_node", "format_type", "load_text", "parse_graph", "parse_type", "print_graph",
           "save_text"]


def format_type(ttype: ValueType | None) -> str:
    """A type as the text IR writes it: ``TensorType``'s str form, quoting symbols that are not words;
    ``seq<...>`` and ``opt<...>`` around the element type of a sequence or optional."""
    if ttype is None:
        return "_"
    if isinstance(ttype, SequenceType):
        return f"seq<{format_type(ttype.elem)}>"
    if isinstance(ttype, OptionalType):
        return f"opt<{format_type(ttype.elem)}>"
    if ttype.shape is None or all(not isinstance(d, str) or is_word(d) for d in ttype.shape):
        return str(ttype)
    dims = ",".join("?" if d is None else format_word(d) if isinstance(d, str) else str(d)
                    for d in ttype.shape)
    return f"{ttype.dtype}[{dims}]"


def parse_type(text: str) -> ValueType | None:
    """The inverse of ``format_type``."""
    parser = Parser(text, None, "<type>")
    ttype = parser.type()
    if parser.peek().kind != "eof":
        parser.fail(f"expected the end of the type, got {parser.peek().describe()}")
    return ttype


class _Printer:
    def __init__(self, tensors: dict[str, np.ndarray] | None, inline_limit: int):
        self.tensors = tensors
        self.inline_limit = inline_limit

    def graph(self, graph: Graph, indent: str) -> str:
        """The graph's text; the first line is not indented (it may follow ``body = ``)."""
        head = [f"graph {format_name('@', graph.name)}", "opset " + _dict(graph.opset, str)]
        if (graph.producer_name, graph.producer_version) != ("tlc", ""):
            head.append(f"producer {quote(graph.producer_name)} {quote(graph.producer_version)}")
        if graph.metadata:
            head.append("metadata " + _dict(graph.metadata, quote))
        if graph.doc:
            head.append(f"doc {quote(graph.doc)}")
        inner = indent + "  "
        lines = [" ".join(head) + " {"]
        lines += [inner + self.statement(graph, node, inner) for node in graph.nodes()]
        outs = [format_name("%", graph.value_name(v))
                + ("" if name == graph.value_name(v) else f" as {quote(name)}") for v, name in graph.outputs]
        lines.append(inner + " ".join(["return", ", ".join(outs)]).rstrip())
        lines.append(indent + "}")
        return "\n".join(lines)

    def statement(self, graph: Graph, node: Node, indent: str) -> str:
        text = ", ".join(format_name("%", n) for n in node.output_names)
        text = (text + " = " if text else "") + format_op(node.op, node.domain)
        if node.num_inputs:
            text += "(" + ", ".join("_" if v is None else format_name("%", graph.value_name(v))
                                    for v in graph.inputs_of(node)) + ")"
        if node.attrs:
            hint = node.output_names[0] if node.op == "Constant" and node.output_names else node.name
            attrs = [(k, self.attr(node.attrs[k], indent, hint if k == "value" else f"{hint}.{k}", node))
                     for k in sorted(node.attrs)]
            text += " {" + ", ".join(f"{format_word(k)} = {v}" for k, v in attrs) + "}"
        if any(t is not None for t in node.output_types):
            text += " : " + ", ".join(format_type(t) for t in node.output_types)
        if not node.output_names or node.name != node.output_names[0]:
            text += f" name {quote(node.name)}"
        if node.doc:
            text += f" doc {quote(node.doc)}"
        return text

    def attr(self, value: Any, indent: str, hint: str, node: Node) -> str:
        if isinstance(value, (bool, np.bool_)):
            return "true" if value else "false"
        if isinstance(value, (int, np.integer)):
            return str(int(value))
        if isinstance(value, (float, np.floating)):
            return repr(float(value))
        if isinstance(value, str):
            return quote(value)
        if isinstance(value, np.ndarray):
            try:
                return self.tensor(value, hint)
            except ValidationError as exc:
                raise ValidationError(f"node {node.name!r} ({node.qualified_op}), attribute {hint!r}: {exc}") from None
        if isinstance(value, Graph):
            return self.graph(value, indent)
        if isinstance(value, (list, tuple)):
            items = [self.attr(v, indent, f"{hint}.{i}", node) for i, v in enumerate(value)]
            return "[" + ", ".join(items) + "]"
        raise ValidationError(f"node {node.name!r} ({node.qualified_op}): cannot print attribute {hint!r} of "
                              f"type {type(value).__name__}; expected int, float, str, list, ndarray, Graph")

    def tensor(self, array: np.ndarray, hint: str) -> str:
        ttype = TensorType.of(array)
        head = f"dense<{ttype}>"
        if array.size <= self.inline_limit or (ttype.dtype == "string" and self.tensors is not None):
            return f"{head} [{', '.join(_elements(array, ttype.dtype))}]"
        if self.tensors is None:
            return f"{head} ..."
        key = re.sub(r"[^A-Za-z0-9_.]", "_", hint)[:48] or "tensor"
        base, n = key, 0
        while key in self.tensors:
            n += 1
            key = f"{base}_{n}"
        self.tensors[key] = array
        return f"{head} @{key}"


def _dict(items: dict, fmt) -> str:
    return "{" + ", ".join(f"{format_word(k)}: {fmt(v)}" for k, v in items.items()) + "}"


def _elements(array: np.ndarray, dtype: str) -> list[str]:
    flat = array.ravel()
    if dtype == "string":
        if not all(isinstance(s, str) for s in flat):
            raise ValidationError(f"a string tensor holds non-str elements: {flat[:4]!r}")
        return [quote(s) for s in flat]
    if dtype == "bool":
        return ["true" if b else "false" for b in flat.tolist()]
    if dtype.startswith("float"):
        return [str(x) for x in flat]  # numpy's shortest round-trip form for the element type
    return [str(x) for x in flat.tolist()]


def print_graph(graph: Graph, *, tensors: dict[str, np.ndarray] | None = None, inline_limit: int = 16) -> str:
    """The text form of ``graph`` (see the module docstring); ends with a newline.

    Tensors with more than ``inline_limit`` elements are stored in ``tensors`` under a key the text names,
    or, without a dict, elided (readable, but ``parse_graph`` refuses it).
    """
    return _Printer(tensors, inline_limit).graph(graph, "") + "\n"


def parse_graph(text: str, *, tensors: Mapping[str, np.ndarray] | None = None,
                source: str = "<text>") -> Graph:
    """Parse the text form back into a ``Graph`` (the exact inverse of ``print_graph``).

    ``tensors`` supplies the arrays the text refers to as ``@key``. Errors are ``InvalidModelError`` naming
    ``source:line:column`` (``source`` is the file name when known) and what was expected. Op names and
    attributes are not checked against the registry here; ``Graph.verify`` does that.
    """
    return Parser(text, tensors, source).parse()


def _npz_path(path: str | os.PathLike) -> Path:
    return Path(str(path) + ".npz")


def _write_npz(tmp: str, tensors: dict[str, np.ndarray]) -> None:
    # What np.savez does, without its keyword-argument API (a tensor key "file" would collide with it).
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for key, array in tensors.items():
            with zf.open(key + ".npy", "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.asanyarray(array), allow_pickle=False)


def save_text(graph: Graph, path: str | os.PathLike) -> None:
    """Write ``graph`` as text to ``path``; large tensors go to ``<path>.npz`` beside it (atomic writes)."""
    tensors: dict[str, np.ndarray] = {}
    text = print_graph(graph, tensors=tensors)
    npz = _npz_path(path)
    if tensors:
        atomic_write(npz, lambda tmp: _write_npz(tmp, tensors))
    elif npz.exists():
        npz.unlink()  # arrays of an earlier save of this file; the new text does not refer to them
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8", newline="\n"))


def load_text(path: str | os.PathLike) -> Graph:
    """Read a graph written by ``save_text`` (the text and, when present, the ``.npz`` beside it)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidModelError(f"cannot read text IR file {str(path)!r}: {exc}") from exc
    npz = _npz_path(path)
    if not npz.exists():
        return parse_graph(text, source=str(path))
    try:
        _check_npz(npz)
        arrays = np.load(npz, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise InvalidModelError(f"cannot read the tensors of {str(path)!r} from {str(npz)!r}: {exc}") from exc
    with arrays:
        return parse_graph(text, tensors=arrays, source=str(path))


def _check_npz(npz: Path) -> None:
    """Refuse an .npz whose arrays the file does not hold: each member stored uncompressed (as ``save_text``
    writes them), inside the file, and as long as its .npy header's shape needs.

    NOTE: numpy allocates an array by its header's shape before it reads the data, so a 200-byte .npz declaring
    10^12 elements would cost terabytes; checked here, no array is larger than the file."""
    size = npz.stat().st_size
    with zipfile.ZipFile(npz) as archive:
        for info in archive.infolist():
            if (info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size
                    or info.file_size > size):
                raise ValueError(f"member {info.filename!r} is compressed or larger than the file ({info.file_size} "
                                 f"bytes in a {size}-byte file); save_text stores arrays uncompressed")
            with archive.open(info) as member:
                version = np.lib.format.read_magic(member)
                read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                               else np.lib.format.read_array_header_2_0)
                shape, _, dtype = read_header(member)
                need = member.tell() + math.prod(shape) * dtype.itemsize
            if not dtype.hasobject and need > info.file_size:
                raise ValueError(f"member {info.filename!r} declares {dtype}{list(shape)} ({need} bytes) but holds "
                                 f"{info.file_size} bytes")
