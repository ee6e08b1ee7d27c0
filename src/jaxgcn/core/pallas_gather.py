"""A Pallas TPU kernel for the neighbour-list row sum ``out[i] = Σ_k weights[i, k] · x[cols[i, k]]``.

XLA's gather on a TPU costs per row gathered (~5-9 ns a row whatever its width), and the TPU core
has no general vector gather. This kernel keeps the whole table ``x`` in VMEM and reads each
neighbour's row with one scalar-addressed load, its column index and weight read from SMEM, and
sums in float32 registers. It has the signature of the XLA formulation
``jnp.sum(x[cols] * weights[..., None], axis=1)`` (:func:`jaxgcn.core.gather.row_sum`), so a propagation backend can
call either.

Layout: VMEM pads an array's last dimension to 128 lanes, so a ``[n, 16]`` float32 table would
cost ``n · 512`` bytes. The wrapper packs ``128 // F`` consecutive rows into one 128-lane row
(a free reshape of the row-major table), so 1M × 16 float32 takes 64 MB of VMEM instead of 512 MB.
A row load fetches its packed row; a lane mask keeps the row's own ``F`` lanes, and the ``pack``
lane groups of each output row are added outside the kernel. With ``dtype=jnp.bfloat16`` the table
is stored as bfloat16 (pairs of columns in one 32-bit word, so the row loads stay 32-bit) and the
sums stay float32: half the VMEM, for the accuracy of bfloat16 features.

Off the TPU the kernel runs interpreted (``interpret=None`` picks it), so CI tests it on the CPU.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp

LANES = 128  # a VMEM row's lanes; the last dimension pads to a multiple of this
SUBLANES = 8  # the second-to-last dimension pads to a multiple of this (32-bit words)
VMEM_BYTES = 128 * 2**20  # one TPU v5e core's VMEM (jax/_src/tpu_info.py)
# What the kernel needs in VMEM besides the table: the double-buffered output blocks and Mosaic's
# own scratch. A generous round number, so that `fits` errs on the side of refusing.
VMEM_RESERVE = 8 * 2**20
INTERLEAVE = 8  # output rows summed at once (a block's rows are a multiple of it)
UNROLL = 2  # neighbour slots per loop step
SMEM_TILE = 1024  # a rank-1 block's length must be a multiple of this (Pallas TPU lowering)
SMEM_BLOCK_WORDS = 2048  # entries of one block's cols (and weights) in SMEM, aimed at
SMEM_BLOCK_MAX = 16384  # and at most: cols and weights, double-buffered, take 256 KiB of the 1 MiB
OUT_BLOCK_BYTES = 2**20  # one output block in VMEM (double-buffered, within VMEM_RESERVE)


def _words(f: int, dtype: jnp.dtype) -> int:
    """32-bit words a feature row takes: bfloat16 packs two columns in a word."""
    return -(-f // 2) if jnp.dtype(dtype) == jnp.bfloat16 else f


def _pack(words: int) -> int:
    """Table rows per 128-lane VMEM row: ``128 // words`` when that divides 128, else 1."""
    return LANES // words if words <= LANES and LANES % words == 0 else 1


def table_bytes(n: int, f: int, dtype: jnp.dtype = jnp.float32) -> int:
    """VMEM bytes of the packed ``[n, f]`` table: rows of ``pack`` table rows, the last dimension
    padded to 128 lanes and the row count to 8 sublanes, 4 bytes a word."""
    words = _words(f, dtype)
    pack = _pack(words)
    rows = -(-n // pack)
    lanes = pack * words
    return (-(-rows // SUBLANES) * SUBLANES) * (-(-lanes // LANES) * LANES) * 4


def fits(n: int, f: int, vmem_bytes: int = VMEM_BYTES, dtype: jnp.dtype = jnp.float32) -> bool:
    """Whether the kernel can hold an ``[n, f]`` table whole in ``vmem_bytes`` of VMEM: the packed,
    padded table (:func:`table_bytes`) plus :data:`VMEM_RESERVE` for the blocks and Mosaic's scratch.

    >>> fits(1_000_000, 16), fits(2_400_000, 16), fits(2_400_000, 16, dtype=jnp.bfloat16)
    (True, False, True)
    """
    return table_bytes(n, f, dtype) + VMEM_RESERVE <= vmem_bytes


def smem_step(k: int) -> int:
    """The rows a block of width-``k`` lists must be a multiple of: 8 (the kernel sums 8 rows at
    once), with ``rows · k`` a multiple of 1024 (Pallas TPU's rule for a rank-1 block)."""
    return math.lcm(INTERLEAVE, SMEM_TILE // math.gcd(k, SMEM_TILE))


def list_width(k: int) -> int:
    """The width the kernel pads lists of width ``k`` to (with weight-0 slots): ``k`` itself unless a
    block of it would not fit :data:`SMEM_BLOCK_MAX` words (an odd ``k`` needs 1024 rows)."""
    while smem_step(k) * k > SMEM_BLOCK_MAX:
        k += 1
    return k


def block_rows_for(k: int, out_lanes: int = LANES) -> int:
    """Output rows per grid step for lists of (padded) width ``k``: about :data:`SMEM_BLOCK_WORDS`
    list entries and an output block of at most :data:`OUT_BLOCK_BYTES`, a multiple of
    :func:`smem_step`."""
    step = smem_step(k)
    return max(step, min(SMEM_BLOCK_WORDS // k, OUT_BLOCK_BYTES // (4 * out_lanes)) // step * step)


def resolve_interpret(interpret: bool | None) -> bool:
    """``interpret=None`` means interpreted everywhere but on the TPU (Mosaic compiles only there)."""
    return jax.default_backend() != "tpu" if interpret is None else interpret


def _kernel(cols_ref, w_ref, x_ref, o_ref, *, k: int, pack: int, words: int, bf16: bool, unroll: int):
    """One block of output rows: for each row, ``k`` scalar-addressed row loads from the VMEM table
    summed in float32 registers. ``o_ref`` is ``[block, 128·c]`` (``c`` = 2 for bfloat16: the even
    and odd columns side by side); each row's ``pack`` lane groups are added outside.

    :data:`INTERLEAVE` rows are summed at once, each in its own accumulator: their loads are
    independent, so the core overlaps them instead of waiting on one row's chain of loads."""
    from jax.experimental import pallas as pl
    group = jax.lax.broadcasted_iota(jnp.int32, (1, x_ref.shape[1]), 1) // words
    sublane = jax.lax.broadcasted_iota(jnp.int32, (INTERLEAVE, o_ref.shape[1]), 0)
    shift = pack.bit_length() - 1  # pack is a power of two: row // pack, row % pack by bits

    def load(entry):
        col = cols_ref[entry]
        packed = x_ref[pl.ds(col >> shift, 1), :]
        if pack > 1:  # the other rows sharing this VMEM row must not add in: keep this row's lanes
            packed = jnp.where(group == (col & (pack - 1)), packed, jnp.zeros_like(packed))
        if bf16:  # a word holds columns (2c, 2c+1) as bfloat16: each shifted into a float32's high half
            even = jax.lax.bitcast_convert_type(packed << 16, jnp.float32)
            odd = jax.lax.bitcast_convert_type(packed & jnp.uint32(0xFFFF0000), jnp.float32)
            packed = jnp.concatenate([even, odd], axis=1)
        return w_ref[entry] * packed

    def rows(g, carry):
        first = g * INTERLEAVE

        def edge(j, accs):
            return tuple(acc + load((first + r) * k + j) for r, acc in enumerate(accs))

        zero = jnp.zeros((1, o_ref.shape[1]), jnp.float32)
        accs = jax.lax.fori_loop(0, k, edge, (zero,) * INTERLEAVE, unroll=unroll)
        # one aligned [8, lanes] store (Mosaic proves a dynamic sublane offset aligned from
        # multiple_of), the rows put in place by selects rather than 8 one-sublane stores
        tile = jnp.broadcast_to(accs[0], (INTERLEAVE, o_ref.shape[1]))
        for r, acc in enumerate(accs[1:], start=1):
            tile = jnp.where(sublane == r, acc, tile)
        o_ref[pl.ds(pl.multiple_of(first, INTERLEAVE), INTERLEAVE), :] = tile
        return carry

    jax.lax.fori_loop(0, o_ref.shape[0] // INTERLEAVE, rows, 0)


def _packed_table(x: jax.Array, dtype: jnp.dtype) -> tuple[jax.Array, int, int]:
    """``x`` as the kernel's VMEM table: (table [rows, pack·words], pack, words)."""
    n, f = x.shape
    bf16 = jnp.dtype(dtype) == jnp.bfloat16
    if bf16:
        xb = jnp.pad(x.astype(jnp.bfloat16), ((0, 0), (0, f % 2)))
        x = jax.lax.bitcast_convert_type(xb.reshape(n, -1, 2), jnp.uint32)
    words = x.shape[1]
    pack = _pack(words)
    rows = -(-n // pack)
    rows = -(-rows // SUBLANES) * SUBLANES
    x = jnp.pad(x, ((0, rows * pack - n), (0, 0))).reshape(rows, pack * words)
    return jnp.pad(x, ((0, 0), (0, -x.shape[1] % LANES))), pack, words


def _unpack_out(out: jax.Array, m: int, f: int, pack: int, words: int, bf16: bool) -> jax.Array:
    """The kernel's ``[rows, 128·c]`` blocks as ``[m, f]``: the lane groups added, bfloat16's even
    and odd columns interleaved back."""
    out = out[:m]
    halves = 2 if bf16 else 1
    out = out.reshape(m, halves, -1)[:, :, : pack * words].reshape(m, halves, pack, words).sum(axis=2)
    # bfloat16: interleave the even and odd columns back ([m, 2, words] -> [m, words, 2])
    out = jnp.swapaxes(out, 1, 2).reshape(m, halves * words)
    return out[:, :f]


def _check(x: jax.Array, cols: jax.Array, weights: jax.Array, block_rows: int | None, dtype: jnp.dtype) -> None:
    """Shapes and options, checked while tracing (the indices themselves are the caller's to check:
    the kernel does not bound-check a load)."""
    if x.ndim != 2 or cols.ndim != 2 or weights.shape != cols.shape:
        raise ValueError(f"row_sum: x must be [n, F] and cols, weights [m, K] alike; got x {x.shape}, cols "
                         f"{cols.shape}, weights {weights.shape}")
    if block_rows is not None and block_rows <= 0:
        raise ValueError(f"row_sum: block_rows={block_rows} must be positive (a multiple of smem_step(K))")
    if jnp.dtype(dtype) not in (jnp.dtype(jnp.float32), jnp.dtype(jnp.bfloat16)):
        raise ValueError(f"row_sum: dtype={jnp.dtype(dtype)} is not a table storage type; use float32 or bfloat16")


@functools.partial(jax.jit, static_argnames=("block_rows", "interpret", "dtype", "unroll"))
def row_sum(x: jax.Array, cols: jax.Array, weights: jax.Array, *, block_rows: int | None = None,
            interpret: bool | None = None, dtype: jnp.dtype = jnp.float32, unroll: int = UNROLL) -> jax.Array:
    """``out[i] = Σ_k weights[i, k] · x[cols[i, k]]`` by the Pallas kernel, summed in float32.

    It has no derivative of its own: :func:`propagate_symmetric` (or a caller's custom VJP, with the
    transpose's lists) gives the backward pass, as another row sum.

    Args:
        x: [n, F] float32 table (stored in VMEM as ``dtype``: float32, or bfloat16 for half the VMEM).
        cols: [m, K] int32 row indices into ``x``, each in ``[0, n)`` (padding slots too).
        weights: [m, K] float32; a padding slot has weight 0.
        block_rows: output rows per grid step (default :func:`block_rows_for`); ``m`` need not be a
            multiple of it (the last block is padded and sliced off).
        interpret: run the kernel interpreted; ``None``: on any backend but the TPU.
        dtype: the table's storage type in VMEM, ``jnp.float32`` or ``jnp.bfloat16``.
        unroll: neighbour slots per step of the kernel's loop (a tuning knob; the result is the same).

    Returns:
        [m, F] float32, equal to :func:`jaxgcn.core.gather.row_sum` (up to the rounding of ``dtype``).

    >>> x = jnp.arange(6.0).reshape(3, 2)
    >>> row_sum(x, jnp.array([[0, 2], [1, 1]]), jnp.array([[1.0, 0.5], [2.0, 0.0]])).tolist()
    [[2.0, 3.5], [4.0, 6.0]]
    """
    (n, f), (m, k) = x.shape, cols.shape
    _check(x, cols, weights, block_rows, dtype)
    if not fits(n, f, dtype=dtype):
        raise ValueError(f"row_sum: x of shape {x.shape} ({table_bytes(n, f, dtype)} bytes packed in VMEM) does "
                         f"not fit the {VMEM_BYTES} bytes of VMEM; use the XLA row sum or dtype=bfloat16")
    table, pack, words = _packed_table(x.astype(jnp.float32), dtype)
    bf16 = jnp.dtype(dtype) == jnp.bfloat16
    out_lanes = (2 if bf16 else 1) * table.shape[1]
    kp = list_width(k)
    block = block_rows or block_rows_for(kp, out_lanes)
    if block % smem_step(kp):
        raise ValueError(f"row_sum: block_rows={block} must be a multiple of {smem_step(kp)} for lists of width {k}")
    blocks = max(1, -(-m // block))
    # padding rows and slots read row 0 with weight 0; the rows are sliced off
    pad = ((0, blocks * block - m), (0, kp - k))
    cols, weights = jnp.pad(cols.astype(jnp.int32), pad), jnp.pad(weights.astype(jnp.float32), pad)
    kernel = functools.partial(_kernel, k=kp, pack=pack, words=words, bf16=bf16, unroll=max(1, min(kp, unroll)))
    vmem = table_bytes(n, f, dtype) + 2 * 4 * block * out_lanes + VMEM_RESERVE // 2
    out = _launch(kernel, cols, weights, table, block, out_lanes, vmem, resolve_interpret(interpret))
    return _unpack_out(out, m, f, pack, words, bf16)


def _launch(kernel, cols: jax.Array, weights: jax.Array, table: jax.Array, block: int, out_lanes: int,
            vmem: int, interpret: bool) -> jax.Array:
    """The pallas_call: a grid over blocks of ``block`` output rows, each block's lists (``cols``
    and ``weights`` [blocks · block, K], flattened: ``block · K`` entries a block) in SMEM, the
    whole table in VMEM (copied in once, not pipelined). Returns ``[blocks · block, out_lanes]``."""
    # imported here: Pallas adds ~0.1 s to importing jaxgcn, which CPU runs never use
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    blocks = cols.shape[0] // block
    lists = pl.BlockSpec((block * cols.shape[1],), lambda i: (i,), memory_space=pltpu.SMEM)
    return pl.pallas_call(
        kernel,
        grid=(blocks,),
        in_specs=[lists, lists, pl.BlockSpec(memory_space=pltpu.VMEM)],
        out_specs=pl.BlockSpec((block, out_lanes), lambda i: (i, 0)),
        out_shape=jax.ShapeDtypeStruct((blocks * block, out_lanes), jnp.float32),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",), vmem_limit_bytes=vmem),
        interpret=interpret,
    )(cols.reshape(-1), weights.reshape(-1), table)


def propagate_symmetric(x: jax.Array, cols: jax.Array, weights: jax.Array, self_weights: jax.Array, *,
                        block_rows: int | None = None, interpret: bool | None = None,
                        dtype: jnp.dtype = jnp.float32) -> jax.Array:
    """``Â · x`` for a symmetric ``Â`` given as one bucket of neighbour lists covering every row,
    plus its diagonal: ``self_weights[i] · x[i] + row_sum(x, cols, weights)[i]``. The gradient with
    respect to ``x`` is the same product of the cotangent (``Â`` symmetric), by the same kernel; the
    lists and weights are data (no gradient).

    Args:
        x: [n, F] float32.
        cols, weights: [n, K] the off-diagonal entries of row ``i`` (weight 0 in padding slots): the one
            bucket of :func:`jaxgcn.core.gather.build` with ``width=K``.
        self_weights: [n] the diagonal of ``Â``.
        block_rows, interpret, dtype: as for :func:`row_sum`.
    """
    return _symmetric((block_rows, interpret, dtype), x, cols, weights, self_weights)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _symmetric(options: tuple, x: jax.Array, cols: jax.Array, weights: jax.Array,
               self_weights: jax.Array) -> jax.Array:
    block_rows, interpret, dtype = options
    sums = row_sum(x, cols, weights, block_rows=block_rows, interpret=interpret, dtype=dtype)
    return self_weights[:, None] * x + sums


def _symmetric_forward(options, x, cols, weights, self_weights):
    return _symmetric(options, x, cols, weights, self_weights), (cols, weights, self_weights)


def _symmetric_backward(options, lists, g):
    # Â symmetric: the cotangent of x is Â · g, one more forward product; the lists get none
    return (_symmetric(options, g, *lists), None, None, None)


_symmetric.defvjp(_symmetric_forward, _symmetric_backward)


# Where the kernel beats XLA's gather on a TPU v5e (benchmarks/bench_pallas_gather.py, 16 columns, average
# degree 25): at 100k nodes (a 6.4 MB table) XLA's gather-sum took 7.9 ms against the kernel's 12.4; at
# 1M nodes (64 MB) 338 ms against 113. XLA's cost per gathered row grows with the table (2.7 ns at
# 6.4 MB, 9.2 ns at 64 MB), the kernel's stays at 3.7 ns (one scalar-addressed VMEM load per slot).
MIN_TABLE_BYTES = 16 * 2**20


def tpu_row_sum(x: jax.Array, cols: jax.Array, weights: jax.Array) -> jax.Array:
    """THE row sum of the ``gather`` backend on a TPU: this kernel where its table of ``x`` is at least
    :data:`MIN_TABLE_BYTES`, fits VMEM (:func:`fits`) and a block of 8 rows of the bucket's width fits
    SMEM; else XLA's gather (:func:`jaxgcn.core.gather.row_sum`). A choice made from static shapes.

    >>> import jax.numpy as jnp
    >>> tpu_row_sum(jnp.ones((4, 2)), jnp.array([[0, 1]]), jnp.array([[1.0, 2.0]])).tolist()  # small: XLA's
    [[3.0, 3.0]]
    """
    from jaxgcn.core import gather

    n, f = x.shape
    k = cols.shape[1]
    if 4 * n * f >= MIN_TABLE_BYTES and fits(n, f) and SUBLANES * k <= SMEM_BLOCK_MAX:
        return row_sum(x, cols, weights).astype(x.dtype)
    return gather.row_sum(x, cols, weights)


# --- the feature lists' per-run sums (jaxgcn.core.feature_lists): runs on the lanes ----------------------------


def runs_vmem_bytes(t: int, width: int, r: int, v: int) -> int:
    """VMEM bytes of :func:`runs_sum`'s tables: the ``[t, width]`` table laid out ``[t, S, L]`` (``S``
    sublanes padded to 8, ``L`` lanes padded to 128: each run's ``width // r`` columns down the sublanes,
    the ``r`` runs across the lanes) and the ``[v, r]`` values ``[v, L]`` (rows padded to 8)."""
    sub, lanes = _runs_shape(width, r)
    return 4 * lanes * (t * -(-sub // SUBLANES) * SUBLANES + -(-v // SUBLANES) * SUBLANES)


def _runs_shape(width: int, r: int) -> tuple[int, int]:
    """(sublanes, lanes) of one table row: runs on the lanes when the values are per run (``r > 1``),
    else the row's ``width`` folded into 128-lane rows (every column scaled by the same value)."""
    if r == 1:
        return -(-width // LANES), LANES
    return width // r, -(-r // LANES) * LANES


def _runs_kernel(cols_ref, pos_ref, table_ref, values_ref, o_ref, *, k: int, unroll: int):
    """One block of output rows: ``o[i] = sum_k table[cols[i, k]] * values[pos[i, k]]``, each table row a
    ``[S, L]`` tile read by one scalar-addressed load of its leading index, each value row ``[1, L]``
    broadcast down the sublanes. :data:`INTERLEAVE` rows at once, each in its own accumulator."""
    from jax.experimental import pallas as pl

    def rows(g, carry):
        first = g * INTERLEAVE

        def slot(j, accs):
            out = []
            for r, acc in enumerate(accs):
                entry = (first + r) * k + j
                out.append(acc + table_ref[cols_ref[entry]] * values_ref[pl.ds(pos_ref[entry], 1), :])
            return tuple(out)

        zero = jnp.zeros(o_ref.shape[1:], jnp.float32)
        accs = jax.lax.fori_loop(0, k, slot, (zero,) * INTERLEAVE, unroll=unroll)
        for r, acc in enumerate(accs):
            o_ref[first + r] = acc
        return carry

    jax.lax.fori_loop(0, o_ref.shape[0] // INTERLEAVE, rows, 0)


@functools.partial(jax.jit, static_argnames=("interpret", "unroll"))
def runs_sum(values: jax.Array, table: jax.Array, cols: jax.Array, pos: jax.Array, *,
             interpret: bool | None = None, unroll: int = UNROLL) -> jax.Array:
    """``out[i, r-th block] = sum_k values[pos[i, k], r] * table[cols[i, k], r-th block]`` -> [m, width] by
    a Pallas kernel: the feature lists' row sum (:func:`jaxgcn.core.feature_lists.runs_sum`'s signature).

    XLA's formulation gathers [m, K, width] rows (100 Cora seeds: 470 MB a pass); here the table and the
    values stay in VMEM and each slot costs two scalar-addressed loads and a multiply-add of one tile.
    The runs go across the lanes (``[t, width / r, r]``), so a value row multiplies its runs' blocks at
    once; shared values (``r == 1``) scale whole 128-lane rows.

    Args:
        values: [v, r] float32 (row 0 the padding's 0); r == 1: shared by every run.
        table: [t, width] float32, width a multiple of r.
        cols: [m, K] int32 rows of ``table``; pos: [m, K] int32 rows of ``values`` (0 for a padding slot).
        interpret, unroll: as for :func:`row_sum`.

    >>> vals = jnp.array([[0.0, 0.0], [1.0, 2.0], [3.0, 4.0]])
    >>> table = jnp.arange(8.0).reshape(2, 4)   # 2 rows, 2 runs of 2 columns
    >>> runs_sum(vals, table, jnp.array([[0, 1]]), jnp.array([[1, 2]])).tolist()
    [[12.0, 16.0, 28.0, 34.0]]
    """
    (t, width), (v, r), (m, k) = table.shape, values.shape, cols.shape
    sub, lanes = _runs_shape(width, r)
    if r == 1:
        tab = jnp.pad(table, ((0, 0), (0, sub * lanes - width))).reshape(t, sub, lanes)
        vals = jnp.broadcast_to(values, (v, lanes))
    else:
        tab = jnp.pad(table.reshape(t, r, sub).transpose(0, 2, 1), ((0, 0), (0, 0), (0, lanes - r)))
        vals = jnp.pad(values, ((0, 0), (0, lanes - r)))
    tab = jnp.pad(tab.astype(jnp.float32), ((0, 0), (0, -sub % SUBLANES), (0, 0)))
    vals = jnp.pad(vals.astype(jnp.float32), ((0, -v % SUBLANES), (0, 0)))
    kp = list_width(k)
    block = block_rows_for(kp, tab.shape[1] * lanes)
    blocks = -(-max(m, 1) // block)
    pad = ((0, blocks * block - m), (0, kp - k))  # padding slots read table row 0 times the values' 0 row
    cols, pos = jnp.pad(cols.astype(jnp.int32), pad), jnp.pad(pos.astype(jnp.int32), pad)
    vmem = runs_vmem_bytes(t, width, r, v) + 2 * 4 * block * tab.shape[1] * lanes + VMEM_RESERVE // 2
    out = _launch_runs(functools.partial(_runs_kernel, k=kp, unroll=max(1, min(kp, unroll))), cols, pos, tab,
                       vals, block, vmem, resolve_interpret(interpret))[:m, :sub]
    if r == 1:
        return out.reshape(m, sub * lanes)[:, :width]
    return out[:, :, :r].transpose(0, 2, 1).reshape(m, width)


def _launch_runs(kernel, cols: jax.Array, pos: jax.Array, tab: jax.Array, vals: jax.Array, block: int,
                 vmem: int, interpret: bool) -> jax.Array:
    """:func:`runs_sum`'s pallas_call: a grid over blocks of ``block`` output rows, each block's ``cols``
    and ``pos`` in SMEM, the table and the values whole in VMEM. Returns ``[blocks · block, S, L]``."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import tpu as pltpu

    blocks = cols.shape[0] // block
    lists = pl.BlockSpec((block * cols.shape[1],), lambda i: (i,), memory_space=pltpu.SMEM)
    whole = pl.BlockSpec(memory_space=pltpu.VMEM)
    return pl.pallas_call(
        kernel,
        grid=(blocks,),
        in_specs=[lists, lists, whole, whole],
        out_specs=pl.BlockSpec((block, *tab.shape[1:]), lambda i: (i, 0, 0)),
        out_shape=jax.ShapeDtypeStruct((blocks * block, *tab.shape[1:]), jnp.float32),
        compiler_params=pltpu.CompilerParams(dimension_semantics=("parallel",), vmem_limit_bytes=vmem),
        interpret=interpret,
    )(cols.reshape(-1), pos.reshape(-1), tab, vals)


def runs_kernel_fits(t: int, width: int, r: int, v: int, vmem_bytes: int = VMEM_BYTES) -> bool:
    """Whether :func:`runs_sum` holds its tables in ``vmem_bytes`` of VMEM (with :data:`VMEM_RESERVE`).

    >>> runs_kernel_fits(2708, 1600, 100, 49217), runs_kernel_fits(2_449_029, 1600, 100, 10**6)
    (True, False)
    """
    return runs_vmem_bytes(t, width, r, v) + VMEM_RESERVE <= vmem_bytes


def lists_kernel_fits(n_nodes: int, n_features: int, nnz: int) -> bool:
    """Whether :func:`runs_sum` holds feature lists' tables in VMEM (the larger side of X and the values,
    for up to 128 runs of hidden width 16: one [16, 128] tile a row), what a TPU's plan lays them out by
    (:func:`jaxgcn.plan.features_layout`). Where it does not (a wider layer), XLA's gathers sum them.

    >>> lists_kernel_fits(2708, 1433, 49_216), lists_kernel_fits(19_717, 500, 988_031)
    (True, False)
    """
    return runs_kernel_fits(max(n_nodes, n_features), 16 * LANES, LANES, nnz + 1)
