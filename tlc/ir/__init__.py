"""The graph IR: ``Graph`` on networkx, ``Node``, ``Value``, value types, verifier, hashing, text form."""

from .graph import DEFAULT_OPSET, TLC_DOMAIN, Graph, Node, Value
from .types import DTYPES, TensorType, dtype_name, np_dtype

__all__ = ["DEFAULT_OPSET", "DTYPES", "TLC_DOMAIN", "Graph", "Node", "TensorType", "Value", "dtype_name",
           "np_dtype"]
