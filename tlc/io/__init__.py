"""Reading and writing graphs: ONNX, textual IR (.tlc), DOT and GraphML, chosen by file extension.

``load`` and ``save`` are the public entry points (re-exported as ``tlc.load`` / ``tlc.save``). Writes are
atomic: the file appears complete or not at all.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import InvalidModelError, TlcError
from ..ir.fileutil import atomic_write
from ..ir.graph import Graph

__all__ = ["FORMATS", "atomic_write", "format_of", "load", "save"]

FORMATS = ("onnx", "tlc", "dot", "graphml")


def format_of(path: str | os.PathLike, explicit: str | None = None) -> str:
    """The format named by ``explicit`` or by the file's extension."""
    fmt = (explicit or Path(path).suffix.lstrip(".")).lower()
    if fmt not in FORMATS:
        raise TlcError(f"cannot tell the format of {str(path)!r}: expected an extension or --emit of "
                       f"{', '.join(FORMATS)}, got {fmt or 'none'!r}")
    return fmt


def load(path: str | os.PathLike, *, format: str | None = None) -> Graph:
    """Read a graph from an ONNX model, a .tlc text file or a GraphML file written by tlc."""
    fmt = format_of(path, format)
    if not Path(path).is_file():
        raise InvalidModelError(f"no such model file: {str(path)!r}")
    if fmt == "onnx":
        from .onnx import load_onnx

        return load_onnx(path)
    if fmt == "tlc":
        from ..ir.text import load_text

        return load_text(path)
    if fmt == "graphml":
        from .dumps import read_graphml

        return read_graphml(path)
    raise TlcError(f"{fmt} files can be written but not read back; load a .onnx, .tlc or .graphml file")


def save(graph: Graph, path: str | os.PathLike, *, format: str | None = None) -> None:
    """Write ``graph`` in the format given by ``format`` or by the extension; atomically."""
    fmt = format_of(path, format)
    if fmt == "onnx":
        from .onnx import save_onnx as writer
    elif fmt == "tlc":
        from ..ir.text import save_text as writer
    elif fmt == "dot":
        from .dumps import write_dot as writer
    else:
        from .dumps import write_graphml as writer
    writer(graph, path)
