"""Graph-interface and tensor-manipulation operators: Input, Constant, Identity, Reshape and kin.

Shape-producing inputs (Reshape's ``shape``, Expand's ``shape``, ...) are read when they are constants, so
inference resolves data-dependent shapes; otherwise the output rank is known and the dims are not.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import Dim, TensorType
from .registry import REQUIRED, Attr, InferContext, OpDef, Trait, register

PURE = frozenset({Trait.PURE, Trait.FOLDABLE})


def _input_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.node.output_types[0]
    if t is None:
        ctx.fail("graph input has no declared type")
    return [t]


def _not_executable(*_args, **_attrs):
    raise RuntimeError("Input nodes take their value from the feeds; they are never executed")


register(OpDef(name="Input", infer=_input_infer, reference=_not_executable, inputs=(0, 0), traits=frozenset(),
               doc="A graph input; its declared type is its output type."))

register(OpDef(name="Constant", infer=lambda ctx: [TensorType.of(ctx.attrs["value"])],
               reference=lambda *, value: value, inputs=(0, 0), attrs={"value": Attr("tensor", REQUIRED)},
               traits=PURE, doc="A constant tensor (ONNX's value_* attribute forms are normalised to `value`)."))

register(OpDef(name="Identity", infer=lambda ctx: [ctx.type(0)], reference=lambda x: x, traits=PURE))


def _dropout_infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    types = [t]
    if ctx.node.num_outputs > 1:
        types.append(t.with_dtype("bool"))
    return types


def _dropout(x, ratio=None, training_mode=None, *, seed):
    if training_mode is not None and bool(np.asarray(training_mode)):
        raise NotImplementedError("Dropout in training mode is not supported (inference only)")
    return [x, np.ones(x.shape, dtype=bool)]


def _dropout_outputs(attrs, num_inputs):
    return 1


register(OpDef(name="Dropout", infer=_dropout_infer, reference=_dropout, inputs=(1, 3), outputs=_dropout_outputs,
               attrs={"seed": Attr("int")}, traits=PURE,
               doc="Inference-mode Dropout: the identity, and an all-true mask when asked for."))


def reshape_dims(in_shape, target: list[int], allowzero: int) -> list[Dim]:
    """Output dims of Reshape with symbolic input dims: resolves 0 (copy) and -1 (inferred) where possible."""
    out: list[Dim] = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if in_shape is None or i >= len(in_shape):
                raise ValueError(f"Reshape copies dim {i} from an input of rank "
                                 f"{None if in_shape is None else len(in_shape)}")
            out.append(in_shape[i])
        else:
            out.append(int(d))
    if sum(1 for d in out if d == -1) > 1:
        raise ValueError("Reshape target has more than one -1")
    if -1 in out:
        idx = out.index(-1)
        if in_shape is None or any(d is None for d in in_shape):
            out[idx] = None
            return out
        in_num = int(np.prod([d for d in in_shape if isinstance(d, int)], dtype=np.int64))
        in_syms = sorted(d for d in in_shape if isinstance(d, str))
        known = [d for j, d in enumerate(out) if j != idx]
        if any(d is None for d in known):
            out[idx] = None
            return out
        out_num = int(np.prod([d for d in known if isinstance(d, int)], dtype=np.int64))
        out_syms = sorted(d for d in known if isinstance(d, str))
        rest = list(in_syms)
        for s in out_syms:
            if s in rest:
                rest.remove(s)
            else:
                out[idx] = None
                return out
        if out_num == 0 or in_num % out_num:
            if not rest:
                raise ValueError(f"cannot reshape {list(in_shape)} into {target}")
            out[idx] = None
        elif not rest:
            out[idx] = in_num // out_num
        elif len(rest) == 1 and in_num == out_num:
            out[idx] = rest[0]
        else:
            out[idx] = None
    elif in_shape is not None and all(isinstance(d, int) for d in in_shape) and all(isinstance(d, int) for d in out):
        if int(np.prod(in_shape, dtype=np.int64)) != int(np.prod(out, dtype=np.int64)):
            raise ValueError(f"cannot reshape {list(in_shape)} into {list(out)}")
    return out


def _reshape_infer(ctx: InferContext) -> list[TensorType]:
    data = ctx.type(0)
    target = ctx.const(1)
    if target is None:
        shape_t = ctx.type(1)
        if shape_t.shape is None or not isinstance(shape_t.shape[0], int):
            return [TensorType(data.dtype, None)]
        return [TensorType(data.dtype, (None,) * shape_t.shape[0])]
    try:
        dims = reshape_dims(data.shape, [int(v) for v in target.ravel()], ctx.attrs["allowzero"])
    except ValueError as exc:
        ctx.fail(str(exc))
    return [TensorType(data.dtype, tuple(dims))]


def _reshape(x, shape, *, allowzero):
    target = [int(v) for v in shape.ravel()]
    if not allowzero:
        target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return x.reshape(target)


register(OpDef(name="Reshape", infer=_reshape_infer, reference=_reshape, inputs=(2, 2),
               attrs={"allowzero": Attr("int", 0)}, traits=PURE, cost=0))
