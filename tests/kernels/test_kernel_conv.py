"""The convolution family (tlc.kernels.conv) against the op registry's reference Conv and pools: every algorithm
on every geometry class (strides, pads, dilations, groups, depthwise, pointwise, batches), cut into 1-3 parts."""

from __future__ import annotations

import numpy as np
import pytest

from tlc.kernels import conv as K
from tlc.kernels import lib_pool, panel
from tlc.kernels import reduce as kreduce
from tlc.ops.conv import conv as reference_conv
from tlc.ops.pool import average_pool, max_pool

#: (n, c, h, m, k, stride, pad, group, dilation)
GEOMETRIES = [
    (1, 3, 9, 5, 3, 1, 1, 1, 1),      # odd channel counts: ragged direct blocks
    (2, 4, 8, 6, 3, 2, 1, 1, 1),      # batch, stride 2
    (1, 4, 7, 4, 3, 1, 0, 2, 1),      # two groups, no padding
    (1, 8, 7, 8, 3, 1, 1, 2, 1),      # two groups of four: the direct kernel's blocks
    (1, 6, 7, 6, 3, 2, 1, 6, 1),      # depthwise, stride 2
    (3, 8, 10, 8, 5, 1, 2, 8, 2),     # depthwise, dilated, three images: a 25-tap window in three passes
    (1, 4, 6, 4, 2, 1, 0, 4, 1),      # depthwise 2x2: a pass of four taps and five zero ones
    (2, 6, 7, 6, 3, 1, 1, 6, 1),      # depthwise 3x3 "same": straight from the input, first/last plane padded
    (1, 5, 1, 5, 3, 1, 1, 5, 1),      # ... on 1x1 planes (one row: no band above or below)
    (3, 3, 2, 3, 3, 1, 1, 3, 1),      # ... on 2x2 planes (no rows between the first and the last)
    (2, 5, 37, 5, 3, 2, 1, 5, 1),     # depthwise stride 2 on 37-wide planes: vectors of 16 outputs, a ragged last
    (1, 3, 19, 3, 3, 1, 1, 3, 1),     # ... stride 1, 19 wide
    (1, 5, 6, 7, 1, 1, 0, 1, 1),      # pointwise: BLAS straight on the input
    (2, 5, 6, 7, 1, 2, 0, 1, 1),      # strided 1x1: gathered
    (1, 8, 9, 12, 2, 2, 0, 4, 1),     # even kernel, groups of two channels
    (1, 3, 11, 4, 4, 3, 1, 1, 1),     # kernel wider than the stride
    (2, 3, 11, 8, 3, 2, 2, 1, 2),     # strided and dilated: the direct kernel on stride phases, two images
    (1, 5, 17, 6, 1, 1, 0, 1, 1),     # pointwise, few output channels over many columns: column tiles
    (2, 6, 9, 5, 3, 1, 1, 1, 1),      # Winograd: odd output size (ragged last tiles), two images
    (1, 4, 6, 3, 3, 1, 0, 1, 1),      # Winograd without padding (4x4 output)
    (1, 70, 40, 80, 3, 1, 1, 1, 1),   # Winograd in several chunks a part
    (2, 3, 64, 13, 7, 2, 3, 1, 1),    # a 7x7 stride-2 stem: PANEL on the phases a row at a time (32 wide)
    (1, 32, 56, 13, 3, 2, 1, 1, 1),   # ... rows of 28 in chunks of 11 rows 29 wide (``_phase_rows``)
    (1, 3, 24, 13, 8, 8, 0, 1, 1),    # a ViT-style patchify conv: LANES_CHANNELS on a positions-major im2col (RUNS)
    (2, 5, 18, 7, 9, 3, 4, 1, 1),     # ... overlapping 9-wide windows, padded on every side, two images
]


# float64 compiles every algorithm's kernels a second time (~17 s cold): a sweep, for CI's 10 minutes
@pytest.mark.parametrize("dtype", [np.float32, pytest.param(np.float64, marks=pytest.mark.sweep)])
def test_every_algorithm_matches_the_reference(dtype):
    """float64 runs one part only (the parallel drivers' compiles cost CI ~10 s a dtype)."""
    rng = np.random.default_rng(0)
    for n, c, h, m, k, s, p, g, d in GEOMETRIES:
        x = rng.standard_normal((n, c, h, h)).astype(dtype)
        w = rng.standard_normal((m, c // g, k, k)).astype(dtype)
        b = rng.standard_normal(m).astype(dtype)
        for bias in (b, None):
            expected = reference_conv(x, w, bias, strides=[s, s], pads=[p] * 4, dilations=[d, d], group=g)
            geo = K.conv_geometry(x.shape, w.shape, expected.shape, (s, s), (p, p), (d, d), g)
            algos = [K.GEMM] + ([K.DIRECT] if K.direct_applies(geo) else []) + \
                ([K.DEPTHWISE] if K.is_depthwise(geo) else []) + ([K.WINOGRAD] if K.winograd_applies(geo) else [])
            if dtype == np.float64:   # the direct and Winograd kernels' float64 compiles are left out (CI's budget)
                algos = [a for a in algos if a not in (K.DIRECT, K.WINOGRAD)]
            # the panel kernel in every orientation (float32, one group; a host without AVX-512 computes the
            # same, slower)
            # Winograd with both tile sides (F(2x2, 3x3) and F(4x4, 3x3))
            runs = [(a, None) for a in algos if a != K.WINOGRAD] + \
                [(K.WINOGRAD, f"F{m}") for m in K.WINO_TILES if K.WINOGRAD in algos] + \
                ([(K.PANEL, K.LANES_POSITIONS), (K.PANEL, K.LANES_CHANNELS),
                                                  (K.PANEL, K.LANES_PHASES)] if dtype == np.float32 and g == 1 else [])
            if K.DEPTHWISE in algos and dtype == np.float32:   # and the vector kernel where it takes the shape
                runs.append((K.DEPTHWISE, "vectors"))
            if K.WINOGRAD in algos and dtype == np.float32:    # and Winograd's products in the panel kernel
                runs += [(K.WINOGRAD, f"F{m} panel products") for m in K.WINO_TILES]
            for algo, lanes in runs:
                for nparts in ((1, 2, 3) if dtype == np.float32 else (1,)):   # float64: one compile less
                    tile = int(lanes[1]) if isinstance(lanes, str) and lanes.startswith("F") else None
                    col_size, parts, nprep = K.plan_conv(geo, nparts, algo, min_seconds=0, tile=tile,
                                                         lanes=lanes if lanes in (K.LANES_POSITIONS,
                                                                                  K.LANES_CHANNELS,
                                                                                  K.LANES_PHASES) else None)
                    if lanes == "vectors" and not K.use_vector_depthwise(geo, dtype):
                        break
                    if isinstance(lanes, str) and lanes.endswith("panel products") and \
                            not K.use_panel_products(geo, dtype):
                        break
                    out = np.full(expected.shape, np.nan, dtype)
                    # parts on Numba's pool (each driver calls its part by address: cheap to compile)
                    K.conv_run(x, K.pack_weights(w, geo), b if bias is not None else np.zeros(0, dtype), geo,
                               out, np.empty(col_size, dtype), parts, nprep)
                    # F(4x4)'s transforms scale a tile's inputs by up to 10 before the products cancel: its
                    # error follows the size of the values around an output, not the output's own
                    atol = 2e-5 * np.abs(expected).max() if tile == 4 else 1e-4
                    np.testing.assert_allclose(out, expected, rtol=1e-4 if dtype == np.float32 else 1e-10,
                                               atol=atol if dtype == np.float32 else 1e-10,
                                               err_msg=f"{K.ALGO_NAMES[algo]}/{lanes}/{nparts} "
                                                       f"{(n, c, h, m, k, s, p, g, d)}")


def test_depthwise_same_never_counts_what_it_reads_across_a_row_end():
    """``_depthwise_same`` reads the element before a row's start and after its end (the row before, the row
    after, the neighbouring plane) and must drop it: infinities and NaNs at every row's ends stay where the
    reference puts them (read across a row's end, the infinity at a row's start would reach the ends of the
    rows above it, the NaN at a row's end the starts of the rows below). The vector kernel reads such a small
    plane flattened (16 outputs of several rows a vector) and must drop the same elements."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 5, 6)).astype(np.float32)
    x[0, 1, 2, 0] = np.inf
    x[1, 2, 3, -1] = np.nan
    w = rng.standard_normal((4, 1, 3, 3)).astype(np.float32)
    expected = reference_conv(x, w, None, strides=[1, 1], pads=[1] * 4, group=4)
    for vectors in (False, True):
        geo = K.conv_geometry(x.shape, w.shape, expected.shape, (1, 1), (1, 1), (1, 1), 4)
        col_size, parts, nprep = K.plan_conv(geo, 1, K.DEPTHWISE, min_seconds=0)
        if vectors and not K.use_vector_depthwise(geo, np.float32):
            continue   # a host without AVX-512: the phase kernels only
        out = np.zeros(expected.shape, np.float32)
        K.conv_run(x, K.pack_weights(w, geo), np.zeros(0, np.float32), geo, out, np.empty(col_size, np.float32),
                   parts, nprep)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5, err_msg=f"vectors={vectors}")
        assert np.isfinite(out).sum() == out.size - 12


def test_parts_return_contiguous_ranges_that_tile_the_output():
    """What an epilogue relies on: part p's range is what it wrote, and the ranges cover the output once."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 6, 5, 5)).astype(np.float32)
    w = rng.standard_normal((12, 6, 3, 3)).astype(np.float32)
    y = (2, 12, 5, 5)
    geo = K.conv_geometry(x.shape, w.shape, y, (1, 1), (1, 1), (1, 1), 1)
    for algo, lanes in ((K.GEMM, None), (K.DIRECT, None), (K.WINOGRAD, 2), (K.WINOGRAD, 4),
                        (K.PANEL, K.LANES_POSITIONS), (K.PANEL, K.LANES_CHANNELS), (K.PANEL, K.LANES_PHASES)):
        for nparts in (1, 2, 3, 4):
            col_size, parts, nprep = K.plan_conv(geo, nparts, algo, min_seconds=0,
                                                 lanes=None if algo == K.WINOGRAD else lanes,
                                                 tile=lanes if algo == K.WINOGRAD else None)
            col = np.empty(col_size, np.float32)
            packed = K.pack_weights(w, geo)
            for p in range(nprep):
                K.conv_prepare(x, packed, np.zeros(0, np.float32), geo, col, p, nprep)
            out = np.zeros(y, np.float32)
            covered = np.zeros(out.size, np.int64)
            for p in range(parts):
                before = out.copy()
                lo, hi = K.conv_part(x, packed, np.zeros(0, np.float32), geo, out, col, p, parts)
                if K.deferred(geo):   # strided slabs: an epilogue runs after every part
                    assert (lo, hi) == (0, 0)
                    continue
                changed = np.flatnonzero((out != before).reshape(-1))
                assert changed.size == 0 or (changed.min() >= lo and changed.max() < hi)
                covered[lo:hi] += 1
            assert K.deferred(geo) or (covered == 1).all(), (K.ALGO_NAMES[algo], nparts)


def _host(monkeypatch, zen4: bool, full_avx512: bool, blas_core: str) -> None:
    """The cost model with the rates of such a host (``K.host_rates``), whatever this one is."""
    blas, panel_rate = K.host_rates(zen4, full_avx512, blas_core)
    monkeypatch.setattr(K, "BLAS_MACS_PER_S", blas)
    monkeypatch.setattr(K, "PANEL_MACS_PER_S", panel_rate)


def _geometry(c, h, m, k, s=1, group=1):
    ho = (h + 2 * (k // 2) - k) // s + 1
    return K.conv_geometry((1, c, h, h), (m, c // group, k, k), (1, m, ho, ho), (s, s), (k // 2,) * 2, (1, 1), group)


def test_the_cost_model_picks_blas_winograd_direct_and_depthwise_where_each_wins(monkeypatch):
    """On Zen 4 (where the rates were measured)."""
    _host(monkeypatch, zen4=True, full_avx512=False, blas_core="Haswell")
    geometry = _geometry

    assert K.choose(geometry(64, 56, 128, 3, s=2)) == K.GEMM            # strided: no Winograd
    assert K.choose(geometry(256, 14, 256, 1)) == K.GEMM                # pointwise: BLAS on the input
    assert K.choose(geometry(64, 56, 64, 3)) == K.WINOGRAD              # ResNet's 3x3 convs
    assert K.choose(geometry(8, 16, 8, 3)) == K.DIRECT                  # small
    assert K.choose(geometry(32, 56, 32, 3, group=32)) == K.DEPTHWISE
    # with the panel kernel (float32 weights on an AVX-512 host): the products it runs faster than BLAS
    assert K.choose(geometry(960, 7, 160, 1), panels=True) == K.PANEL              # MobileNetV2's 1x1s at 7x7
    assert K.panel_lanes(geometry(960, 7, 160, 1))[0] == K.LANES_CHANNELS          # 49 positions: 2 panels
    assert K.panel_lanes(geometry(16, 112, 96, 1))[0] == K.LANES_POSITIONS         # 12544 positions
    # ResNet's last 3x3s: for one image PANEL with the channels in lanes (gathered), as Winograd's 20 slots a
    # product fill a panel of 32 columns (measured on Zen 5: 1173 us against 1208; 2 threads 751 against 877); for
    # eight, Winograd's products in the panel kernel (6.8 ms against 10.3)
    assert K.choose(geometry(512, 7, 512, 3), panels=True) == K.PANEL
    batch8 = K.conv_geometry((8, 512, 7, 7), (512, 512, 3, 3), (8, 512, 7, 7), (1, 1), (1, 1), (1, 1), 1)
    assert K.choose(batch8, panels=True) == K.WINOGRAD
    assert K.choose(geometry(512, 7, 512, 3)) == K.GEMM                             # Winograd on BLAS: slower
    assert K.panel_lanes(geometry(512, 7, 512, 3))[0] == K.LANES_CHANNELS
    assert K.choose(geometry(64, 56, 64, 3), panels=True) == K.WINOGRAD
    # MobileNetV2's and ResNet's stems: positions in lanes, read from the input's stride phases (no im2col; their
    # weights, 3.5 and 37 KiB, stay in cache while every panel of positions reads them)
    assert K.choose(geometry(3, 224, 32, 3, s=2), panels=True) == K.PANEL
    assert K.panel_lanes(geometry(3, 224, 32, 3, s=2))[0] == K.LANES_PHASES
    assert K.panel_lanes(geometry(3, 224, 64, 7, s=2))[0] == K.LANES_PHASES
    assert K.panel_lanes(geometry(64, 56, 128, 1, s=2))[0] != K.LANES_PHASES      # 1x1: phases 4x the gather
    # Winograd's tile side at two parts: F(4x4) for one image of enough tiles, its parts splitting the output
    # channels (ROWS); F(2x2) for a small plane, and for several images, which would read the weights per image
    assert K.winograd_tile(geometry(128, 28, 128, 3), panels=True, nparts=2) == 4
    assert K.winograd_tile(geometry(128, 16, 128, 3), panels=True, nparts=2) == 2
    assert K.winograd_tile(geometry(128, 16, 128, 3), panels=True, nparts=1) == 4
    two = K.conv_geometry((2, 128, 28, 28), (128, 128, 3, 3), (2, 128, 28, 28), (1, 1), (1, 1), (1, 1), 1)
    assert K.winograd_tile(two, panels=True, nparts=2) == 2


def test_the_cost_model_follows_the_hosts_vector_width_and_blas_kernels(monkeypatch):
    """Full-width AVX-512 (Zen 5): the panel kernel ~1.5x OpenBLAS's AVX2 kernels, which the environment may
    pin (OPENBLAS_CORETYPE=Haswell), and slower than its AVX-512 ones (measured in ``K.host_rates``)."""
    stem, pointwise = _geometry(3, 224, 64, 7, s=2), _geometry(256, 28, 256, 1)   # ResNet-50's
    _host(monkeypatch, zen4=False, full_avx512=True, blas_core="Haswell")
    assert K.choose(stem, panels=True) == K.PANEL                 # on its stride phases: 1.14 ms against 1.62 in
    assert K.choose(stem) == K.GEMM                               # column tiles in the panel kernel, 2.67 in
    assert K.seconds(stem, K.GEMM, True) < K.seconds(stem, K.GEMM)  # BLAS
    assert K.choose(pointwise, panels=True) == K.PANEL            # 666 us against 883
    _host(monkeypatch, zen4=False, full_avx512=True, blas_core="SkylakeX")
    assert K.choose(pointwise, panels=True) == K.GEMM             # 458 us against 688
    assert K.choose(_geometry(64, 56, 64, 3), panels=True) == K.WINOGRAD


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_pooling_matches_the_reference(dtype):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 9, 9)).astype(dtype)
    x[0, 1, 2, 2] = x[1, 2, 0, 0] = np.nan   # max: NaN counts only as a window's first tap, as in the reference
    cases = [dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
             dict(kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 0, 0], ceil_mode=1),
             dict(kernel_shape=[3, 2], strides=[1, 2], pads=[1, 0, 1, 1], dilations=[2, 1]),
             dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
             dict(kernel_shape=[5, 5], strides=[2, 2], pads=[2, 2, 2, 2]),   # even left pad: other phase pairs
             dict(kernel_shape=[2, 3], strides=[3, 3], pads=[0, 1, 0, 1]),   # stride 3: nine phases
             # few outputs a plane: window by window (a NaN first in one window, later in another)
             dict(kernel_shape=[9, 9], strides=[1, 1], pads=[0, 0, 0, 0]),
             dict(kernel_shape=[5, 5], strides=[4, 4], pads=[1, 1, 1, 1]),
             dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1, small=True)]
    for attrs in cases:
        xc = np.ascontiguousarray(x[:, :, :7, :7]) if attrs.pop("small", False) else x   # 4x4 outputs
        for kind, ref in ((K.MAX, max_pool), (K.AVG, average_pool)):
            if kind == K.AVG and "dilations" in attrs:
                continue
            if kind == K.MAX and "count_include_pad" in attrs:
                continue
            expected = ref(xc, **attrs)
            expected = expected[0] if isinstance(expected, list) else expected
            pads, kernel = attrs["pads"], attrs["kernel_shape"]
            strides, dil = attrs["strides"], attrs.get("dilations", [1, 1])
            geo = K.pool_geometry(xc.shape, kernel, expected.shape, strides, pads[:2], dil, kind)
            lgeo = lib_pool.PoolGeometry(*xc.shape, *kernel, *expected.shape[2:], *strides, *dil, *pads)
            div = lib_pool.avg_divisor(lgeo, bool(attrs.get("count_include_pad", 0)), dtype)
            for nparts in ((1, 2) if dtype == np.float32 else (1,)):
                out = np.empty(expected.shape, dtype)
                K.pool_run(xc, geo, div, out, np.empty(K.pool_scratch(geo, nparts), dtype), nparts)
                np.testing.assert_allclose(out, expected, rtol=1e-6, err_msg=f"{kind} {attrs}")
            if kind == K.MAX:   # the numpy taps a lazy plan runs while the kernel compiles (fuzz seed 808425)
                work = [np.empty(s, dtype) for s in lib_pool.workspace(lgeo)]
                out = lib_pool.max_pool(xc, np.empty(expected.shape, dtype), lgeo, work)
                np.testing.assert_allclose(out, expected, rtol=1e-6, err_msg=f"numpy taps {attrs}")
    plane = x.shape[2] * x.shape[3]
    for op, reduce in ((kreduce.MAX, np.max), (kreduce.MEAN, np.mean)):   # the global pools as the plan runs them
        for run, parts in ((kreduce.reduce_serial, ()), (kreduce.reduce_parallel, (2,))):
            out = np.empty(x.shape[:2] + (1, 1), dtype)
            run(x, out, plane, 1, op, *parts)
            np.testing.assert_allclose(out, reduce(x, axis=(2, 3), keepdims=True), rtol=1e-6)


def test_column_tiles_match_the_reference(monkeypatch):
    """GEMM in column tiles (large im2col blocks, or few output channels): partial last tiles, groups, strides,
    pointwise; the parts report (0, 0) and ``deferred`` says an epilogue must follow them."""
    monkeypatch.setattr(K, "WHOLE_COL_MAX", 0)
    monkeypatch.setattr(K, "TILE_ELEMS", 16 * 40)
    rng = np.random.default_rng(3)
    for n, c, h, m, k, s, p, g, d in GEOMETRIES:
        x = rng.standard_normal((n, c, h, h)).astype(np.float32)
        w = rng.standard_normal((m, c // g, k, k)).astype(np.float32)
        b = rng.standard_normal(m).astype(np.float32)
        expected = reference_conv(x, w, b, strides=[s, s], pads=[p] * 4, dilations=[d, d], group=g)
        geo = K.conv_geometry(x.shape, w.shape, expected.shape, (s, s), (p, p), (d, d), g)
        for nparts, products in ((1, K.PRODUCTS_BLAS), (2, K.PRODUCTS_BLAS), (3, K.PRODUCTS_BLAS),
                                 (1, K.PRODUCTS_PANEL), (3, K.PRODUCTS_PANEL)):
            col_size, parts, nprep = K.plan_conv(geo, nparts, K.GEMM, min_seconds=0)
            assert K.deferred(geo) or K.is_pointwise(geo)   # pointwise: tiles only for few rows of many columns
            if geo[K.MODE] == K.TILES and products == K.PRODUCTS_PANEL:   # the tiles' products in the panel
                if not panel.fast():                                      # kernel (a host with AVX-512)
                    continue
                geo[K.KIND] = products
            out = np.full(expected.shape, np.nan, np.float32)
            K.conv_run(x, K.pack_weights(w, geo), b, geo, out, np.empty(col_size, np.float32), parts, nprep)
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4,
                                       err_msg=f"{nparts} {products} {(n, c, h, m, k)}")


def test_depthwise_parts_before_an_epilogue_fit_in_cache():
    """A depthwise conv that an epilogue follows is cut into parts of at most EPILOGUE_ELEMS outputs, a whole
    number per thread and never more than its planes; without an epilogue, one part per thread."""
    for n, c, h, threads in ((1, 144, 56, 1), (1, 144, 56, 2), (2, 32, 112, 2), (1, 6, 112, 4), (1, 960, 7, 2)):
        geo = K.conv_geometry((n, c, h, h), (c, 1, 3, 3), (n, c, h, h), (1, 1), (1, 1), (1, 1), c)
        _, plain, _ = K.plan_conv(geo, threads, K.DEPTHWISE, min_seconds=0)
        assert plain == min(threads, n * c)
        _, parts, _ = K.plan_conv(geo, threads, K.DEPTHWISE, min_seconds=0, epilogue=True)
        planes = n * c
        assert parts % plain == 0 and parts <= planes
        most = max(1, K.EPILOGUE_ELEMS // (h * h))   # planes a part may take
        assert -(-planes // parts) <= most or parts == planes // plain * plain, (n, c, h, threads, parts)
        assert parts < 2 * plain or -(-planes // (parts - plain)) > most   # no more parts than needed


def test_panel_parts_share_out_channels_only_when_they_balance():
    """PANEL parts take whole units of 12 output channels where they share out at least as evenly as runs of
    output positions do, else the positions (TILES): 16 channels are units of 12 and 4 (3:1 at two parts), 24 two
    equal units, 32 three units, 64 five and a 4 (36:28) against 98 panels of 32 positions (49:49). On the stride
    phases positions go in chunks of output rows: ResNet's 7x7 s2 stem (112 rows, 56:56) takes them, its 3x3 s2
    64 -> 128 conv to 28x28 (chunks of 11 rows: 11:17) keeps the channels (72:56)."""
    assert panel.TILE == 12 and panel.PANEL == 32
    for n, m, threads, mode in ((1, 16, 2, K.TILES), (1, 24, 2, K.ROWS), (1, 32, 2, K.TILES), (1, 64, 2, K.TILES),
                                (2, 16, 2, K.ROWS), (1, 16, 1, K.ROWS)):
        geo = K.conv_geometry((n, 32, 56, 56), (m, 32, 1, 1), (n, m, 56, 56), (1, 1), (0, 0), (1, 1), 1)
        K.plan_conv(geo, threads, K.PANEL, min_seconds=0, lanes=K.LANES_POSITIONS)
        assert geo[K.MODE] == mode, (n, m, threads)
    for (c, h, m, k, ho, pad), mode in (((3, 224, 64, 7, 112, 3), K.TILES), ((64, 56, 128, 3, 28, 1), K.ROWS)):
        geo = K.conv_geometry((1, c, h, h), (m, c, k, k), (1, m, ho, ho), (2, 2), (pad, pad), (1, 1), 1)
        K.plan_conv(geo, 2, K.PANEL, min_seconds=0, lanes=K.LANES_PHASES)
        assert geo[K.MODE] == mode, (c, m, k)


def test_panel_parts_before_an_epilogue_fit_in_cache():
    """A PANEL conv that an epilogue follows is cut into parts of whole units of output channels holding at most
    ``EPILOGUE_ELEMS`` outputs (one unit where a unit holds more), a whole number per thread, so the epilogue
    reads each part's output from cache; without an epilogue, one part per thread."""
    assert panel.TILE == 12   # the wanted parts below are for units of 12 channels
    for n, c, m, hw, threads, want in ((8, 16, 96, 112, 1, 64), (3, 16, 96, 112, 2, 24), (1, 96, 576, 14, 1, 2),
                                       (1, 96, 576, 14, 2, 2), (8, 96, 576, 14, 2, 16)):
        geo = K.conv_geometry((n, c, hw, hw), (m, c, 1, 1), (n, m, hw, hw), (1, 1), (0, 0), (1, 1), 1)
        _, plain, _ = K.plan_conv(geo, threads, K.PANEL, min_seconds=0, lanes=K.LANES_POSITIONS)
        assert plain == threads
        _, parts, _ = K.plan_conv(geo, threads, K.PANEL, min_seconds=0, epilogue=True, lanes=K.LANES_POSITIONS)
        assert geo[K.MODE] == K.ROWS and parts == want, (n, threads, parts)
        units, per_unit = n * -(-m // panel.TILE), panel.TILE * hw * hw
        assert parts % threads == 0 and -(-units // parts) * per_unit <= max(K.EPILOGUE_ELEMS, per_unit)
