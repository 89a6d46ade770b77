/* The driver's own host cost per launch, without Python: an empty kernel with per_token_cast's parameter
 * block (19 parameters, 120 bytes), launched N times in a C loop through each launch entry point and on
 * each kind of stream. It says how much of an op's host time the driver takes, so that what remains is
 * ours (Python, ctypes, torch allocations).
 *
 * Build (anywhere, no CUDA headers or libraries needed: libcuda is opened at run time):
 *     gcc -O2 -o launch_floor benchmarks/launch_floor.c -ldl
 * Run on the GPU machine: ./launch_floor [launches per repeat]   -> one JSON line
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
typedef void *CUcontext, *CUmodule, *CUfunction, *CUstream;
typedef struct {
  unsigned grid[3], block[3], smem;
  CUstream stream;
  void *attrs;
  unsigned num_attrs;
} LaunchConfig; /* CUlaunchConfig */

static CUresult (*cuInit)(unsigned);
static CUresult (*cuDevicePrimaryCtxRetain)(CUcontext *, int);
static CUresult (*cuCtxSetCurrent)(CUcontext);
static CUresult (*cuModuleLoadData)(CUmodule *, const void *);
static CUresult (*cuModuleGetFunction)(CUfunction *, CUmodule, const char *);
static CUresult (*cuStreamCreate)(CUstream *, unsigned);
static CUresult (*cuCtxSynchronize)(void);
static CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                  CUstream, void **, void **);
static CUresult (*cuLaunchKernelEx)(const LaunchConfig *, CUfunction, void **, void **);

#define NPARAMS 19
/* 3 pointers, 16 32-bit values, as per_token_cast's device parameters (the layout matters little) */
static const char *PTX =
    ".version 8.0\n.target sm_90a\n.address_size 64\n"
    ".visible .entry empty(.param .u64 p0, .param .u64 p1, .param .u64 p2, .param .u32 p3, .param .u32 p4,"
    " .param .u32 p5, .param .u32 p6, .param .u32 p7, .param .u32 p8, .param .u32 p9, .param .u32 p10,"
    " .param .f32 p11, .param .u64 p12, .param .u32 p13, .param .u32 p14, .param .u32 p15, .param .u32 p16,"
    " .param .u32 p17, .param .u32 p18)\n{\n ret;\n}\n";
static const unsigned OFFSETS[NPARAMS] = {0, 8, 16, 24, 28, 32, 36, 40, 44, 48, 52, 56, 64, 72, 76, 80, 84, 88, 92};
#define PARAM_BYTES 96

static double now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec * 1e-3;
}

static void check(CUresult rc, const char *what) {
  if (rc) {
    fprintf(stderr, "%s failed: %d\n", what, rc);
    exit(1);
  }
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

enum { KERNEL_PARAMS, EX, EXTRA_BUFFER };

static double time_launches(CUfunction f, CUstream s, int path, int n) {
  static char blob[PARAM_BYTES] __attribute__((aligned(16)));
  void *params[NPARAMS];
  for (int i = 0; i < NPARAMS; ++i) params[i] = blob + OFFSETS[i];
  size_t size = PARAM_BYTES;
  void *extra[] = {(void *)1, blob, (void *)2, &size, (void *)0}; /* BUFFER_POINTER, BUFFER_SIZE, END */
  LaunchConfig c = {{4, 8, 1}, {128, 1, 1}, 0, s, 0, 0};
  double reps[5];
  for (int r = 0; r < 5; ++r) {
    check(cuCtxSynchronize(), "sync");
    double t0 = now_us();
    for (int i = 0; i < n; ++i) {
      CUresult rc = path == EX ? cuLaunchKernelEx(&c, f, params, 0)
                    : path == KERNEL_PARAMS ? cuLaunchKernel(f, 4, 8, 1, 128, 1, 1, 0, s, params, 0)
                                            : cuLaunchKernel(f, 4, 8, 1, 128, 1, 1, 0, s, 0, extra);
      if (rc) check(rc, "launch");
    }
    check(cuCtxSynchronize(), "sync");
    reps[r] = (now_us() - t0) / n;
  }
  qsort(reps, 5, sizeof(double), cmp);
  return reps[2];
}

#define LOAD(name)                                                      \
  do {                                                                  \
    *(void **)&name = dlsym(lib, #name);                                \
    if (!name) { fprintf(stderr, "no %s in libcuda\n", #name); return 1; } \
  } while (0)

int main(int argc, char **argv) {
  int n = argc > 1 ? atoi(argv[1]) : 20000;
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) { fprintf(stderr, "no libcuda.so.1\n"); return 1; }
  LOAD(cuInit); LOAD(cuCtxSetCurrent); LOAD(cuModuleGetFunction); LOAD(cuCtxSynchronize); LOAD(cuLaunchKernelEx);
  *(void **)&cuDevicePrimaryCtxRetain = dlsym(lib, "cuDevicePrimaryCtxRetain");
  *(void **)&cuModuleLoadData = dlsym(lib, "cuModuleLoadData");
  *(void **)&cuStreamCreate = dlsym(lib, "cuStreamCreate");
  *(void **)&cuLaunchKernel = dlsym(lib, "cuLaunchKernel");
  CUcontext ctx;
  CUmodule mod;
  CUfunction f;
  check(cuInit(0), "cuInit");
  check(cuDevicePrimaryCtxRetain(&ctx, 0), "retain");
  check(cuCtxSetCurrent(ctx), "set current");
  check(cuModuleLoadData(&mod, PTX), "load PTX");
  check(cuModuleGetFunction(&f, mod, "empty"), "get function");
  CUstream blocking, nonblocking;
  check(cuStreamCreate(&blocking, 0), "stream");
  check(cuStreamCreate(&nonblocking, 1), "stream");
  struct { const char *name; CUstream s; } streams[] = {
      {"legacy_default", 0}, {"per_thread_default", (CUstream)2}, {"blocking", blocking},
      {"non_blocking", nonblocking}};
  const char *paths[] = {"cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchKernel_extra_buffer"};
  time_launches(f, 0, KERNEL_PARAMS, 2000); /* warm-up */
  printf("{\"launches_per_repeat\": %d", n);
  for (int si = 0; si < 4; ++si)
    for (int p = 0; p < 3; ++p)
      printf(", \"%s_%s_us\": %.3f", paths[p], streams[si].name, time_launches(f, streams[si].s, p, n));
  printf("}\n");
  return 0;
}
