"""Signal processing: DFT (opset 20), STFT, the Hann, Hamming and Blackman windows and MelWeightMatrix; and a
few stragglers that fit nowhere else: Det, MaxUnpool, and the deprecated Upsample (opset 7/9) and Scatter (opset
9/10, the old name of ScatterElements).

Complex values are real tensors with a trailing axis of 2 (real, imaginary); a real signal has a trailing axis
of 1. The references transform with numpy's FFT in the input's precision (single for float16 and float32). The
window and mel ops take their sizes as (scalar) input values, so their output shapes are known only where those
are constants.
"""

from __future__ import annotations

import numpy as np

from ..ir.types import DTYPE_OF_ONNX_CODE, FLOAT_DTYPES, INT_DTYPES, TensorType
from . import dims
from .infer import numel
from .registry import REQUIRED, Attr, InferContext, OpDef, Trait, get, register
from .resize import resize_axis, source_coords, taps

PURE = frozenset({Trait.PURE, Trait.FOLDABLE})
LAYOUT_PURE = PURE | {Trait.LAYOUT_SENSITIVE}
INDEX_DTYPES = ("int32", "int64")


def _scalar(value: np.ndarray, what: str) -> int:
    """A scalar input (shape [] or [1]) as an int."""
    array = np.asarray(value)
    if array.size != 1:
        raise ValueError(f"{what} must be a scalar, got shape {list(array.shape)}")
    return int(array.reshape(-1)[0])


def _const_scalar(ctx: InferContext, i: int, what: str) -> int | None:
    """Input ``i`` as an int when it is a constant (after checking it is an integer scalar), else None."""
    t = ctx.type(i)
    if t.dtype not in INDEX_DTYPES:
        ctx.fail(f"{what} has dtype {t.dtype}, expected int32 or int64")
    if t.shape is not None and numel(t.shape) not in (None, 1):
        ctx.fail(f"{what} {t} must be a scalar")
    value = ctx.const(i)
    return None if value is None else _scalar(value, what)


def _float_signal(ctx: InferContext, i: int, what: str) -> TensorType:
    t = ctx.type(i)
    if t.dtype not in FLOAT_DTYPES:
        ctx.fail(f"{what} has dtype {t.dtype}; {ctx.node.op} takes float16, float32 or float64")
    return t


def _as_complex(x: np.ndarray) -> np.ndarray:
    """A [..., 1] (real) or [..., 2] (complex) tensor as a real or complex array without the last axis.

    float16 and float32 transform in single precision (numpy's FFT keeps complex64), float64 in double: the
    ONNX backend cases hold single-precision results, and near-zero parts differ between the two.
    """
    real = np.float64 if x.dtype == np.float64 else np.float32
    if x.shape[-1] == 1:
        return x[..., 0].astype(real)
    if x.shape[-1] == 2:
        z = np.empty(x.shape[:-1], np.complex128 if real is np.float64 else np.complex64)
        z.real, z.imag = x[..., 0], x[..., 1]
        return z
    raise ValueError(f"the last axis holds (real) or (real, imaginary) and must be 1 or 2, got {x.shape[-1]}")


def _as_pairs(z: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.stack([z.real, z.imag], axis=-1).astype(dtype)


# ---------------------------------------------------------------------------- DFT
def _dft_axis(axis: int, rank: int) -> int:
    """The signal axis in [0, rank - 2]; the last axis holds the complex parts and cannot be transformed."""
    if not (-rank <= axis <= -2 or 0 <= axis <= rank - 2):
        raise ValueError(f"axis {axis} is out of range for rank {rank} (expected [-{rank}, -2] or [0, {rank - 2}]; "
                         f"the last axis holds the real and imaginary parts)")
    return axis % rank


def _dft_kind(onesided: int, inverse: int, parts: int | None) -> str:
    """"irfft", "rfft" or "dft"; raises when onesided meets the wrong kind of input."""
    if onesided not in (0, 1) or inverse not in (0, 1):
        raise ValueError(f"onesided and inverse must be 0 or 1, got {onesided} and {inverse}")
    if onesided and inverse:
        if parts == 1:
            raise ValueError("onesided=1 with inverse=1 (IRFFT) takes a complex input ([..., 2]), got a real one")
        return "irfft"
    if onesided:
        if parts == 2:
            raise ValueError("onesided=1 (RFFT) takes a real input ([..., 1]), got a complex one")
        return "rfft"
    return "dft"


def _dft_length(kind: str, n_in, dft_length):
    """The transform length: dft_length when given, else the axis length (2 * (n - 1) for IRFFT)."""
    if dft_length is not None:
        return dft_length
    if kind == "irfft":
        return 2 * (n_in - 1) if isinstance(n_in, int) else None
    return n_in


def _dft_infer(ctx: InferContext) -> list[TensorType]:
    x = _float_signal(ctx, 0, "input")
    parts = x.shape[-1] if x.shape else None
    if x.rank is not None and x.rank < 2:
        ctx.fail(f"input {x} must have rank >= 2 (signal axes, then the real/imaginary axis)")
    if isinstance(parts, int) and parts not in (1, 2):
        ctx.fail(f"input {x}: the last axis must be 1 (real) or 2 (complex), got {parts}")
    try:
        kind = _dft_kind(ctx.attrs["onesided"], ctx.attrs["inverse"], parts if isinstance(parts, int) else None)
    except ValueError as exc:
        ctx.fail(str(exc))
    length = _const_scalar(ctx, 1, "dft_length") if ctx.has_input(1) else None
    if length is not None and length < 1:
        ctx.fail(f"dft_length must be >= 1, got {length}")
    axis = -2
    if ctx.has_input(2):
        if ctx.type(2).dtype != "int64":
            ctx.fail(f"axis has dtype {ctx.type(2).dtype}, expected int64")
        axis = _const_scalar(ctx, 2, "axis")
    if x.shape is None:
        return [TensorType(x.dtype, None)]
    last = 1 if kind == "irfft" else 2
    if axis is None:  # the axis is a runtime value: only a plain DFT keeps every signal dim for sure
        same = kind == "dft" and not ctx.has_input(1)
        return [TensorType(x.dtype, (*(x.shape[:-1] if same else dims.unknown(x.rank - 1)), last))]
    try:
        a = _dft_axis(axis, x.rank)
    except ValueError as exc:
        ctx.fail(str(exc))
    n = None if ctx.has_input(1) and length is None else _dft_length(kind, x.shape[a], length)
    if kind == "rfft" and n is not None:
        n = n // 2 + 1 if isinstance(n, int) else None
    shape = list(x.shape)
    shape[a], shape[-1] = n, last
    return [TensorType(x.dtype, tuple(shape))]


def dft(x, dft_length=None, axis=None, *, inverse: int, onesided: int) -> np.ndarray:
    """The DFT of ``x`` along ``axis`` (default -2), zero-padded or cut to dft_length; onesided halves it.

    IRFFT is the standard complex-to-real inverse of length n = dft_length: it reads the first n // 2 + 1 bins
    (zero-padded when fewer). NOTE: onnxruntime agrees when that is the input's length (n = 2 * (bins - 1), the
    default, or 2 * bins - 1); for other explicit lengths it reads the bins otherwise.
    """
    if x.ndim < 2:
        raise ValueError(f"input must have rank >= 2, got shape {list(x.shape)}")
    a = _dft_axis(-2 if axis is None else _scalar(axis, "axis"), x.ndim)
    kind = _dft_kind(onesided, inverse, x.shape[-1])
    signal = _as_complex(x)
    n = _dft_length(kind, signal.shape[a], None if dft_length is None else _scalar(dft_length, "dft_length"))
    if n < 1:
        raise ValueError(f"dft_length must be >= 1, got {n}")
    if kind == "irfft":
        return np.fft.irfft(signal, n=n, axis=a)[..., None].astype(x.dtype)
    spectrum = np.fft.ifft(signal, n=n, axis=a) if inverse else np.fft.fft(signal, n=n, axis=a)
    if kind == "rfft":
        spectrum = np.take(spectrum, np.arange(n // 2 + 1), axis=a)
    return _as_pairs(spectrum, x.dtype)


register(OpDef(name="DFT", infer=_dft_infer, reference=dft, inputs=(1, 3),
               attrs={"inverse": Attr("int", 0), "onesided": Attr("int", 0)}, traits=PURE, cost=8,
               doc="Discrete Fourier transform along `axis` (an input, opset 20): forward, inverse, RFFT, IRFFT."))


# ---------------------------------------------------------------------------- STFT
def _stft_infer(ctx: InferContext) -> list[TensorType]:
    signal = _float_signal(ctx, 0, "signal")
    if signal.rank is not None and signal.rank != 3:
        ctx.fail(f"signal {signal} must have rank 3 ([batch, length, 1 or 2])")
    parts = signal.shape[-1] if signal.shape else None
    if isinstance(parts, int) and parts not in (1, 2):
        ctx.fail(f"signal {signal}: the last axis must be 1 (real) or 2 (complex), got {parts}")
    step = _const_scalar(ctx, 1, "frame_step")
    if step is not None and step < 1:
        ctx.fail(f"frame_step must be >= 1, got {step}")
    window = None
    if ctx.has_input(2):
        w = ctx.type(2)
        if w.dtype != signal.dtype:
            ctx.fail(f"window has dtype {w.dtype}, expected {signal.dtype} like the signal")
        if w.rank is not None and w.rank != 1:
            ctx.fail(f"window {w} must be 1-D")
        window = w.shape[0] if w.shape else None
    length = _const_scalar(ctx, 3, "frame_length") if ctx.has_input(3) else None
    if isinstance(length, int) and isinstance(window, int) and length != window:
        ctx.fail(f"frame_length {length} and the window's length {window} differ")
    if length is None and not ctx.has_input(3):
        length = window if ctx.has_input(2) else (signal.shape[1] if signal.shape else None)
    batch, total = (signal.shape[0], signal.shape[1]) if signal.shape else (None, None)
    frames = None
    if isinstance(total, int) and isinstance(length, int):
        if length < 1 or length > total:
            ctx.fail(f"frame_length {length} must be in [1, {total}] (the signal's length)")
        frames = (total - length) // step + 1 if step is not None else None
    bins = length // 2 + 1 if isinstance(length, int) and ctx.attrs["onesided"] else length
    return [TensorType(signal.dtype, (batch, frames, bins if isinstance(bins, int) else None, 2))]


def stft(signal, frame_step, window=None, frame_length=None, *, onesided: int) -> np.ndarray:
    """Frames of ``frame_length`` every ``frame_step`` samples, windowed, each transformed (RFFT if onesided)."""
    if signal.ndim != 3:
        raise ValueError(f"signal must have rank 3 ([batch, length, 1 or 2]), got shape {list(signal.shape)}")
    z = _as_complex(signal)
    step = _scalar(frame_step, "frame_step")
    if frame_length is not None:
        n = _scalar(frame_length, "frame_length")
    else:
        n = z.shape[1] if window is None else window.shape[0]
    if window is not None and (window.ndim != 1 or window.shape[0] != n):
        raise ValueError(f"window must be 1-D of length frame_length {n}, got shape {list(window.shape)}")
    if step < 1 or not 1 <= n <= z.shape[1]:
        raise ValueError(f"frame_step {step} must be >= 1 and frame_length {n} in [1, {z.shape[1]}]")
    frames = (z.shape[1] - n) // step + 1
    framed = z[:, np.arange(frames)[:, None] * step + np.arange(n)]  # [batch, frames, n]
    if window is not None:
        framed = framed * window.astype(framed.real.dtype)
    spectrum = np.fft.fft(framed, axis=-1)
    if onesided:  # NOTE: a complex signal keeps its first n // 2 + 1 bins too (onnxruntime; onesided defaults to 1)
        spectrum = spectrum[..., : n // 2 + 1]
    return _as_pairs(spectrum, signal.dtype)


register(OpDef(name="STFT", infer=_stft_infer, reference=stft, inputs=(2, 4), attrs={"onesided": Attr("int", 1)},
               traits=PURE, cost=8, doc="Short-time Fourier transform: a DFT of each windowed frame of the signal."))


# ---------------------------------------------------------------------------- windows
def _output_dtype(ctx: InferContext, allowed) -> str:
    name = DTYPE_OF_ONNX_CODE.get(int(ctx.attrs["output_datatype"]))
    if name not in allowed:
        ctx.fail(f"output_datatype {ctx.attrs['output_datatype']} is not a numeric type tlc holds (1 = float32, "
                 f"10 = float16, 11 = float64, or an integer type)")
    return name


def _window_infer(ctx: InferContext) -> list[TensorType]:
    dtype = _output_dtype(ctx, FLOAT_DTYPES | INT_DTYPES)
    size = _const_scalar(ctx, 0, "size")
    if size is not None and size < 0:
        ctx.fail(f"size must be >= 0, got {size}")
    return [TensorType(dtype, (size,))]


def _cosine_window(a0: float, a1: float, a2: float):
    """The reference of a generalised cosine window: a0 - a1 cos(t) + a2 cos(2t), t = 2 pi n / N; N = size for a
    periodic window, size - 1 for a symmetric one; in float32, then cast, as the ONNX function body defines it.
    NOTE: onnxruntime computes otherwise: cast to an integer type, its Blackman peak is 1, the body's 0.99999994
    truncates to 0.

    A symmetric window of one point is 0 / 0 there: NaN (onnxruntime too), which an integer type cannot hold.
    """

    def window(size, *, periodic: int, output_datatype: int) -> np.ndarray:
        count = _scalar(size, "size")
        dtype = np.dtype(DTYPE_OF_ONNX_CODE[int(output_datatype)])
        if count < 0:
            raise ValueError(f"size must be >= 0, got {count}")
        if count == 1 and not periodic and dtype.kind != "f":
            raise ValueError(f"a symmetric window of size 1 is NaN (0 / 0 in the ONNX definition); {dtype} "
                             f"cannot hold it")
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.float32(2 * np.pi) / np.float32(count if periodic else count - 1)
            angle = np.arange(count, dtype=np.float32) * step
        values = np.float32(a0) - np.float32(a1) * np.cos(angle) + np.float32(a2) * np.cos(2 * angle)
        return values.astype(dtype)

    return window


WINDOW_ATTRS = {"periodic": Attr("int", 1), "output_datatype": Attr("int", 1)}
for _name, _coefficients in (("HannWindow", (0.5, 0.5, 0.0)), ("HammingWindow", (25 / 46, 21 / 46, 0.0)),
                             ("BlackmanWindow", (0.42, 0.5, 0.08))):
    register(OpDef(name=_name, infer=_window_infer, reference=_cosine_window(*_coefficients), attrs=WINDOW_ATTRS,
                   traits=PURE, cost=1, doc=f"A {_name[:-6]} window of `size` points, periodic or symmetric."))


# ---------------------------------------------------------------------------- MelWeightMatrix
def _mel_infer(ctx: InferContext) -> list[TensorType]:
    dtype = _output_dtype(ctx, FLOAT_DTYPES | INT_DTYPES)
    bins = _const_scalar(ctx, 0, "num_mel_bins")
    length = _const_scalar(ctx, 1, "dft_length")
    _const_scalar(ctx, 2, "sample_rate")
    for i, what in ((3, "lower_edge_hertz"), (4, "upper_edge_hertz")):
        _float_signal(ctx, i, what)
    if (bins is not None and bins < 1) or (length is not None and length < 1):
        ctx.fail(f"num_mel_bins {bins} and dft_length {length} must be >= 1")
    return [TensorType(dtype, (None if length is None else length // 2 + 1, bins))]


def _hz_to_mel(hz):
    return 2595.0 * np.log10(1.0 + hz / 700.0)


def _mel_to_hz(mel):
    return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)


def mel_weight_matrix(num_mel_bins, dft_length, sample_rate, lower_edge_hertz, upper_edge_hertz, *,
                      output_datatype: int) -> np.ndarray:
    """[dft_length // 2 + 1, num_mel_bins] triangular filters with peak 1 on spectrogram bins.

    The band edges are num_mel_bins + 2 points from lower_edge_hertz on, spaced by (upper - lower) /
    (num_mel_bins + 2) on the mel scale (so the last edge stays below upper_edge_hertz), each mapped to the
    spectrogram bin floor((dft_length + 1) * hz / sample_rate); band i rises from edge i to edge i + 1 and falls
    to edge i + 2. This is the formulation of onnxruntime and of the ONNX backend case (the spec gives none).
    """
    bands, n_fft, rate = (_scalar(v, name) for v, name in ((num_mel_bins, "num_mel_bins"),
                                                           (dft_length, "dft_length"), (sample_rate, "sample_rate")))
    low, high = float(np.asarray(lower_edge_hertz).reshape(-1)[0]), float(np.asarray(upper_edge_hertz).reshape(-1)[0])
    spectrum_bins = n_fft // 2 + 1
    if bands < 1 or n_fft < 1 or rate < 1 or not 0 <= low < high:
        raise ValueError(f"expected num_mel_bins, dft_length, sample_rate >= 1 and 0 <= lower_edge_hertz < "
                         f"upper_edge_hertz; got {bands}, {n_fft}, {rate}, {low}, {high}")
    low_mel, high_mel = _hz_to_mel(low), _hz_to_mel(high)
    step = (high_mel - low_mel) / (bands + 2)
    edges = np.floor((n_fft + 1) * _mel_to_hz(low_mel + step * np.arange(bands + 2)) / rate).astype(np.int64)
    if edges[-1] >= spectrum_bins:
        raise ValueError(f"upper_edge_hertz {high} maps to spectrogram bin {edges[-1]}, past the last of the "
                         f"{spectrum_bins} bins of a {n_fft}-point DFT at {rate} Hz")
    left, center, right = edges[:-2], edges[1:-1], edges[2:]
    j = np.arange(spectrum_bins, dtype=np.float64)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        rising = np.where(center == left, 1.0, (j - left) / (center - left))
        falling = (right - j) / (right - center)
    weights = np.where((center <= j) & (j < right), falling, np.where((left <= j) & (j <= center), rising, 0.0))
    return weights.astype(DTYPE_OF_ONNX_CODE[int(output_datatype)])


register(OpDef(name="MelWeightMatrix", infer=_mel_infer, reference=mel_weight_matrix, inputs=(5, 5),
               attrs={"output_datatype": Attr("int", 1)}, traits=PURE, cost=1,
               doc="Triangular mel filter bank mapping onesided DFT bins to num_mel_bins mel bands."))


# ---------------------------------------------------------------------------- Det
def _det_infer(ctx: InferContext) -> list[TensorType]:
    x = _float_signal(ctx, 0, "X")
    if x.shape is None:
        return [x]
    if x.rank < 2:
        ctx.fail(f"X {x} must have rank >= 2 ([*, M, M])")
    try:
        dims.merge(x.shape[-1], x.shape[-2])
    except ValueError:
        ctx.fail(f"X {x}: the last two dims must be equal (square matrices)")
    return [TensorType(x.dtype, x.shape[:-2])]


def det(x) -> np.ndarray:
    """Determinants of the trailing square matrices (LU in float64 via LAPACK)."""
    if x.ndim < 2 or x.shape[-1] != x.shape[-2]:
        raise ValueError(f"expected [*, M, M] square matrices, got shape {list(x.shape)}")
    return np.asarray(np.linalg.det(x.astype(np.float64))).astype(x.dtype)


register(OpDef(name="Det", infer=_det_infer, reference=det, traits=PURE, cost=4,
               doc="Determinant of each square matrix in the last two axes."))


# ---------------------------------------------------------------------------- MaxUnpool
def _unpool_geometry(attrs: dict, spatial: int) -> tuple[list[int], list[int], list[int]]:
    kernel = list(attrs["kernel_shape"])
    strides = list(attrs["strides"] or [1] * spatial)
    pads = list(attrs["pads"] or [0] * (2 * spatial))
    if len(kernel) != spatial or len(strides) != spatial or len(pads) != 2 * spatial:
        raise ValueError(f"kernel_shape {kernel}, strides {strides} and pads {pads} must hold {spatial}, "
                         f"{spatial} and {2 * spatial} values for {spatial} spatial axes")
    if min(kernel + strides) < 1 or min(pads) < 0:
        raise ValueError(f"kernel_shape {kernel} and strides {strides} must be >= 1, pads {pads} >= 0")
    return kernel, strides, pads


def _unpooled_dim(d, i: int, kernel, strides, pads):
    """(d - 1) * stride + kernel - pad_begin - pad_end: the size of the MaxPool input that gave ``d``."""
    if not isinstance(d, int):
        return None
    return (d - 1) * strides[i] + kernel[i] - pads[i] - pads[i + len(kernel)]


def _max_unpool_infer(ctx: InferContext) -> list[TensorType]:
    x, indices = _float_signal(ctx, 0, "X"), ctx.type(1)
    if indices.dtype != "int64":
        ctx.fail(f"I has dtype {indices.dtype}, expected int64")
    if x.rank is not None and x.rank < 3:
        ctx.fail(f"X {x} must have rank >= 3 (N, C, spatial...)")
    if x.shape is not None and indices.shape is not None:
        try:
            [dims.merge(a, b) for a, b in zip(x.shape, indices.shape, strict=True)]
        except ValueError:
            ctx.fail(f"I {indices} must have the shape of X {x}")
    if ctx.has_input(2):
        if ctx.type(2).dtype != "int64":
            ctx.fail(f"output_shape has dtype {ctx.type(2).dtype}, expected int64")
        given = dims.const_ints(ctx, 2)
        if given is not None:
            if x.rank is not None and len(given) != x.rank:
                ctx.fail(f"output_shape {given} must hold {x.rank} dims, one per axis of X {x}")
            return [TensorType(x.dtype, tuple(given))]
        rank = dims.vector_length(ctx, 2)
        return [TensorType(x.dtype, None if rank is None else dims.unknown(rank))]
    if x.shape is None:
        return [x]
    try:
        kernel, strides, pads = _unpool_geometry(ctx.attrs, x.rank - 2)
    except ValueError as exc:
        ctx.fail(str(exc))
    spatial = [_unpooled_dim(d, i, kernel, strides, pads) for i, d in enumerate(x.shape[2:])]
    return [TensorType(x.dtype, (*x.shape[:2], *spatial))]


def max_unpool(x, indices, output_shape=None, *, kernel_shape, strides, pads) -> np.ndarray:
    """Zeros of the unpooled shape with each X value written at its flat index from I (MaxPool's Indices)."""
    kernel, steps, margins = _unpool_geometry(dict(kernel_shape=kernel_shape, strides=strides, pads=pads),
                                              x.ndim - 2)
    if indices.shape != x.shape:
        raise ValueError(f"I has shape {list(indices.shape)}, expected that of X {list(x.shape)}")
    if output_shape is not None:
        shape = [int(d) for d in np.asarray(output_shape).ravel()]
        if len(shape) != x.ndim:
            raise ValueError(f"output_shape {shape} must hold {x.ndim} dims, one per axis of X")
    else:
        shape = list(x.shape[:2]) + [_unpooled_dim(d, i, kernel, steps, margins) for i, d in enumerate(x.shape[2:])]
    out = np.zeros(int(np.prod(shape, dtype=np.int64)), x.dtype)
    flat = indices.ravel()
    if flat.size and (flat.min() < 0 or flat.max() >= out.size):
        raise ValueError(f"I holds indices in [{flat.min()}, {flat.max()}], outside the {out.size} elements of the "
                         f"output {shape}")
    out[flat] = x.ravel()
    return out.reshape(shape)


register(OpDef(name="MaxUnpool", infer=_max_unpool_infer, reference=max_unpool, inputs=(2, 3),
               attrs={"kernel_shape": Attr("ints", REQUIRED), "pads": Attr("ints"), "strides": Attr("ints")},
               traits=LAYOUT_PURE, cost=2,
               doc="Partial inverse of MaxPool: X written at its Indices into zeros of the pooled input's shape."))


# ---------------------------------------------------------------------------- Upsample (deprecated)
#: Upsample is Resize with asymmetric coordinates (x_in = x_out / scale), nearest rounding down (onnxruntime).
UPSAMPLE_RESIZE_ATTRS = {"coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor", "antialias": 0,
                         "cubic_coeff_a": -0.75, "exclude_outside": 0, "extrapolation_value": 0.0}


def _upsample_infer(ctx: InferContext) -> list[TensorType]:
    x = ctx.type(0)
    if ctx.attrs["mode"] not in ("nearest", "linear"):
        ctx.fail(f"mode {ctx.attrs['mode']!r} is not nearest or linear")
    if ctx.has_input(1) == (ctx.attrs["scales"] is not None):
        ctx.fail("expected scales as an input (opset 9) or as an attribute (opset 7), exactly one of them")
    if ctx.attrs["mode"] == "linear" and x.dtype not in FLOAT_DTYPES | INT_DTYPES:
        ctx.fail(f"linear mode interpolates numbers; X has dtype {x.dtype}")
    scales = ctx.attrs["scales"]
    if ctx.has_input(1):
        if ctx.type(1).dtype != "float32":
            ctx.fail(f"scales has dtype {ctx.type(1).dtype}, expected float32")
        value = ctx.const(1)
        scales = None if value is None else [float(s) for s in value.ravel()]
    if x.shape is None:
        return [x]
    if scales is None:
        return [TensorType(x.dtype, dims.unknown(x.rank))]
    if len(scales) != x.rank or min(scales, default=1) < 1:
        ctx.fail(f"scales {scales} must hold one value >= 1 per axis of X {x}")
    return [TensorType(x.dtype, tuple(int(np.floor(d * s)) if isinstance(d, int) else (d if s == 1 else None)
                                      for d, s in zip(x.shape, scales)))]


def upsample(x, scale_input=None, *, mode: str, scales) -> np.ndarray:
    """Each axis with scale s resized to floor(dim * s) by Resize's per-axis taps (nearest or linear)."""
    factors = scales if scale_input is None else [float(s) for s in np.asarray(scale_input).ravel()]
    if factors is None or len(factors) != x.ndim or min(factors, default=1) < 1:
        raise ValueError(f"scales {factors} must hold one value >= 1 per axis of X {list(x.shape)}")
    attrs = dict(UPSAMPLE_RESIZE_ATTRS, mode=mode)
    result = x if mode == "nearest" else x.astype(np.float64)
    for axis, scale in enumerate(factors):
        in_len, out_len = x.shape[axis], int(np.floor(x.shape[axis] * scale))
        if out_len == in_len:
            continue
        if mode == "nearest":  # a gather: any dtype, strings and bool included
            coords, _ = source_coords("asymmetric", out_len, in_len, scale, (0.0, 1.0))
            result = np.take(result, taps(coords, in_len, scale, attrs)[0][:, 0], axis=axis)
        else:
            result = resize_axis(result, axis, out_len, scale, (0.0, 1.0), attrs)
    if mode == "nearest" or x.dtype.kind == "f":
        return result.astype(x.dtype, copy=False)
    info = np.iinfo(x.dtype)
    return np.clip(np.round(result), info.min, info.max).astype(x.dtype)


register(OpDef(name="Upsample", infer=_upsample_infer, reference=upsample, inputs=(1, 2),
               attrs={"mode": Attr("string", "nearest"), "scales": Attr("floats")}, traits=LAYOUT_PURE, cost=4,
               doc="Deprecated (opset 7/9): nearest or linear upsampling by per-axis scales, asymmetric coordinates."))


# ---------------------------------------------------------------------------- Scatter (deprecated)
def _scatter_infer(ctx: InferContext) -> list[TensorType]:
    data, indices, updates = ctx.type(0), ctx.type(1), ctx.type(2)
    if indices.dtype not in INDEX_DTYPES:
        ctx.fail(f"indices have dtype {indices.dtype}, expected int32 or int64")
    if updates.dtype != data.dtype:
        ctx.fail(f"updates have dtype {updates.dtype}, expected {data.dtype} like data")
    if data.rank is not None:
        dims.normalize_axes_unique(ctx, [ctx.attrs["axis"]], data.rank, "axis")
        for what, t in (("indices", indices), ("updates", updates)):
            if t.rank is not None and t.rank != data.rank:
                ctx.fail(f"{what} {t} must have the rank of data {data}")
    if indices.shape is not None and updates.shape is not None:
        try:
            [dims.merge(a, b) for a, b in zip(indices.shape, updates.shape)]
        except ValueError:
            ctx.fail(f"updates {updates} must have the shape of indices {indices}")
    return [data]


def scatter(data, indices, updates, *, axis: int) -> np.ndarray:
    """ScatterElements without a reduction (its reference does the work)."""
    return get("ScatterElements").reference(data, indices, updates, axis=axis, reduction="none")


register(OpDef(name="Scatter", infer=_scatter_infer, reference=scatter, inputs=(3, 3),
               attrs={"axis": Attr("int", 0)}, traits=PURE,
               doc="Deprecated (opset 9/10) name of ScatterElements without reduction."))
