"""Operators of the ai.onnx.ml domain (LabelEncoder, Binarizer, ArrayFeatureExtractor, TreeEnsemble) and of
ai.onnx.preview.training (Adagrad, Adam, Momentum).

LabelEncoder takes every attribute form its versions had: keys/values as lists (opset 2), as tensors with a
default tensor (opset 4), and opset 1's ``classes_strings`` (string -> its index, int64 -> the class at it).
TreeEnsemble is the opset-5 operator: interior nodes and leaves as parallel ``nodes_*`` / ``leaf_*`` lists,
each tree ending in one leaf that adds its weight to one target; a NaN feature takes the branch
``nodes_missing_value_tracks_true`` names whatever the comparison. Targets no tree reaches are 0, also for MIN
and MAX; AVERAGE divides by the number of trees.

The training ops are pure functions of their inputs: one optimizer step for k tensors, inputs
``R, T, X_1..X_k, G_1..G_k, <state groups>`` and outputs ``X_new_1..k, <new state groups>``. They compute in
float64 and round each output to its tensor's type.
"""

from __future__ import annotations

import math

import numpy as np

from ..ir.types import FLOAT_DTYPES, TensorType, dtype_name, np_dtype
from . import expr as E
from .infer import broadcast_shapes
from .registry import REQUIRED, Attr, InferContext, OpDef, Trait, register

ML = "ai.onnx.ml"
TRAINING = "ai.onnx.preview.training"
PURE = frozenset({Trait.PURE, Trait.FOLDABLE})


# ---------------------------------------------------------------------------- LabelEncoder
_LIST_KINDS = {"int64s": "int64", "floats": "float32", "strings": "string"}
_ATTR_KIND = {"int64s": "ints", "floats": "floats", "strings": "strings"}
_DEFAULT_OF_KIND = {"int64s": "default_int64", "floats": "default_float", "strings": "default_string"}
LABEL_ENCODER_ATTRS = {
    **{f"{side}_{kind}": Attr(_ATTR_KIND[kind]) for side in ("keys", "values") for kind in _LIST_KINDS},
    "keys_tensor": Attr("tensor"), "values_tensor": Attr("tensor"), "default_tensor": Attr("tensor"),
    "default_int64": Attr("int", -1), "default_float": Attr("float", -0.0), "default_string": Attr("string", "_Unused"),
    "classes_strings": Attr("strings"),
}


def _typed_default(dtype: str):
    """The spec's default for a values tensor without default_tensor."""
    return "_Unused" if dtype == "string" else -0.0 if dtype in FLOAT_DTYPES else -1


def _side(attrs: dict, side: str) -> tuple[str, list]:
    """(dtype, items) of the keys or values; ValueError unless exactly one form is given."""
    given = [k for k in (*_LIST_KINDS, "tensor") if attrs.get(f"{side}_{k}") is not None]
    if len(given) != 1:
        found = ", ".join(f"{side}_{k}" for k in given) or "none"
        raise ValueError(f"exactly one {side}_* attribute must be given, got {found}")
    value = attrs[f"{side}_{given[0]}"]
    if given[0] == "tensor":
        array = np.asarray(value)
        return dtype_name(array.dtype), array.ravel().tolist()
    return _LIST_KINDS[given[0]], list(value)


def label_mapping(attrs: dict, in_dtype: str) -> tuple[str, dict, object, object]:
    """(output dtype, key -> value, the value for a NaN input, default) for an input of ``in_dtype``."""
    if attrs.get("classes_strings") is not None:
        classes = list(attrs["classes_strings"])
        if in_dtype == "string":
            return "int64", {c: i for i, c in enumerate(classes)}, attrs["default_int64"], attrs["default_int64"]
        if in_dtype == "int64":
            table = dict(enumerate(classes))
            return "string", table, attrs["default_string"], attrs["default_string"]
        raise ValueError(f"X has dtype {in_dtype}; classes_strings maps string or int64 inputs")
    key_dtype, keys = _side(attrs, "keys")
    out_dtype, values = _side(attrs, "values")
    if len(keys) != len(values):
        raise ValueError(f"{len(keys)} keys but {len(values)} values")
    if in_dtype != key_dtype:
        raise ValueError(f"X has dtype {in_dtype}; the keys are {key_dtype}")
    if attrs.get("default_tensor") is not None:
        default_array = np.asarray(attrs["default_tensor"])
        if default_array.size != 1 or dtype_name(default_array.dtype) != out_dtype:
            raise ValueError(f"default_tensor is {dtype_name(default_array.dtype)}{list(default_array.shape)}; "
                             f"expected one {out_dtype} value")
        default = default_array.ravel()[0]
    elif attrs.get("values_tensor") is not None:
        default = _typed_default(out_dtype)
    else:
        kind = next(k for k in _LIST_KINDS if attrs.get(f"values_{k}") is not None)
        default = attrs[_DEFAULT_OF_KIND[kind]]
    table, nan_value = {}, default
    for k, v in zip(keys, values):  # NOTE: a repeated key: the last one wins
        if isinstance(k, float) and math.isnan(k):
            nan_value = v
        else:
            table[k] = v
    return out_dtype, table, nan_value, default


def _label_encoder_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.type(0)
    try:
        out_dtype = label_mapping(ctx.attrs, x.dtype)[0]
    except ValueError as exc:
        ctx.fail(str(exc))
    return [x.with_dtype(out_dtype)]


def label_encoder(x: np.ndarray, **attrs) -> np.ndarray:
    in_dtype = "string" if x.dtype == object else dtype_name(x.dtype)
    out_dtype, table, nan_value, default = label_mapping(attrs, in_dtype)
    mapped = [table.get(v, default) if v == v else nan_value for v in x.ravel().tolist()]
    out = np.empty(len(mapped), np_dtype(out_dtype))
    out[:] = mapped
    return out.reshape(x.shape)


register(OpDef(name="LabelEncoder", domain=ML, infer=_label_encoder_infer, reference=label_encoder,
               attrs=LABEL_ENCODER_ATTRS, traits=PURE, cost=4,
               doc="Map each element through a key -> value table (a default where a key is missing)."))


# ---------------------------------------------------------------------------- Binarizer
def _binarizer_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.type(0)
    if x.dtype not in ("float32", "float64", "int32", "int64"):
        ctx.fail(f"X has dtype {x.dtype}; Binarizer takes float32, float64, int32 or int64")
    return [x]


def binarizer(x: np.ndarray, *, threshold: float) -> np.ndarray:
    """1 where x > threshold (compared as float64), else 0 (NaN too), in x's type."""
    return (x.astype(np.float64) > threshold).astype(x.dtype)


register(OpDef(name="Binarizer", domain=ML, infer=_binarizer_infer, reference=binarizer,
               attrs={"threshold": Attr("float", 0.0)},
               traits=frozenset({Trait.PURE, Trait.FOLDABLE, Trait.ELEMENTWISE}),
               expr=lambda x, *, threshold: E.where(E.gt(E.cast(x, "float64"), float(threshold)), 1, 0),
               doc="1 where X > threshold, else 0."))


# ---------------------------------------------------------------------------- ArrayFeatureExtractor
def _extractor_infer(ctx: InferContext) -> list[TensorType]:
    x, y = ctx.type(0), ctx.type(1)
    if y.dtype != "int64":
        ctx.fail(f"Y has dtype {y.dtype}; the indices are int64")
    if x.shape is None:
        return [x]
    if not x.shape:
        ctx.fail(f"X is {x}; ArrayFeatureExtractor selects along the last axis of a tensor of rank >= 1")
    count = y.numel
    # NOTE: a 1-D X gives [1, count], as onnxruntime does
    return [x.with_shape((1, count) if len(x.shape) == 1 else tuple(x.shape[:-1]) + (count,))]


def array_feature_extractor(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    indices = np.asarray(y, np.int64).ravel()
    width = x.shape[-1]
    bad = indices[(indices < 0) | (indices >= width)]
    if bad.size:
        raise ValueError(f"index {int(bad[0])} is out of range for the last axis of size {width} (expected [0, "
                         f"{width}))")
    out = x[..., indices]
    return out.reshape(1, -1) if x.ndim == 1 else out


register(OpDef(name="ArrayFeatureExtractor", domain=ML, infer=_extractor_infer, reference=array_feature_extractor,
               inputs=(2, 2), traits=PURE,
               doc="Select elements along the last axis of X at the indices Y."))


# ---------------------------------------------------------------------------- TreeEnsemble
BRANCH_MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ", "BRANCH_MEMBER")
MEMBER = 6
AGGREGATES = ("AVERAGE", "SUM", "MIN", "MAX")
POST_TRANSFORMS = ("NONE", "SOFTMAX", "LOGISTIC", "SOFTMAX_ZERO", "PROBIT")
_NODE_FIELDS = ("nodes_modes", "nodes_featureids", "nodes_splits", "nodes_truenodeids", "nodes_trueleafs",
                "nodes_falsenodeids", "nodes_falseleafs")
TREE_ATTRS = {
    **{name: Attr("tensor" if name in ("nodes_modes", "nodes_splits") else "ints", REQUIRED) for name in _NODE_FIELDS},
    "tree_roots": Attr("ints", REQUIRED), "leaf_targetids": Attr("ints", REQUIRED),
    "leaf_weights": Attr("tensor", REQUIRED), "nodes_missing_value_tracks_true": Attr("ints"),
    "nodes_hitrates": Attr("tensor"), "membership_values": Attr("tensor"), "n_targets": Attr("int"),
    "aggregate_function": Attr("int", 1), "post_transform": Attr("int", 0),
}


def _membership_sets(values) -> list[np.ndarray]:
    """membership_values split at its NaNs: one set per BRANCH_MEMBER node, in node order."""
    if values is None:
        return []
    flat = np.asarray(values, np.float64).ravel()
    cuts = np.flatnonzero(np.isnan(flat))
    pieces = np.split(flat, cuts)
    sets = [pieces[0]] + [p[1:] for p in pieces[1:]]
    return sets if sets[-1].size else sets[:-1]


def _tree_problem(a: dict, features) -> str | None:
    """Why the tree attributes are inconsistent (with ``features`` input features, when known), or None."""
    fields = {name: np.asarray(a[name]).ravel() for name in _NODE_FIELDS}
    if a["nodes_missing_value_tracks_true"] is not None:
        fields["nodes_missing_value_tracks_true"] = np.asarray(a["nodes_missing_value_tracks_true"])
    lengths = {name: len(v) for name, v in fields.items()}
    nodes = lengths["nodes_modes"]
    if len(set(lengths.values())) != 1:
        return f"the nodes_* attributes differ in length: {lengths}"
    leaves = len(a["leaf_targetids"])
    if np.asarray(a["leaf_weights"]).size != leaves:
        return f"leaf_weights has {np.asarray(a['leaf_weights']).size} entries, leaf_targetids {leaves}"
    modes = fields["nodes_modes"].astype(np.int64)
    if nodes and not ((modes >= 0) & (modes < len(BRANCH_MODES))).all():
        return f"nodes_modes {modes.tolist()} has a value outside 0..6 ({', '.join(BRANCH_MODES)})"
    members, sets = int((modes == MEMBER).sum()), len(_membership_sets(a["membership_values"]))
    if members and members != sets:
        return f"{members} BRANCH_MEMBER nodes but {sets} NaN-separated sets in membership_values"
    for side in ("true", "false"):
        ids, is_leaf = fields[f"nodes_{side}nodeids"], fields[f"nodes_{side}leafs"].astype(bool)
        if ((ids < 0) | (ids >= np.where(is_leaf, leaves, nodes))).any():
            return f"nodes_{side}nodeids {ids.tolist()} point outside the nodes ({nodes}) or leaves ({leaves})"
    if not a["tree_roots"] or not all(0 <= r < nodes for r in a["tree_roots"]):
        return f"tree_roots {list(a['tree_roots'])} must be non-empty indices into the {nodes} nodes"
    targets = _num_targets(a)
    if not all(0 <= t < targets for t in a["leaf_targetids"]):
        return f"leaf_targetids {list(a['leaf_targetids'])} must lie in [0, n_targets={targets})"
    if not 0 <= a["aggregate_function"] < len(AGGREGATES):
        return f"aggregate_function {a['aggregate_function']} is not one of 0..3 ({', '.join(AGGREGATES)})"
    if not 0 <= a["post_transform"] < len(POST_TRANSFORMS):
        return f"post_transform {a['post_transform']} is not one of 0..4 ({', '.join(POST_TRANSFORMS)})"
    feats = fields["nodes_featureids"]
    if nodes and (feats.min() < 0 or (isinstance(features, int) and feats.max() >= features)):
        return f"nodes_featureids {feats.tolist()} must lie in [0, {features})"
    return None


def _num_targets(a: dict) -> int:
    return a["n_targets"] if a["n_targets"] is not None else max(a["leaf_targetids"], default=-1) + 1


def _tree_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.type(0)
    if x.dtype not in FLOAT_DTYPES:
        ctx.fail(f"X has dtype {x.dtype}; TreeEnsemble takes float16, float32 or float64")
    if x.shape is not None and len(x.shape) != 2:
        ctx.fail(f"X is {x}; TreeEnsemble takes [N, F]")
    problem = _tree_problem(ctx.attrs, None if x.shape is None else x.shape[1])
    if problem:
        ctx.fail(problem)
    return [x.with_shape((None if x.shape is None else x.shape[0], _num_targets(ctx.attrs)))]


def _leaves_reached(x: np.ndarray, a: dict) -> np.ndarray:
    """The leaf each (tree, row) ends in, walking all trees and rows together one level per step."""
    modes = np.asarray(a["nodes_modes"]).ravel().astype(np.int64)
    feats, splits = np.asarray(a["nodes_featureids"]), np.asarray(a["nodes_splits"], np.float64).ravel()
    ids = {side: np.asarray(a[f"nodes_{side}nodeids"]) for side in ("true", "false")}
    leafs = {side: np.asarray(a[f"nodes_{side}leafs"]).astype(bool) for side in ("true", "false")}
    tracks = np.zeros(len(modes), bool) if a["nodes_missing_value_tracks_true"] is None else \
        np.asarray(a["nodes_missing_value_tracks_true"]).astype(bool)
    sets = dict(zip(np.flatnonzero(modes == MEMBER).tolist(), _membership_sets(a["membership_values"])))
    roots = np.asarray(a["tree_roots"])
    node = np.repeat(roots[:, None], x.shape[0], axis=1)
    leaf = np.full(node.shape, -1)
    active = np.ones(node.shape, bool)
    for _ in range(len(modes) + 1):
        if not active.any():
            return leaf
        tree, row = np.nonzero(active)
        at = node[tree, row]
        v, s, m = x[row, feats[at]], splits[at], modes[at]
        cond = np.select([m == 0, m == 1, m == 2, m == 3, m == 4, m == 5], [v <= s, v < s, v >= s, v > s, v == s,
                                                                               v != s], False)
        for member in np.unique(at[m == MEMBER]).tolist():
            here = at == member
            cond[here] = np.isin(v[here], sets[member])
        cond = np.where(np.isnan(v), tracks[at], cond)
        nxt = np.where(cond, ids["true"][at], ids["false"][at])
        done = np.where(cond, leafs["true"][at], leafs["false"][at])
        leaf[tree[done], row[done]] = nxt[done]
        node[tree[~done], row[~done]] = nxt[~done]
        active[tree[done], row[done]] = False
    raise ValueError("the trees have a cycle: a path visits more nodes than there are")


def _erfinv(y: np.ndarray) -> np.ndarray:
    """The inverse error function: Winitzki's approximation refined by Newton steps on math.erf."""
    erf = np.vectorize(math.erf, otypes=[np.float64])
    with np.errstate(all="ignore"):
        log = np.log1p(-y * y)
        t = 2 / (math.pi * 0.147) + log / 2
        x = np.sign(y) * np.sqrt(np.sqrt(t * t - log / 0.147) - t)
        for _ in range(3):
            step = (erf(x) - y) / (2 / math.sqrt(math.pi) * np.exp(-x * x))
            x = np.where(np.isfinite(x), x - np.nan_to_num(step), x)
    return x


def _post_transform(scores: np.ndarray, kind: int) -> np.ndarray:
    name = POST_TRANSFORMS[kind]
    if name == "SOFTMAX":
        e = np.exp(scores - scores.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)
    if name == "SOFTMAX_ZERO":  # zeros stay 0 and take no share
        e = np.where(scores != 0, np.exp(scores - scores.max(axis=1, keepdims=True)), 0.0)
        total = e.sum(axis=1, keepdims=True)
        return np.divide(e, total, out=np.zeros_like(e), where=total > 0)
    if name == "LOGISTIC":
        return 1 / (1 + np.exp(-scores))
    if name == "PROBIT":
        return math.sqrt(2) * _erfinv(2 * scores - 1)
    return scores


def tree_ensemble(x: np.ndarray, **a) -> np.ndarray:
    problem = _tree_problem(a, x.shape[1] if x.ndim == 2 else None)
    if problem or x.ndim != 2:
        raise ValueError(problem or f"X has shape {list(x.shape)}; TreeEnsemble takes [N, F]")
    leaf = _leaves_reached(x.astype(np.float64), a)
    trees, rows = leaf.shape
    targets = np.asarray(a["leaf_targetids"])[leaf]
    weights = np.asarray(a["leaf_weights"], np.float64).ravel()[leaf]
    where = (np.broadcast_to(np.arange(rows), leaf.shape), targets)
    aggregate = AGGREGATES[a["aggregate_function"]]
    scores = np.zeros((rows, _num_targets(a)))
    if aggregate in ("SUM", "AVERAGE"):
        np.add.at(scores, where, weights)
        if aggregate == "AVERAGE":
            scores /= trees
    else:
        reached = np.zeros(scores.shape, bool)
        reached[where] = True
        scores[:] = np.inf if aggregate == "MIN" else -np.inf
        (np.minimum if aggregate == "MIN" else np.maximum).at(scores, where, weights)
        scores[~reached] = 0.0
    return _post_transform(scores, a["post_transform"]).astype(x.dtype)


register(OpDef(name="TreeEnsemble", domain=ML, infer=_tree_infer, reference=tree_ensemble, attrs=TREE_ATTRS,
               traits=PURE, cost=16,
               doc="Sum (or average, min, max) the leaf weights a batch reaches in each tree, per target."))


# ---------------------------------------------------------------------------- Adagrad, Adam, Momentum
def _optimizer_infer(groups_in: int, groups_out: tuple[int, ...]):
    """Inference for ``R, T`` followed by ``groups_in`` groups of k tensors; output group j has the types of
    input group ``groups_out[j]``."""

    def infer(ctx: InferContext) -> list[TensorType]:
        n = ctx.num_inputs - 2
        if n <= 0 or n % groups_in:
            ctx.fail(f"{ctx.num_inputs} inputs; expected R, T and {groups_in} tensors per optimized tensor")
        k = n // groups_in
        if ctx.node.num_outputs != len(groups_out) * k:
            ctx.fail(f"{ctx.node.num_outputs} outputs; {k} optimized tensors give {len(groups_out) * k}")
        r, t = ctx.type(0), ctx.type(1)
        if r.dtype not in ("float32", "float64") or t.dtype != "int64" or r.numel not in (1, None) \
                or t.numel not in (1, None):
            ctx.fail(f"R is {r} and T is {t}; expected a float32/float64 scalar R and an int64 scalar T")
        for i in range(2, ctx.num_inputs):
            if ctx.type(i).dtype not in ("float32", "float64"):
                ctx.fail(f"input {i} is {ctx.type(i)}; the optimized tensors and their state are float32/float64")
        for j in range(k):
            x = ctx.type(2 + j)
            for g in range(1, groups_in):
                other = ctx.type(2 + g * k + j)
                try:
                    shape = broadcast_shapes(x.shape, other.shape)
                except Exception:
                    shape = ()
                if x.shape is not None and other.shape is not None and shape != tuple(x.shape):
                    ctx.fail(f"input {2 + g * k + j} {other} does not broadcast to its tensor {x}")
        return [ctx.type(2 + g * k + j) for g in groups_out for j in range(k)]

    return infer


def _groups(tensors: tuple, count: int) -> list[list[np.ndarray]]:
    if not tensors or len(tensors) % count:
        raise ValueError(f"{len(tensors)} tensors after R and T; expected {count} per optimized tensor")
    k = len(tensors) // count
    return [[np.asarray(a, np.float64) for a in tensors[g * k:(g + 1) * k]] for g in range(count)]


def _rounded(results: list[np.ndarray], like: list[np.ndarray]) -> list[np.ndarray]:
    return [np.broadcast_to(r, x.shape).astype(x.dtype) for r, x in zip(results, like)]


def adagrad(r, t, *tensors, norm_coefficient: float, decay_factor: float, epsilon: float) -> list[np.ndarray]:
    xs, gs, hs = _groups(tensors, 3)
    rate = float(r) / (1 + float(t) * decay_factor)
    x_new, h_new = [], []
    for x, g, h in zip(xs, gs, hs):
        g = norm_coefficient * x + g
        h = h + g * g
        x_new.append(x - rate * g / (np.sqrt(h) + epsilon))
        h_new.append(h)
    k = len(xs)
    return _rounded(x_new + h_new, list(tensors[:k]) + list(tensors[2 * k:]))


def adam(r, t, *tensors, alpha: float, beta: float, epsilon: float, norm_coefficient: float,
         norm_coefficient_post: float) -> list[np.ndarray]:
    xs, gs, vs, hs = _groups(tensors, 4)
    step = int(t)
    rate = float(r) * math.sqrt(1 - beta**step) / (1 - alpha**step) if step > 0 else float(r)
    x_new, v_new, h_new = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        g = norm_coefficient * x + g
        v = alpha * v + (1 - alpha) * g
        h = beta * h + (1 - beta) * g * g
        x_new.append((1 - norm_coefficient_post) * (x - rate * v / (np.sqrt(h) + epsilon)))
        v_new.append(v)
        h_new.append(h)
    k = len(xs)
    return _rounded(x_new + v_new + h_new, list(tensors[:k]) + list(tensors[2 * k:]))


MOMENTUM_MODES = ("standard", "nesterov")


def momentum(r, t, *tensors, alpha: float, beta: float, mode: str, norm_coefficient: float) -> list[np.ndarray]:
    if mode not in MOMENTUM_MODES:
        raise ValueError(f"mode {mode!r} is not one of {', '.join(MOMENTUM_MODES)}")
    xs, gs, vs = _groups(tensors, 3)
    scale = beta if int(t) > 0 else 1.0
    x_new, v_new = [], []
    for x, g, v in zip(xs, gs, vs):
        g = norm_coefficient * x + g
        v = alpha * v + scale * g
        x_new.append(x - float(r) * (g + alpha * v if mode == "nesterov" else v))
        v_new.append(v)
    k = len(xs)
    return _rounded(x_new + v_new, list(tensors[:k]) + list(tensors[2 * k:]))


def _momentum_infer(ctx: InferContext) -> list[TensorType]:
    if ctx.attrs["mode"] not in MOMENTUM_MODES:
        ctx.fail(f"mode {ctx.attrs['mode']!r} is not one of {', '.join(MOMENTUM_MODES)}")
    return _optimizer_infer(3, (0, 2))(ctx)


def _outputs_per(groups_in: int, groups_out: int):
    return lambda attrs, n: groups_out * max(0, n - 2) // groups_in


register(OpDef(name="Adagrad", domain=TRAINING, infer=_optimizer_infer(3, (0, 2)), reference=adagrad,
               inputs=(5, None), outputs=_outputs_per(3, 2), traits=PURE, cost=6,
               attrs={"norm_coefficient": Attr("float", 0.0), "decay_factor": Attr("float", 0.0),
                      "epsilon": Attr("float", 1e-6)},
               doc="One Adagrad step: new tensors and accumulated squared gradients."))
register(OpDef(name="Adam", domain=TRAINING, infer=_optimizer_infer(4, (0, 2, 3)), reference=adam,
               inputs=(6, None), outputs=_outputs_per(4, 3), traits=PURE, cost=8,
               attrs={"alpha": Attr("float", 0.9), "beta": Attr("float", 0.999), "epsilon": Attr("float", 1e-6),
                      "norm_coefficient": Attr("float", 0.0), "norm_coefficient_post": Attr("float", 0.0)},
               doc="One Adam step: new tensors, averaged gradients and averaged squared gradients."))
register(OpDef(name="Momentum", domain=TRAINING, infer=_momentum_infer, reference=momentum,
               inputs=(5, None), outputs=_outputs_per(3, 2), traits=PURE, cost=4,
               attrs={"alpha": Attr("float", REQUIRED), "beta": Attr("float", REQUIRED),
                      "mode": Attr("string", REQUIRED), "norm_coefficient": Attr("float", REQUIRED)},
               doc="One SGD-with-momentum step (standard or Nesterov): new tensors and momenta."))
