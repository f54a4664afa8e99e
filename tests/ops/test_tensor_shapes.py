"""Shape inference of the tensor ops: symbolic dims, constant vs computed shape-like inputs, named errors.

The generic check: a graph whose inputs carry symbols ("d0", ...) is inferred, then run on concrete arrays; every
inferred int dim must equal the produced dim and every symbol the size bound to it in the inputs.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tlc
from tlc.ir.graph import Value

INT64_MAX, INT64_MIN = 2**63 - 1, -(2**63)


def build(op: str, inputs: list, consts: tuple[int, ...] = (), symbolic: dict[int, tuple[int, ...]] | None = None,
          **attrs):
    """A one-node graph: inputs at ``consts`` become Constants, the others graph inputs whose dims at
    ``symbolic[i]`` are symbols. Returns (graph, output values, feeds, binding symbol -> size)."""
    g = tlc.Graph("t")
    values, feeds, binding = [], {}, {}
    for i, a in enumerate(inputs):
        if a is None:
            values.append(None)
            continue
        a = np.asarray(a)
        if i in consts:
            values.append(g.constant(a, name=f"c{i}"))
            continue
        shape = list(a.shape)
        for axis in (symbolic or {}).get(i, ()):
            shape[axis] = f"s{i}_{axis}"
            binding[shape[axis]] = a.shape[axis]
        values.append(g.input(f"x{i}", a.dtype, shape))
        feeds[f"x{i}"] = a
    outs = g.add_node(op, values, attrs=attrs)
    outs = (outs,) if isinstance(outs, Value) else outs
    for k, v in enumerate(outs):
        g.output(v, f"y{k}")
    g.verify()
    return g, outs, feeds, binding


def check(op: str, inputs: list, consts: tuple[int, ...] = (), symbolic=None, **attrs) -> list:
    """Infer, run, and check inference against the produced arrays; returns the inferred shapes."""
    g, outs, feeds, binding = build(op, inputs, consts, symbolic, **attrs)
    result = tlc.reference.run(g, feeds)
    shapes = []
    for k, v in enumerate(outs):
        t, array = g.type_of(v), result[f"y{k}"]
        assert t.dtype == tlc.ir.types.dtype_name(array.dtype), (op, t, array.dtype)
        if t.shape is not None:
            assert len(t.shape) == array.ndim, (op, t, array.shape)
            for d, n in zip(t.shape, array.shape):
                assert d is None or (d == n if isinstance(d, int) else binding[d] == n), (op, t, array.shape, binding)
        shapes.append(t.shape)
    return shapes


def infer(op: str, types: list, consts: dict[int, np.ndarray] | None = None, **attrs):
    """Inferred output shapes for inputs given as (dtype, shape) types, some of them constants."""
    g = tlc.Graph("t")
    values = []
    for i, t in enumerate(types):
        if consts and i in consts:
            values.append(g.constant(consts[i], name=f"c{i}"))
        elif t is None:
            values.append(None)
        else:
            values.append(g.input(f"x{i}", *t))
    outs = g.add_node(op, values, attrs=attrs)
    outs = (outs,) if isinstance(outs, Value) else outs
    return [g.type_of(v).shape for v in outs]


i64 = lambda *v: np.array(v, dtype=np.int64)  # noqa: E731


# ---------------------------------------------------------------------------- symbolic dims
def test_shape_of_symbolic_input_is_int64_vector_of_rank():
    g = tlc.Graph("t")
    x = g.input("x", "float32", ("N", "S", 8))
    for attrs, n in (({}, 3), ({"start": 1}, 2), ({"start": -1}, 1), ({"end": -1}, 2), ({"start": 2, "end": 1}, 0)):
        t = g.type_of(g.add_node("Shape", [x], attrs=attrs))
        assert (t.dtype, t.shape) == ("int64", (n,))
    assert g.type_of(g.add_node("Size", [x])).shape == ()
    assert tlc.ops.get("Shape").has(tlc.ops.Trait.SHAPE_ONLY) and tlc.ops.get("Size").has(tlc.ops.Trait.SHAPE_ONLY)
    assert g.type_of(g.add_node("Shape", [g.input("u", "float32", None)])).shape == (None,)


def test_symbols_pass_through_views():
    f32 = "float32"
    assert infer("Transpose", [(f32, ("N", "S", 8))], perm=[1, 0, 2]) == [("S", "N", 8)]
    assert infer("Transpose", [(f32, ("N", "S", 8))]) == [(8, "S", "N")]
    assert infer("Flatten", [(f32, ("N", 3, 4))]) == [("N", 12)]
    assert infer("Flatten", [(f32, ("N", 3, 4))], axis=2) == [(None, 4)]
    assert infer("Flatten", [(f32, ("N", 1, 1))], axis=-2) == [("N", 1)]
    assert infer("Unsqueeze", [(f32, ("N", 8)), None], {1: i64(0, -1)}) == [(1, "N", 8, 1)]
    assert infer("Squeeze", [(f32, ("N", 1, 8)), None], {1: i64(1)}) == [("N", 8)]
    assert infer("Squeeze", [(f32, ("N", 1, 8))]) == [None]  # N might be 1 too
    assert infer("Concat", [(f32, ("N", 4)), (f32, ("N", 2))], axis=1) == [("N", 6)]
    assert infer("Concat", [(f32, ("N", 4)), (f32, (3, 4))], axis=0) == [(None, 4)]
    assert infer("Concat", [(f32, (None, 4)), (f32, (3, "K"))], axis=0) == [(None, 4)]
    assert infer("Gather", [(f32, ("V", "D")), ("int64", ("B", "S"))], axis=0) == [("B", "S", "D")]
    assert infer("Expand", [(f32, ("N", 1)), None], {1: i64(2, 1, 5)}) == [(2, "N", 5)]
    assert infer("Split", [(f32, ("N", 6))], axis=1, num_outputs=3) == [("N", 2)] * 3


def test_slice_symbolic_dims_whole_axis_and_partial():
    f32 = "float32"
    full = infer("Slice", [(f32, ("N", "S", 8)), None, None, None], {1: i64(0, 0), 2: i64(INT64_MAX, 4), 3: i64(0, 2)})
    assert full == [("N", "S", 4)]
    rev = infer("Slice", [(f32, ("N", 8)), None, None, None, None],
                {1: i64(-1), 2: i64(INT64_MIN), 3: i64(0), 4: i64(-1)})
    assert rev == [("N", 8)]
    part = infer("Slice", [(f32, ("N", 8)), None, None], {1: i64(1), 2: i64(INT64_MAX)})
    assert part == [(None, 8)]


# ---------------------------------------------------------------------------- constant vs computed shape inputs
def test_shape_inputs_constant_give_exact_shapes_otherwise_rank():
    f32 = "float32"
    x = (f32, ("N", 3, 4))
    vec = lambda n: ("int64", (n,))  # noqa: E731
    assert infer("Reshape", [x, None], {1: i64(0, -1)}) == [("N", 12)]
    assert infer("Reshape", [x, vec(2)]) == [(None, None)]
    assert infer("Expand", [(f32, (3, 1)), vec(3)]) == [(None, 3, None)]
    assert infer("Tile", [x, None], {1: i64(1, 2, 3)}) == [("N", 6, 12)]
    assert infer("Tile", [x, vec(3)]) == [(None, None, None)]
    assert infer("Pad", [x, None], {1: i64(0, 1, 0, 0, 1, 2)}) == [("N", 5, 6)]
    assert infer("Pad", [x, vec(6)]) == [(None, None, None)]
    assert infer("Pad", [x, vec(2), None, None], {3: i64(-1)}) == [("N", 3, None)]
    assert infer("Unsqueeze", [x, vec(2)]) == [(None,) * 5]
    assert infer("Squeeze", [x, vec(1)]) == [(None, None)]
    assert infer("ConstantOfShape", [None], {0: i64(2, 5)}) == [(2, 5)]
    assert infer("ConstantOfShape", [vec(3)]) == [(None, None, None)]
    assert infer("Range", [None, None, None], {0: i64(0), 1: i64(10), 2: i64(3)}) == [(4,)]
    assert infer("Range", [("int64", ()), ("int64", ()), ("int64", ())]) == [(None,)]
    assert infer("Slice", [x, vec(1), vec(1), None], {3: i64(2)}) == [("N", 3, None)]
    assert infer("Slice", [x, vec(1), vec(1)]) == [(None, 3, 4)]
    assert infer("TopK", [x, None], {1: i64(2)}) == [("N", 3, 2)] * 2
    assert infer("TopK", [x, vec(1)], axis=1) == [("N", None, 4)] * 2
    assert infer("OneHot", [("int64", ("N",)), None, (f32, (2,))], {1: i64(5)}) == [("N", 5)]


def test_split_sizes_constant_or_computed():
    g = tlc.Graph("t")
    x = g.input("x", "float32", ("N", 6))
    a, b = g.add_node("Split", [x, g.constant(i64(2, 4))], num_outputs=2, axis=1)
    assert g.type_of(a).shape == ("N", 2) and g.type_of(b).shape == ("N", 4)
    sizes = g.add_node("Shape", [g.input("s", "float32", (None,))])
    a, b = g.add_node("Split", [x, sizes], num_outputs=2, axis=1)
    assert g.type_of(a).shape == ("N", None)


def test_resize_scales_or_sizes():
    f32 = "float32"
    x = (f32, ("N", 3, 4, 6))
    empty = np.zeros(0, np.float32)
    assert infer("Resize", [x, None, None], {2: np.array([1, 1, 2, 0.5], np.float32)}) == [("N", 3, 8, 3)]
    assert infer("Resize", [x, None, None, None], {2: empty, 3: i64(5, 7)}, axes=[2, 3]) == [("N", 3, 5, 7)]
    assert infer("Resize", [x, None, None, ("int64", (2,))], {2: empty}, axes=[2, 3]) == [("N", 3, None, None)]
    (shape,) = infer("Resize", [(f32, (1, 1, 4, 6)), None, None, None], {3: i64(8, 8)}, axes=[2, 3],
                     keep_aspect_ratio_policy="not_larger")
    assert shape == (1, 1, 5, 8)  # scale min(8/4, 8/6) = 4/3: 4 * 4/3 = 5.33 -> 5, 6 * 4/3 = 8


# ---------------------------------------------------------------------------- errors name node, expected, got
def test_concat_off_axis_mismatch_is_named():
    g = tlc.Graph("t")
    a, b = g.input("a", "float32", ("N", 4)), g.input("b", "float32", ("N", 5))
    with pytest.raises(tlc.ShapeInferenceError, match=r"'cat' \(Concat\).*input 1 has shape \[N,5\], input 0 has "
                                                      r"\[N,4\] \(dim 1 must agree\)"):
        g.add_node("Concat", [a, b], axis=0, name="cat")
    with pytest.raises(tlc.ShapeInferenceError, match="input 1 has dtype int64, expected float32"):
        g.add_node("Concat", [a, g.input("c", "int64", ("N", 4))], axis=0)


@pytest.mark.parametrize("op, types, consts, attrs, message", [
    ("Reshape", [("float32", (2, 3)), None], {1: i64(4, 2)}, {}, r"cannot reshape \[2, 3\] into \[4, 2\]"),
    ("Expand", [("float32", (2, 3)), None], {1: i64(4, 3)}, {}, r"\[2,3\] cannot be expanded to \[4, 3\]"),
    ("Squeeze", [("float32", (2, 3)), None], {1: i64(1)}, {}, "expected size 1, got 3"),
    ("Unsqueeze", [("float32", (2, 3)), None], {1: i64(0, 0)}, {}, "repeat an axis"),
    ("Transpose", [("float32", (2, 3))], None, {"perm": [0, 0]}, "not a permutation"),
    ("Slice", [("float32", (2, 3)), None, None, None, None], {1: i64(0), 2: i64(1), 3: i64(0), 4: i64(0)}, {},
     "steps .* contain 0"),
    ("Pad", [("float32", (2, 3)), None], {1: i64(1, 1)}, {}, r"pads \[1, 1\] should hold 2 x 2 values"),
    ("Tile", [("float32", (2, 3)), None], {1: i64(2)}, {}, "should hold 2 counts"),
    ("TopK", [("float32", (2, 3)), None], {1: i64(4)}, {}, "K = 4 is larger than axis 1"),
    ("Gather", [("float32", (2, 3)), ("float32", (2,))], None, {}, "indices must be int32 or int64"),
    ("DepthToSpace", [("float32", (1, 6, 2, 2))], None, {"blocksize": 2}, "channels 6 are not divisible by"),
    ("Resize", [("float32", (1, 1, 2, 2)), None, None], {2: np.ones(3, np.float32)}, {},
     "scales .* should hold one value per axis"),
    ("Flatten", [("float32", (2, 3))], None, {"axis": 3}, "axis 3 is out of range for rank 2"),
])
def test_inference_errors_name_node_and_say_expected_vs_got(op, types, consts, attrs, message):
    with pytest.raises(tlc.ShapeInferenceError, match=rf"node '{op}' \({op}\): .*{message}"):
        infer(op, types, consts, **attrs)


# ---------------------------------------------------------------------------- hypothesis against numpy
shapes = st.lists(st.integers(0, 4), min_size=1, max_size=4).map(tuple)
bounds = st.one_of(st.integers(-7, 7), st.sampled_from([INT64_MAX, INT64_MIN, 2**31 - 1, -(2**31)]))


def _symbols(draw, shape) -> dict[int, tuple[int, ...]]:
    return {0: tuple(a for a in range(len(shape)) if draw(st.booleans()))}


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_slice_matches_python_slicing(data):
    shape = data.draw(shapes)
    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    axes = data.draw(st.lists(st.integers(-len(shape), len(shape) - 1), min_size=1, max_size=len(shape),
                              unique_by=lambda a: a % len(shape)))
    starts, ends = [data.draw(bounds) for _ in axes], [data.draw(bounds) for _ in axes]
    steps = [data.draw(st.sampled_from([-3, -2, -1, 1, 2, 3])) for _ in axes]
    index = [slice(None)] * len(shape)
    for a, s, e, k in zip(axes, starts, ends, steps):
        # ONNX clamps a backward start below -dim to 0, where Python's slice yields nothing (onnxruntime
        # follows the spec; test_tensor_ops_ort checks that).
        if k < 0 and s < -shape[a % len(shape)]:
            s = 0
        index[a % len(shape)] = slice(s, e, k)
    want = x[tuple(index)]
    symbolic = _symbols(data.draw, shape)
    g, outs, feeds, _ = build("Slice", [x, i64(*starts), i64(*ends), i64(*axes), i64(*steps)], (1, 2, 3, 4), symbolic)
    np.testing.assert_array_equal(tlc.reference.run(g, feeds)["y0"], want)
    check("Slice", [x, i64(*starts), i64(*ends), i64(*axes), i64(*steps)], (1, 2, 3, 4), symbolic)
    (shape_static,) = check("Slice", [x, i64(*starts), i64(*ends), i64(*axes), i64(*steps)], (1, 2, 3, 4))
    assert shape_static == want.shape


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_transpose_squeeze_unsqueeze_match_numpy(data):
    shape = data.draw(shapes)
    x = np.random.default_rng(0).random(shape).astype(np.float32)
    sym = _symbols(data.draw, shape)
    perm = data.draw(st.permutations(range(len(shape))))
    check("Transpose", [x], symbolic=sym, perm=list(perm))
    g, _, feeds, _ = build("Transpose", [x], perm=list(perm))
    np.testing.assert_array_equal(tlc.reference.run(g, feeds)["y0"], np.transpose(x, perm))
    ones = [a for a, d in enumerate(shape) if d == 1]
    axes = data.draw(st.lists(st.sampled_from(ones), unique=True)) if ones else []
    if axes:
        (s,) = check("Squeeze", [x, i64(*axes)], (1,), sym)
        assert len(s) == len(shape) - len(axes)
        assert check("Squeeze", [x, i64(*axes)], (1,))[0] == np.squeeze(x, tuple(axes)).shape
    new = data.draw(st.lists(st.integers(-len(shape) - 2, len(shape) + 1), min_size=1, max_size=2,
                             unique_by=lambda a: a % (len(shape) + 2)))
    rank = len(shape) + len(new)
    new = [a for a in new if -rank <= a < rank]
    if new:
        check("Unsqueeze", [x, i64(*new)], (1,), sym)
        assert check("Unsqueeze", [x, i64(*new)], (1,))[0] == np.expand_dims(x, tuple(new)).shape


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_concat_expand_gather_match_numpy(data):
    shape = data.draw(shapes)
    rank = len(shape)
    axis = data.draw(st.integers(-rank, rank - 1))
    parts = [np.full(shape[:axis % rank] + (data.draw(st.integers(0, 3)),) + shape[axis % rank + 1:], i, np.int32)
             for i in range(data.draw(st.integers(1, 3)))]
    sym = {i: tuple(a for a in range(rank) if a != axis % rank and data.draw(st.booleans())) for i in range(len(parts))}
    (s,) = check("Concat", parts, symbolic=sym, axis=axis)
    assert s is not None
    assert check("Concat", parts, axis=axis)[0] == np.concatenate(parts, axis=axis).shape

    x = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
    extra = data.draw(st.lists(st.integers(1, 3), max_size=2))
    target = extra + [data.draw(st.sampled_from([1, d] if d != 1 else [1, 2, 3])) for d in shape]
    want = np.broadcast_to(x, np.broadcast_shapes(x.shape, tuple(target)))
    check("Expand", [x, i64(*target)], (1,), _symbols(data.draw, shape))
    assert check("Expand", [x, i64(*target)], (1,))[0] == want.shape

    if shape[axis % rank] > 0:
        d = shape[axis % rank]
        idx_shape = tuple(data.draw(st.lists(st.integers(0, 3), max_size=2)))
        idx = np.random.default_rng(1).integers(-d, d, idx_shape)
        g, outs, feeds, _ = build("Gather", [x, idx], symbolic=_symbols(data.draw, shape), axis=axis)
        np.testing.assert_array_equal(tlc.reference.run(g, feeds)["y0"], np.take(x, idx, axis=axis))
        check("Gather", [x, idx], symbolic={0: tuple(range(rank)), 1: tuple(range(idx.ndim))}, axis=axis)


# ---------------------------------------------------------------------------- shapes computed from shapes
def test_shape_chains_keep_symbolic_dims_through_reshape_expand_and_constant_of_shape(rng):
    """The chains exporters write for dynamic shapes (Shape -> Gather / Slice -> Unsqueeze -> Concat, integer Mul)
    give Reshape, Expand and ConstantOfShape their dims, symbols included; the run agrees with every dim."""
    g = tlc.Graph("chains")
    x = g.input("x", "float32", ("B", "S", 4, 16))
    shape = g.add_node("Shape", [x])

    def dim(i):
        return g.add_node("Unsqueeze", [g.add_node("Gather", [shape, g.constant(np.int64(i))], attrs={"axis": 0}),
                                        g.constant(np.array([0], np.int64))])

    inner = g.add_node("Mul", [dim(2), dim(3)])
    merged = g.add_node("Reshape", [x, g.add_node("Concat", [dim(0), dim(1), inner], attrs={"axis": 0})])
    head = g.add_node("Slice", [shape, g.constant(np.array([0], np.int64)), g.constant(np.array([2], np.int64))])
    target = g.add_node("Concat", [head, g.constant(np.array([64], np.int64))], attrs={"axis": 0})
    bias = g.constant(rng.standard_normal((1, 1, 64)).astype(np.float32))
    expanded = g.add_node("Expand", [bias, target])
    tail = g.add_node("Shape", [x], attrs={"start": -2})
    zeros = g.add_node("ConstantOfShape", [g.add_node("Concat", [head, tail], attrs={"axis": 0})])
    flat = g.add_node("Reshape", [x, g.add_node("Concat", [dim(0), g.constant(np.array([-1], np.int64))],
                                                          attrs={"axis": 0})])
    for name, v in (("merged", merged), ("expanded", expanded), ("zeros", zeros), ("flat", flat)):
        g.output(v, name)
    want = {"merged": ("B", "S", 64), "expanded": ("B", "S", 64), "zeros": ("B", "S", 4, 16), "flat": ("B", None)}
    assert {name: g.type_of(v).shape for v, name in g.outputs} == want
    out = tlc.reference.run(g, {"x": rng.standard_normal((3, 5, 4, 16)).astype(np.float32)})
    assert {k: v.shape for k, v in out.items()} == {"merged": (3, 5, 64), "expanded": (3, 5, 64),
                                                   "zeros": (3, 5, 4, 16), "flat": (3, 320)}
