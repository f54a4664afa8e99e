"""The expansion-depthwise chain in bands (``tlc.kernels.chain``) against its numpy form: strides 1 and 2, odd
and even sizes, bands of one row to the whole plane (rows moved up between bands), clamps or none, 1-3 parts."""

from __future__ import annotations

import numpy as np
import pytest

from tlc.kernels import chain, panel


@pytest.mark.skipif(not panel.fast(), reason="the chain runs where the panel kernels are fast (AVX-512)")
def test_bands_match_the_expansion_then_the_depthwise_conv(rng):
    for n, cin, cexp, h, stride in [(1, 3, 5, 9, 1), (2, 4, 17, 18, 2), (1, 2, 3, 33, 2), (2, 5, 7, 20, 1)]:
        x = rng.standard_normal((n, cin, h, h)).astype(np.float32)
        w1 = rng.standard_normal((cexp, cin)).astype(np.float32)
        b1 = rng.standard_normal(cexp).astype(np.float32)
        wd = rng.standard_normal((cexp, 9)).astype(np.float32)
        bd = rng.standard_normal(cexp).astype(np.float32)
        ho = (h - 1) // stride + 1
        for clamps in ((np.array([0, 6], np.float32), np.array([-1, 1], np.float32)),
                       (np.zeros(0, np.float32), np.zeros(0, np.float32))):
            want = chain.reference(x, w1, b1, clamps[0], wd, bd, clamps[1], stride)
            for band in sorted({1, 2, 3, ho}):
                for nparts in (1, 2, 3):
                    out = np.full((n, cexp, ho, ho), np.nan, np.float32)
                    scratch = np.empty(nparts * chain.scratch_elements(cexp, h, stride, band), np.float32)
                    chain.chain_run(x, w1, b1, clamps[0], wd, bd, clamps[1], out, scratch, band, stride, nparts)
                    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4,
                                               err_msg=f"{(n, cin, cexp, h, stride)} band {band} parts {nparts}")
