/* Candidate native launch shim, measured against the ctypes-only path (bench_launch_paths.py).
 * Links nothing (not libcuda, not libtorch, not CPython): the caller passes cuLaunchKernelEx's address.
 * Builds the CUlaunchConfig and the kernelParams array on the C stack from a packed argument blob. */
#include <stdint.h>

typedef struct {
  unsigned grid[3], block[3], smem;
  void *stream, *attrs;
  unsigned num_attrs;
} launch_config;  /* layout of CUlaunchConfig */

typedef int (*launch_ex_fn)(const launch_config *, void *, void **, void **);

int tk_launch(void *launch_ex, void *function, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
              unsigned bz, unsigned smem, void *stream, void *attrs, unsigned num_attrs, const char *args,
              const uint16_t *offsets, int num_args) {
  launch_config c = {{gx, gy, gz}, {bx, by, bz}, smem, stream, attrs, num_attrs};
  void *params[64];
  if (num_args > 64) return -1;
  for (int i = 0; i < num_args; ++i) params[i] = (void *)(args + offsets[i]);
  return ((launch_ex_fn)launch_ex)(&c, function, params, 0);
}
