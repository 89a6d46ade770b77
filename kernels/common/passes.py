"""TileLang pass configuration of the thread-level kernels (most of kernels/): each thread issues its own
vectorized loads and stores, so TMA lowering and warp specialization are off, and the automatic
out-of-bounds guards are off because every access is already guarded in the kernel (the automatic ones
split the 16-byte vector accesses)."""
THREAD_LEVEL = {
    "tl.disable_tma_lower": True,
    "tl.disable_warp_specialized": True,
    "tl.disable_safe_memory_legalize": True,
}
