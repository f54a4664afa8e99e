"""The convolution family: 2-D convolution and pooling as Numba kernels cut into parts for the runtime's pool.

One geometry vector describes every member (``conv_geometry``/``pool_geometry``: an int64 array, so one
compiled function serves every shape), and the algorithm is a field of it, chosen per shape by ``choose``:

- ``GEMM``: im2col (a Numba gather) and one single-threaded BLAS call per part; a 1x1 convolution with stride 1
  and no padding reads the input directly. Parts are whole images, runs of one batch's output rows (after a
  parallel im2col, ``conv_prepare``), or column tiles whose im2col block stays in L2 (large gathers, or few
  output channels). The BLAS kernels win on large convolutions.
- ``DIRECT`` (whole blocks of four output channels per group, any stride): four output planes accumulated
  together from weights packed once at compile time as [M/4, C/group, kh, kw, 4], on the stride phases of
  every input plane (``_into_phases``); each pass sums nine taps of one input channel into all four, one long
  vector loop over the output. For small convolutions and few input channels (a 3-channel first conv), where
  im2col and a BLAS call cost more than the arithmetic.
- ``DEPTHWISE``: one input channel per output channel (group == C == M): passes of nine taps over each
  plane's stride phases (every output computed once, a strided conv too); a 3x3 conv with padding 1 and stride
  1 or 2 on float32 runs ``tlc.kernels.panel``'s vector kernel instead (``use_vector_depthwise``).
- ``PANEL`` (one group, float32, constant weights, AVX-512 hosts): per image out[M, HW] = W[M, K] @ X[K, HW]
  (X the input of a pointwise conv, else the batch's im2col matrix gathered first, ``prepare_panel``) through
  ``tlc.kernels.panel``'s register-tiled kernel, with the output positions in its lanes (W broadcast, X read in
  place; pointwise convs with many positions) or the output channels (X broadcast, W^T packed once in panels of
  32, each vector scattered into NCHW). A gathered conv whose weights fit in L2 reads its input where
  ``_into_phases`` put the stride phases of its planes instead of an im2col matrix (``LANES_PHASES``: the kernel's
  row k of B is tap k's input row, found through a table of offsets; ResNet's 7x7 stem at 224x224, one core,
  1.62 -> 1.14 ms). Parts are runs of output channels (a panel's 32, or a tile's 12), or of output positions (of
  rows, on the phases) where the channels share out unevenly (``deferred``).
- ``WINOGRAD`` (3x3, stride 1, no dilation, one group): F(m x m, 3x3) with m = 2 or 4 (``geo[WT]``, chosen by
  ``winograd_tile``). Weights transformed once at compile time into (m + 2)^2 matrices U[(m + 2)^2, M, C]; per
  chunk of m x m output tiles the (m + 2) x (m + 2) input tiles are transformed into as many blocks (B^T d B),
  multiplied by U in as many products (2.25x fewer multiply-adds than im2col for F(2x2), 4x for F(4x4)), and
  transformed back (A^T m A) into the output; the transforms are entries called by address. Parts are chunks
  of tile rows (``TILES``, the epilogue deferred) or, when there are too few tiles for every thread, (image,
  output-channel) rows of one shared input transform (``ROWS``). On float32 where the panel kernel runs fast,
  the products run in it instead of BLAS (``use_panel_products``).

Parts follow the contract of ``cpu.Contraction``: ``part_<algorithm>(x, w, bias, geo, acc, col, p, nparts)``
computes part ``p`` of the output ``acc`` with its bias and returns the flat range [lo, hi) it wrote, so a
generated epilogue (Relu, Clip, a residual Add, a folded BatchNorm's scale) runs on that range on the same thread
while it is in cache; column tiles write strided slabs and return (0, 0) (``deferred``: the epilogue follows all
parts). Compiled code calls a part by address (``tlc.kernels.entries``: the part is compiled once per dtype,
not linked into every epilogue module and driver that runs it); ``ensure_entries`` first.

Layout: NCHW (``LAYOUT`` 0). The geometry carries the layout so that channels-last members join the same
family; today the channels-last convolution (``tlc.ConvNhwc``) still runs on its own library kernels.

Pooling (max, average, with padding, strides, dilations) runs per (image, channel) plane on the plane's stride
phases, as depthwise does: ``pool_run(x, geo, divisor, out, scratch, nparts)``; global pooling (and a window
that is the whole plane) is ``tlc.kernels.reduce``'s, over the planes as rows.
"""

from __future__ import annotations

import numpy as np
from numba import carray, njit, prange

from . import entries, panel
from .blas import AVX512_CORES, gemm_f32, gemm_f64
from .entries import Entry
from .panel import BIAS_COLUMNS, BIAS_NONE, BIAS_ROWS, depthwise_3x3, max_pool_3x3, panel_strided

panel.ensure()   # the symbol the PANEL parts call (compiled code links it by name)

# geometry vector fields
N, C, H, W, M, KH, KW, HO, WO, GROUP, SH, SW, DH, DW, PT, PL, LAYOUT, ALGO, MODE, KIND, TILE = range(21)
#: a clamp of the output (``set_clamp``: a Relu or Clip the PANEL kernel applies as it stores): whether there is
#: one, and its bounds as two float32 in one field (lo in the low half)
CLAMP, CLAMP_BOUNDS = 21, 22
#: LANES_PHASES: 1 where the batch's phases are made once, by the preparation's parts, and read by every part
#: (fewer images than parts: each part would make the same image's phases), 0 where each part makes an image's
#: own in its scratch
SHARED = 23
#: WINOGRAD: the side m of its output tiles, F(m x m, 3x3) with m = 2 or 4 (``plan_conv``, by the cost model)
WT = 24
#: PANEL in LANES_CHANNELS on a gathered im2col matrix: 1 where it is positions-major, [HW, K] an image (each
#: output position's K taps in a row, copied as runs of KW contiguous input elements: ``_im2col_positions``), 0
#: where it is [K, HW] (``_im2col_rows``, a strided gather along each output row). Runs of ``RUNS_MIN_KW`` or more
#: (ViT's 16x16 stride-16 patches, 3 -> 192 at 224x224, one core: the gather 60 -> 28 us of a 306 us conv)
RUNS = 25
RUNS_MIN_KW = 8
#: 1 where the output holds a residual when the conv starts and the PANEL kernel adds its product to it
#: (``set_accumulate``: a residual Add taken in place)
ACCUMULATE = 26
GEO_SIZE = 27
GEMM, DIRECT, DEPTHWISE, WINOGRAD, PANEL = 0, 1, 2, 3, 4
ALGO_NAMES = ("gemm", "direct", "depthwise", "winograd", "panel")
IMAGES, ROWS, TILES = 0, 1, 2  # GEMM modes: parts of whole images / of one batch's output rows / of column tiles
#: PANEL's orientations (``geo[KIND]``): the kernel's vectors along the output positions (a tile: 12 output
#: channels x 32 positions, broadcasting the weights) or along the output channels (12 positions x 32 channels
#: from the weights packed once in panels, broadcasting the input; the tile's columns scattered into NCHW)
LANES_POSITIONS, LANES_CHANNELS = 0, 1
#: PANEL's third orientation: positions in lanes as LANES_POSITIONS, the input read where ``_into_phases`` put its
#: stride phases instead of gathered into an im2col matrix (the kernel's row k of B is tap k's input row, at an
#: offset from a table: ``panel_strided``'s ``b_rows``); per output row or per chunk of rows ``wq`` wide, their
#: extra columns dropped as they are copied out (``_copy_rows``), as ``_phase_rows`` chooses
LANES_PHASES = 2
#: output rows this wide or wider run a kernel call each, straight into the output, unless chunks of rows fill
#: the kernel's lanes better by more than copying them out costs (``_phase_rows``); narrower ones in chunks
PHASE_ROW_MIN = 24
#: columns (rows ``wq`` wide) of a chunk of output rows at most: ten panels
PHASE_CHUNK_COLUMNS = 320
#: what copying an output element out of a chunk costs, in the kernel's multiply-adds (~0.15 ns)
PHASE_COPY_MACS = 16
#: the weights (bytes) up to which LANES_PHASES applies: every panel of output positions reads all of them again
#: (deeper convs take LANES_CHANNELS, whose weight panels stay in L2 while every position runs through them)
PHASE_WEIGHTS_MAX = 1 << 20
#: DEPTHWISE's kernels (``geo[KIND]``): the Numba kernels on stride phases, or (3x3, padding 1, stride 1 or 2,
#: float32, AVX-512: ``use_vector_depthwise``) ``tlc.kernels.panel``'s vector kernel
DEPTHWISE_PHASES, DEPTHWISE_VECTORS = 0, 1
#: the products of WINOGRAD and of GEMM's column tiles (``geo[KIND]``): BLAS, or (float32, a host that runs it
#: fast: ``use_panel_products``) ``tlc.kernels.panel``'s kernel on their right operand where it is
PRODUCTS_BLAS, PRODUCTS_PANEL = 0, 1
#: a column tile's im2col block stays in L2: about this many elements (K x tile columns)
TILE_ELEMS = 1 << 17
#: im2col buffers larger than this (elements) are gathered a tile at a time instead
WHOLE_COL_MAX = 1 << 20
MAX, AVG = 0, 1               # pooling kinds
#: a pool's kernels (``geo[ALGO]`` of a pooling geometry): the passes on stride phases, or (``use_vector_pool``)
#: ``tlc.kernels.panel``'s vector kernel
POOL_PHASES, POOL_VECTORS = 0, 1
#: a pool with at most this many outputs a plane takes each output's window in turn (``_pool_windows``)
POOL_WINDOW_OUTPUTS = 16
BLOCK = 4                     # output channels per direct-kernel block
#: taps one pass of the window kernels (depthwise, direct, 3x3 pooling) sums per output: a 3x3 window in one
#: pass over the output (a pass per tap moved the output through the cache nine times: 2-5 GMAC/s)
TAPS_PER_PASS = 9

#: the cost model's rates on one core (2-core Zen 4 VM, thread CPU time; the sweep is recorded in
#: docs/architecture.md). Direct: ~33 GMAC/s on large planes, plus a set-up per pass (``DIRECT_PASS_S``); BLAS
#: ~55 GMAC/s on products with many columns after ~10 us per call with its im2col set-up (a whole 3x3 conv of
#: ResNet's first stage: 38 GMAC/s), the gather ~3 G elements/s.
#: Measured: 8 -> 8 channels at 16x16 direct 8 us against im2col + BLAS 12 us; 64 -> 64 at 56x56 3.2 ms
#: against 3.0 ms (Winograd 1.2); 3 -> 32 at 224x224 stride 2 0.35 ms against 0.40.
DIRECT_MACS_PER_S = 33e9
#: the direct kernel's set-up of one pass (nine slices, 36 weights): 14x14 and 7x7 outputs with hundreds of
#: input channels ran at 12-15 GMAC/s, 56x56 and larger at 30-35
DIRECT_PASS_S = 60e-9
DEPTHWISE_MACS_PER_S = 2e9


def host_rates(zen4: bool, full_avx512: bool, blas_core: str) -> tuple[float, float]:
    """(BLAS, PANEL) MAC/s of one core, the cost model's two rates that differ most between hosts; the others
    are Zen 4's. Zen 4 runs AVX-512 as two 256-bit halves: OpenBLAS's AVX2 (Haswell) kernels ~55 G, the panel
    kernel 1.15x that (below). A host with full-width AVX-512 (measured: 2-core EPYC Zen 5, one thread, convs
    through ``tools/conv_shapes.py``): the panel kernel 70-100 G (1x1 256 -> 256 at 28x28 77, 3x3 512 -> 512 at
    7x7 70, 3x3 128 -> 128 at 28x28 ~95), OpenBLAS's AVX2 kernels ~58 G and its AVX-512 ones ~105 G (the same 1x1
    112). There the Zen 4 rates chose im2col + AVX2 BLAS for ResNet-50's 7x7 stem, 2.68 ms against 1.74 in the
    panel kernel."""
    if zen4 or not full_avx512:
        return 55e9, 1.15 * 55e9
    return (105e9 if blas_core in AVX512_CORES else 58e9), 85e9


def _this_host() -> tuple[float, float]:
    from .._platform import zen4
    from .blas import CORE

    return host_rates(zen4(), panel.fast(), CORE)


BLAS_MACS_PER_S, _PANEL_RATE = _this_host()
#: output columns (positions) from which a product reaches that rate: 512 -> 512 at 7x7 (49 columns) runs at
#: ~35 GMAC/s
BLAS_FULL_COLUMNS = 128
#: and the depth (C/group * kh * kw) from which it does: with few products per output element the output's
#: traffic dominates (16 -> 96 1x1 at 112x112: 20 GMAC/s; 24 -> 144 at 56x56: 26; 3 -> 32 3x3 at 64x64: 17)
BLAS_FULL_DEPTH = 128
BLAS_CALL_S = 10e-6
IM2COL_ELEMS_PER_S = 3e9
#: and ~2 ns a run of one output row (a 512 -> 512 3x3 conv at 7x7 gathers 4608 x 7 runs of 7 in ~0.14 ms)
IM2COL_SEGMENT_S = 2e-9
#: Winograd F(2x2, 3x3): its 16 products reach ~55 GMAC/s from 64 tiles a chunk on (16 tiles: 0.4 of it, as
#: each product packs its whole [M, C] matrix), the input transform ~4.5 G and the output transform ~6 G
#: transformed elements/s (unit-stride vector loops over a chunk's slots; 2-3.5 G on 7x7 planes), ~0.5 us per
#: BLAS call. Measured on one core against im2col + BLAS: 64 -> 64 at 56x56 1.23 ms against 3.08; 128 -> 128
#: at 28x28 1.28 against 2.69; 48 -> 16 at 128x128 1.61 against 4.67; 512 -> 512 at 7x7 3.4 against 3.4.
#: (Its 16 products run at ``BLAS_MACS_PER_S``, less for narrow chunks, or in the panel kernel.)
WINO_FULL_TILES = 64
WINO_IN_ELEMS_PER_S = 4.5e9
WINO_OUT_ELEMS_PER_S = 6e9
WINO_CALL_S = 0.5e-6
#: F(m x m, 3x3) for these m: output tiles m x m from input tiles (m + 2) x (m + 2), (m + 2)^2 products. F(4x4)
#: does 2.25 multiply-adds an output where F(2x2) does 4, but reads its 36 weight matrices once per chunk of
#: tiles: on small planes (7x7: 4 tiles an image) they come from memory for few columns each (one core, ResNet's
#: 512 -> 512 at 7x7: 2.4 ms against F(2x2)'s 1.2-1.5; 256 -> 256 at 14x14 0.76 against 0.64), which
#: ``WINO_WEIGHTS_BYTES_PER_S`` prices (fitted to those two); F(4x4) on larger planes: 64 -> 64 at 56x56 0.54
#: against 0.74 ms, 128 -> 128 at 28x28 0.46 against 0.63, batch 8 64 -> 64 at 56x56 4.8 against 6.5
WINO_TILES = (2, 4)
#: F(4x4)'s tiles an image needs for F(4x4) where its parts split the output channels (``winograd_tile``)
WINO_ROWS_TILES = 48
WINO_WEIGHTS_BYTES_PER_S = 40e9
#: the time of a transformed element of the input and output transforms against F(2x2)'s (measured, one core,
#: 64 -> 64 at 56x56: F(4x4)'s input transform 0.19 ms for 452 k elements, F(2x2)'s 0.13 ms for 803 k; output
#: 0.096 against 0.091): F(4x4)'s combine more values, and its input goes through column phases
WINO_TRANSFORM_COST = {2: (1.0, 1.0), 4: (2.7, 1.9)}
#: the weights of one chunk's products stay in L2 below this, and are read from memory once
WINO_L2_BYTES = 1 << 20
#: tiles x (C + M) x blocks of one chunk: its transformed blocks (1 MiB of float32) stay in L2; a chunk has at
#: least WINO_FULL_TILES tiles, as the products slow down below (each streams its [M, C] matrix)
WINO_CHUNK_BLOCKS = 1 << 18
#: elements between the transformed blocks: blocks a multiple of 4 KiB apart fall in one L1 set, and the
#: transforms, which touch all 16 at once, thrash it (the input transform ran 4x slower)
WINO_PAD = 48
#: PANEL (``tlc.kernels.panel``'s register-tiled kernel on float32 and constant weights, AVX-512 hosts): 1.1-1.2x
#: BLAS's rate on the same product where the tile's 32 lanes are all used (hence 1.15x ``BLAS_MACS_PER_S``, in
#: the cost model's units), less a tile's scattered stores in LANES_CHANNELS (~24 k-steps' worth) and the rows a
#: tile lacks. Measured against numpy's BLAS (1 thread): 160 x 960 x 49 (M x K x positions) 52 against 44 GMAC/s,
#: 1280 x 320 x 49 50 against 43, 512 x 4608 x 49 45 against 38, 96 x 576 x 196 54 against 48 (all channels in
#: lanes), 144 x 24 x 3136 53 against 46, 96 x 16 x 12544 48 against 41 (positions in lanes)
PANEL_MACS_PER_S = _PANEL_RATE   # ``host_rates``
PANEL_SCATTER_K = 24
#: a gathered PANEL conv deeper than this (K = C x kh x kw), or gathering more elements than the next, runs
#: LANES_CHANNELS (``panel_lanes``)
PANEL_GATHER_DEEP = 64
PANEL_GATHER_SMALL = 1 << 19
#: PANEL gathers the batch's whole im2col matrix (K x positions per image) up to this many elements
PANEL_COL_MAX = 1 << 22
#: work worth a parallel region (one costs ~5-10 us on this VM; a BLAS product's threshold is the same ~20 us)
PARALLEL_MIN_S = 20e-6
#: outputs of a depthwise part at most (when there are planes enough): the epilogue that follows the part on its
#: thread finds them in L2 (one part per thread over a 144x56x56 output ran a Clip after it at ~3 GB/s; PANEL's
#: parts cut so, a tile's 6 channels each, read their whole input again: MobileNetV2's 16 -> 96 1x1 at 112x112
#: with its Clip 0.59 -> 0.63 ms)
EPILOGUE_ELEMS = 1 << 16
#: elements a part's scratch is rounded to (``_slot``): two 64-byte lines of float32, as the prefetcher pairs them
SLOT = 32


def conv_geometry(x_shape, w_shape, out_shape, strides, pads_begin, dilations, group: int) -> np.ndarray:
    n, c, h, w = x_shape
    m, _, kh, kw = w_shape
    geo = np.zeros(GEO_SIZE, np.int64)
    geo[:LAYOUT] = (n, c, h, w, m, kh, kw, out_shape[2], out_shape[3], group, strides[0], strides[1],
                    dilations[0], dilations[1], pads_begin[0], pads_begin[1])
    return geo


def set_clamp(geo: np.ndarray, lo: float, hi: float) -> None:
    """Clamp the conv's output to [lo, hi] as it is stored (where the algorithm does: ``clamps``)."""
    geo[CLAMP] = 1
    geo[CLAMP_BOUNDS:CLAMP_BOUNDS + 1].view(np.float32)[:] = (lo, hi)


def set_accumulate(geo: np.ndarray) -> None:
    """Add the conv's result to what the output holds when it starts (``accumulates``): a residual Add."""
    geo[ACCUMULATE] = 1


def accumulates(geo: np.ndarray) -> bool:
    """Whether the chosen algorithm can add its result to the output's values (``set_accumulate``): PANEL with
    the output positions in the kernel's lanes (rows of C contiguous), not on stride phases."""
    return bool(geo[ALGO] == PANEL and geo[KIND] == LANES_POSITIONS)


def clamps(geo: np.ndarray) -> bool:
    """Whether the chosen algorithm applies a clamp as it stores (``tlc.kernels.panel``'s kernels: PANEL and the
    vector depthwise kernel)."""
    return bool(geo[ALGO] == PANEL or (geo[ALGO] == DEPTHWISE and geo[KIND] == DEPTHWISE_VECTORS))


def is_pointwise(geo: np.ndarray) -> bool:
    """A 1x1 convolution that is a plain product of the input (stride 1, no padding, one group)."""
    return bool(geo[KH] == geo[KW] == 1 and geo[SH] == geo[SW] == 1 and geo[PT] == geo[PL] == 0
                and geo[GROUP] == 1 and geo[HO] == geo[H] and geo[WO] == geo[W])


def deferred(geo: np.ndarray) -> bool:
    """Whether the parts write strided slabs (column tiles, Winograd's tile rows of every channel), so that an
    epilogue must run after all of them."""
    return bool(geo[ALGO] in (GEMM, WINOGRAD, PANEL) and geo[MODE] == TILES)


def is_depthwise(geo: np.ndarray) -> bool:
    return bool(geo[GROUP] == geo[C] == geo[M] and geo[GROUP] > 1)


def macs(geo: np.ndarray) -> int:
    return int(geo[N] * geo[M] * geo[HO] * geo[WO] * (geo[C] // geo[GROUP]) * geo[KH] * geo[KW])


def winograd_applies(geo: np.ndarray) -> bool:
    """Whether Winograd takes this shape: a 3x3 kernel, stride 1, no dilation, one group."""
    return bool(geo[KH] == geo[KW] == 3 and geo[SH] == geo[SW] == 1 and geo[DH] == geo[DW] == 1
                and geo[GROUP] == 1)


def _winograd_rows(geo, m: int) -> int:
    """Tile rows per Winograd chunk of F(m x m) (a tile row: m output rows, ``ceil(WO / m)`` tiles)."""
    tw = _tiles(geo[WO], m)
    return int(max(1, max(WINO_FULL_TILES, WINO_CHUNK_BLOCKS // _blocks(m) // (geo[C] + geo[M])) // tw))


def _winograd_scratch(geo) -> int:
    """One part's Winograd scratch (TILES): a chunk's transformed input and output blocks, and the input
    transform's rows (the output transform reuses them)."""
    m = int(geo[WT])
    tw = _tiles(geo[WO], m)
    rows = min(int(geo[TILE]), int(geo[N] * _tiles(geo[HO], m)))
    slots = rows * (tw + 1)
    return int(_blocks(m) * (geo[C] * slots + WINO_PAD + geo[M] * slots + WINO_PAD) + _winograd_q(m, rows, tw))


def _winograd_seconds(geo: np.ndarray, m: int, panels: bool) -> float:
    """The time of a WINOGRAD conv with tiles of ``m``, to compare tile sides (``winograd_tile``): products on
    whole panels and weights read again per chunk where they exceed L2, what sets F(2x2) and F(4x4) apart."""
    blocks = _blocks(m)
    tw, rows = _tiles(geo[WO], m), int(geo[N] * _tiles(geo[HO], m))
    tiles = rows * tw
    per_chunk = min(_winograd_rows(geo, m), rows)
    chunks = -(-rows // per_chunk)
    if panels:
        # the panel kernel at its rate on whole panels of 32 columns (a chunk's slots: its tile rows' tiles and
        # one junk slot each; measured on Zen 5, one core, whole convs, F(2x2): 64 -> 64 at 56x56 714 us,
        # 512 -> 512 at 7x7, 20 slots a product, 1183 us; PANEL took 1337 and 1741, Winograd on OpenBLAS's AVX2
        # kernels 1170 and 2607)
        full, last = rows // per_chunk, rows % per_chunk
        columns = full * _whole(per_chunk * (tw + 1), panel.PANEL) + _whole(last * (tw + 1), panel.PANEL)
        products = blocks * geo[M] * geo[C] * columns / PANEL_MACS_PER_S
    else:   # BLAS streams each product's [M, C] matrix: narrow products run slower
        rate = BLAS_MACS_PER_S * min(1.0, (per_chunk * tw / WINO_FULL_TILES) ** (2 / 3))
        products = blocks * geo[M] * geo[C] * rows * (tw + 1) / rate
    # the products' weights, read once a chunk, come from memory when they exceed L2
    weights = blocks * geo[M] * geo[C] * 4
    streamed = weights * chunks / WINO_WEIGHTS_BYTES_PER_S if weights > WINO_L2_BYTES else 0.0
    slow_in, slow_out = WINO_TRANSFORM_COST[m]
    return products + streamed + blocks * chunks * WINO_CALL_S + \
        blocks * tiles * (geo[C] * slow_in / WINO_IN_ELEMS_PER_S + geo[M] * slow_out / WINO_OUT_ELEMS_PER_S)


def _whole(n: int, unit: int) -> int:
    """``n`` rounded up to whole ``unit``s."""
    return -(-n // unit) * unit


def winograd_tile(geo: np.ndarray, panels: bool | None = None, nparts: int = 1) -> int:
    """The Winograd tile side (``WINO_TILES``) the cost model prefers for this shape, cut into ``nparts``: F(4x4)
    where its tiles still fill every part (TILES mode), or one image of at least ``WINO_ROWS_TILES`` of them.
    With fewer tiles, parts split the output channels of each image (ROWS) and read their share of the 36
    weight matrices again per image, for few columns: batch 8 512 -> 512 at 7x7, two threads, 8.7 ms against
    F(2x2)'s 3.8. One image reads them once; on a plane of enough tiles F(4x4) then gains (2-core Zen 4, two
    parts, F(4x4) in ROWS against F(2x2): 128 -> 128 at 28x28 570 against 736 us, 32 -> 64 at 32x32 127 against
    135), on smaller ones its 16-column products lose (UNet's 128 -> 128 at 16x16 ~500 against ~400 in the
    model; 64 -> 64 at 16x16 105 against 102 alone)."""
    panels = geo[KIND] == PRODUCTS_PANEL if panels is None else panels
    sides = [m for m in WINO_TILES
             if m == 2 or not _few_tiles(geo, m, nparts)
             or (geo[N] == 1 and _tiles(geo[HO], m) * _tiles(geo[WO], m) >= WINO_ROWS_TILES)]
    return min(sides, key=lambda m: _winograd_seconds(geo, m, panels))


def seconds(geo: np.ndarray, algo: int, panels: bool | None = None) -> float:
    """The cost model's time for the whole convolution with ``algo`` on one core (Winograd's products in the
    panel kernel with ``panels``; None: as ``geo[KIND]`` says)."""
    work = macs(geo)
    if algo == WINOGRAD:
        if not winograd_applies(geo):
            return np.inf
        # F(2x2)'s time, as fitted against the other algorithms (``winograd_tile`` picks F(4x4) where it is
        # faster still: the choice of algorithm does not depend on it)
        tw, rows = _tiles(geo[WO], 2), int(geo[N] * _tiles(geo[HO], 2))
        tiles, slots = rows * tw, rows * (tw + 1)   # products run over every slot, one junk a tile row
        per_chunk = min(_winograd_rows(geo, 2), rows)
        if geo[KIND] == PRODUCTS_PANEL if panels is None else panels:
            rate = PANEL_MACS_PER_S   # the panel kernel at its rate: its operands stay in L2
            # on whole panels of columns: a chunk's slots rounded up (one image at 7x7: 20 slots in 32 columns;
            # 512 -> 512 there, one core, 1208 us against PANEL's 1173 and 2 cores 877 against 751)
            full, last = rows // per_chunk, rows % per_chunk
            slots = full * _whole(per_chunk * (tw + 1), panel.PANEL) + _whole(last * (tw + 1), panel.PANEL)
        else:   # BLAS streams each product's [M, C] matrix: narrow products run slower
            rate = BLAS_MACS_PER_S * min(1.0, (per_chunk * tw / WINO_FULL_TILES) ** (2 / 3))
        return 16 * geo[M] * geo[C] * slots / rate + 16 * -(-rows // per_chunk) * WINO_CALL_S + \
            16 * tiles * (geo[C] / WINO_IN_ELEMS_PER_S + geo[M] / WINO_OUT_ELEMS_PER_S)
    if algo == DEPTHWISE:
        return work / DEPTHWISE_MACS_PER_S
    if algo == PANEL:
        k = geo[C] * geo[KH] * geo[KW]
        gather = 0 if is_pointwise(geo) else geo[N] * k * geo[HO] * geo[WO]
        if geo[GROUP] != 1:
            return np.inf
        lanes, fraction = panel_lanes(geo)
        if lanes == LANES_PHASES:   # the input copied into its phases, narrow rows copied out of a scratch
            copied = 0 if _phase_rows(geo) == 0 else geo[N] * geo[M] * geo[HO] * geo[WO]
            return work / (PANEL_MACS_PER_S * fraction) + (_phase_elements(geo) + copied) / IM2COL_ELEMS_PER_S
        if gather > PANEL_COL_MAX:
            return np.inf
        segments = 0 if is_pointwise(geo) else geo[N] * k * geo[HO]   # the gather's runs of one output row
        return work / (PANEL_MACS_PER_S * fraction) + gather / IM2COL_ELEMS_PER_S + \
            segments * IM2COL_SEGMENT_S
    if algo == DIRECT:   # whole blocks per group only; a pass sums nine taps (a 1x1 window eight zero ones)
        if not direct_applies(geo):
            return np.inf
        passes = geo[N] * (geo[M] // BLOCK) * (geo[C] // geo[GROUP]) * -(-geo[KH] * geo[KW] // TAPS_PER_PASS)
        return passes * (BLOCK * TAPS_PER_PASS * geo[HO] * geo[WO] / DIRECT_MACS_PER_S + DIRECT_PASS_S)
    k = (geo[C] // geo[GROUP]) * geo[KH] * geo[KW]
    gather = 0 if is_pointwise(geo) else geo[N] * geo[GROUP] * k * geo[HO] * geo[WO]
    rate = BLAS_MACS_PER_S * min(1.0, (geo[HO] * geo[WO] / BLAS_FULL_COLUMNS) ** 0.5) * \
        min(1.0, (k / BLAS_FULL_DEPTH) ** 0.5)
    if panels and _gathers_in_tiles(geo) and PANEL_MACS_PER_S > BLAS_MACS_PER_S:
        # column tiles, their products in the panel kernel (``use_panel_products``): ResNet's 7x7 3 -> 64 stem at
        # 224x224 1.74 ms against 2.67 in BLAS (Zen 5, OpenBLAS's AVX2 kernels), 15.2 against 22.2 at batch 8
        rate = PANEL_MACS_PER_S * min(1.0, geo[M] / geo[GROUP] / panel.TILE)
    return work / rate + geo[N] * geo[GROUP] * BLAS_CALL_S + gather / IM2COL_ELEMS_PER_S


def _gathers_in_tiles(geo: np.ndarray) -> bool:
    """Whether a GEMM conv's im2col matrix is too large to gather whole (``WHOLE_COL_MAX``): column tiles."""
    return not is_pointwise(geo) and int(geo[C] * geo[KH] * geo[KW] * geo[HO] * geo[WO]) > WHOLE_COL_MAX


def choose(geo: np.ndarray, panels: bool = False, winograd: bool = True) -> int:
    """The algorithm for this shape: depthwise when it is one, else the cheapest of im2col + BLAS, direct,
    Winograd (unless ``winograd`` is false) and (``panels``: float32, constant weights, a host that runs the
    kernel fast) PANEL by the cost model."""
    if is_depthwise(geo):
        return DEPTHWISE
    return min((GEMM, DIRECT) + ((WINOGRAD,) if winograd else ()) + ((PANEL,) if panels else ()),
               key=lambda algo: seconds(geo, algo, panels))


def use_panel_products(geo: np.ndarray, dtype) -> bool:
    """Run a WINOGRAD conv's 36 products, or a GEMM conv's column tiles, in ``tlc.kernels.panel``'s kernel (the
    weights broadcast, the transformed input or the tile's im2col block read where it is, as PANEL's positions
    in lanes) instead of BLAS: float32, a host that runs the kernel fast, and for the tiles a panel rate above
    BLAS's (``host_rates``); sets ``geo[KIND]``. Winograd's products are narrow, where BLAS is slowest: in the
    panel kernel even against OpenBLAS's AVX-512 kernels on Zen 5 (128 -> 128 at 28x28 651 us against 749)."""
    tiles = geo[ALGO] == GEMM and geo[MODE] == TILES
    if geo[ALGO] != WINOGRAD and not tiles:
        return False
    fast = bool(np.dtype(dtype) == np.float32 and panel.fast()) and \
        (not tiles or PANEL_MACS_PER_S > BLAS_MACS_PER_S)
    geo[KIND] = PRODUCTS_PANEL if fast else PRODUCTS_BLAS
    return fast


def use_vector_depthwise(geo: np.ndarray, dtype) -> bool:
    """Run a DEPTHWISE conv on ``tlc.kernels.panel``'s vector kernel where it takes it (3x3, padding 1 at the
    start, stride 1 or 2, no dilation, float32, a host that runs it fast); sets ``geo[KIND]``. Measured on one
    core against the phase kernels (in a MobileNetV2, per conv): 576 planes 14x14 stride 2 122 -> ~45 us, 144 at
    56x56 stride 2 156 -> ~85, 32 at 112x112 stride 1 345 -> ~160, 960 at 7x7 60 -> ~35."""
    if geo[ALGO] != DEPTHWISE:
        return False
    vector = _vector_window(geo, dtype)
    geo[KIND] = DEPTHWISE_VECTORS if vector else DEPTHWISE_PHASES
    return vector


def _vector_window(geo: np.ndarray, dtype) -> bool:
    """Whether ``tlc_dw3x3``'s loops take this window: 3x3, padding 1 at the start, stride 1 or 2 (the same both
    ways), no dilation, float32, on a host that runs them fast (``panel.fast``)."""
    return bool(geo[KH] == geo[KW] == 3 and geo[PT] == geo[PL] == 1 and geo[SH] == geo[SW] and geo[SH] in (1, 2)
                and geo[DH] == geo[DW] == 1 and np.dtype(dtype) == np.float32 and panel.fast())


def panel_lanes(geo: np.ndarray) -> tuple[int, float]:
    """PANEL's orientation for this shape (LANES_POSITIONS or LANES_CHANNELS) and the fraction of the kernel's
    full rate it runs at: the share of its lanes that hold outputs (``panel.lanes_used``), less the
    scattered stores of LANES_CHANNELS, and a tile's rows (of 12) where there are fewer. A gathered conv deeper
    than ``PANEL_GATHER_DEEP`` takes LANES_CHANNELS: with the positions in lanes, each k-step of a panel reads a
    row of the im2col matrix a page or more from the last, and many such streams thrash (a 7x7 3 -> 64 conv at
    224x224, stride 2, K = 147: 3.44 ms against 3.21 with the channels); so does one that gathers more than
    ``PANEL_GATHER_SMALL`` elements. A shallow, small one keeps the fractions' choice (MobileNetV2's 3x3 3 -> 32
    stem at 224x224, stride 2, K = 27: 311 us against 514 with the channels, 363 in the direct kernel; 3 -> 16
    at 64x64: 58 against 239; the stem at batch 8, 2.7 M elements gathered: 6.2 ms against 3.6 direct). A strided
    1x1 conv gathers a matrix whose rows are its positions at unit stride, a pointwise conv's input: the fractions
    choose (ResNet-50's 256 -> 512 1x1 s2 at 56x56: 2.00 ms with the positions, 2.09 with the channels, and the
    kernel then adds the residual as it stores)."""
    hw, m = int(geo[HO] * geo[WO]), int(geo[M])
    k = int(geo[C] * geo[KH] * geo[KW])
    positions = panel.lanes_used(hw) * min(1.0, m / panel.TILE)
    channels = panel.lanes_used(m) * k / (k + PANEL_SCATTER_K) * min(1.0, hw / panel.TILE)
    gathered = 0 if is_pointwise(geo) else int(geo[N]) * k * hw
    if gathered and m * k * 4 <= PHASE_WEIGHTS_MAX and _phase_elements(geo) < gathered:
        return LANES_PHASES, phase_fraction(geo)
    # (a strided 1x1 conv's im2col matrix is a pointwise conv's input: rows of its positions, read as streams)
    thrashes = gathered and not geo[KH] == geo[KW] == 1 and (k > PANEL_GATHER_DEEP or gathered > PANEL_GATHER_SMALL)
    if channels > positions or thrashes:
        return LANES_CHANNELS, channels
    return LANES_POSITIONS, positions


def phase_fraction(geo: np.ndarray) -> float:
    """LANES_PHASES's fraction of the kernel's full rate: the lanes that hold outputs (a row's, or a chunk's less
    its extra columns) and a tile's rows where there are fewer output channels."""
    wo, m = int(geo[WO]), int(geo[M])
    rows = int(_phase_rows(geo))
    if rows == 0:
        lanes = panel.lanes_used(wo)
    else:
        wq = int(_phase_dims(geo[HO], geo[WO], geo[KH], geo[KW], geo[SH], geo[SW], geo[DH], geo[DW])[1])
        lanes = panel.lanes_used(rows * wq) * wo / wq
    return lanes * min(1.0, m / panel.TILE)


def _phase_elements(geo) -> int:
    """Elements of the batch's stride phases (LANES_PHASES's copy of the input, padded)."""
    return int(geo[N] * geo[C]) * int(_phase_sizes(geo)[2])


@njit(cache=True, nogil=True)
def _phase_rows(geo):
    """Output rows a LANES_PHASES kernel call covers: 0 for one row straight into the output, else a chunk of that
    many rows ``wq`` wide in the scratch, copied out without their extra columns: as many rows (up to
    ``PHASE_CHUNK_COLUMNS`` columns) as fill the kernel's lanes best. Rows narrower than ``PHASE_ROW_MIN`` always
    go in chunks; wider ones where the chunk's lanes gain more than the copy costs (ResNet's 3x3 s2 convs to
    28x28, rows of 28 in two vectors: 1083 -> 1013 us for 128 -> 128 at 56x56 in chunks of 11 rows 29 wide)."""
    wq = _phase_dims(geo[HO], geo[WO], geo[KH], geo[KW], geo[SH], geo[SW], geo[DH], geo[DW])[1]
    best, best_lanes = 1, 0.0
    for r in range(1, max(1, min(geo[HO], PHASE_CHUNK_COLUMNS // wq)) + 1):
        lanes = panel.lanes_used(r * wq)
        if lanes >= best_lanes:
            best, best_lanes = r, lanes
    if geo[WO] < PHASE_ROW_MIN:
        return best
    k = geo[C] * geo[KH] * geo[KW]
    if k * wq / (best_lanes * geo[WO]) + PHASE_COPY_MACS < k / panel.lanes_used(geo[WO]):
        return best
    return 0


def _panel_units(geo) -> int:
    """Output channels a PANEL part's unit holds: a panel's 32 (LANES_CHANNELS) or a tile's 12 (LANES_POSITIONS)."""
    return panel.PANEL if geo[KIND] == LANES_CHANNELS else panel.TILE


def parallel(geo: np.ndarray, threads: int, min_seconds: float | None = None) -> bool:
    """Whether ``geo``'s convolution (its algorithm set) runs on the pool: it takes at least ``min_seconds``
    (``PARALLEL_MIN_S``) on one core."""
    least = PARALLEL_MIN_S if min_seconds is None else min_seconds
    return threads > 1 and seconds(geo, int(geo[ALGO])) >= least


def plan_conv(geo: np.ndarray, threads: int, algo: int | None = None,
              min_seconds: float | None = None, epilogue: bool = False,
              lanes: int | None = None, tile: int | None = None) -> tuple[int, int, int]:
    """Set ``geo``'s algorithm (``choose``'s unless given) and mode, and cut the work into one part per thread
    when it takes at least ``min_seconds`` on one core (``parallel``); a depthwise conv that an ``epilogue``
    follows into parts of at most ``EPILOGUE_ELEMS`` outputs (a whole number per thread), a PANEL conv into
    parts of about an image; PANEL in the orientation ``panel_lanes`` picks unless ``lanes`` says. Returns (col
    elements, nparts, nprep)."""
    geo[ALGO] = choose(geo) if algo is None else algo
    nparts = threads if parallel(geo, threads, min_seconds) else 1
    if geo[ALGO] == DIRECT and not direct_applies(geo):
        raise ValueError("the direct kernel takes whole blocks of output channels per group only")
    if geo[ALGO] == WINOGRAD:
        if not winograd_applies(geo):
            raise ValueError("Winograd takes 3x3 kernels, stride 1, no dilation, one group only")
        m = winograd_tile(geo, panels=panel.fast(), nparts=nparts) if tile is None else tile
        geo[WT] = m
        geo[TILE] = _winograd_rows(geo, m)
        geo[KIND] = PRODUCTS_BLAS   # (``use_panel_products`` may pick the panel kernel)
        rows = int(geo[N] * _tiles(geo[HO], m))
        if _few_tiles(geo, m, nparts) and geo[N] * geo[M] >= nparts:
            # few tiles: every part reads the whole transformed input and computes its run of output channels
            geo[MODE] = ROWS
            si, q_size, so, per_image = _winograd_rows_layout(geo, nparts)
            return int(_blocks(m) * si + nparts * (q_size + _blocks(m) * so + _wino_eo(m) * per_image)), nparts, nparts
        geo[MODE] = TILES
        parts = max(1, min(nparts, rows))
        return parts * _slot(_winograd_scratch(geo)), parts, 0
    if geo[ALGO] == PANEL:
        if seconds(geo, PANEL) == np.inf:
            raise ValueError("PANEL takes one group, and an im2col matrix of at most PANEL_COL_MAX elements")
        geo[KIND] = panel_lanes(geo)[0] if lanes is None else lanes
        if geo[KIND] == LANES_PHASES and is_pointwise(geo):   # a pointwise conv reads its input as it is
            geo[KIND] = LANES_POSITIONS
        geo[RUNS] = int(geo[KIND] == LANES_CHANNELS and not is_pointwise(geo) and geo[DW] == 1
                        and geo[KW] >= RUNS_MIN_KW)
        units = int(geo[N]) * -(-int(geo[M]) // _panel_units(geo))
        # parts of whole units of output channels (contiguous: the epilogue follows each part), unless too few
        # units share out evenly: then runs of output positions (every channel, strided: deferred; on the stride
        # phases, runs of an image's chunks of output rows)
        even = units % nparts == 0 or units >= 4 * nparts
        if even and not epilogue and nparts > 1:
            # whole units, but of unequal channels (16 output channels: units of 12 and 4): runs of positions
            # where they share out more evenly (MobileNetV2's 32 -> 16 1x1 at 112x112, 2 threads: 58.6 us, 68 at
            # 1 thread; ResNet's 7x7 3 -> 64 stem at 224x224, units of 36 and 28 channels against 56 rows each:
            # 595 -> 530 us), and always where the channels are far from even
            balance = _unit_balance(geo, units, nparts)
            if balance < PANEL_BALANCE_MIN or balance < _position_balance(geo, nparts):
                even = False
        geo[MODE] = ROWS if nparts == 1 or even else TILES
        if geo[MODE] == ROWS:
            nparts = max(1, min(nparts, units))
            if epilogue:
                # parts of at most ``EPILOGUE_ELEMS`` outputs (whole units, a whole number per thread): the
                # epilogue that follows a part finds its output in cache, not in memory (MobileNetV2's 16 -> 96
                # 1x1 + Clip at 112x112: 4.8 MB of output an image)
                per_unit = _panel_units(geo) * int(geo[HO] * geo[WO])
                chunks = -(-units // max(1, EPILOGUE_ELEMS // per_unit))
                nparts = max(nparts, min(units // nparts * nparts, -(-chunks // nparts) * nparts))
        if is_pointwise(geo):
            return 1, nparts, 0
        if geo[KIND] == LANES_PHASES:   # the batch's phases once (SHARED) or one image's a part, and a chunk of rows
            geo[SHARED] = 1 if 1 < nparts and geo[N] < nparts else 0
            return int(_phase_shared(geo)) + nparts * int(_phase_region(geo)), nparts, nparts * geo[SHARED]
        rows = int(geo[N] * geo[C] * geo[KH] * geo[KW])
        positions = int(geo[N] * geo[HO] * geo[WO])   # the rows of a positions-major matrix (RUNS)
        return rows * int(geo[HO] * geo[WO]), nparts, min(nparts, positions if geo[RUNS] else rows)
    if geo[ALGO] != GEMM:
        geo[KIND] = DEPTHWISE_PHASES   # (``use_vector_depthwise`` may pick the vector kernel)
        planes = int(geo[N] * geo[M])
        parts = max(1, min(nparts, planes))
        if epilogue and geo[ALGO] == DEPTHWISE:   # the epilogue follows each part while its output is in cache
            chunks = -(-planes // max(1, EPILOGUE_ELEMS // int(geo[HO] * geo[WO])))   # whole planes a part
            chunks = -(-chunks // parts) * parts                    # a whole number per thread
            parts = max(parts, min(chunks, planes // parts * parts))
        per_part = _slot(_phase_scratch(geo) if geo[ALGO] == DEPTHWISE else _direct_scratch(geo))
        return parts * per_part, parts, 0
    geo[KIND] = PRODUCTS_BLAS   # (``use_panel_products`` may pick the panel kernel for column tiles)
    k_all = int(geo[C] * geo[KH] * geo[KW])
    hw = int(geo[HO] * geo[WO])
    gather = not is_pointwise(geo)
    few_rows = geo[N] < nparts and geo[N] * geo[M] // nparts < 32 and hw >= 256
    if _gathers_in_tiles(geo) or few_rows:
        # tiles of output columns: the gathered block stays in cache, and a few output channels still make
        # wide BLAS calls; the parts' outputs are strided, so an epilogue runs after them (``deferred``)
        geo[MODE] = TILES
        tile = max(16, min(hw, (TILE_ELEMS // max(1, k_all)) // 16 * 16))
        # at least one tile a part: a 3 -> 32 conv at 64x64 fit one tile and ran on one thread of two
        tile = max(16, min(tile, (hw // -(-nparts // int(geo[N]))) // 16 * 16))
        geo[TILE] = tile
        return (nparts * k_all * tile if gather else 1), nparts, 0
    if geo[N] >= nparts:
        geo[MODE] = IMAGES
        return (nparts * k_all * hw if gather else 1), nparts, 0
    geo[MODE] = ROWS
    rows = int(geo[N] * k_all)
    return (rows * hw if gather else 1), nparts, (min(nparts, rows) if gather else 0)


def direct_applies(geo: np.ndarray) -> bool:
    """Whether the direct kernel takes this shape: output channels per group a multiple of BLOCK."""
    return (geo[M] // geo[GROUP]) % BLOCK == 0


def _slot(elements: int) -> int:
    """A part's scratch rounded up to whole slots of ``SLOT`` elements: parts on different threads that shared
    a cache line at their boundary ran at half speed (a 7x7 depthwise conv at 2 threads took as long as at 1)."""
    return -(-int(elements) // SLOT) * SLOT


def _direct_scratch(geo) -> int:
    """The direct kernel's scratch per part: every input plane's stride phases, and BLOCK output planes ``wq``
    wide."""
    _, _, phases, size = _phase_sizes(geo)
    return int(geo[C] * phases + BLOCK * size)


def _phase_scratch(geo) -> int:
    """The depthwise and pooling kernels' scratch per part: the padded plane split into its stride phases
    (``_into_phases``), the output rows ``wq`` wide, and the column mask of ``_depthwise_same``."""
    _, _, phases, size = _phase_sizes(geo)
    return int(phases + size + geo[H] * geo[W] + 1)


@njit(cache=True, nogil=True, inline="always")
def _phase_sizes(geo):
    """(hq, wq, elements of a plane's stride phases, elements of its output rows ``wq`` wide): the layout of the
    window kernels' scratch (phases first, then the output rows)."""
    hq, wq = _phase_dims(geo[HO], geo[WO], geo[KH], geo[KW], geo[SH], geo[SW], geo[DH], geo[DW])
    return hq, wq, geo[SH] * geo[SW] * (hq * wq + wq), geo[HO] * wq


@njit(cache=True, nogil=True, inline="always")
def _phase_dims(ho, wo, kh, kw, sh, sw, dh, dw):
    """Rows and row length of one stride phase of the padded plane a window kernel reads flat."""
    return ho + ((kh - 1) * dh) // sh, wo + ((kw - 1) * dw) // sw


@njit(cache=True, nogil=True)
def _into_phases(xf, x0, h, width, ph, sh, sw, pt, pl, hq, wq):
    """Copy the image plane [H, W] at ``xf[x0:]`` (flat, C order) into its ``sh * sw`` stride phases in ``ph``:
    phase (a, b) is the flat plane [hq, wq] (and ``wq`` of slack) of the padded plane's rows a, a + sh, ... and
    columns b, b + sw, ...
    Only the image's own elements are written: the caller fills ``ph`` with the pad value once. Tap (ki, kj) of
    a strided window is then one unit-stride loop over the flat output, in phase ((ki*dh) % sh, (kj*dw) % sw)
    shifted by ((ki*dh) // sh) rows and ((kj*dw) // sw) columns (``_phase_offset``): every output is computed
    once (computing every stride-1 position and subsampling did 4x the work at stride 2). Stride 1 is one
    phase: the padded plane. Flat indices only: a view per row cost a reference count each, most of the
    time of a 7x7 plane."""
    plane = hq * wq + wq
    for a in range(sh):
        i_lo = min(hq, (pt - a + sh - 1) // sh)
        i_hi = min(hq, max(i_lo, (h + pt - a + sh - 1) // sh))
        if sw == 2:   # both column phases in one pass: a pairwise (interleaved) load LLVM vectorizes
            _into_two_phases(xf, x0, width, ph, a, sh, pt, pl, hq, wq, i_lo, i_hi)
            continue
        for b in range(sw):
            base = (a * sw + b) * plane
            j_lo = min(wq, (pl - b + sw - 1) // sw)
            j_hi = min(wq, max(j_lo, (width + pl - b + sw - 1) // sw))
            c0 = j_lo * sw + b - pl
            for i in range(i_lo, i_hi):
                src = x0 + (i * sh + a - pt) * width + c0
                row = base + i * wq + j_lo
                if sw == 1:
                    for j in range(j_hi - j_lo):
                        ph[np.uint64(row + j)] = xf[np.uint64(src + j)]
                else:
                    for j in range(j_hi - j_lo):
                        ph[np.uint64(row + j)] = xf[np.uint64(src + j * sw)]


@njit(cache=True, nogil=True)
def _into_two_phases(xf, x0, width, ph, a, sh, pt, pl, hq, wq, i_lo, i_hi):
    """``_into_phases``'s rows [i_lo, i_hi) of phases (a, 0) and (a, 1) for a column stride of 2: image column
    c goes to phase (c + pl) % 2, column (c + pl) // 2; the columns both phases take are copied in pairs."""
    plane = hq * wq + wq
    e0, e1 = (a * 2) * plane, (a * 2 + 1) * plane
    c_lo = pl % 2                      # first image column of a pair (its padded column even)
    pairs = max(0, min((width - c_lo) // 2, wq - (c_lo + pl) // 2))
    j0 = (c_lo + pl) // 2
    for i in range(i_lo, i_hi):
        src = x0 + (i * sh + a - pt) * width
        r0, r1 = e0 + i * wq + j0, e1 + i * wq + j0
        for j in range(pairs):
            ph[np.uint64(r0 + j)] = xf[np.uint64(src + c_lo + 2 * j)]
            ph[np.uint64(r1 + j)] = xf[np.uint64(src + c_lo + 2 * j + 1)]
        for t in range(c_lo + width - c_lo - 2 * pairs):   # the columns outside the pairs (a few)
            c = t if t < c_lo else c_lo + 2 * pairs + t - c_lo
            jj = (c + pl) // 2
            if jj < wq:
                ph[np.uint64((e0 if (c + pl) % 2 == 0 else e1) + i * wq + jj)] = xf[np.uint64(src + c)]


@njit(cache=True, nogil=True, inline="always")
def _phase_offset(ki, kj, sw, sh, dh, dw, hq, wq):
    """Where tap (ki, kj) starts in the phases of ``_into_phases``."""
    r, c = ki * dh, kj * dw
    return ((r % sh) * sw + c % sw) * (hq * wq + wq) + (r // sh) * wq + c // sw


def pack_weights(w: np.ndarray, geo: np.ndarray) -> np.ndarray:
    """Weights [M, C/group, kh, kw] in the layout the algorithm reads, flat: as they are for GEMM, DEPTHWISE and
    PANEL with positions in lanes, [M/4, C/group, kh, kw, 4] (zero-padded to whole blocks) for DIRECT, for
    WINOGRAD the 36 transformed matrices [36, M, C] (``G w G^T``, computed in float64), and for PANEL with
    channels in lanes W [M, C*kh*kw] transposed in panels (``panel.pack``)."""
    if geo[ALGO] == PANEL and geo[KIND] == LANES_CHANNELS:
        return panel.pack(np.asarray(w, np.float32).reshape(w.shape[0], -1).T)
    if geo[ALGO] == WINOGRAD:
        g = _WINO_G[int(geo[WT])]
        u = np.einsum("ai,mcij,bj->abmc", g, np.asarray(w, np.float64), g)
        return np.ascontiguousarray(u.reshape(len(g) ** 2, w.shape[0], w.shape[1]), w.dtype).reshape(-1)
    if geo[ALGO] != DIRECT:
        return np.ascontiguousarray(w).reshape(-1)
    m, cg, kh, kw = w.shape
    blocks = -(-m // BLOCK)
    packed = np.zeros((blocks * BLOCK, cg, kh, kw), w.dtype)
    packed[:m] = w
    return np.ascontiguousarray(packed.reshape(blocks, BLOCK, cg, kh, kw).transpose(0, 2, 3, 4, 1)).reshape(-1)


#: Winograd's weight transforms by tile side: F(2x2, 3x3) (points 0, +-1, infinity) and F(4x4, 3x3) (0, +-1, +-2,
#: infinity); the input and output transforms, B^T and A^T of the same points, are written out in the kernels
_WINO_G = {2: np.array([[1, 0, 0], [.5, .5, .5], [.5, -.5, .5], [0, 0, 1]]),
           4: np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                        [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])}


@njit(cache=True, nogil=True, inline="always")
def _tiles(length, m):
    """Winograd tiles of side ``m`` along an output axis of ``length`` (the cost model and the kernels)."""
    return (length + m - 1) // m


@njit(cache=True, nogil=True, inline="always")
def _blocks(m):
    """F(m x m, 3x3)'s transformed blocks (and products): (m + 2)^2."""
    return (m + 2) * (m + 2)


#: PANEL parts of whole units of output channels only while the largest part holds at most 1 / this of its
#: share of the channels (``_unit_balance``); else runs of output positions
PANEL_BALANCE_MIN = 0.85


def _largest_part(units: int, nparts: int, size) -> int:
    """The largest sum of ``size(u)`` over the runs of ``units`` that ``nparts`` parts take (part p the units
    [units * p // nparts, units * (p + 1) // nparts), as the parts cut them)."""
    return max(sum(size(u) for u in range(units * p // nparts, units * (p + 1) // nparts)) for p in range(nparts))


def _unit_balance(geo: np.ndarray, units: int, nparts: int) -> float:
    """The average part's output channels against the largest part's, with the batch's ``units`` of
    ``_panel_units`` channels shared out as ``_channel_runs`` does (an image's last unit may hold fewer)."""
    unit, m_all = _panel_units(geo), int(geo[M])
    per_image = -(-m_all // unit)
    last = m_all - (per_image - 1) * unit
    largest = _largest_part(units, nparts, lambda u: last if u % per_image == per_image - 1 else unit)
    return int(geo[N]) * m_all / nparts / max(largest, 1)


def _position_balance(geo: np.ndarray, nparts: int) -> float:
    """The average part's output positions against the largest part's, with the batch's positions cut as
    ``part_panel``'s TILES mode cuts them: whole chunks of output rows (LANES_PHASES, ``_phase_rows``), else
    whole tiles of ``panel.TILE`` positions (LANES_CHANNELS) or panels of ``panel.PANEL`` (LANES_POSITIONS)."""
    ho, hw = int(geo[HO]), int(geo[HO] * geo[WO])
    if geo[KIND] == LANES_PHASES:
        length, step, scale = ho, max(1, int(_phase_rows(geo))), int(geo[WO])
    else:
        length, step, scale = hw, panel.TILE if geo[KIND] == LANES_CHANNELS else panel.PANEL, 1
    chunks = -(-length // step)
    largest = _largest_part(int(geo[N]) * chunks, nparts, lambda u: min(step, length - (u % chunks) * step)) * scale
    return int(geo[N]) * hw / nparts / max(largest, 1)


def _few_tiles(geo: np.ndarray, m: int, nparts: int) -> bool:
    """Whether F(m x m)'s tiles of the batch are too few to give every one of ``nparts`` parts a full chunk."""
    return nparts > 1 and geo[N] * _tiles(geo[HO], m) * _tiles(geo[WO], m) < nparts * WINO_FULL_TILES


@njit(cache=True, nogil=True, inline="always")
def _wino_eo(m):
    """The output transform's scratch planes a slot: F(2x2)'s four outputs, F(4x4)'s sixteen and the 24 of its
    row pass (``_winograd_output4``)."""
    return 4 if m == 2 else 40


# ---------------------------------------------------------------------------- helpers
@njit(cache=True, nogil=True, inline="always")
def _span(off, sw, width, wo):
    """The output columns [j0, j1) whose input column ``ow * sw + off`` lies inside [0, width)."""
    j0 = 0 if off >= 0 else (-off + sw - 1) // sw
    j1 = (width - 1 - off) // sw + 1 if width - 1 - off >= 0 else 0
    return min(j0, wo), max(min(j1, wo), min(j0, wo))


@njit(cache=True, nogil=True, inline="always")
def _product(m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc, in_panel):
    """``_gemm``'s product, or (``in_panel``: float32, ``use_panel_products``) the panel kernel's with A (the
    weights) broadcast and B read where it is, a panel every ``PANEL`` columns (PANEL's positions in lanes)."""
    if in_panel:
        panel_strided(b.ctypes.data + b_off * 4, ldb, panel.PANEL, a.ctypes.data + a_off * 4, lda, 1,
                      c.ctypes.data + c_off * 4, ldc, 1, m, k, n, 0, BIAS_NONE)
    else:
        _gemm(m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc)


@njit(cache=True, nogil=True, inline="always")
def _gemm(m, n, k, a, a_off, lda, b, b_off, ldb, c, c_off, ldc):
    """c[c_off:] (m x n, row stride ldc) = a[a_off:] (m x k) @ b[b_off:] (k x n), single-threaded BLAS."""
    item = c.itemsize
    if item == 4:
        gemm_f32(m, n, k, 1.0, a.ctypes.data + a_off * item, lda, 1, b.ctypes.data + b_off * item, ldb, 1, 0.0,
                 c.ctypes.data + c_off * item, ldc)
    else:
        gemm_f64(m, n, k, 1.0, a.ctypes.data + a_off * item, lda, 1, b.ctypes.data + b_off * item, ldb, 1, 0.0,
                 c.ctypes.data + c_off * item, ldc)


@njit(cache=True, nogil=True)
def _im2col_rows(x, geo, col, col_off, r0, r1):
    """Rows [r0, r1) of the im2col matrix of the whole batch (row = (image, channel, ki, kj), columns the output
    positions) into ``col`` from ``col_off`` on (``col_off`` is where row 0 would start). The row's (image,
    channel, ki, kj) is counted on from r0's, not divided out of each row (ResNet's 3x3 s2 256 -> 512 to 7x7: 113 K
    elements, 90 -> 59 us; 512 channels at 7x7, stride 1: 204 -> 140)."""
    c_all, h, width, kh, kw = geo[C], geo[H], geo[W], geo[KH], geo[KW]
    ho, wo, sh, sw, dh, dw, pt, pl = geo[HO], geo[WO], geo[SH], geo[SW], geo[DH], geo[DW], geo[PT], geo[PL]
    hw = ho * wo
    taps = kh * kw
    xf = x.reshape(-1)
    n = r0 // (c_all * taps)
    rest = r0 - n * c_all * taps
    c = rest // taps
    ki = (rest - c * taps) // kw
    kj = rest - c * taps - ki * kw
    for r in range(r0, r1):
        off = kj * dw - pl
        j0, j1 = _span(off, sw, width, wo)
        base = col_off + r * hw
        plane = (n * c_all + c) * h * width
        for oh in range(ho):
            ih = oh * sh - pt + ki * dh
            row = base + oh * wo
            if ih < 0 or ih >= h:
                for j in range(wo):
                    col[np.uint64(row + j)] = 0.0
                continue
            src = plane + ih * width + off
            for j in range(j0):
                col[np.uint64(row + j)] = 0.0
            if sw == 1:
                for j in range(j0, j1):
                    col[np.uint64(row + j)] = xf[np.uint64(src + j)]
            else:
                for j in range(j0, j1):
                    col[np.uint64(row + j)] = xf[np.uint64(src + j * sw)]
            for j in range(j1, wo):
                col[np.uint64(row + j)] = 0.0
        kj += 1   # the next row's tap, channel and image
        if kj == kw:
            kj = 0
            ki += 1
            if ki == kh:
                ki = 0
                c += 1
                if c == c_all:
                    c = 0
                    n += 1


@njit(cache=True, nogil=True, inline="always")
def _add_bias(acc, bias, n, m0, m1, hw):
    if bias.shape[0] == 0:
        return
    flat = acc.reshape(-1)
    base = n * acc.shape[1] * hw
    for m in range(m0, m1):
        b = bias[m]
        start = base + m * hw
        for j in range(hw):
            flat[np.uint64(start + j)] += b   # unsigned: a signed index's wraparound check kept this scalar


@njit(cache=True, nogil=True)
def _gemm_rows(x, w, bias, geo, acc, col, col_off, n, m0, m1):
    """Output channels [m0, m1) of image ``n`` (within one group or across groups) from its im2col columns,
    which start at ``col[col_off]`` as [C*kh*kw, HO*WO] (unused for a pointwise conv)."""
    c_all, m_all, group = geo[C], geo[M], geo[GROUP]
    cg, mg = c_all // group, m_all // group
    k = cg * geo[KH] * geo[KW]
    hw = geo[HO] * geo[WO]
    pointwise = geo[KH] == 1 and geo[KW] == 1 and geo[SH] == 1 and geo[SW] == 1 and geo[PT] == 0 \
        and geo[PL] == 0 and geo[HO] == geo[H] and geo[WO] == geo[W]
    xf = x.reshape(-1)
    out_base = n * m_all * hw
    m = m0
    while m < m1:
        g = m // mg
        stop = min(m1, (g + 1) * mg)
        if pointwise:
            _gemm(stop - m, hw, k, w, m * k, k, xf, (n * c_all + g * cg) * hw, hw, acc, out_base + m * hw, hw)
        else:
            _gemm(stop - m, hw, k, w, m * k, k, col, col_off + g * k * hw, hw, acc, out_base + m * hw, hw)
        m = stop
    _add_bias(acc, bias, n, m0, m1, hw)


@njit(cache=True, nogil=True)
def _gemm_tile(x, w, bias, geo, acc, col, own, n, j0, j1, pointwise):
    """Output columns [j0, j1) of image ``n``, every channel: the columns' im2col block gathered into
    ``col[own:]`` ([C*kh*kw, j1-j0]), one BLAS call per group, the bias added on the tile."""
    c_all, h, width, m_all, group = geo[C], geo[H], geo[W], geo[M], geo[GROUP]
    kh, kw, wo = geo[KH], geo[KW], geo[WO]
    sh, sw, dh, dw, pt, pl = geo[SH], geo[SW], geo[DH], geo[DW], geo[PT], geo[PL]
    cg, mg = c_all // group, m_all // group
    k = cg * kh * kw
    hw = geo[HO] * wo
    cols = j1 - j0
    taps = kh * kw
    if not pointwise:
        for r in range(c_all * taps):
            c = r // taps
            ki = (r - c * taps) // kw
            kj = r - c * taps - ki * kw
            off = kj * dw - pl
            base = own + r * cols - j0
            xc = x[n, c]
            j = j0
            while j < j1:
                oh = j // wo
                stop = min(j1, (oh + 1) * wo)
                ih = oh * sh - pt + ki * dh
                first = oh * wo
                if ih < 0 or ih >= h:
                    for q in range(j, stop):
                        col[np.uint64(base + q)] = 0.0
                else:
                    xrow = xc[ih]
                    lo, hi = _span(off, sw, width, wo)
                    lo, hi = max(lo + first, j), min(hi + first, stop)
                    for q in range(j, min(lo, stop)):
                        col[np.uint64(base + q)] = 0.0
                    if sw == 1:
                        for q in range(lo, hi):
                            col[np.uint64(base + q)] = xrow[np.uint64(q - first + off)]
                    else:
                        for q in range(lo, hi):
                            col[np.uint64(base + q)] = xrow[np.uint64((q - first) * sw + off)]
                    for q in range(max(hi, j), stop):
                        col[np.uint64(base + q)] = 0.0
                j = stop
    xf = x.reshape(-1)
    out_base = n * m_all * hw
    in_panel = geo[KIND] == PRODUCTS_PANEL
    for g in range(group):
        if pointwise:
            _product(mg, cols, k, w, g * mg * k, k, xf, (n * c_all + g * cg) * hw + j0, hw, acc,
                     out_base + g * mg * hw + j0, hw, in_panel)
        else:
            _product(mg, cols, k, w, g * mg * k, k, col, own + g * k * cols, cols, acc,
                     out_base + g * mg * hw + j0, hw, in_panel)
    if bias.shape[0] > 0:
        flat = acc.reshape(-1)
        for m in range(m_all):
            b = bias[m]
            start = out_base + m * hw
            for q in range(j0, j1):
                flat[np.uint64(start + q)] += b


@njit(cache=True, nogil=True)
def _direct_phases(x, wp_, bias, geo, acc, scratch, n, m0, m1):
    """Output channels [m0, m1) of image ``n`` (``m0`` a multiple of BLOCK) on the stride phases of every input
    plane (``_into_phases``): four output planes ``wq`` wide accumulate together, each pass one loop over the
    whole output that sums nine taps of one input channel into all four (36 multiply-adds a position for 9
    loads and 4 stores; a pass per tap was 4 multiply-adds for 5 loads and 4 stores: memory-bound)."""
    c_all, h, width, m_all, group = geo[C], geo[H], geo[W], geo[M], geo[GROUP]
    kh, kw, ho, wo = geo[KH], geo[KW], geo[HO], geo[WO]
    sh, sw, dh, dw, pt, pl = geo[SH], geo[SW], geo[DH], geo[DW], geo[PT], geo[PL]
    cg, mg = c_all // group, m_all // group
    hq, wq, plane, size = _phase_sizes(geo)
    taps = kh * kw
    passes = (taps + TAPS_PER_PASS - 1) // TAPS_PER_PASS
    xp = scratch[:c_all * plane]
    op = scratch[c_all * plane:c_all * plane + BLOCK * size]
    xf = x.reshape(x.size)
    af = acc.reshape(acc.size)
    zero = wp_.dtype.type(0)
    for j in range(c_all * plane):
        xp[j] = zero
    for c in range(c_all):
        _into_phases(xf, (n * c_all + c) * h * width, h, width, xp[c * plane:(c + 1) * plane], sh, sw, pt, pl,
                     hq, wq)
    offsets = np.empty(passes * TAPS_PER_PASS, np.int64)
    for t in range(passes * TAPS_PER_PASS):
        offsets[t] = _tap_offset(t, taps, kw, sw, sh, dh, dw, hq, wq)
    has_bias = bias.shape[0] > 0
    o0, o1, o2, o3 = op[:size], op[size:2 * size], op[2 * size:3 * size], op[3 * size:]
    for mb in range(m0 // BLOCK, (m1 + BLOCK - 1) // BLOCK):
        first = mb * BLOCK
        count = min(BLOCK, m1 - first)
        g = first // mg
        b0 = bias[first] if has_bias else zero
        b1 = bias[first + 1] if has_bias and count > 1 else zero
        b2 = bias[first + 2] if has_bias and count > 2 else zero
        b3 = bias[first + 3] if has_bias and count > 3 else zero
        for j in range(size):
            o0[j] = b0
            o1[j] = b1
            o2[j] = b2
            o3[j] = b3
        for c in range(cg):
            xc = xp[(g * cg + c) * plane:]
            for t in range(0, taps, TAPS_PER_PASS):
                a0, a1, a2 = xc[offsets[t]:], xc[offsets[t + 1]:], xc[offsets[t + 2]:]
                a3, a4, a5 = xc[offsets[t + 3]:], xc[offsets[t + 4]:], xc[offsets[t + 5]:]
                a6, a7, a8 = xc[offsets[t + 6]:], xc[offsets[t + 7]:], xc[offsets[t + 8]:]
                k = ((mb * cg + c) * taps + t) * BLOCK
                v0, v1, v2, v3, v4, v5, v6, v7, v8 = _block_weights(wp_, k, t, taps, 0)
                u0, u1, u2, u3, u4, u5, u6, u7, u8 = _block_weights(wp_, k, t, taps, 1)
                r0, r1, r2, r3, r4, r5, r6, r7, r8 = _block_weights(wp_, k, t, taps, 2)
                s0, s1, s2, s3, s4, s5, s6, s7, s8 = _block_weights(wp_, k, t, taps, 3)
                for j in range(size):
                    e0, e1, e2, e3, e4, e5, e6, e7, e8 = a0[j], a1[j], a2[j], a3[j], a4[j], a5[j], a6[j], a7[j], a8[j]
                    o0[j] += (v0 * e0 + v1 * e1 + v2 * e2 + v3 * e3 + v4 * e4 + v5 * e5 + v6 * e6 + v7 * e7
                              + v8 * e8)
                    o1[j] += (u0 * e0 + u1 * e1 + u2 * e2 + u3 * e3 + u4 * e4 + u5 * e5 + u6 * e6 + u7 * e7
                              + u8 * e8)
                    o2[j] += (r0 * e0 + r1 * e1 + r2 * e2 + r3 * e3 + r4 * e4 + r5 * e5 + r6 * e6 + r7 * e7
                              + r8 * e8)
                    o3[j] += (s0 * e0 + s1 * e1 + s2 * e2 + s3 * e3 + s4 * e4 + s5 * e5 + s6 * e6 + s7 * e7
                              + s8 * e8)
        for t in range(count):   # a block across a group boundary never happens: see conv_part
            _copy_rows(op[t * size:], af, (n * m_all + first + t) * ho * wo, ho, wo, wq)


@njit(cache=True, nogil=True, inline="always")
def _block_weights(wp_, k, t, taps, o):
    """Output ``o``'s weights of taps t .. t + 8 in a DIRECT block from ``wp_[k:]`` ([taps, BLOCK]); zero past
    the last tap."""
    return (_block_weight(wp_, k, t, taps, o, 0), _block_weight(wp_, k, t, taps, o, 1),
            _block_weight(wp_, k, t, taps, o, 2), _block_weight(wp_, k, t, taps, o, 3),
            _block_weight(wp_, k, t, taps, o, 4), _block_weight(wp_, k, t, taps, o, 5),
            _block_weight(wp_, k, t, taps, o, 6), _block_weight(wp_, k, t, taps, o, 7),
            _block_weight(wp_, k, t, taps, o, 8))


@njit(cache=True, nogil=True, inline="always")
def _block_weight(wp_, k, t, taps, o, i):
    return wp_[k + i * BLOCK + o] if t + i < taps else wp_.dtype.type(0)


@njit(cache=True, nogil=True, inline="always")
def _tap_offset(t, taps, kw, sw, sh, dh, dw, hq, wq):
    """Phase offset of tap ``t`` of a window (``_phase_offset``); 0 past the last tap."""
    if t >= taps:
        return 0
    ki = t // kw
    return _phase_offset(ki, t - ki * kw, sw, sh, dh, dw, hq, wq)


@njit(cache=True, nogil=True, inline="always")
def _tap_weight(w, c, t, taps):
    """Weight of tap ``t`` of channel ``c``; zero past the last tap, so that a pass always sums
    ``TAPS_PER_PASS`` taps."""
    return w[c * taps + t] if t < taps else w.dtype.type(0)



@njit(cache=True, nogil=True)
def _depthwise_flat(x, w, bias, geo, acc, scratch, q0, q1):
    """Depthwise planes [q0, q1) on the stride phases of each padded plane (``_into_phases``): each pass sums
    ``TAPS_PER_PASS`` taps into the output, one multiply-add loop over the whole output ``wq`` wide (long enough
    for AVX-512's vector loops, which a 14-wide row never reaches); then the output rows are copied out."""
    c_all = geo[C]
    kh, kw, ho, wo = geo[KH], geo[KW], geo[HO], geo[WO]
    sh, sw, dh, dw, pt, pl = geo[SH], geo[SW], geo[DH], geo[DW], geo[PT], geo[PL]
    hq, wq, phases, size = _phase_sizes(geo)
    taps = kh * kw
    h, width = geo[H], geo[W]
    xf = x.reshape(x.size)
    af = acc.reshape(acc.size)
    ph = scratch[:phases]
    op = scratch[phases:phases + size]
    has_bias = bias.shape[0] > 0
    for j in range(phases):
        ph[j] = 0.0
    zero = w.dtype.type(0)
    # a slice per tap: loads at ``j`` of nine bases vectorize (``ph[j + o0]`` with a run-time ``o0`` did not);
    # the first pass's offsets (integer divisions) and slices (a reference count each) are made once: per
    # plane, they were most of the time of a 7x7 plane
    a0, a1, a2, a3, a4, a5, a6, a7, a8 = _tap_slices(ph, 0, taps, kw, sw, sh, dh, dw, hq, wq)
    for q in range(q0, q1):
        c = q % c_all
        _into_phases(xf, q * h * width, h, width, ph, sh, sw, pt, pl, hq, wq)
        for t in range(0, taps, TAPS_PER_PASS):
            w0, w1, w2 = _tap_weight(w, c, t, taps), _tap_weight(w, c, t + 1, taps), _tap_weight(w, c, t + 2, taps)
            w3, w4, w5 = _tap_weight(w, c, t + 3, taps), _tap_weight(w, c, t + 4, taps), _tap_weight(w, c, t + 5, taps)
            w6, w7, w8 = _tap_weight(w, c, t + 6, taps), _tap_weight(w, c, t + 7, taps), _tap_weight(w, c, t + 8, taps)
            if t == 0:
                b = bias[c] if has_bias else zero
                for j in range(size):
                    op[j] = (b + w0 * a0[j] + w1 * a1[j] + w2 * a2[j] + w3 * a3[j] + w4 * a4[j] + w5 * a5[j]
                             + w6 * a6[j] + w7 * a7[j] + w8 * a8[j])
            else:   # windows of more than nine taps
                s0, s1, s2, s3, s4, s5, s6, s7, s8 = _tap_slices(ph, t, taps, kw, sw, sh, dh, dw, hq, wq)
                for j in range(size):
                    op[j] += (w0 * s0[j] + w1 * s1[j] + w2 * s2[j] + w3 * s3[j] + w4 * s4[j] + w5 * s5[j]
                              + w6 * s6[j] + w7 * s7[j] + w8 * s8[j])
        _copy_rows(op, af, q * ho * wo, ho, wo, wq)


@njit(cache=True, nogil=True, inline="always")
def _same_3x3(geo):
    """A 3x3 window, stride 1, no dilation, one pixel of padding on every side (the output the input's size)."""
    return (geo[KH] == 3 and geo[KW] == 3 and geo[SH] == 1 and geo[SW] == 1 and geo[DH] == 1 and geo[DW] == 1
            and geo[PT] == 1 and geo[PL] == 1 and geo[HO] == geo[H] and geo[WO] == geo[W])


@njit(cache=True, nogil=True)
def _depthwise_same(x, w, bias, geo, acc, scratch, q0, q1):
    """Depthwise planes [q0, q1) of a ``_same_3x3`` window straight from the input, no padded copy: a plane's
    output is three flat loops (its first row, the rows between, its last row) over its flat positions, the
    taps at fixed flat offsets; a column mask (``left[j]``: position j has a left neighbour; ``left[j + 1]``: a
    right one) picks zero for the taps that fall off a row's ends, so the values read across a row's end (the
    row before or after, or the neighbouring plane) never count. The tensor's first and last planes take
    ``_depthwise_flat``: there those reads would fall one element outside the input.
    On 7x7 and 14x14 planes the per-row copies into the padded planes and back were most of the time (960
    planes of 7x7: 100 -> 41 us; 144 planes of 56x56: 208 -> 164 us)."""
    h, width = geo[H], geo[W]
    n = h * width
    c_all, planes = geo[C], geo[N] * geo[M]
    xf = x.reshape(x.size)
    af = acc.reshape(acc.size)
    _, _, phases, size = _phase_sizes(geo)
    start = phases + size                        # after ``_depthwise_flat``'s scratch
    left = scratch[start:start + n + 1]
    zero, one = w.dtype.type(0), w.dtype.type(1)
    for j in range(n):
        left[j] = one if j % width > 0 else zero
    left[n] = zero
    has_bias = bias.shape[0] > 0
    for q in range(q0, q1):
        if q == 0 or q == planes - 1:
            _depthwise_flat(x, w, bias, geo, acc, scratch, q, q + 1)
            continue
        c = q % c_all
        b = bias[c] if has_bias else zero
        base = q * n
        if h == 1:
            _same_band(xf, af, left, base, 0, n, width, w, c * 9, b, False, False)
        else:
            _same_band(xf, af, left, base, 0, width, width, w, c * 9, b, False, True)
            _same_band(xf, af, left, base, width, n - width, width, w, c * 9, b, True, True)
            _same_band(xf, af, left, base, n - width, n, width, w, c * 9, b, True, False)


@njit(cache=True, nogil=True, inline="always")
def _pick(v, keep, zero):
    return v if keep != zero else zero


@njit(cache=True, nogil=True, inline="always")
def _same_band(xf, af, left, base, j0, j1, width, w, k, b, up, down):
    """Positions [j0, j1) of the plane at ``base``: the row's own taps, the row above's when ``up``, the row
    below's when ``down``. Unsigned flat indices: a signed index's wraparound check kept the loop scalar."""
    zero = w.dtype.type(0)
    w0, w1, w2, w3, w4, w5, w6, w7, w8 = w[k], w[k + 1], w[k + 2], w[k + 3], w[k + 4], w[k + 5], w[k + 6], \
        w[k + 7], w[k + 8]
    one, row = np.uint64(1), np.uint64(width)
    for j in range(j0, j1):
        i = np.uint64(base + j)
        lk, rk = left[np.uint64(j)], left[np.uint64(j + 1)]
        s = b + _pick(xf[i - one], lk, zero) * w3 + xf[i] * w4 + _pick(xf[i + one], rk, zero) * w5
        if up:
            u = i - row
            s += _pick(xf[u - one], lk, zero) * w0 + xf[u] * w1 + _pick(xf[u + one], rk, zero) * w2
        if down:
            d = i + row
            s += _pick(xf[d - one], lk, zero) * w6 + xf[d] * w7 + _pick(xf[d + one], rk, zero) * w8
        af[i] = s


@njit(cache=True, nogil=True, inline="always")
def _tap_slices(ph, t, taps, kw, sw, sh, dh, dw, hq, wq):
    """The phases from where taps t .. t + 8 start (``_tap_offset``)."""
    return (ph[_tap_offset(t, taps, kw, sw, sh, dh, dw, hq, wq):],
            ph[_tap_offset(t + 1, taps, kw, sw, sh, dh, dw, hq, wq):],
            ph[_tap_offset(t + 2, taps, kw, sw, sh, dh, dw, hq, wq):],
            ph[_tap_offset(t + 3, taps, kw, sw, sh, dh, dw, hq, wq):],
            ph[_tap_offset(t + 4, taps, kw, sw, sh, dh, dw, hq, wq):],
            ph[_tap_offset(t + 5, taps, kw, sw, sh, dh, dw, hq, wq):],
            ph[_tap_offset(t + 6, taps, kw, sw, sh, dh, dw, hq, wq):],
            ph[_tap_offset(t + 7, taps, kw, sw, sh, dh, dw, hq, wq):],
            ph[_tap_offset(t + 8, taps, kw, sw, sh, dh, dw, hq, wq):])


@njit(cache=True, nogil=True, inline="always")
def _copy_rows(op, dst, start, ho, wo, wq):
    """Output rows ``wq`` wide in ``op`` to the flat ``dst`` at ``start``, ``wo`` wide."""
    for oh in range(ho):
        d = start + oh * wo
        r = oh * wq
        for j in range(wo):
            dst[np.uint64(d + j)] = op[np.uint64(r + j)]


@njit(cache=True, nogil=True, inline="always")
def _tile_rows(x, q, c, g0, g1, th, m, plane, wp, c0, c1, h, pt, pl):
    """Channel ``c``'s input rows of the tile rows [g0, g1) of F(m x m) (each ``m + 2`` rows, zero outside the
    image) into ``m + 2`` planes ``plane`` apart, a tile row ``wp`` wide in each, columns [c0, c1) only (the
    padding columns stay as the caller zeroed them)."""
    for i in range(m + 2):
        for g in range(g0, g1):
            n = g // th
            ty = g - n * th
            ih = m * ty + i - pt
            base = i * plane + (g - g0) * wp
            if ih < 0 or ih >= h:
                for j in range(c0, c1):
                    q[np.uint64(base + j)] = 0.0
                continue
            src = x[n, c, ih]
            for j in range(c0, c1):
                q[np.uint64(base + j)] = src[np.uint64(j - pl)]


@njit(cache=True, nogil=True)
def _winograd_input2(x, geo, scr, vo, si, tiles, g0, g1, gbase, q):
    """Winograd F(2x2, 3x3)'s input transform of the batch's tile rows [g0, g1) (row ``g``: image ``g // th``,
    output rows 2*(g % th) and the next): each tile's 4x4 input patch ``d`` (zero outside the image) becomes
    ``B^T d B``, whose 16 values go to 16 blocks [C, tiles] at ``scr[vo + k * si]``, in column
    ``(g - gbase) * (tw + 1) + tx`` (``tw + 1`` slots a tile row: the last one is junk, so that a slot's input
    columns are 2 * slot .. 2 * slot + 3 across the whole chunk and every loop runs its full length).
    Per channel: the four input rows of every tile are copied into four planes [rows, 2 * tw + 2], combined in
    place (B^T d), then each combined plane gives four blocks (d B) in one pass over the slots: long unit-stride
    vector loops, where a loop per tile ran scalar. ``q``: ``_winograd_q(2, g1 - g0, tw)`` elements of scratch."""
    c_all, h, width, ho, wo, pt, pl = geo[C], geo[H], geo[W], geo[HO], geo[WO], geo[PT], geo[PL]
    th, tw = _tiles(ho, 2), _tiles(wo, 2)
    wp = 2 * tw + 2
    span = (g1 - g0) * wp
    slots = (g1 - g0) * (tw + 1)
    c0, c1 = max(0, pl), min(wp, pl + width)
    for j in range(4 * span + 4):
        q[j] = 0.0
    for c in range(c_all):
        _tile_rows(x, q, c, g0, g1, th, 2, span, wp, c0, c1, h, pt, pl)
        for j in range(span):   # B^T d: rows d0 - d2, d1 + d2, d2 - d1, d1 - d3 (pad columns stay zero)
            d0 = q[np.uint64(j)]
            d1 = q[np.uint64(span + j)]
            d2 = q[np.uint64(2 * span + j)]
            d3 = q[np.uint64(3 * span + j)]
            q[np.uint64(j)] = d0 - d2
            q[np.uint64(span + j)] = d1 + d2
            q[np.uint64(2 * span + j)] = d2 - d1
            q[np.uint64(3 * span + j)] = d1 - d3
        for r in range(4):      # (B^T d) B: slot t reads columns 2t .. 2t + 3 of combined row r
            vb = r * span
            ob = vo + c * tiles + (g0 - gbase) * (tw + 1) + 4 * r * si
            for t in range(slots):
                v0 = q[np.uint64(vb + 2 * t)]
                v1 = q[np.uint64(vb + 2 * t + 1)]
                v2 = q[np.uint64(vb + 2 * t + 2)]
                v3 = q[np.uint64(vb + 2 * t + 3)]
                scr[np.uint64(ob + t)] = v0 - v2
                scr[np.uint64(ob + si + t)] = v1 + v2
                scr[np.uint64(ob + 2 * si + t)] = v2 - v1
                scr[np.uint64(ob + 3 * si + t)] = v1 - v3


@njit(cache=True, nogil=True)
def _winograd_output2(acc, bias, geo, scr, oo, so, tiles, g0, g1, gbase, m0, m1, eo):
    """Winograd's output transform: output channels [m0, m1) of tile rows [g0, g1) from the 16 product blocks
    [m1 - m0, tiles] at ``scr[oo + k * so]`` (slot ``(g - gbase) * (tw + 1) + tx``): ``A^T m A`` and the bias
    into four planes of the tiles' corners (one unit-stride pass over the slots), then interleaved into the
    output rows; outputs past HO or WO (a ragged last tile) are not written. ``eo``: ``4 * (g1 - g0) * (tw + 1)``
    elements of scratch."""
    m_all, ho, wo = geo[M], geo[HO], geo[WO]
    th, tw = _tiles(ho, 2), _tiles(wo, 2)
    slots = (g1 - g0) * (tw + 1)
    out = acc.reshape(-1)
    hw = ho * wo
    pairs = wo // 2
    has_bias = bias.shape[0] > 0
    for m in range(m0, m1):
        bv = bias[m] if has_bias else 0.0
        b = oo + (m - m0) * tiles + (g0 - gbase) * (tw + 1)
        for t in range(slots):
            m00 = scr[np.uint64(b + t)]
            m01 = scr[np.uint64(b + so + t)]
            m02 = scr[np.uint64(b + 2 * so + t)]
            m03 = scr[np.uint64(b + 3 * so + t)]
            m10 = scr[np.uint64(b + 4 * so + t)]
            m11 = scr[np.uint64(b + 5 * so + t)]
            m12 = scr[np.uint64(b + 6 * so + t)]
            m13 = scr[np.uint64(b + 7 * so + t)]
            m20 = scr[np.uint64(b + 8 * so + t)]
            m21 = scr[np.uint64(b + 9 * so + t)]
            m22 = scr[np.uint64(b + 10 * so + t)]
            m23 = scr[np.uint64(b + 11 * so + t)]
            m30 = scr[np.uint64(b + 12 * so + t)]
            m31 = scr[np.uint64(b + 13 * so + t)]
            m32 = scr[np.uint64(b + 14 * so + t)]
            m33 = scr[np.uint64(b + 15 * so + t)]
            p0, p1, p2, p3 = m00 + m10 + m20, m01 + m11 + m21, m02 + m12 + m22, m03 + m13 + m23
            s0, s1, s2, s3 = m10 - m20 - m30, m11 - m21 - m31, m12 - m22 - m32, m13 - m23 - m33
            eo[np.uint64(t)] = p0 + p1 + p2 + bv
            eo[np.uint64(slots + t)] = p1 - p2 - p3 + bv
            eo[np.uint64(2 * slots + t)] = s0 + s1 + s2 + bv
            eo[np.uint64(3 * slots + t)] = s1 - s2 - s3 + bv
        for g in range(g0, g1):
            n = g // th
            ty = g - n * th
            src = (g - g0) * (tw + 1)
            r0 = (n * m_all + m) * hw + 2 * ty * wo
            for j in range(pairs):
                out[np.uint64(r0 + 2 * j)] = eo[np.uint64(src + j)]
                out[np.uint64(r0 + 2 * j + 1)] = eo[np.uint64(slots + src + j)]
            if wo % 2:
                out[np.uint64(r0 + wo - 1)] = eo[np.uint64(src + pairs)]
            if 2 * ty + 1 < ho:
                r1 = r0 + wo
                for j in range(pairs):
                    out[np.uint64(r1 + 2 * j)] = eo[np.uint64(2 * slots + src + j)]
                    out[np.uint64(r1 + 2 * j + 1)] = eo[np.uint64(3 * slots + src + j)]
                if wo % 2:
                    out[np.uint64(r1 + wo - 1)] = eo[np.uint64(2 * slots + src + pairs)]


@njit(cache=True, nogil=True)
def _winograd_input4(x, geo, scr, vo, si, tiles, g0, g1, gbase, q):
    """Winograd F(4x4, 3x3)'s input transform of the batch's tile rows [g0, g1) (row ``g``: image ``g // th``,
    output rows 4*(g % th) to the fourth after): each tile's 6x6 input patch ``d`` (zero outside the image)
    becomes ``B^T d B``, whose 36 values go to 36 blocks [C, tiles] at ``scr[vo + k * si]``, in column
    ``(g - gbase) * (tw + 1) + tx`` (``tw + 1`` slots a tile row: the last one is junk, so that a slot's input
    columns are 4 * slot .. 4 * slot + 5 across the whole chunk and every loop runs its full length).
    Per channel: the six input rows of every tile are copied into six planes, each as its four column phases
    (column j of a tile row at ``(j % 4) * ln + j // 4``), combined in place (B^T d), then each combined plane
    gives six blocks (d B) in one pass over the slots: long unit-stride vector loops (a slot's six columns read
    with stride 4 from one row ran as gathers, 2.7x slower). ``q``: ``_winograd_q(4, g1 - g0, tw)`` elements.
    B^T's rows (points 0, +-1, +-2): 4d0 - 5d2 + d4, -4(d1 + d2) + d3 + d4, 4(d1 - d2) - d3 + d4,
    2(d3 - d1) - d2 + d4, -2(d3 - d1) - d2 + d4, 4d1 - 5d3 + d5; the factors are sums (x + x: exact), so one
    compiled function serves float32 and float64 without a mixed-type product."""
    c_all, h, width, ho, wo, pt, pl = geo[C], geo[H], geo[W], geo[HO], geo[WO], geo[PT], geo[PL]
    th, tw = _tiles(ho, 4), _tiles(wo, 4)
    slots = (g1 - g0) * (tw + 1)
    wp = 4 * (tw + 1)         # a tile row's input columns (the junk slot's four included)
    rows = 4 * slots          # a plane of input rows, as the image lies (``d``)
    ln = slots + 1            # a phase (the junk slot of the last tile row reads one past the slots)
    span = 4 * ln             # a plane of combined rows in its four column phases (``B^T d``)
    ph = 6 * rows + 4         # where the phases start
    c0, c1 = max(0, pl), min(wp, pl + width)
    for j in range(ph + 6 * span):
        q[j] = 0.0
    for c in range(c_all):
        _tile_rows(x, q, c, g0, g1, th, 4, rows, wp, c0, c1, h, pt, pl)
        for j in range(rows):   # B^T d in place (pad columns stay zero)
            d0 = q[np.uint64(j)]
            d1 = q[np.uint64(rows + j)]
            d2 = q[np.uint64(2 * rows + j)]
            d3 = q[np.uint64(3 * rows + j)]
            d4 = q[np.uint64(4 * rows + j)]
            d5 = q[np.uint64(5 * rows + j)]
            q[np.uint64(j)] = _wino_in0(d0, d2, d4)
            q[np.uint64(rows + j)] = _wino_in1(d1, d2, d3, d4)
            q[np.uint64(2 * rows + j)] = _wino_in2(d1, d2, d3, d4)
            q[np.uint64(3 * rows + j)] = _wino_in3(d1, d2, d3, d4)
            q[np.uint64(4 * rows + j)] = _wino_in4(d1, d2, d3, d4)
            q[np.uint64(5 * rows + j)] = _wino_in0(d1, d3, d5)
        for r in range(6):      # each combined plane into its column phases (column j at (j % 4) * ln + j // 4)
            a = r * rows
            b = ph + r * span
            for u in range(slots):
                v0 = q[np.uint64(a + 4 * u)]
                v1 = q[np.uint64(a + 4 * u + 1)]
                v2 = q[np.uint64(a + 4 * u + 2)]
                v3 = q[np.uint64(a + 4 * u + 3)]
                q[np.uint64(b + u)] = v0
                q[np.uint64(b + ln + u)] = v1
                q[np.uint64(b + 2 * ln + u)] = v2
                q[np.uint64(b + 3 * ln + u)] = v3
        for r in range(6):      # (B^T d) B: slot t reads columns 4t .. 4t + 5 of combined row r, unit-stride
            p0 = ph + r * span  # in its phases
            p1, p2, p3 = p0 + ln, p0 + 2 * ln, p0 + 3 * ln
            ob = vo + c * tiles + (g0 - gbase) * (tw + 1) + 6 * r * si
            # a loop per block: a loop that wrote all six needed more run-time overlap checks than LLVM
            # vectorizes with (it ran scalar, 4x slower)
            for t in range(slots):
                scr[np.uint64(ob + t)] = _wino_in0(q[np.uint64(p0 + t)], q[np.uint64(p2 + t)], q[np.uint64(p0 + t + 1)])
            for t in range(slots):
                scr[np.uint64(ob + si + t)] = _wino_in1(q[np.uint64(p1 + t)], q[np.uint64(p2 + t)],
                                                        q[np.uint64(p3 + t)], q[np.uint64(p0 + t + 1)])
            for t in range(slots):
                scr[np.uint64(ob + 2 * si + t)] = _wino_in2(q[np.uint64(p1 + t)], q[np.uint64(p2 + t)],
                                                            q[np.uint64(p3 + t)], q[np.uint64(p0 + t + 1)])
            for t in range(slots):
                scr[np.uint64(ob + 3 * si + t)] = _wino_in3(q[np.uint64(p1 + t)], q[np.uint64(p2 + t)],
                                                            q[np.uint64(p3 + t)], q[np.uint64(p0 + t + 1)])
            for t in range(slots):
                scr[np.uint64(ob + 4 * si + t)] = _wino_in4(q[np.uint64(p1 + t)], q[np.uint64(p2 + t)],
                                                            q[np.uint64(p3 + t)], q[np.uint64(p0 + t + 1)])
            for t in range(slots):
                scr[np.uint64(ob + 5 * si + t)] = _wino_in0(q[np.uint64(p1 + t)], q[np.uint64(p3 + t)],
                                                            q[np.uint64(p1 + t + 1)])


@njit(cache=True, nogil=True, inline="always")
def _wino_in0(a, b, c):
    """4a - 5b + c (B^T's first row; its last is the same on d1, d3, d5)."""
    u = a - b
    u = u + u
    return (u + u) - b + c


@njit(cache=True, nogil=True, inline="always")
def _wino_in1(d1, d2, d3, d4):
    """-4(d1 + d2) + d3 + d4."""
    u = d1 + d2
    u = u + u
    return (d3 + d4) - (u + u)


@njit(cache=True, nogil=True, inline="always")
def _wino_in2(d1, d2, d3, d4):
    """4(d1 - d2) - d3 + d4."""
    u = d1 - d2
    u = u + u
    return (d4 - d3) + (u + u)


@njit(cache=True, nogil=True, inline="always")
def _wino_in3(d1, d2, d3, d4):
    """2(d3 - d1) - d2 + d4."""
    u = d3 - d1
    return (d4 - d2) + (u + u)


@njit(cache=True, nogil=True, inline="always")
def _wino_in4(d1, d2, d3, d4):
    """-2(d3 - d1) - d2 + d4."""
    u = d3 - d1
    return (d4 - d2) - (u + u)


@njit(cache=True, nogil=True, inline="always")
def _wino_out(m0, m1, m2, m3, m4, m5):
    """A^T's four rows on six values: m0 + m1 + m2 + m3 + m4, (m1 - m2) + 2(m3 - m4), (m1 + m2) + 4(m3 + m4),
    (m1 - m2) + 8(m3 - m4) + m5."""
    a, b, c, d = m1 + m2, m1 - m2, m3 + m4, m3 - m4
    c2, d2 = c + c, d + d
    d4 = d2 + d2
    return m0 + a + c, b + d2, a + (c2 + c2), b + (d4 + d4) + m5


@njit(cache=True, nogil=True)
def _winograd_output4(acc, bias, geo, scr, oo, so, tiles, g0, g1, gbase, m0, m1, eo):
    """Winograd's output transform: output channels [m0, m1) of tile rows [g0, g1) from the 36 product blocks
    [m1 - m0, tiles] at ``scr[oo + k * so]`` (slot ``(g - gbase) * (tw + 1) + tx``): ``A^T m A`` and the bias
    into sixteen planes of the tiles' outputs, then interleaved into the output rows; outputs past HO or WO (a
    ragged last tile) are not written. ``eo``: ``40 * (g1 - g0) * (tw + 1)`` elements of scratch: the sixteen
    output planes and the 24 of ``m A``. In two passes of unit-stride loops over the slots (six blocks in, four
    planes out), not one: a loop reading all 36 blocks and writing 16 planes needs more run-time overlap checks
    than LLVM vectorizes with (it ran scalar, 4x slower)."""
    m_all, ho, wo = geo[M], geo[HO], geo[WO]
    th, tw = _tiles(ho, 4), _tiles(wo, 4)
    slots = (g1 - g0) * (tw + 1)
    out = acc.reshape(-1)
    hw = ho * wo
    quads = wo // 4
    rest = wo - 4 * quads
    has_bias = bias.shape[0] > 0
    zero = np.zeros(1, eo.dtype)[0]   # (a literal 0.0 would make the bias, and every sum with it, float64)
    for m in range(m0, m1):
        bv = bias[m] if has_bias else zero
        b = oo + (m - m0) * tiles + (g0 - gbase) * (tw + 1)
        for a in range(6):   # m A, row by row: 24 planes (4a + j) after the output planes
            ba = b + 6 * a * so
            ra = (16 + 4 * a) * slots
            for t in range(slots):
                r0, r1, r2, r3 = _wino_out(scr[np.uint64(ba + t)], scr[np.uint64(ba + so + t)],
                                           scr[np.uint64(ba + 2 * so + t)], scr[np.uint64(ba + 3 * so + t)],
                                           scr[np.uint64(ba + 4 * so + t)], scr[np.uint64(ba + 5 * so + t)])
                eo[np.uint64(ra + t)] = r0
                eo[np.uint64(ra + slots + t)] = r1
                eo[np.uint64(ra + 2 * slots + t)] = r2
                eo[np.uint64(ra + 3 * slots + t)] = r3
        for j in range(4):   # A^T (m A), column by column, and the bias: output plane 4i + j
            rj = (16 + j) * slots
            for t in range(slots):
                y0, y1, y2, y3 = _wino_out(eo[np.uint64(rj + t)], eo[np.uint64(rj + 4 * slots + t)],
                                           eo[np.uint64(rj + 8 * slots + t)], eo[np.uint64(rj + 12 * slots + t)],
                                           eo[np.uint64(rj + 16 * slots + t)], eo[np.uint64(rj + 20 * slots + t)])
                eo[np.uint64(j * slots + t)] = y0 + bv
                eo[np.uint64((4 + j) * slots + t)] = y1 + bv
                eo[np.uint64((8 + j) * slots + t)] = y2 + bv
                eo[np.uint64((12 + j) * slots + t)] = y3 + bv
        for g in range(g0, g1):   # tile row g's output rows 4 * ty + i: plane 4i + j holds column 4 * tx + j
            n = g // th
            ty = g - n * th
            src = (g - g0) * (tw + 1)
            for i in range(min(4, ho - 4 * ty)):
                r0 = (n * m_all + m) * hw + (4 * ty + i) * wo
                e0 = 4 * i * slots + src
                for j in range(quads):
                    out[np.uint64(r0 + 4 * j)] = eo[np.uint64(e0 + j)]
                    out[np.uint64(r0 + 4 * j + 1)] = eo[np.uint64(e0 + slots + j)]
                    out[np.uint64(r0 + 4 * j + 2)] = eo[np.uint64(e0 + 2 * slots + j)]
                    out[np.uint64(r0 + 4 * j + 3)] = eo[np.uint64(e0 + 3 * slots + j)]
                for j in range(rest):
                    out[np.uint64(r0 + 4 * quads + j)] = eo[np.uint64(e0 + j * slots + quads)]


@njit(cache=True, nogil=True, inline="always")
def _winograd_q(m, rows, tw):
    """Scratch of the input transform of F(m x m) for ``rows`` tile rows, reused by the output transform. F(2x2):
    four planes of input rows, and 4 of slack that the last (junk) slot reads. F(4x4): six planes of input rows,
    then six of four column phases of ``slots + 1``, and 4 of slack; its output transform's 40 planes."""
    if m == 2:
        return 4 * rows * (2 * tw + 2) + 4
    return max(6 * 4 * rows * (tw + 1) + 4 + 24 * (rows * (tw + 1) + 1), 40 * rows * (tw + 1))


@njit(cache=True, nogil=True, inline="always")
def _wino_eo(m):
    """The output transform's scratch planes a slot: F(2x2)'s four outputs, F(4x4)'s sixteen and the 24 of its
    row pass (``_winograd_output4``)."""
    return 4 if m == 2 else 40


@njit(cache=True, nogil=True, inline="always")
def _winograd_input(x, geo, scr, vo, si, tiles, g0, g1, gbase, q):
    """The input transform of the tile side ``geo[WT]``, called by address (``WINO_ENTRIES``): linked into the
    part and preparation modules, the four transforms made them take 23 s to compile cold, 7 s before F(4x4)."""
    if geo[WT] == 2:
        entries.call("wino_in2", (x, geo, scr, vo, si, tiles, g0, g1, gbase, q))
    else:
        entries.call("wino_in4", (x, geo, scr, vo, si, tiles, g0, g1, gbase, q))


@njit(cache=True, nogil=True, inline="always")
def _winograd_output(acc, bias, geo, scr, oo, so, tiles, g0, g1, gbase, m0, m1, eo):
    """The output transform of the tile side ``geo[WT]``, called by address (see ``_winograd_input``)."""
    if geo[WT] == 2:
        entries.call("wino_out2", (acc, bias, geo, scr, oo, so, tiles, g0, g1, gbase, m0, m1, eo))
    else:
        entries.call("wino_out4", (acc, bias, geo, scr, oo, so, tiles, g0, g1, gbase, m0, m1, eo))


@njit(cache=True, nogil=True)
def _winograd_rows_layout(geo, nparts):
    """ROWS mode's scratch: the whole batch's 36 transformed input blocks (block stride ``si``), shared by every
    part; then per part the input transform's rows (``q_size``: it transforms runs of ``geo[TILE]`` tile rows),
    and per part 36 product blocks (stride ``so``: its most output channels of one image) with the output
    transform's ``_wino_eo(m) * per_image`` elements. Returns (si, q_size, so, per_image slots)."""
    m = geo[WT]
    th, tw = _tiles(geo[HO], m), _tiles(geo[WO], m)
    per_image = th * (tw + 1)
    si = geo[C] * geo[N] * per_image + WINO_PAD
    most = min(geo[M], (geo[N] * geo[M] + nparts - 1) // nparts)
    so = most * per_image + WINO_PAD
    return si, _winograd_q(m, min(geo[TILE], geo[N] * th), tw), so, per_image


# ---------------------------------------------------------------------------- parts
@njit(cache=True, nogil=True)
def prepare_gemm(x, w, bias, geo, col, p, nprep):
    """Part ``p`` of ``nprep`` of the batch's im2col (GEMM, ROWS mode; nothing otherwise)."""
    if geo[MODE] == ROWS:
        _im2col_part(x, geo, col, p, nprep)


@njit(cache=True, nogil=True, inline="always")
def _im2col_part(x, geo, col, p, nprep):
    """Part ``p`` of ``nprep`` of the rows of the batch's whole im2col matrix, into ``col`` ([K, HW] an image,
    or positions-major where ``geo[RUNS]``)."""
    if geo[RUNS]:
        rows = geo[N] * geo[HO] * geo[WO]
        _im2col_positions(x, geo, col, rows * p // nprep, rows * (p + 1) // nprep)
    else:
        rows = geo[N] * geo[C] * geo[KH] * geo[KW]
        _im2col_rows(x, geo, col, 0, rows * p // nprep, rows * (p + 1) // nprep)


@njit(cache=True, nogil=True)
def _im2col_positions(x, geo, col, r0, r1):
    """Rows [r0, r1) of the batch's positions-major im2col matrix (``RUNS``: row = (image, output position),
    its K = C * KH * KW taps in (channel, ki, kj) order) into ``col``: each (channel, ki) a run of KW contiguous
    input elements (unit dilation along the row), zeros where the window lies in the padding."""
    c_all, h, width, kh, kw = geo[C], geo[H], geo[W], geo[KH], geo[KW]
    ho, wo, sh, sw, dh, pt, pl = geo[HO], geo[WO], geo[SH], geo[SW], geo[DH], geo[PT], geo[PL]
    hw = ho * wo
    k = c_all * kh * kw
    for r in range(r0, r1):
        n = r // hw
        oh = (r - n * hw) // wo
        ow = r - n * hw - oh * wo
        iw0 = ow * sw - pl
        j0 = min(kw, max(0, -iw0))             # the window's columns [j0, j1) inside the row
        j1 = max(j0, min(kw, width - iw0))
        for c in range(c_all):
            for ki in range(kh):
                at = r * k + (c * kh + ki) * kw
                ih = oh * sh - pt + ki * dh
                if ih < 0 or ih >= h:
                    for j in range(kw):
                        col[np.uint64(at + j)] = 0.0
                    continue
                xrow = x[n, c, ih]
                for j in range(j0):
                    col[np.uint64(at + j)] = 0.0
                for j in range(j0, j1):
                    col[np.uint64(at + j)] = xrow[np.uint64(iw0 + j)]
                for j in range(j1, kw):
                    col[np.uint64(at + j)] = 0.0


@njit(cache=True, nogil=True, inline="always")
def _unit_channel(u, per_image, unit, m_all):
    """The flat (image, output channel) index where unit ``u`` starts: units of ``unit`` output channels,
    ``per_image`` an image (its last one may hold fewer), numbered across the batch."""
    return u // per_image * m_all + min(m_all, (u % per_image) * unit)


@njit(cache=True, nogil=True)
def _channel_runs(n_all, m_all, unit, p, nparts):
    """Part ``p`` of ``nparts`` of the batch's units of ``unit`` output channels, as runs within one image: rows
    (image, first channel, channel past the last), and the flat (image, channel) range [lo, hi) they cover."""
    per_image = (m_all + unit - 1) // unit
    units = n_all * per_image
    u0, u1 = units * p // nparts, units * (p + 1) // nparts
    runs = np.empty((n_all + 1, 3), np.int64)
    count = 0
    u = u0
    while u < u1:
        n = u // per_image
        stop = min(u1, (n + 1) * per_image)
        runs[count, 0] = n
        runs[count, 1] = _unit_channel(u, per_image, unit, m_all) - n * m_all
        runs[count, 2] = _unit_channel(stop, per_image, unit, m_all) - n * m_all
        count += 1
        u = stop
    return runs[:count], _unit_channel(u0, per_image, unit, m_all), _unit_channel(u1, per_image, unit, m_all)


@njit(cache=True, nogil=True)
def prepare_winograd(x, w, bias, geo, col, p, nprep):
    """Part ``p`` of ``nprep`` of the batch's Winograd input transform (ROWS mode; nothing otherwise): into the
    shared blocks at the start of ``col`` (see ``_winograd_shared``), with part ``p``'s own input rows after them."""
    if geo[MODE] != ROWS:
        return
    m = geo[WT]
    rows = geo[N] * _tiles(geo[HO], m)
    si, q_size, _, per_image = _winograd_rows_layout(geo, nprep)
    nb = _blocks(m)
    q = col[nb * si + p * q_size:nb * si + (p + 1) * q_size]
    g, stop = rows * p // nprep, rows * (p + 1) // nprep
    while g < stop:
        end = min(stop, g + geo[TILE])
        _winograd_input(x, geo, col, 0, si, geo[N] * per_image, g, end, 0, q)
        g = end


@njit(cache=True, nogil=True, inline="always")
def _clamp_at(geo):
    """The address of the clamp's two float32 bounds in ``geo`` (``set_clamp``), or 0 where there is none."""
    return geo.ctypes.data + CLAMP_BOUNDS * 8 if geo[CLAMP] else 0


@njit(cache=True, nogil=True)
def part_depthwise(x, w, bias, geo, acc, col, p, nparts):
    """Part ``p`` of ``nparts`` of a DEPTHWISE conv: a run of (image, channel) planes."""
    hw = geo[HO] * geo[WO]
    planes = geo[N] * geo[M]
    q0, q1 = planes * p // nparts, planes * (p + 1) // nparts
    own = col[p * (col.shape[0] // nparts):]
    if geo[KIND] == DEPTHWISE_VECTORS:
        m_all, hw_in, item = geo[M], geo[H] * geo[W], 4
        clamp = _clamp_at(geo)
        q = q0
        while q < q1:   # runs of planes within one image (weights and bias follow the channel)
            m0 = q % m_all
            stop = min(q1, q - m0 + m_all)
            depthwise_3x3(x.ctypes.data + q * hw_in * item, w.ctypes.data + m0 * 9 * item,
                          bias.ctypes.data + m0 * item, acc.ctypes.data + q * hw * item, stop - q, geo[H], geo[W],
                          geo[HO], geo[WO], geo[SH], bias.shape[0], clamp)
            q = stop
    elif _same_3x3(geo):
        _depthwise_same(x, w, bias, geo, acc, own, q0, q1)
    else:
        _depthwise_flat(x, w, bias, geo, acc, own, q0, q1)
    return q0 * hw, q1 * hw


@njit(cache=True, nogil=True)
def part_direct(x, w, bias, geo, acc, col, p, nparts):
    """Part ``p`` of ``nparts`` of a DIRECT conv: a run of whole blocks of output channels."""
    n_all, m_all = geo[N], geo[M]
    hw = geo[HO] * geo[WO]
    own = col[p * (col.shape[0] // nparts):]
    runs, lo, hi = _channel_runs(n_all, m_all, BLOCK, p, nparts)
    for r in range(runs.shape[0]):
        _direct_phases(x, w, bias, geo, acc, own, runs[r, 0], runs[r, 1], runs[r, 2])
    return lo * hw, hi * hw


@njit(cache=True, nogil=True)
def part_gemm(x, w, bias, geo, acc, col, p, nparts):
    """Part ``p`` of ``nparts`` of a GEMM conv in its mode: column tiles (returns (0, 0): strided slabs), whole
    images, or a run of one batch's output rows."""
    n_all, m_all = geo[N], geo[M]
    hw = geo[HO] * geo[WO]
    k_all = geo[C] * geo[KH] * geo[KW]
    pointwise = col.shape[0] <= 1
    if geo[MODE] == TILES:
        tile = geo[TILE]
        per_image = (hw + tile - 1) // tile
        tiles = n_all * per_image
        own = p * k_all * tile
        for t in range(tiles * p // nparts, tiles * (p + 1) // nparts):
            n = t // per_image
            j0 = (t - n * per_image) * tile
            _gemm_tile(x, w, bias, geo, acc, col, own, n, j0, min(hw, j0 + tile), pointwise)
        return 0, 0
    if geo[MODE] == IMAGES:
        n0, n1 = n_all * p // nparts, n_all * (p + 1) // nparts
        own = p * k_all * hw
        for n in range(n0, n1):
            if not pointwise:
                _im2col_rows(x, geo, col, own - n * k_all * hw, n * k_all, (n + 1) * k_all)
            _gemm_rows(x, w, bias, geo, acc, col, own, n, 0, m_all)
        return n0 * m_all * hw, n1 * m_all * hw
    rows = n_all * m_all
    r0, r1 = rows * p // nparts, rows * (p + 1) // nparts
    r = r0
    while r < r1:
        n = r // m_all
        stop = min(r1, (n + 1) * m_all)
        _gemm_rows(x, w, bias, geo, acc, col, n * k_all * hw, n, r - n * m_all, stop - n * m_all)
        r = stop
    return r0 * hw, r1 * hw


@njit(cache=True, nogil=True)
def prepare_panel(x, w, bias, geo, col, p, nprep):
    """Part ``p`` of ``nprep`` of the batch's im2col (PANEL with a gather; nothing for a pointwise conv), or on
    the stride phases of its planes where they are made once for every part (``geo[SHARED]``; otherwise each part
    makes its images' own)."""
    if geo[KIND] == LANES_PHASES:
        if geo[SHARED]:   # planes [q0, q1) of the batch's phases
            planes = geo[N] * geo[C]
            phases = _phase_sizes(geo)[2]
            for q in range(planes * p // nprep, planes * (p + 1) // nprep):
                _plane_phases(x, geo, col, q * phases, q // geo[C], q % geo[C])
    elif col.shape[0] > 1:
        _im2col_part(x, geo, col, p, nprep)


@njit(cache=True, nogil=True)
def _panel_phases(x, w, bias, geo, acc, col, p, nparts):
    """``part_panel`` on the stride phases of each image's planes, which the part makes in its own scratch
    before it computes that image (so that they are in L2 while it does: ResNet's stem at batch 8 ran 12.5 ms
    with the batch's phases made first, 10.0 an image at a time), or (``geo[SHARED]``: fewer images than parts)
    which the preparation made once for every part (ResNet's 3x3 128 -> 128 s2 at 56x56, batch 1, 2 threads:
    each part making the image's phases cost ~100 us of 640). ROWS: a run of whole units of output channels
    (returns its flat range); TILES: a run of chunks of output rows, every channel (returns (0, 0)). The kernel
    reads row k of B at tap k's offset in its channel's phases (a table of the K offsets)."""
    n_all, m_all, c_all = geo[N], geo[M], geo[C]
    kh, kw, ho, wo = geo[KH], geo[KW], geo[HO], geo[WO]
    taps = kh * kw
    k = c_all * taps
    hq, wq, phases, _ = _phase_sizes(geo)
    table = np.empty(k, np.int64)
    for c in range(c_all):
        for t in range(taps):
            table[c * taps + t] = c * phases + _phase_offset(t // kw, t % kw, geo[SW], geo[SH], geo[DH], geo[DW],
                                                              hq, wq)
    rows_each = max(1, _phase_rows(geo))
    shared = geo[SHARED] != 0
    image = c_all * phases
    # this part's phases (unless shared), then its chunk of output rows
    base = _phase_shared(geo) + p * _phase_region(geo)
    scratch = base + (0 if shared else -(-image // SLOT) * SLOT)
    have = -1                                                # the image whose phases the scratch holds
    if geo[MODE] == TILES:
        chunks = (ho + rows_each - 1) // rows_each
        units = n_all * chunks
        for u in range(units * p // nparts, units * (p + 1) // nparts):
            n, r0 = u // chunks, (u % chunks) * rows_each
            if shared:
                base = n * image
            elif n != have:
                _image_phases(x, geo, col, base, n)
                have = n
            _phase_block(w, bias, geo, acc, col, table, base, scratch, n, 0, m_all, r0, min(ho, r0 + rows_each))
        return 0, 0
    runs, lo, hi = _channel_runs(n_all, m_all, panel.TILE, p, nparts)
    for r in range(runs.shape[0]):
        n = runs[r, 0]
        if shared:
            base = n * image
        elif n != have:
            _image_phases(x, geo, col, base, n)
            have = n
        _phase_block(w, bias, geo, acc, col, table, base, scratch, n, runs[r, 1], runs[r, 2], 0, ho)
    return lo * ho * wo, hi * ho * wo


@njit(cache=True, nogil=True, inline="always")
def _phase_region(geo):
    """Elements of a LANES_PHASES part's scratch: an image's phases (unless ``geo[SHARED]``), then a chunk of
    output rows."""
    _, wq, phases, _ = _phase_sizes(geo)
    chunk = geo[M] * _phase_rows(geo) * wq
    own = 0 if geo[SHARED] else -(-(geo[C] * phases) // SLOT) * SLOT
    return own + -(-chunk // SLOT) * SLOT


@njit(cache=True, nogil=True, inline="always")
def _phase_shared(geo):
    """Elements of the batch's phases that a LANES_PHASES conv with ``geo[SHARED]`` makes once (before the parts'
    scratch), else 0."""
    return -(-(geo[N] * geo[C] * _phase_sizes(geo)[2]) // SLOT) * SLOT if geo[SHARED] else 0


@njit(cache=True, nogil=True)
def _image_phases(x, geo, col, base, n):
    """Image ``n``'s planes split into their stride phases (``_into_phases``, the padding zeros) at ``col[base:]``."""
    phases = _phase_sizes(geo)[2]
    for c in range(geo[C]):
        _plane_phases(x, geo, col, base + c * phases, n, c)


@njit(cache=True, nogil=True, inline="always")
def _plane_phases(x, geo, col, at, n, c):
    """Plane (n, c) split into its stride phases (the padding zeros) at ``col[at:]``."""
    h, width = geo[H], geo[W]
    hq, wq, phases, _ = _phase_sizes(geo)
    ph = col[at:at + phases]
    for j in range(phases):
        ph[j] = 0.0
    _into_phases(x.reshape(x.size), (n * geo[C] + c) * h * width, h, width, ph, geo[SH], geo[SW], geo[PT], geo[PL],
                 hq, wq)


@njit(cache=True, nogil=True, inline="always")
def _phase_block(w, bias, geo, acc, col, table, base, scratch, n, m0, m1, r0, r1):
    """Output channels [m0, m1) of image ``n``, output rows [r0, r1), from its phases at ``col[base:]``: a kernel
    call a row, straight into the output, or (``_phase_rows``) a chunk of rows at a time into the scratch at
    ``col[scratch:]``, ``wq`` wide, then copied out without their extra columns."""
    m_all, c_all, ho, wo = geo[M], geo[C], geo[HO], geo[WO]
    hw = ho * wo
    k = c_all * geo[KH] * geo[KW]
    _, wq, phases, _ = _phase_sizes(geo)
    item = 4
    mode = BIAS_NONE if bias.shape[0] == 0 else BIAS_ROWS
    clamp = _clamp_at(geo)
    if clamp:
        mode |= panel.CLAMP
    planes = col.ctypes.data + base * item
    weights = w.ctypes.data + m0 * k * item
    out = (n * m_all + m0) * hw
    chunked = _phase_rows(geo)
    rows_each = max(1, chunked)
    af = acc.reshape(acc.size)
    for a in range(r0, r1, rows_each):
        b = min(r1, a + rows_each)
        if chunked == 0:   # one output row, straight into the output
            at = acc.ctypes.data + (out + a * wo) * item
            panel_strided(planes + a * wq * item, 0, panel.PANEL, weights, k, 1, at, hw, 1, m1 - m0, k, wo,
                          bias.ctypes.data + m0 * item, mode, clamp, table.ctypes.data)
        else:   # rows [a, b) wq wide into the scratch, then their first wo columns into the output
            cols = (b - a) * wq
            panel_strided(planes + a * wq * item, 0, panel.PANEL, weights, k, 1, col.ctypes.data + scratch * item,
                          cols, 1, m1 - m0, k, cols, bias.ctypes.data + m0 * item, mode, clamp, table.ctypes.data)
            for m in range(m1 - m0):
                _copy_rows(col[scratch + m * cols:], af, out + m * hw + a * wo, b - a, wo, wq)


@njit(cache=True, nogil=True)
def part_panel(x, w, bias, geo, acc, col, p, nparts):
    """Part ``p`` of ``nparts`` of a PANEL conv: per image, out[M, HW] = W[M, K] @ X[K, HW] (X the input itself
    for a pointwise conv, else the im2col matrix ``prepare_panel`` gathered) through ``panel_strided``, the
    kernel's accumulators starting from the bias. ROWS: a run of whole units of output channels (returns its
    flat range); TILES: a run of output positions of every channel (returns (0, 0): strided)."""
    if geo[KIND] == LANES_PHASES:
        return _panel_phases(x, w, bias, geo, acc, col, p, nparts)
    n_all, m_all = geo[N], geo[M]
    hw = geo[HO] * geo[WO]
    k = geo[C] * geo[KH] * geo[KW]
    item = 4
    src = x.ctypes.data if col.shape[0] <= 1 else col.ctypes.data
    image_in = (geo[C] * geo[H] * geo[W] if col.shape[0] <= 1 else k * hw) * item
    out = acc.ctypes.data
    channels = geo[KIND] == LANES_CHANNELS
    runs = geo[RUNS] != 0   # A (positions x taps) row-major, else the [K, HW] matrix read transposed
    lda, a_k = (k, 1) if runs else (1, hw)
    # the bias is where the kernel's accumulators start: a column's (channels in lanes) or a row's
    mode = BIAS_NONE if bias.shape[0] == 0 else BIAS_COLUMNS if channels else BIAS_ROWS
    clamp = _clamp_at(geo)
    if clamp:
        mode |= panel.CLAMP
    if geo[ACCUMULATE] and not channels:
        mode |= panel.ACCUMULATE
    if geo[MODE] == TILES:   # positions [i0, i1) of each image: whole tiles of rows, or whole panels
        step = panel.TILE if channels else panel.PANEL
        tiles = (hw + step - 1) // step
        t0, t1 = n_all * tiles * p // nparts, n_all * tiles * (p + 1) // nparts
        t = t0
        while t < t1:
            n = t // tiles
            stop = min(t1, (n + 1) * tiles)
            i0, i1 = (t - n * tiles) * step, min(hw, (stop - n * tiles) * step)
            image, at = src + n * image_in + i0 * (k if runs else 1) * item, out + (n * m_all * hw + i0) * item
            if channels:
                panel_strided(w.ctypes.data, panel.PANEL, k * panel.PANEL, image, lda, a_k, at, 1, hw, i1 - i0, k,
                             m_all, bias.ctypes.data, mode, clamp)
            else:
                panel_strided(image, hw, panel.PANEL, w.ctypes.data, k, 1, at, hw, 1, m_all, k, i1 - i0,
                             bias.ctypes.data, mode, clamp)
            t = stop
        return 0, 0
    runs, lo, hi = _channel_runs(n_all, m_all, panel.PANEL if channels else panel.TILE, p, nparts)
    for r in range(runs.shape[0]):
        n, m0, m1 = runs[r, 0], runs[r, 1], runs[r, 2]
        image = src + n * image_in
        at = out + (n * m_all + m0) * hw * item
        if channels:
            panel_strided(w.ctypes.data + m0 * k * item, panel.PANEL, k * panel.PANEL, image, lda, a_k, at, 1, hw,
                         hw, k, m1 - m0, bias.ctypes.data + m0 * item, mode, clamp)
        else:
            panel_strided(image, hw, panel.PANEL, w.ctypes.data + m0 * k * item, k, 1, at, hw, 1, m1 - m0, k, hw,
                         bias.ctypes.data + m0 * item, mode, clamp)
    return lo * hw, hi * hw


@njit(cache=True, nogil=True)
def part_winograd(x, w, bias, geo, acc, col, p, nparts):
    """Part ``p`` of ``nparts`` of a WINOGRAD conv in its mode: a run of the batch's tile rows in chunks of
    ``geo[TILE]`` rows (TILES; returns (0, 0): every channel's rows, strided), or a run of (image, output
    channel) rows from the shared input transform (ROWS: for few tiles, where splitting them would leave each
    part's products too narrow)."""
    n_all, m_all, c_all = geo[N], geo[M], geo[C]
    mt = geo[WT]
    nb, neo = _blocks(mt), _wino_eo(mt)
    th, tw = _tiles(geo[HO], mt), _tiles(geo[WO], mt)
    tiles_mode = geo[MODE] == TILES
    if tiles_mode:   # runs of the batch's tile rows, in chunks of geo[TILE] rows, in this part's own scratch
        rows = n_all * th
        r0, r1 = rows * p // nparts, rows * (p + 1) // nparts
        buf = col[p * (col.shape[0] // nparts):]
        si = so = oo = eo_at = 0
        per_image = 0
    else:            # runs of (image, output channel) rows from the shared input transform
        rows = n_all * m_all
        r0, r1 = rows * p // nparts, rows * (p + 1) // nparts
        buf = col
        si, q_size, so, per_image = _winograd_rows_layout(geo, nparts)
        oo = nb * si + nparts * q_size + p * (nb * so + neo * per_image)
        eo_at = oo + nb * so
    # one call site per transform (each linked copy costs LLVM seconds in every module that links this one)
    r = r0
    while r < r1:
        if tiles_mode:   # a chunk: input transform into nb blocks [C, slots], nb products, output transform
            stop = min(r1, r + geo[TILE])
            g0, g1, m0, m1 = r, stop, 0, m_all
            cols = (stop - r) * (tw + 1)
            si, so = c_all * cols + WINO_PAD, m_all * cols + WINO_PAD
            b_at, ldb, oo, ldc = 0, cols, nb * si, cols
            eo_at = oo + nb * so   # the input transform's rows, free again by the output transform
        else:
            n = r // m_all
            stop = min(r1, (n + 1) * m_all)
            g0, g1, m0, m1 = n * th, (n + 1) * th, r - n * m_all, stop - n * m_all
            cols = per_image
            b_at, ldb, ldc = n * per_image, n_all * per_image, per_image
        if tiles_mode:
            _winograd_input(x, geo, buf, 0, si, cols, g0, g1, g0, buf[eo_at:eo_at + _winograd_q(mt, g1 - g0, tw)])
        for k in range(nb):
            _product(m1 - m0, cols, c_all, w, (k * m_all + m0) * c_all, c_all, buf, b_at + k * si, ldb, buf,
                     oo + k * so, ldc, geo[KIND] == PRODUCTS_PANEL)
        _winograd_output(acc, bias, geo, buf, oo, so, ldc, g0, g1, g0, m0, m1, buf[eo_at:eo_at + neo * cols])
        r = stop
    if tiles_mode:
        return 0, 0
    hw = geo[HO] * geo[WO]
    return r0 * hw, r1 * hw


# ---------------------------------------------------------------------------- entries (called by address)
@njit(cache=True, nogil=True, inline="always")
def _arrays(xp, wp, wn, bp, bn, gp, cp, cn):
    """The conv inputs an entry gets as addresses (``tlc.kernels.entries``), rebuilt from the geometry."""
    geo = carray(gp, (GEO_SIZE,))
    x = carray(xp, (geo[N], geo[C], geo[H], geo[W]))
    return x, carray(wp, (wn,)), carray(bp, (bn,)), geo, carray(cp, (cn,))


@njit(cache=True, nogil=True, inline="always")
def _output(ap, geo):
    return carray(ap, (geo[N], geo[M], geo[HO], geo[WO]))


@njit(cache=True, nogil=True, inline="always")
def _results(rp, lo, hi):
    r = carray(rp, (2,))
    r[0] = lo
    r[1] = hi


def _entry_gemm(xp, xn, wp, wn, bp, bn, gp, gn, ap, an, cp, cn, p, nparts, rp):
    x, w, bias, geo, col = _arrays(xp, wp, wn, bp, bn, gp, cp, cn)
    lo, hi = part_gemm(x, w, bias, geo, _output(ap, geo), col, p, nparts)
    _results(rp, lo, hi)


def _entry_direct(xp, xn, wp, wn, bp, bn, gp, gn, ap, an, cp, cn, p, nparts, rp):
    x, w, bias, geo, col = _arrays(xp, wp, wn, bp, bn, gp, cp, cn)
    lo, hi = part_direct(x, w, bias, geo, _output(ap, geo), col, p, nparts)
    _results(rp, lo, hi)


def _entry_depthwise(xp, xn, wp, wn, bp, bn, gp, gn, ap, an, cp, cn, p, nparts, rp):
    x, w, bias, geo, col = _arrays(xp, wp, wn, bp, bn, gp, cp, cn)
    lo, hi = part_depthwise(x, w, bias, geo, _output(ap, geo), col, p, nparts)
    _results(rp, lo, hi)


def _entry_winograd(xp, xn, wp, wn, bp, bn, gp, gn, ap, an, cp, cn, p, nparts, rp):
    x, w, bias, geo, col = _arrays(xp, wp, wn, bp, bn, gp, cp, cn)
    lo, hi = part_winograd(x, w, bias, geo, _output(ap, geo), col, p, nparts)
    _results(rp, lo, hi)


def _entry_panel(xp, xn, wp, wn, bp, bn, gp, gn, ap, an, cp, cn, p, nparts, rp):
    x, w, bias, geo, col = _arrays(xp, wp, wn, bp, bn, gp, cp, cn)
    lo, hi = part_panel(x, w, bias, geo, _output(ap, geo), col, p, nparts)
    _results(rp, lo, hi)


def _entry_prepare_panel(xp, xn, wp, wn, bp, bn, gp, gn, cp, cn, p, nprep, rp):
    x, w, bias, geo, col = _arrays(xp, wp, wn, bp, bn, gp, cp, cn)
    prepare_panel(x, w, bias, geo, col, p, nprep)


def _entry_prepare_gemm(xp, xn, wp, wn, bp, bn, gp, gn, cp, cn, p, nprep, rp):
    x, w, bias, geo, col = _arrays(xp, wp, wn, bp, bn, gp, cp, cn)
    prepare_gemm(x, w, bias, geo, col, p, nprep)


def _entry_prepare_winograd(xp, xn, wp, wn, bp, bn, gp, gn, cp, cn, p, nprep, rp):
    x, w, bias, geo, col = _arrays(xp, wp, wn, bp, bn, gp, cp, cn)
    prepare_winograd(x, w, bias, geo, col, p, nprep)


def _entry_wino_in2(xp, xn, gp, gn, sp, sn, vo, si, tiles, g0, g1, gbase, qp, qn, rp):
    geo = carray(gp, (GEO_SIZE,))
    _winograd_input2(carray(xp, (geo[N], geo[C], geo[H], geo[W])), geo, carray(sp, (sn,)), vo, si, tiles, g0, g1,
                     gbase, carray(qp, (qn,)))


def _entry_wino_in4(xp, xn, gp, gn, sp, sn, vo, si, tiles, g0, g1, gbase, qp, qn, rp):
    geo = carray(gp, (GEO_SIZE,))
    _winograd_input4(carray(xp, (geo[N], geo[C], geo[H], geo[W])), geo, carray(sp, (sn,)), vo, si, tiles, g0, g1,
                     gbase, carray(qp, (qn,)))


def _entry_wino_out2(ap, an, bp, bn, gp, gn, sp, sn, oo, so, tiles, g0, g1, gbase, m0, m1, ep, en, rp):
    geo = carray(gp, (GEO_SIZE,))
    _winograd_output2(_output(ap, geo), carray(bp, (bn,)), geo, carray(sp, (sn,)), oo, so, tiles, g0, g1, gbase,
                      m0, m1, carray(ep, (en,)))


def _entry_wino_out4(ap, an, bp, bn, gp, gn, sp, sn, oo, so, tiles, g0, g1, gbase, m0, m1, ep, en, rp):
    geo = carray(gp, (GEO_SIZE,))
    _winograd_output4(_output(ap, geo), carray(bp, (bn,)), geo, carray(sp, (sn,)), oo, so, tiles, g0, g1, gbase,
                      m0, m1, carray(ep, (en,)))


#: the Winograd transforms, called by address from the Winograd part and preparation (``_winograd_input``)
WINO_ENTRIES = (Entry("wino_in2", _entry_wino_in2, "rgriiiiiir"), Entry("wino_in4", _entry_wino_in4, "rgriiiiiir"),
                Entry("wino_out2", _entry_wino_out2, "rrgriiiiiiiir"),
                Entry("wino_out4", _entry_wino_out4, "rrgriiiiiiiir"))

_PART_KINDS = "rrrgrrii"      # x, w, bias, geo, acc, col, p, nparts
_PREPARE_KINDS = "rrrgrii"    # x, w, bias, geo, col, p, nprep

#: each algorithm's part and (ROWS mode) preparation as entries: compiled once per dtype and called by address,
#: so a parallel driver or an epilogue module that runs a part does not link (and re-optimize) its code
PART_ENTRIES = {GEMM: Entry("conv_gemm", _entry_gemm, _PART_KINDS),
                DIRECT: Entry("conv_direct", _entry_direct, _PART_KINDS),
                DEPTHWISE: Entry("conv_depthwise", _entry_depthwise, _PART_KINDS),
                WINOGRAD: Entry("conv_winograd", _entry_winograd, _PART_KINDS),
                PANEL: Entry("conv_panel", _entry_panel, _PART_KINDS)}
PREPARE_ENTRIES = {GEMM: Entry("conv_prepare_gemm", _entry_prepare_gemm, _PREPARE_KINDS),
                   WINOGRAD: Entry("conv_prepare_winograd", _entry_prepare_winograd, _PREPARE_KINDS),
                   PANEL: Entry("conv_prepare_panel", _entry_prepare_panel, _PREPARE_KINDS)}


def ensure_entries(geo: np.ndarray, dtype) -> None:
    """Compile (or load) the entries of ``geo``'s algorithm for ``dtype`` (numpy's or Numba's): before any module
    that calls them (``call_*``, the parallel drivers, epilogue modules) is compiled or loaded."""
    algo = int(geo[ALGO])
    if algo == WINOGRAD:
        for entry in WINO_ENTRIES:
            entries.ensure(entry, dtype)
    entries.ensure(PART_ENTRIES[algo], dtype)
    if algo in PREPARE_ENTRIES:
        entries.ensure(PREPARE_ENTRIES[algo], dtype)


@njit(cache=True, nogil=True)
def call_gemm(x, w, bias, geo, acc, col, p, nparts):
    return entries.call("conv_gemm", (x, w, bias, geo, acc, col, p, nparts))


@njit(cache=True, nogil=True)
def call_direct(x, w, bias, geo, acc, col, p, nparts):
    return entries.call("conv_direct", (x, w, bias, geo, acc, col, p, nparts))


@njit(cache=True, nogil=True)
def call_depthwise(x, w, bias, geo, acc, col, p, nparts):
    return entries.call("conv_depthwise", (x, w, bias, geo, acc, col, p, nparts))


@njit(cache=True, nogil=True)
def call_winograd(x, w, bias, geo, acc, col, p, nparts):
    return entries.call("conv_winograd", (x, w, bias, geo, acc, col, p, nparts))


@njit(cache=True, nogil=True)
def call_panel(x, w, bias, geo, acc, col, p, nparts):
    return entries.call("conv_panel", (x, w, bias, geo, acc, col, p, nparts))


@njit(cache=True, nogil=True)
def call_prepare_panel(x, w, bias, geo, col, p, nprep):
    entries.call("conv_prepare_panel", (x, w, bias, geo, col, p, nprep))


@njit(cache=True, nogil=True)
def call_prepare_gemm(x, w, bias, geo, col, p, nprep):
    entries.call("conv_prepare_gemm", (x, w, bias, geo, col, p, nprep))


@njit(cache=True, nogil=True)
def call_prepare_winograd(x, w, bias, geo, col, p, nprep):
    entries.call("conv_prepare_winograd", (x, w, bias, geo, col, p, nprep))


#: the part function of each algorithm, as compiled code calls it (by address: ``call_*``)
PART_FUNCTIONS = {GEMM: "call_gemm", DIRECT: "call_direct", DEPTHWISE: "call_depthwise",
                  WINOGRAD: "call_winograd", PANEL: "call_panel"}


#: the preparation each algorithm's ROWS mode runs on every part before any part (im2col, Winograd's input
#: transform)
PREPARE_FUNCTIONS = {GEMM: "call_prepare_gemm", WINOGRAD: "call_prepare_winograd", PANEL: "call_prepare_panel"}


def prepare_function(geo: np.ndarray):
    """The algorithm's preparation, or None (the algorithm has none)."""
    name = PREPARE_FUNCTIONS.get(int(geo[ALGO]))
    return None if name is None else globals()[name]


def part_function(geo: np.ndarray):
    return globals()[PART_FUNCTIONS[int(geo[ALGO])]]


def conv_prepare(x, w, bias, geo, col, p: int, nprep: int) -> None:
    """Part ``p`` of ``nprep`` of the algorithm's preparation (nothing where it has none)."""
    fn = prepare_function(geo)
    if fn is not None:
        ensure_entries(geo, x.dtype)
        fn(x, w, bias, geo, col, p, nprep)


def conv_part(x, w, bias, geo, acc, col, p: int, nparts: int) -> tuple[int, int]:
    """Part ``p`` of ``nparts`` of the convolution into ``acc`` (bias included); returns the flat range written
    ((0, 0) for strided column tiles: see ``deferred``)."""
    ensure_entries(geo, x.dtype)
    return part_function(geo)(x, w, bias, geo, acc, col, p, nparts)


@njit(cache=True, nogil=True, parallel=True)
def _prepare_gemm_parallel(x, w, bias, geo, col, nprep):
    for p in prange(nprep):
        call_prepare_gemm(x, w, bias, geo, col, np.int64(p), nprep)


@njit(cache=True, nogil=True, parallel=True)
def _prepare_winograd_parallel(x, w, bias, geo, col, nprep):
    for p in prange(nprep):
        call_prepare_winograd(x, w, bias, geo, col, np.int64(p), nprep)


@njit(cache=True, nogil=True, parallel=True)
def _prepare_panel_parallel(x, w, bias, geo, col, nprep):
    for p in prange(nprep):
        call_prepare_panel(x, w, bias, geo, col, np.int64(p), nprep)


def parallel_prepare(geo: np.ndarray):
    """The parallel driver of the algorithm's preparation, or None."""
    return {GEMM: _prepare_gemm_parallel, WINOGRAD: _prepare_winograd_parallel,
            PANEL: _prepare_panel_parallel}.get(int(geo[ALGO]))


@njit(cache=True, nogil=True, parallel=True)
def _gemm_parallel(x, w, bias, geo, out, col, nparts):
    for p in prange(nparts):
        call_gemm(x, w, bias, geo, out, col, np.int64(p), nparts)


@njit(cache=True, nogil=True, parallel=True)
def _direct_parallel(x, w, bias, geo, out, col, nparts):
    for p in prange(nparts):
        call_direct(x, w, bias, geo, out, col, np.int64(p), nparts)


@njit(cache=True, nogil=True, parallel=True)
def _depthwise_parallel(x, w, bias, geo, out, col, nparts):
    for p in prange(nparts):
        call_depthwise(x, w, bias, geo, out, col, np.int64(p), nparts)


@njit(cache=True, nogil=True, parallel=True)
def _winograd_parallel(x, w, bias, geo, out, col, nparts):
    for p in prange(nparts):
        call_winograd(x, w, bias, geo, out, col, np.int64(p), nparts)


@njit(cache=True, nogil=True, parallel=True)
def _panel_parallel(x, w, bias, geo, out, col, nparts):
    for p in prange(nparts):
        call_panel(x, w, bias, geo, out, col, np.int64(p), nparts)


#: each algorithm's parallel driver (the entry a part calls is named in the code: one driver per algorithm)
PARALLEL_DRIVERS = {GEMM: "_gemm_parallel", DIRECT: "_direct_parallel", DEPTHWISE: "_depthwise_parallel",
                    WINOGRAD: "_winograd_parallel", PANEL: "_panel_parallel"}


def parallel_driver(geo: np.ndarray):
    return globals()[PARALLEL_DRIVERS[int(geo[ALGO])]]


def run_calls(geo: np.ndarray, parallel: bool, nparts: int, nprep: int) -> list[tuple]:
    """The compiled calls that run a whole convolution, in order: (function, whether it takes the output, its
    trailing arguments). Each takes (x, w, bias, geo) then (out,) col: the preparation's parts, then the parts,
    on Numba's pool (``parallel``: each a parallel driver) or in turn on the calling thread."""
    if parallel:
        calls = [(parallel_prepare(geo), False, (nprep,))] if nprep else []
        return calls + [(parallel_driver(geo), True, (nparts,))]
    return [(prepare_function(geo), False, (p, nprep)) for p in range(nprep)] + \
        [(part_function(geo), True, (p, nparts)) for p in range(nparts)]


def _run(x, w, bias, geo, out, col, nparts, nprep, parallel: bool) -> None:
    ensure_entries(geo, x.dtype)
    for fn, with_out, tail in run_calls(geo, parallel, nparts, nprep):
        fn(x, w, bias, geo, *((out, col) if with_out else (col,)), *tail)


def conv_run_parallel(x, w, bias, geo, out, col, nparts, nprep):
    """Every part on Numba's pool."""
    _run(x, w, bias, geo, out, col, nparts, nprep, True)


def conv_run_serial(x, w, bias, geo, out, col, nparts, nprep):
    """Every part on the calling thread."""
    _run(x, w, bias, geo, out, col, nparts, nprep, False)


def conv_run(x, w, bias, geo, out, col, nparts: int, nprep: int) -> None:
    """The whole convolution into ``out`` (see the module docstring), on Numba's pool when ``nparts > 1``."""
    (conv_run_parallel if nparts > 1 else conv_run_serial)(x, w, bias, geo, out, col, nparts, nprep)


# ---------------------------------------------------------------------------- pooling
def pool_geometry(x_shape, kernel, out_shape, strides, pads_begin, dilations, kind: int) -> np.ndarray:
    n, c, h, w = x_shape
    geo = np.zeros(GEO_SIZE, np.int64)
    geo[:LAYOUT] = (n, c, h, w, c, kernel[0], kernel[1], out_shape[2], out_shape[3], c, strides[0], strides[1],
                    dilations[0], dilations[1], pads_begin[0], pads_begin[1])
    geo[KIND] = kind
    return geo


def use_vector_pool(geo: np.ndarray, dtype) -> bool:
    """Run a pool on ``tlc.kernels.panel``'s vector kernel where it takes it (a 3x3 max pool, padding 1 at the
    start, stride 1 or 2, no dilation, float32, a host that runs it fast); sets ``geo[ALGO]``. ResNet's 3x3 s2
    max pool over 64 planes of 112x112, one Zen 5 core: 158 -> ~60 us (onnxruntime 90 in the model)."""
    vector = geo[KIND] == MAX and _vector_window(geo, dtype)
    geo[ALGO] = POOL_VECTORS if vector else POOL_PHASES
    return vector


def pool_scratch(geo: np.ndarray, nparts: int) -> int:
    """Scratch elements ``pool_run`` needs with ``nparts`` parts: per part, a plane's stride phases and the
    output rows."""
    return nparts * _slot(_phase_scratch(geo))


@njit(cache=True, nogil=True)
def pool_planes(x, geo, divisor, out, scratch, q0, q1):
    """Planes [q0, q1) of the flattened (image, channel) output of a max or average pool (float), on the stride
    phases of each padded plane (``_into_phases``): the window reduction is one vector loop per tap over the
    whole output ``wq`` wide, then the output rows are copied out. Max starts from the first tap in window order
    and compares strictly, pads counting as -inf, exactly as the reference and onnxruntime (a NaN counts only
    as a window's first tap); average sums with zero pads and divides by ``divisor`` [HO, WO]
    (``lib_pool.avg_divisor``: ONNX's rules for ``count_include_pad``)."""
    kh, kw, ho, wo = geo[KH], geo[KW], geo[HO], geo[WO]
    sh, sw, dh, dw, pt, pl = geo[SH], geo[SW], geo[DH], geo[DW], geo[PT], geo[PL]
    is_max = geo[KIND] == MAX
    hq, wq, phases, size = _phase_sizes(geo)
    h, width = geo[H], geo[W]
    xf = x.reshape(x.size)
    of = out.reshape(out.size)
    if (is_max and kh == 2 and kw == 2 and sh == 2 and sw == 2 and dh == 1 and dw == 1 and pt == 0 and pl == 0
            and 2 * ho <= h and 2 * wo <= width):
        _max_2x2(xf, of, h, width, ho, wo, q0, q1)
        return
    if geo[ALGO] == POOL_VECTORS:
        max_pool_3x3(x.ctypes.data + q0 * h * width * 4, out.ctypes.data + q0 * ho * wo * 4, q1 - q0, h, width, ho,
                     wo, sh)
        return
    df = divisor.reshape(divisor.size)
    if ho * wo <= POOL_WINDOW_OUTPUTS:
        _pool_windows(xf, of, df, geo, q0, q1)
        return
    ph = scratch[:phases]
    full = scratch[phases:phases + size]
    fill = x.dtype.type(-np.inf) if is_max else x.dtype.type(0)
    for j in range(phases):
        ph[j] = fill
    taps = kh * kw
    # a 3x3 window in one pass over a slice per tap (as ``_depthwise_flat``)
    a0, a1, a2, a3, a4, a5, a6, a7, a8 = _tap_slices(ph, 0, taps, kw, sw, sh, dh, dw, hq, wq)
    for q in range(q0, q1):
        _into_phases(xf, q * h * width, h, width, ph, sh, sw, pt, pl, hq, wq)
        if taps == TAPS_PER_PASS and is_max:
            for j in range(size):
                m = _later(_later(_later(_later(a0[j], a1[j]), a2[j]), a3[j]), a4[j])
                full[j] = _later(_later(_later(_later(m, a5[j]), a6[j]), a7[j]), a8[j])
        elif taps == TAPS_PER_PASS:
            for j in range(size):
                full[j] = a0[j] + a1[j] + a2[j] + a3[j] + a4[j] + a5[j] + a6[j] + a7[j] + a8[j]
        else:
            for j in range(size):
                full[j] = ph[j]
        for ki in range(kh if taps != TAPS_PER_PASS else 0):
            for kj in range(kw):
                if ki == 0 and kj == 0:
                    continue
                tap = ph[_phase_offset(ki, kj, sw, sh, dh, dw, hq, wq):]
                if is_max:
                    for j in range(size):
                        v = tap[j]
                        m = full[j]
                        full[j] = v if v > m else m
                else:
                    for j in range(size):
                        full[j] += tap[j]
        if is_max:
            _copy_rows(full, of, q * ho * wo, ho, wo, wq)
        else:
            for oh in range(ho):
                row, dst = oh * wq, (q * ho + oh) * wo
                for j in range(wo):
                    of[np.uint64(dst + j)] = full[np.uint64(row + j)] / df[np.uint64(oh * wo + j)]


@njit(cache=True, nogil=True)
def _pool_windows(xf, of, df, geo, q0, q1):
    """Planes [q0, q1) of a pool with few outputs a plane (``POOL_WINDOW_OUTPUTS``), each output from its own
    window: its taps in window order, pads as -inf (max) or 0 (average), as ``pool_planes``'s passes take them
    (the same results to the bit). ResNet-50's last pool, 7x7 over 2048 planes of 7x7, took 820 us in the
    passes, 49 of them a plane over one output each."""
    kh, kw, ho, wo = geo[KH], geo[KW], geo[HO], geo[WO]
    sh, sw, dh, dw, pt, pl = geo[SH], geo[SW], geo[DH], geo[DW], geo[PT], geo[PL]
    h, width = geo[H], geo[W]
    is_max = geo[KIND] == MAX
    fill = xf.dtype.type(-np.inf) if is_max else xf.dtype.type(0)
    for q in range(q0, q1):
        x0 = q * h * width
        for oh in range(ho):
            for ow in range(wo):
                acc = fill
                for ki in range(kh):
                    ih = oh * sh - pt + ki * dh
                    for kj in range(kw):
                        iw = ow * sw - pl + kj * dw
                        v = xf[np.uint64(x0 + ih * width + iw)] if 0 <= ih < h and 0 <= iw < width else fill
                        if ki == 0 and kj == 0:
                            acc = v
                        elif is_max:
                            acc = _later(acc, v)
                        else:
                            acc += v
                at = np.uint64((q * ho + oh) * wo + ow)
                of[at] = acc if is_max else acc / df[np.uint64(oh * wo + ow)]


@njit(cache=True, nogil=True)
def _max_2x2(xf, of, h, width, ho, wo, q0, q1):
    """Planes [q0, q1) of a 2x2 stride-2 max pool whose windows all lie inside the plane (UNet's, VGG's): each
    output from its four inputs in window order, read in place (the phase copy and the tap passes of
    ``pool_planes`` took three passes over the plane: one such pool of 8 x 32 x 64x64 alone 197 -> 65 us)."""
    for q in range(q0, q1):
        x0, o0 = q * h * width, q * ho * wo
        for i in range(ho):
            r0 = x0 + 2 * i * width
            r1, o = r0 + width, o0 + i * wo
            for j in range(wo):
                m = _later(xf[np.uint64(r0 + 2 * j)], xf[np.uint64(r0 + 2 * j + 1)])
                m = _later(m, xf[np.uint64(r1 + 2 * j)])
                of[np.uint64(o + j)] = _later(m, xf[np.uint64(r1 + 2 * j + 1)])


@njit(cache=True, nogil=True, inline="always")
def _later(m, v):
    """A window's running max after its next tap ``v``: strictly greater only, as the reference (a NaN counts
    only as the first tap)."""
    return v if v > m else m


def _entry_pool(xp, xn, gp, gn, dp, dn, op, on, sp, sn, q0, q1, rp):
    geo = carray(gp, (GEO_SIZE,))
    x = carray(xp, (geo[N], geo[C], geo[H], geo[W]))
    rows = geo[HO] if dn == geo[HO] * geo[WO] else 1   # an average's divisor [HO, WO]; max: a [1, 1] stand-in
    pool_planes(x, geo, carray(dp, (rows, dn // rows)), carray(op, (geo[N], geo[C], geo[HO], geo[WO])),
                carray(sp, (sn,)), q0, q1)


#: ``pool_planes`` as an entry (called by address: the serial and parallel callers do not each link it)
POOL_ENTRY = Entry("pool_planes", _entry_pool, "rgrrrii")


@njit(cache=True, nogil=True)
def call_pool(x, geo, divisor, out, scratch, q0, q1):
    entries.call("pool_planes", (x, geo, divisor, out, scratch, q0, q1))


@njit(cache=True, nogil=True, parallel=True)
def _pool_parallel(x, geo, divisor, out, scratch, nparts):
    planes = geo[N] * geo[C]
    per = scratch.shape[0] // nparts
    for p in prange(nparts):
        call_pool(x, geo, divisor, out, scratch[p * per:(p + 1) * per], planes * p // nparts,
                  planes * (p + 1) // nparts)


def pool_run(x, geo, divisor, out, scratch, nparts: int) -> None:
    """The whole pooling into ``out``; ``scratch`` has ``pool_scratch(geo, nparts)`` elements. Every array
    C-contiguous (the planes are an entry, ``tlc.kernels.entries``)."""
    entries.ensure(POOL_ENTRY, x.dtype)
    if nparts > 1:
        _pool_parallel(x, geo, divisor, out, scratch, nparts)
    else:
        call_pool(x, geo, divisor, out, scratch, 0, int(geo[N] * geo[C]))
