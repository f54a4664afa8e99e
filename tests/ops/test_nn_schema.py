"""The registry's schemas of the nn, conv, pool, norm and reduce ops agree with ONNX's (opset 21)."""

from __future__ import annotations

import onnx
import pytest
from onnx import defs

import tlc
from tlc.ops import REQUIRED

OPS = ("MatMul", "Gemm", "Einsum", "Softmax", "LogSoftmax", "Hardmax", "Conv", "ConvTranspose", "MaxPool",
       "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "BatchNormalization",
       "LayerNormalization", "InstanceNormalization", "GroupNormalization", "LRN", "LpNormalization",
       "MeanVarianceNormalization", "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1",
       "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin")
_KINDS = {onnx.AttributeProto.INT: "int", onnx.AttributeProto.FLOAT: "float", onnx.AttributeProto.STRING: "string",
          onnx.AttributeProto.INTS: "ints", onnx.AttributeProto.FLOATS: "floats"}


def _onnx_default(attr):
    value = onnx.helper.get_attribute_value(attr.default_value)
    return value.decode() if isinstance(value, bytes) else value


@pytest.mark.parametrize("op", OPS)
def test_schema_matches_onnx(op):
    schema = defs.get_schema(op, 21)
    opdef = tlc.ops.get(op)
    assert set(opdef.attrs) == set(schema.attributes), f"{op}: attribute names differ"
    for name, attr in schema.attributes.items():
        mine = opdef.attrs[name]
        assert mine.kind == _KINDS[attr.type], f"{op}.{name}: kind {mine.kind}"
        if attr.required:
            assert mine.default is REQUIRED, f"{op}.{name} is required in ONNX"
        elif attr.default_value.type:
            want = _onnx_default(attr)
            assert mine.default == pytest.approx(want) if mine.kind == "float" else mine.default == want, \
                f"{op}.{name}: default {mine.default!r}, ONNX {want!r}"
        else:
            assert mine.default is None, f"{op}.{name}: ONNX has no default, tlc gives {mine.default!r}"
    lo, hi = opdef.inputs
    assert lo == schema.min_input, f"{op}: at least {lo} inputs, ONNX {schema.min_input}"
    assert (hi if hi is not None else 2**31 - 1) == schema.max_input, f"{op}: at most {hi} inputs"
