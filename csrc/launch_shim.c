/* Native launch helper of the KernelKiln runtime (optional: the loader falls back to pure ctypes).
 *
 * It links nothing but libc: no libcuda (the caller passes cuLaunchKernelEx's address), no libtorch, no
 * CPython ABI, so one build serves every Python and torch version. Per call it builds the
 * CUlaunchConfig and the kernelParams array on the C stack from a packed argument blob, which
 * makes the launch thread-safe without per-thread buffers and saves ctypes work.
 * Measured on the H200 against the ctypes path: see benchmarks/results. */
#include <stdint.h>
#include <string.h>

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

/* A launch plan's template: the argument blob with every fixed argument in place, and where each per-call value
 * goes. A plan (a repeated call with the same sizes and options, e.g. per_token_cast's) then packs only its
 * per-call values (data pointers, token count, grid) behind the head, and this copies the template and patches
 * them in, instead of Python packing every argument each call. */
#define TK_MAX_BLOB 1024

typedef struct {
  unsigned size;                /* bytes of blob used */
  unsigned num_values;          /* per-call values */
  uint16_t dst[TK_MAX_ARGS];    /* byte offset of each value in the argument blob */
  uint16_t src[TK_MAX_ARGS];    /* byte offset of each value in the packed call, after the head */
  uint8_t bytes[TK_MAX_ARGS];   /* its size: 4 or 8 */
  char blob[TK_MAX_BLOB];       /* copied into an aligned buffer per call */
} tk_template;

int tk_template_size(void) { return (int)sizeof(tk_template); }

int tk_launch_template(const tk_kernel *k, const tk_template *t, const char *packed) {
  const tk_head *h = (const tk_head *)packed;
  const char *values = packed + TK_HEAD_BYTES;
  char args[TK_MAX_BLOB] __attribute__((aligned(16)));
  memcpy(args, t->blob, t->size);
  for (unsigned i = 0; i < t->num_values; ++i) memcpy(args + t->dst[i], values + t->src[i], t->bytes[i]);
  return tk_launch(k, h->grid[0], h->grid[1], h->grid[2], h->stream, h->pdl, args);
}
