"""batched_transpose: [B, M, N] -> contiguous [B, N, M] (docs/SPEC.md §3.3).

One CTA moves one 64 x 64 tile of one batch through shared memory. Elements are
moved as raw bits (uint8 / uint16 / uint32), so one cubin per element width
serves e4m3, bf16 and fp32.

* Load: each thread reads 16-byte vectors of an input row (4-element vectors in
  the ``wide_loads=False`` variant, for row strides that are only a multiple of
  4 elements) and stores them whole into shared memory.
* Store: each thread gathers V = 16 / elem_bytes elements of one input column
  (V consecutive input rows) and writes them as one 16-byte vector of an output
  row, so every global access is a full 16-byte vector.

bf16 moves pairs: it is read, stored to shared memory and written as 32-bit words, and in the
store phase a thread reads one word (input columns n, n+1) from each of 8 input rows and splits
them with byte permutes into two output vectors (rows n and n+1): 8 shared loads per two 16-byte
stores instead of 16. The element-wise gather kept the shared-memory pipe saturated (ncu: MIO
throttle stalls, 73-82 % of copy bandwidth).

Shared layout: 64 rows of 64 elements without padding (so the 16-byte shared
stores stay aligned); the 16-byte chunk index of row r is XORed with
(r / V) % chunks_per_row. The gathers of a warp then hit distinct banks (or the
same word): bf16 and e4m3 are conflict-free, fp32 too because a warp covers 8
chunk columns x 4 output rows. (bf16 pairs: a warp reads 8 chunk rows x 4 word columns of one
swizzled chunk column per step, 32 distinct banks.)

Each thread moves ``vectors_per_thread`` 16-byte vectors in and out, so the CTA
has tile_bytes / 16 / vectors_per_thread threads. Fewer, fuller threads mean
more bytes in flight per thread and smaller CTAs, whose barrier waits on fewer
loads (the 256-thread fp32 CTAs of 4 vectors reached only 61-73% of copy
bandwidth on the H200; see kernelkiln_contract.transpose:TUNED_VECTORS for the
measured choice per width).

Compile-time: element width, the load width and vectors per thread. Runtime:
batch count, M, N, the input's row and batch strides (one cubin serves every
shape) and the tile order (``m_fast``: consecutive CTAs walk M instead of N).
"""
from kernels.common.passes import THREAD_LEVEL

# Declared in kernelkiln_contract.transpose (BATCHED_TRANSPOSE): element width, load width and the tuned vectors per
# thread, the rules that pick them, and the launch-argument names below, which the build checks against this PrimFunc.
PASS_CONFIGS = THREAD_LEVEL
TILE = 64
STORAGE = {1: "uint8", 2: "uint16", 4: "uint32"}


def threads_for(elem_bytes, vectors_per_thread):
    """Threads per CTA: the 64 x 64 tile's 16-byte vectors, vectors_per_thread each."""
    return TILE * TILE * elem_bytes // 16 // vectors_per_thread


def build(p, arch):
    import tilelang.language as T

    from kernels.common.cuda_source import STORE_16B_SOURCE, store_16b

    del arch
    eb = p["elem_bytes"]
    storage = STORAGE[eb]
    sv = 16 // eb  # elements per 16-byte vector (the store width and the swizzle unit)
    lv = sv if p["wide_loads"] else 4  # elements per load
    cpr = TILE // sv  # 16-byte chunks per tile row: e4m3 4, bf16 8, fp32 16
    lanes_c = min(cpr, 8)  # store phase: chunk columns a warp covers (8 x 4 rows for fp32)
    lanes_n = 32 // lanes_c
    col_groups = cpr // lanes_c
    vpt = p["vectors_per_thread"]
    threads = threads_for(eb, vpt)
    loads = TILE * TILE // lv // threads  # load vectors per thread
    pieces = TILE // lv  # load vectors per tile row
    pairs = eb == 2  # bf16: 32-bit words of two elements everywhere (see the docstring)
    unit = 2 if pairs else 1  # elements per storage word
    word = "uint32" if pairs else storage
    x_numel, y_numel = T.dynamic("x_numel, y_numel")

    def swizzled(row, col):
        """Shared offset (in storage words) of tile element (row, col); col is a multiple of ``unit``."""
        chunk = T.bitwise_xor(col // sv, (row // sv) % cpr)
        return row * (TILE // unit) + chunk * (sv // unit) + (col % sv) // unit

    def perm(a, b, selector):
        return T.call_extern("uint32", "__byte_perm", a, b, T.uint32(selector))

    @T.prim_func
    def batched_transpose(
        x: T.Tensor((x_numel,), word),
        y: T.Tensor((y_numel,), word),
        num_batches: T.int32,
        tiles_x: T.int32,  # gridDim.x: N / 64, or M / 64 when m_fast
        tiles_y: T.int32,  # gridDim.y: the other one
        x_stride_m: T.int32,  # row stride of x in load vectors (elements / lv)
        x_stride_b: T.int64,  # batch stride of x in load vectors
        m_fast: T.int32,  # 1: consecutive CTAs walk M (the same output rows), 0: they walk N
    ):
        with T.Kernel(tiles_x, tiles_y, num_batches, threads=threads) as (gx, gy, batch):
            tx = T.get_thread_binding()
            bn = T.if_then_else(m_fast != 0, gy, gx)
            bm = T.if_then_else(m_fast != 0, gx, gy)
            n_tiles = T.if_then_else(m_fast != 0, tiles_y, tiles_x)
            m_tiles = T.if_then_else(m_fast != 0, tiles_x, tiles_y)
            if eb > 1:
                T.import_source(STORE_16B_SOURCE)
            tile = T.alloc_shared((TILE * TILE // unit,), word)
            buf = T.alloc_local((loads, lv // unit), word)
            out = T.alloc_local((sv,), storage)
            pair_in = T.alloc_local((sv,), "uint32")
            pair_lo = T.alloc_local((sv // 2,), "uint32")  # output rows n and n + 1
            pair_hi = T.alloc_local((sv // 2,), "uint32")

            T.pdl_sync()
            # Addresses in units of load vectors, times lv: provably aligned, so the loads vectorize.
            x_base = T.Cast("int64", batch) * x_stride_b + T.Cast("int64", bm * TILE) * x_stride_m + bn * pieces
            for r in T.unroll(loads):
                q = tx + r * threads
                row = q // pieces
                for i in T.vectorized(lv // unit):
                    buf[r, i] = x[(x_base + T.Cast("int64", row) * x_stride_m + q % pieces) * (lv // unit) + i]
            for r in T.unroll(loads):
                q = tx + r * threads
                row = q // pieces
                col = (q % pieces) * lv
                for i in T.vectorized(lv // unit):
                    tile[swizzled(row, col) + i] = buf[r, i]
            T.sync_threads()
            m_total = m_tiles * TILE
            y_base = (T.Cast("int64", batch) * (n_tiles * TILE) + bn * TILE) * m_total + bm * TILE
            if pairs:
                y_word = (T.Cast("int64", batch) * (n_tiles * TILE) + bn * TILE) * (m_total // 2) + bm * (TILE // 2)
                for r in T.unroll(vpt // 2):
                    q = tx + r * threads
                    lane = q % 32
                    c = lane % 8  # output chunk: input rows c*8 ..
                    n = ((q // 32) * 4 + lane // 8) * 2  # output rows n, n + 1 = input columns
                    for i in T.unroll(sv):
                        pair_in[i] = tile[swizzled(c * sv + i, n)]
                    for j in T.unroll(sv // 2):  # low halves: column n; high halves: column n + 1
                        pair_lo[j] = perm(pair_in[2 * j], pair_in[2 * j + 1], 0x5410)
                        pair_hi[j] = perm(pair_in[2 * j], pair_in[2 * j + 1], 0x7632)
                    store_16b(T, y[y_word + T.Cast("int64", n) * (m_total // 2) + c * (sv // 2)],
                              [pair_lo[j] for j in range(4)])
                    store_16b(T, y[y_word + T.Cast("int64", n + 1) * (m_total // 2) + c * (sv // 2)],
                              [pair_hi[j] for j in range(4)])
            else:
                for r in T.unroll(vpt):
                    q = tx + r * threads
                    lane = q % 32
                    group = q // 32
                    c = (group % col_groups) * lanes_c + lane % lanes_c  # output chunk: input rows c*sv ..
                    n = (group // col_groups) * lanes_n + lane // lanes_c  # output row = input column
                    for i in T.unroll(sv):
                        out[i] = tile[swizzled(c * sv + i, n)]
                    if eb == 4:
                        store_16b(T, y[y_base + T.Cast("int64", n) * m_total + c * sv], [out[i] for i in range(4)])
                    else:
                        for i in T.vectorized(sv):
                            y[y_base + T.Cast("int64", n) * m_total + c * sv + i] = out[i]
            T.pdl_trigger()

    return batched_transpose
