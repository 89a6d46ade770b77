/* Native launch helper of the TileKiln runtime (optional: the loader falls back to pure ctypes).
 *
 * It links nothing: no libcuda (the caller passes cuLaunchKernelEx's address), no libtorch, no
 * CPython ABI, so one build serves every Python and torch version. Per call it builds the
 * CUlaunchConfig and the kernelParams array on the C stack from a packed argument blob, which
 * makes the launch thread-safe without per-thread buffers and saves ctypes work.
 * Measured on the H200 against the ctypes path: see benchmarks/results. */
#include <stdint.h>

#define TK_MAX_ARGS 64

typedef struct {
  unsigned grid[3], block[3], smem;
  void *stream, *attrs;
  unsigned num_attrs;
} tk_launch_config; /* same layout as CUlaunchConfig */

typedef int (*tk_launch_ex_fn)(const tk_launch_config *, void *, void **, void **);

/* Everything about a kernel that is fixed after module load. */
typedef struct {
  void *launch_ex;     /* cuLaunchKernelEx */
  void *function;      /* CUfunction */
  unsigned block[3];
  unsigned smem;
  void *attrs[2];      /* launch attribute arrays: [0] without PDL, [1] with PDL */
  unsigned num_attrs[2];
  int num_args;
  uint16_t offsets[TK_MAX_ARGS]; /* byte offset of each kernel argument in the blob */
} tk_kernel;

int tk_max_args(void) { return TK_MAX_ARGS; }
int tk_kernel_size(void) { return (int)sizeof(tk_kernel); }

/* The head of a packed call: the grid, PDL and the stream, then the kernel's arguments at
 * TK_HEAD_BYTES + offsets[i]. One Python struct.pack builds all of it, and the call passes two
 * pointers, so ctypes converts two arguments instead of seven: a launch with prebuilt arguments took
 * 4.6-4.7 us on the H200 (6.9 in one process; 5.7 us with the seven-argument call; bench_launch_paths.py,
 * benchmarks/results/2026-12-01-a4a7b4edd2 and -21a5b0aa3f). */
typedef struct {
  unsigned grid[3];
  int pdl;
  void *stream;
} tk_head;

#define TK_HEAD_BYTES 24

int tk_head_bytes(void) { return (int)sizeof(tk_head); }

int tk_launch(const tk_kernel *k, unsigned gx, unsigned gy, unsigned gz, void *stream, int pdl, const char *args) {
  tk_launch_config c = {{gx, gy, gz}, {k->block[0], k->block[1], k->block[2]}, k->smem, stream,
                        k->attrs[pdl != 0], k->num_attrs[pdl != 0]};
  void *params[TK_MAX_ARGS];
  for (int i = 0; i < k->num_args; ++i) params[i] = (void *)(args + k->offsets[i]);
  return ((tk_launch_ex_fn)k->launch_ex)(&c, k->function, params, 0);
}

int tk_launch_packed(const tk_kernel *k, const char *packed) {
  const tk_head *h = (const tk_head *)packed;
  return tk_launch(k, h->grid[0], h->grid[1], h->grid[2], h->stream, h->pdl, packed + TK_HEAD_BYTES);
}
