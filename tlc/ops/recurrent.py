"""Recurrent layers: RNN, LSTM and GRU (opset 14), with every direction, activation, layout and optional input
and output of the spec.

The reference projects the whole sequence through W at once (one matrix product for all steps), then runs the
step loop with the recurrence R on the batch rows whose sequence is still running: outputs past a sequence's
length stay zero and Y_h / Y_c hold the state of its last step. float16 is computed in float32.

``activation_alpha`` / ``activation_beta`` are read as onnxruntime reads them: each activation that takes an
alpha (a beta) consumes the next value of the list, in the order of the activations; one left without a value
takes the default of the ONNX operator of that name (onnxruntime uses 0 for Affine, ScaledTanh and
ThresholdedRelu instead; tlc follows the spec there).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ..ir.types import FLOAT_DTYPES, INT_DTYPES, Dim, TensorType, format_shape
from . import dims
from .registry import Attr, InferContext, OpDef, Trait, register

PURE = frozenset({Trait.PURE, Trait.FOLDABLE})
DIRECTIONS = ("forward", "reverse", "bidirectional")


# ---------------------------------------------------------------------------- activations
def _sigmoid(x: np.ndarray) -> np.ndarray:
    e = np.exp(-np.abs(x))  # never overflows: exp of a non-positive number
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e))


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


@dataclass(frozen=True)
class ActivationKind:
    """One activation of the spec's list: ``fn(x, alpha, beta)``, which parameters it takes and their defaults
    (None: the spec names no default, so the model must give the value)."""

    fn: Callable[[np.ndarray, float, float], np.ndarray]
    takes_alpha: bool = False
    takes_beta: bool = False
    alpha: float | None = None
    beta: float | None = None


ACTIVATIONS: dict[str, ActivationKind] = {
    "relu": ActivationKind(lambda x, a, b: np.maximum(x, 0)),
    "tanh": ActivationKind(lambda x, a, b: np.tanh(x)),
    "sigmoid": ActivationKind(lambda x, a, b: _sigmoid(x)),
    # NOTE: Affine and ScaledTanh were experimental ONNX ops; Affine's defaults were alpha 1, beta 0 and
    # ScaledTanh had none.
    "affine": ActivationKind(lambda x, a, b: a * x + b, True, True, 1.0, 0.0),
    "leakyrelu": ActivationKind(lambda x, a, b: np.where(x >= 0, x, a * x), True, False, 0.01),
    "thresholdedrelu": ActivationKind(lambda x, a, b: np.where(x > a, x, 0), True, False, 1.0),
    "scaledtanh": ActivationKind(lambda x, a, b: a * np.tanh(b * x), True, True),
    "hardsigmoid": ActivationKind(lambda x, a, b: np.clip(a * x + b, 0, 1), True, True, 0.2, 0.5),
    "elu": ActivationKind(lambda x, a, b: np.where(x >= 0, x, a * np.expm1(np.minimum(x, 0))), True, False, 1.0),
    "softsign": ActivationKind(lambda x, a, b: x / (1 + np.abs(x))),
    "softplus": ActivationKind(lambda x, a, b: _softplus(x)),
}


@dataclass(frozen=True)
class Activation:
    """An activation with its alpha and beta bound, and the cell clip applied to its input."""

    kind: ActivationKind
    alpha: float
    beta: float
    clip: float | None

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if self.clip is not None:
            x = np.clip(x, -self.clip, self.clip)
        return self.unclipped(x)

    def unclipped(self, x: np.ndarray) -> np.ndarray:
        return self.kind.fn(x, self.alpha, self.beta).astype(x.dtype, copy=False)


def _take(values: list[float], what: str, name: str, default: float | None) -> float:
    if values:
        return float(values.pop(0))
    if default is None:
        raise ValueError(f"activation {name} needs a value in {what} (the spec gives it no default)")
    return default


def bind_activations(names: Sequence[str] | None, alphas: Sequence[float] | None, betas: Sequence[float] | None,
                     clip: float | None, defaults: tuple[str, ...], num_directions: int) -> list[list[Activation]]:
    """The activations of each direction, with alpha, beta and clip bound; ValueError names a bad list."""
    per_direction = len(defaults)
    names = list(defaults) * num_directions if names is None else list(names)
    # NOTE: one direction also takes a list for two (its first half): RNN's schema default is ["Tanh", "Tanh"]
    allowed = (per_direction * num_directions,) if num_directions == 2 else (per_direction, 2 * per_direction)
    if len(names) not in allowed:
        raise ValueError(f"activations {names}: expected {' or '.join(map(str, allowed))} names "
                         f"({', '.join(defaults)} per direction)")
    if clip is not None and not clip > 0:
        raise ValueError(f"clip must be positive, got {clip}")
    alpha_list, beta_list = list(alphas or []), list(betas or [])
    bound = []
    for name in names:
        kind = ACTIVATIONS.get(str(name).lower())
        if kind is None:
            raise ValueError(f"unknown activation {name!r} (expected one of Relu, Tanh, Sigmoid, Affine, LeakyRelu, "
                             f"ThresholdedRelu, ScaledTanh, HardSigmoid, Elu, Softsign, Softplus)")
        alpha = _take(alpha_list, "activation_alpha", name, kind.alpha) if kind.takes_alpha else 0.0
        beta = _take(beta_list, "activation_beta", name, kind.beta) if kind.takes_beta else 0.0
        bound.append(Activation(kind, alpha, beta, clip))
    return [bound[d * per_direction:(d + 1) * per_direction] for d in range(num_directions)]


# ---------------------------------------------------------------------------- one step of each cell
# A step takes the input projection of this step's live rows (X_t W^T + Wb), the state of those rows, the
# direction's R, Rb and P, its activations and the op's attributes, and returns the new state (H first).
State = tuple[np.ndarray, ...]


def _rnn_step(xw, state: State, r, rb, p, acts: list[Activation], attrs: dict) -> State:
    (h,) = state
    return (acts[0](xw + h @ r.T + rb),)


def _gru_step(xw, state: State, r, rb, p, acts: list[Activation], attrs: dict) -> State:
    (h,) = state
    f, g = acts
    hidden = h.shape[-1]
    zr = xw[:, :2 * hidden] + h @ r[:2 * hidden].T + rb[:2 * hidden]
    z, reset = f(zr[:, :hidden]), f(zr[:, hidden:])
    r_h, rb_h = r[2 * hidden:], rb[2 * hidden:]
    if attrs["linear_before_reset"]:
        candidate = g(xw[:, 2 * hidden:] + reset * (h @ r_h.T + rb_h))
    else:
        candidate = g(xw[:, 2 * hidden:] + (reset * h) @ r_h.T + rb_h)
    return ((1 - z) * candidate + z * h,)


def _lstm_step(xw, state: State, r, rb, p, acts: list[Activation], attrs: dict) -> State:
    h, c = state
    f, g, out = acts
    hidden = h.shape[-1]
    gates = xw + h @ r.T + rb  # the order of the spec: i, o, f, c
    zi, zo, zf, zc = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
    if p is not None:  # peepholes: i and f look at the previous cell, o at the new one
        zi = zi + p[:hidden] * c
        zf = zf + p[2 * hidden:] * c
    i = f(zi)
    forget = 1 - i if attrs["input_forget"] else f(zf)
    c_new = forget * c + i * g(zc)
    if p is not None:
        zo = zo + p[hidden:2 * hidden] * c_new
    # NOTE: clip bounds the gates' inputs, not the cell state that h reads (as onnxruntime does)
    return f(zo) * out.unclipped(c_new), c_new


# ---------------------------------------------------------------------------- the ops
@dataclass(frozen=True)
class Recurrence:
    """What sets RNN, GRU and LSTM apart: gates per direction, activations, state count, the step, extra attrs."""

    name: str
    gates: int
    activations: tuple[str, ...]
    states: int                    # 1 (H) or 2 (H and C): also the number of Y_* outputs
    step: Callable[..., State]
    extra_attrs: dict[str, Attr]

    @property
    def max_inputs(self) -> int:
        return 6 + (self.states - 1) * 2  # LSTM adds initial_c and P

    @property
    def max_outputs(self) -> int:
        return 1 + self.states


def settings(attrs: dict, rec: Recurrence) -> tuple[int, list[list[Activation]]]:
    """(num_directions, activations per direction); ValueError names a bad attribute."""
    direction = attrs["direction"]
    if direction not in DIRECTIONS:
        raise ValueError(f"direction {direction!r}: expected one of {', '.join(DIRECTIONS)}")
    if attrs["layout"] not in (0, 1):
        raise ValueError(f"layout {attrs['layout']}: expected 0 ([seq, batch, ...]) or 1 ([batch, seq, ...])")
    if attrs["hidden_size"] is not None and attrs["hidden_size"] < 1:
        raise ValueError(f"hidden_size must be >= 1, got {attrs['hidden_size']}")
    num_directions = 2 if direction == "bidirectional" else 1
    acts = bind_activations(attrs["activations"], attrs["activation_alpha"], attrs["activation_beta"],
                            attrs["clip"], rec.activations, num_directions)
    return num_directions, acts


def sequence_lengths(lens: np.ndarray | None, seq: int, batch: int) -> np.ndarray:
    if lens is None:
        return np.full(batch, seq, np.int64)
    lens = np.asarray(lens).astype(np.int64).ravel()
    if lens.shape != (batch,) or (lens < 0).any() or (lens > seq).any():
        raise ValueError(f"sequence_lens {lens.tolist()}: expected {batch} lengths in [0, {seq}]")
    return lens


def run_recurrence(rec: Recurrence, x, w, r, b=None, sequence_lens=None, initial_h=None, initial_c=None, p=None,
                   **attrs) -> list[np.ndarray]:
    """[Y, Y_h] (RNN, GRU) or [Y, Y_h, Y_c] (LSTM), in the node's layout and X's dtype."""
    num_directions, acts = settings(attrs, rec)
    dtype = x.dtype
    work = np.float32 if dtype == np.float16 else dtype
    batch_first = attrs["layout"] == 1
    x = x.astype(work, copy=False)
    if batch_first:
        x = x.transpose(1, 0, 2)
    seq, batch, _ = x.shape
    hidden = r.shape[-1]
    if attrs["hidden_size"] is not None and attrs["hidden_size"] != hidden:
        raise ValueError(f"hidden_size {attrs['hidden_size']} but R has {hidden} columns")
    gh = rec.gates * hidden
    w, r = w.astype(work, copy=False), r.astype(work, copy=False)
    b = np.zeros((num_directions, 2 * gh), work) if b is None else b.astype(work, copy=False)
    p = None if p is None else p.astype(work, copy=False)
    lens = sequence_lengths(sequence_lens, seq, batch)
    initial = []
    for value in (initial_h, initial_c)[:rec.states]:
        if value is None:
            initial.append(np.zeros((num_directions, batch, hidden), work))
        else:
            value = value.astype(work, copy=False)
            initial.append(value.transpose(1, 0, 2) if batch_first else value)
    y = np.zeros((seq, num_directions, batch, hidden), work)
    finals = [np.zeros((num_directions, batch, hidden), work) for _ in range(rec.states)]
    # NOTE: a projection of the whole sequence, one product for every step, Wb added once
    projected = (x.reshape(seq * batch, -1) @ np.swapaxes(w, 1, 2)).reshape(num_directions, seq, batch, gh)
    for d in range(num_directions):
        reverse = attrs["direction"] == "reverse" or d == 1
        xw = projected[d] + b[d, :gh]
        state = [s[d].copy() for s in initial]
        for t in range(seq):
            rows = np.nonzero(t < lens)[0]
            if rows.size == 0:
                break
            src = lens[rows] - 1 - t if reverse else np.full(rows.size, t)
            new = rec.step(xw[src, rows], tuple(s[rows] for s in state), r[d], b[d, gh:],
                           None if p is None else p[d], acts[d], attrs)
            for s, value in zip(state, new):
                s[rows] = value
            y[src, d, rows] = new[0]
        # NOTE: a sequence of length 0 has no last step: its Y_h (and Y_c) is 0, as onnxruntime gives
        for final, s in zip(finals, state):
            final[d] = np.where((lens > 0)[:, None], s, 0)
    if batch_first:
        y = y.transpose(2, 0, 1, 3)
        finals = [f.transpose(1, 0, 2) for f in finals]
    return [np.ascontiguousarray(a, dtype=dtype) for a in [y, *finals]]


def _expect(ctx: InferContext, i: int, name: str, want: tuple[Dim, ...], meaning: str) -> tuple[Dim, ...] | None:
    """Input ``i``'s shape checked against ``want`` (rank and the int dims both sides know); None when unranked."""
    t = ctx.type(i)
    if t.shape is None:
        return None
    ok = len(t.shape) == len(want) and all(
        not (isinstance(have, int) and isinstance(dim, int)) or have == dim for have, dim in zip(t.shape, want))
    if not ok:
        ctx.fail(f"{name} is {t}, expected shape {format_shape(want)} ({meaning})")
    return t.shape


def _merge(ctx: InferContext, a: Dim, b: Dim, what: str) -> Dim:
    try:
        return dims.merge(a, b)
    except ValueError:
        ctx.fail(f"{what} differs between inputs: {a} and {b}")


def _infer(ctx: InferContext, rec: Recurrence) -> list[TensorType]:
    x = ctx.type(0)
    if x.dtype not in FLOAT_DTYPES:
        ctx.fail(f"X has dtype {x.dtype}; {rec.name} takes float types")
    for i in (1, 2, 3, 5, 6, 7):
        if ctx.has_input(i) and ctx.type(i).dtype != x.dtype:
            ctx.fail(f"input {i} has dtype {ctx.type(i).dtype}, expected {x.dtype} like X")
    if ctx.node.num_outputs > rec.max_outputs:
        ctx.fail(f"{ctx.node.num_outputs} outputs; {rec.name} has at most {rec.max_outputs}")
    try:
        num_directions, _ = settings(ctx.attrs, rec)
    except ValueError as exc:
        ctx.fail(str(exc))
    batch_first = ctx.attrs["layout"] == 1
    if x.shape is not None and len(x.shape) != 3:
        ctx.fail(f"X is {x}, expected rank 3")
    seq, batch, size = (None,) * 3 if x.shape is None else x.shape
    if batch_first:
        seq, batch = batch, seq
    hidden = ctx.attrs["hidden_size"]
    r_shape = ctx.type(2).shape
    if hidden is None and r_shape is not None and len(r_shape) == 3 and isinstance(r_shape[2], int):
        hidden = r_shape[2]
    gh = dims.product([rec.gates, hidden]) if hidden is not None else None
    _expect(ctx, 1, "W", (num_directions, gh, size), "num_directions, gates * hidden_size, input_size")
    _expect(ctx, 2, "R", (num_directions, gh, hidden), "num_directions, gates * hidden_size, hidden_size")
    if ctx.has_input(3):
        _expect(ctx, 3, "B", (num_directions, dims.product([2, gh])), "num_directions, 2 * gates * hidden_size")
    if ctx.has_input(4):
        if ctx.type(4).dtype not in INT_DTYPES:
            ctx.fail(f"sequence_lens has dtype {ctx.type(4).dtype}, expected int32 (or another integer type)")
        lens = _expect(ctx, 4, "sequence_lens", (batch,), "batch_size")
        batch = batch if lens is None else _merge(ctx, batch, lens[0], "batch_size")
    state_shape = (batch, num_directions, hidden) if batch_first else (num_directions, batch, hidden)
    for i, name in ((5, "initial_h"), (6, "initial_c"))[:rec.states]:
        if ctx.has_input(i):
            shape = _expect(ctx, i, name, state_shape, "the shape of Y_h in this layout")
            if shape is not None:
                batch = _merge(ctx, batch, shape[0 if batch_first else 1], "batch_size")
                hidden = _merge(ctx, hidden, shape[2], "hidden_size")
    if rec.states == 2 and ctx.has_input(7):
        _expect(ctx, 7, "P", (num_directions, dims.product([3, hidden]) if hidden is not None else None),
                "num_directions, 3 * hidden_size")
    if batch_first:
        y = (batch, seq, num_directions, hidden)
        state = (batch, num_directions, hidden)
    else:
        y = (seq, num_directions, batch, hidden)
        state = (num_directions, batch, hidden)
    return [TensorType(x.dtype, y)] + [TensorType(x.dtype, state)] * (ctx.node.num_outputs - 1)


COMMON_ATTRS = {
    "activation_alpha": Attr("floats"),
    "activation_beta": Attr("floats"),
    "activations": Attr("strings"),  # None: the equations' defaults in each direction
    "clip": Attr("float"),
    "direction": Attr("string", "forward"),
    "hidden_size": Attr("int"),  # None: read from R
    "layout": Attr("int", 0),
}

RECURRENCES = (
    Recurrence("RNN", 1, ("Tanh",), 1, _rnn_step, {"activations": Attr("strings", ["Tanh", "Tanh"])}),
    Recurrence("GRU", 3, ("Sigmoid", "Tanh"), 1, _gru_step, {"linear_before_reset": Attr("int", 0)}),
    Recurrence("LSTM", 4, ("Sigmoid", "Tanh", "Tanh"), 2, _lstm_step, {"input_forget": Attr("int", 0)}),
)

_DOCS = {
    "RNN": "A one-layer simple RNN: H_t = f(X_t W^T + H_{t-1} R^T + Wb + Rb).",
    "GRU": "A one-layer GRU (gates z, r, h), linear_before_reset as the spec has it.",
    "LSTM": "A one-layer LSTM (gates i, o, f, c) with optional peepholes and coupled input and forget gates.",
}


def _register(rec: Recurrence) -> None:
    def infer(ctx: InferContext) -> list[TensorType]:
        return _infer(ctx, rec)

    def reference(*inputs, **attrs) -> list[np.ndarray]:
        return run_recurrence(rec, *inputs, **attrs)

    register(OpDef(name=rec.name, infer=infer, reference=reference, inputs=(3, rec.max_inputs),
                   outputs=rec.max_outputs, attrs={**COMMON_ATTRS, **rec.extra_attrs}, traits=PURE, cost=20,
                   doc=_DOCS[rec.name]))


for _rec in RECURRENCES:
    _register(_rec)
