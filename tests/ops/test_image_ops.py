"""ImageDecoder: ONNX's node cases (every format the spec names), the inferred type, and bad input by name."""

from __future__ import annotations

import numpy as np
import pytest
from nn_helpers import check_backend_case

import tlc
from tests.onnx_cases import quick_cases_for

pytest.importorskip("PIL")


@pytest.mark.parametrize("case", quick_cases_for("ImageDecoder"), ids=lambda c: c.name)
def test_backend_case(case):
    check_backend_case(case, {})


def test_types_and_errors():
    g = tlc.Graph("decode")
    g.output(g.add_node("ImageDecoder", [g.input("x", "uint8", ("B",))], attrs={"pixel_format": "Grayscale"}), "y")
    assert g.type_of(g.outputs[0][0]) == tlc.TensorType("uint8", (None, None, 1))
    bad = tlc.Graph("bad")
    with pytest.raises(tlc.ShapeInferenceError, match="pixel_format 'CMYK' is not one of"):
        bad.add_node("ImageDecoder", [bad.input("x", "uint8", (3,))], attrs={"pixel_format": "CMYK"})
    g2 = tlc.Graph("garbage")
    g2.output(g2.add_node("ImageDecoder", [g2.input("x", "uint8", (4,))]), "y")
    with pytest.raises(tlc.ExecutionError, match="ImageDecoder"):
        tlc.reference.run(g2, {"x": np.array([1, 2, 3, 4], np.uint8)})
