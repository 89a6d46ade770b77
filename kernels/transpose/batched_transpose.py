"""batched_transpose: [B, M, N] -> contiguous [B, N, M] (OPERATORS.md §3.3).

One CTA moves one 64 x 64 tile of one batch through shared memory. Elements are
moved as raw bits (uint8 / uint16 / uint32), so one cubin per element width
serves e4m3, bf16 and fp32.

* Load: each thread reads 16-byte vectors of an input row (4-element vectors in
  the ``wide_loads=False`` variant, for row strides that are only a multiple of
  4 elements) and stores them whole into shared memory.
* Store: each thread gathers V = 16 / elem_bytes elements of one input column
  (V consecutive input rows) and writes them as one 16-byte vector of an output
  row, so every global access is a full 16-byte vector.

Shared layout: 64 rows of 64 elements without padding (so the 16-byte shared
stores stay aligned); the 16-byte chunk index of row r is XORed with
(r / V) % chunks_per_row. The gathers of a warp then hit distinct banks (or the
same word): bf16 and e4m3 are conflict-free, fp32 too because a warp covers 8
chunk columns x 4 output rows. Four vectors per thread keep 64 bytes in flight
per thread; the CTA size follows from the element width (64 / 128 / 256
threads), so a 2048-thread SM holds 128 KiB of loads in flight for every dtype.

Compile-time: element width and the load width. Runtime: batch count, M, N and
the input's row and batch strides (one cubin serves every shape).
"""
OP = "batched_transpose"
PARAM_NAMES = ("elem_bytes", "wide_loads")
PASS_CONFIGS = {
    "tl.disable_tma_lower": True,
    "tl.disable_warp_specialized": True,
    "tl.disable_safe_memory_legalize": True,
}
TILE = 64
VECTORS_PER_THREAD = 4
STORAGE = {1: "uint8", 2: "uint16", 4: "uint32"}


def invalid_reason(p):
    if p["elem_bytes"] not in STORAGE:
        return f"elem_bytes must be one of {sorted(STORAGE)}"
    if not isinstance(p["wide_loads"], bool):
        return "wide_loads must be a bool"
    if p["elem_bytes"] == 4 and not p["wide_loads"]:
        return "fp32 loads of 4 elements are 16 bytes already: use wide_loads=True"
    return None


def threads_for(elem_bytes):
    """Threads per CTA: the 64 x 64 tile's 16-byte vectors, VECTORS_PER_THREAD each."""
    return TILE * TILE * elem_bytes // 16 // VECTORS_PER_THREAD


def build(p, arch):
    import tilelang.language as T

    del arch
    eb = p["elem_bytes"]
    storage = STORAGE[eb]
    sv = 16 // eb  # elements per 16-byte vector (the store width and the swizzle unit)
    lv = sv if p["wide_loads"] else 4  # elements per load
    cpr = TILE // sv  # 16-byte chunks per tile row: e4m3 4, bf16 8, fp32 16
    lanes_c = min(cpr, 8)  # store phase: chunk columns a warp covers (8 x 4 rows for fp32)
    lanes_n = 32 // lanes_c
    col_groups = cpr // lanes_c
    threads = threads_for(eb)
    loads = TILE * TILE // lv // threads  # load vectors per thread
    pieces = TILE // lv  # load vectors per tile row
    x_numel, y_numel = T.dynamic("x_numel, y_numel")

    def swizzled(row, col):
        """Shared offset of tile element (row, col)."""
        chunk = T.bitwise_xor(col // sv, (row // sv) % cpr)
        return row * TILE + chunk * sv + col % sv

    @T.prim_func
    def batched_transpose(
        x: T.Tensor((x_numel,), storage),
        y: T.Tensor((y_numel,), storage),
        num_batches: T.int32,
        m_tiles: T.int32,  # M / 64
        n_tiles: T.int32,  # N / 64
        x_stride_m: T.int32,  # row stride of x in load vectors (elements / lv)
        x_stride_b: T.int64,  # batch stride of x in load vectors
    ):
        with T.Kernel(n_tiles, m_tiles, num_batches, threads=threads) as (bn, bm, batch):
            tx = T.get_thread_binding()
            tile = T.alloc_shared((TILE * TILE,), storage)
            buf = T.alloc_local((loads, lv), storage)
            out = T.alloc_local((sv,), storage)

            T.pdl_sync()
            # Addresses in units of load vectors, times lv: provably aligned, so the loads vectorize.
            x_base = T.Cast("int64", batch) * x_stride_b + T.Cast("int64", bm * TILE) * x_stride_m + bn * pieces
            for r in T.unroll(loads):
                q = tx + r * threads
                row = q // pieces
                for i in T.vectorized(lv):
                    buf[r, i] = x[(x_base + T.Cast("int64", row) * x_stride_m + q % pieces) * lv + i]
            for r in T.unroll(loads):
                q = tx + r * threads
                row = q // pieces
                col = (q % pieces) * lv
                for i in T.vectorized(lv):
                    tile[swizzled(row, col) + i] = buf[r, i]
            T.sync_threads()
            m_total = m_tiles * TILE
            y_base = (T.Cast("int64", batch) * (n_tiles * TILE) + bn * TILE) * m_total + bm * TILE
            for r in T.unroll(VECTORS_PER_THREAD):
                q = tx + r * threads
                lane = q % 32
                group = q // 32
                c = (group % col_groups) * lanes_c + lane % lanes_c  # output chunk: input rows c*sv ..
                n = (group // col_groups) * lanes_n + lane // lanes_c  # output row = input column
                for i in T.unroll(sv):
                    out[i] = tile[swizzled(c * sv + i, n)]
                for i in T.vectorized(sv):
                    y[y_base + T.Cast("int64", n) * m_total + c * sv + i] = out[i]
            T.pdl_trigger()

    return batched_transpose
