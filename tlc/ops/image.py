"""ImageDecoder: an encoded image (a 1-D uint8 tensor of a file's bytes) to an [H, W, C] uint8 array.

Decoding is Pillow's (an optional dependency: ``pip install tlc[image]``); every format the ONNX spec names
(BMP, JPEG, JPEG 2000, TIFF, PNG, WebP, PNM) is one Pillow reads. Without Pillow the op is refused by name when it
runs. Pillow's decompression-bomb limit stays in force: an image of more than twice ``Image.MAX_IMAGE_PIXELS``
pixels is an error, not an allocation.
"""

from __future__ import annotations

import io

import numpy as np

from ..errors import UnsupportedOperatorError
from ..ir.types import TensorType
from .registry import Attr, InferContext, OpDef, register

#: pixel_format -> (Pillow mode, channels, reverse the channels)
FORMATS = {"RGB": ("RGB", 3, False), "BGR": ("RGB", 3, True), "Grayscale": ("L", 1, False)}


def _infer(ctx: InferContext) -> list[TensorType]:
    t = ctx.type(0)
    if t.dtype != "uint8" or (t.rank is not None and t.rank != 1):
        ctx.fail(f"encoded_stream is {t}; ImageDecoder takes a 1-D uint8 tensor of the file's bytes")
    fmt = ctx.attrs["pixel_format"]
    if fmt not in FORMATS:
        ctx.fail(f"pixel_format {fmt!r} is not one of {', '.join(FORMATS)}")
    return [TensorType("uint8", (None, None, FORMATS[fmt][1]))]


def decode(stream: np.ndarray, *, pixel_format: str) -> np.ndarray:
    try:
        from PIL import Image
    except ImportError:
        raise UnsupportedOperatorError("ImageDecoder needs Pillow, which is not installed (pip install "
                                       "'tlc[image]')", {("", "ImageDecoder"): 1}) from None
    mode, _, reverse = FORMATS[pixel_format]
    with Image.open(io.BytesIO(np.ascontiguousarray(stream, np.uint8).tobytes())) as image:
        pixels = np.asarray(image.convert(mode))
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    return np.ascontiguousarray(pixels[:, :, ::-1] if reverse else pixels)


register(OpDef(name="ImageDecoder", infer=_infer, reference=decode, attrs={"pixel_format": Attr("string", "RGB")},
               traits=frozenset(), cost=50, doc="Decodes an encoded image's bytes into [H, W, C] uint8 pixels."))
