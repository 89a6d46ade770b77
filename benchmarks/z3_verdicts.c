/* LD_PRELOAD shim for benchmarks/lowering_profile.py --z3: times every Z3 check TileLang's prover makes and sums the
 * seconds by verdict (unsat = proved, undef = gave up at its resource limit, sat = disproved). Read the sums with
 * z3_verdicts_get(double[6]): seconds unsat/undef/sat, then counts unsat/undef/sat. Measurement only. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <time.h>

typedef void *ctx_t, *solver_t, *ast_t;
static double seconds[3], counts[3];

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

static int record(double t0, int verdict) { /* Z3_lbool: -1 false (unsat), 0 undef, 1 true (sat) */
  seconds[verdict + 1] += now() - t0;
  counts[verdict + 1] += 1;
  return verdict;
}

int Z3_solver_check(ctx_t c, solver_t s) {
  static int (*real)(ctx_t, solver_t);
  if (!real) real = (int (*)(ctx_t, solver_t))dlsym(RTLD_NEXT, "Z3_solver_check");
  double t0 = now();
  return record(t0, real(c, s));
}

int Z3_solver_check_assumptions(ctx_t c, solver_t s, unsigned n, const ast_t *a) {
  static int (*real)(ctx_t, solver_t, unsigned, const ast_t *);
  if (!real) real = (int (*)(ctx_t, solver_t, unsigned, const ast_t *))dlsym(RTLD_NEXT, "Z3_solver_check_assumptions");
  double t0 = now();
  return record(t0, real(c, s, n, a));
}

void z3_verdicts_get(double *out) {
  for (int i = 0; i < 3; i++) out[i] = seconds[i], out[i + 3] = counts[i];
}
