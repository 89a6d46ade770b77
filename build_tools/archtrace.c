/* Records whether a lowering ever got an answer about the CUDA arch that would differ on another arch
 * (docs/LOWERING.md §5, build_tools/archshare.py).
 *
 * TileLang reads a CUDA target's arch in one place, a file-local helper of src/cuda/target_utils.cc; the rest of
 * TileLang learns about the arch through the predicates that file exports (TargetIsHopper, TargetHasSMVersionGE,
 * ...). Calls into them go through libtilelang's PLT, so a library loaded with RTLD_GLOBAL before TileLang takes
 * them over. Each wrapper answers with the real predicate on the caller's target and, for a CUDA target, asks it
 * about the "alternative" target (the other arch, handed over by archshare.py) too; an answer that differs marks
 * the lowering as arch-dependent.
 *
 * Two callers are compared by their own answer, with the predicates they ask on the way left out: the vectorizer's
 * width cap MaxVectorLoadBits (it asks TargetSupportVectorize256 even where its answer is 128 on every arch), and
 * VectorizePlanner::Plan, whose vector size is all its callers use: where the cap differs, a forked child finishes
 * the Plan as the other arch (every question answered for that arch) and sends its result back, while this process
 * goes on untouched.
 *
 * ABI: tvm::Target is an ObjectRef (one pointer to its object) with a non-trivial copy constructor, so it is passed
 * by invisible reference, as `const Target &` is: the predicates take a pointer to a one-pointer struct, which the
 * caller owns. They return bool in %al only. The real entry points are looked up in the loaded libtilelang by
 * archtrace_bind(). */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct { void *obj; } target_ref;

enum { N_PRED = 18 };
static const char *const NAMES[N_PRED] = {
  "_ZN3tvm2tl12TargetIsCudaENS_6TargetE",
  "_ZN3tvm2tl13TargetIsVoltaENS_6TargetE",
  "_ZN3tvm2tl14TargetIsTuringENS_6TargetE",
  "_ZN3tvm2tl14TargetIsAmpereENS_6TargetE",
  "_ZN3tvm2tl14TargetIsHopperENS_6TargetE",
  "_ZN3tvm2tl13TargetIsSm100ENS_6TargetE",
  "_ZN3tvm2tl13TargetIsSM120ENS_6TargetE",
  "_ZN3tvm2tl22TargetCudaHasAsyncCopyENS_6TargetE",
  "_ZN3tvm2tl18TargetHasAsyncCopyENS_6TargetE",
  "_ZN3tvm2tl17TargetHasLdmatrixENS_6TargetE",
  "_ZN3tvm2tl13TargetHasTmemENS_6TargetE",
  "_ZN3tvm2tl17TargetHasBulkCopyENS_6TargetE",
  "_ZN3tvm2tl26TargetSupportsNamedBarrierENS_6TargetE",
  "_ZN3tvm2tl25TargetSupportVectorize256ENS_6TargetE",
  "_ZN3tvm2tl17TargetHasStmatrixENS_6TargetEb",
  "_ZN3tvm2tl20TargetHasSMVersionGEENS_6TargetEi",
  "_ZN3tvm2tl17MaxVectorLoadBitsERKNS_6TargetEb",
  "_ZN3tvm2tl16VectorizePlanner4PlanERKNS_4tirx3ForE",
};
enum { IS_CUDA = 0, HAS_STMATRIX = 14, HAS_SM_GE = 15, MAX_VECTOR_BITS = 16, PLAN = 17 };

/* every predicate returns bool (in %al only: the rest of %eax is undefined, so never read it as int) */
typedef _Bool (*pred1)(const target_ref *);
typedef _Bool (*pred2)(const target_ref *, int);
typedef _Bool (*pred_b)(const target_ref *, _Bool);
static void *real[N_PRED];
static target_ref alt;            /* the other arch's target; alt.obj == NULL: not tracing */
static int quiet;                 /* > 0: inside a wrapper that compares a decision made of these answers */
static int plan_depth;            /* > 0: inside a traced VectorizePlanner::Plan */
static int plan_other_known, plan_other;  /* the other arch's result of the Plan in progress, from a child */
static int child_fd = -1;         /* >= 0: this is a forked child answering as the other arch; its Plan result goes here */
static long forks;
static long calls, differing;
enum { N_SITES = 64 };
static void *sites[N_SITES];      /* return addresses of the calls that answered differently (diagnostics) */
static int site_pred[N_SITES], n_sites;
static uint32_t differing_mask;   /* bit i: predicate NAMES[i] answered differently */

static int find_tilelang(struct dl_phdr_info *info, size_t size, void *out) {
  (void)size;
  const char *slash = strrchr(info->dlpi_name, '/');
  if (slash && strcmp(slash + 1, "libtilelang.so") == 0) {
    *(const char **)out = info->dlpi_name;
    return 1;
  }
  return 0;
}

/* Looks the real predicates up in the loaded libtilelang.so (0: bound; -1: TileLang is not loaded; -2 - i: it
 * lacks predicate i). Called from Python after TileLang is imported, and on the first traced call otherwise. */
int archtrace_bind(void) {
  const char *path = NULL;
  dl_iterate_phdr(find_tilelang, &path);
  void *h = path ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : NULL;
  if (!h) return -1;
  for (int i = 0; i < N_PRED; i++)
    if (!(real[i] = dlsym(h, NAMES[i]))) return -2 - i;
  return 0;
}

/* Whether calls from libtilelang reach the wrappers here (1) or bypass them (0): the symbol the dynamic linker
 * resolves globally must be ours. */
int archtrace_interposed(void) {
  Dl_info mine, seen_info;
  if (!dladdr((void *)archtrace_interposed, &mine)) return 0;
  for (int i = 0; i < N_PRED; i++) {
    void *seen = dlsym(RTLD_DEFAULT, NAMES[i]);
    if (!seen || !dladdr(seen, &seen_info) || seen_info.dli_fbase != mine.dli_fbase) return 0;
  }
  return 1;
}

void archtrace_start(void *alt_target_object) {
  alt.obj = alt_target_object;
  quiet = plan_depth = plan_other_known = 0;
  calls = differing = forks = 0;
  differing_mask = 0;
  n_sites = 0;
}

void archtrace_stop(void) { alt.obj = NULL; }

/* out[0] calls traced, out[1] answers that differed, out[2] mask of the predicates that differed */
void archtrace_counts(long *out) {
  out[0] = calls;
  out[1] = differing;
  out[2] = (long)differing_mask;
}

static int ask(int i, const target_ref *t, int has_arg, int arg) {
  if (!real[i] && archtrace_bind() != 0) abort();  /* only reachable from libtilelang, which is loaded */
  if (i == MAX_VECTOR_BITS) return ((int (*)(const target_ref *, _Bool))real[i])(t, arg != 0);
  if (!has_arg) return ((pred1)real[i])(t);
  return i == HAS_STMATRIX ? ((pred_b)real[i])(t, arg != 0) : ((pred2)real[i])(t, arg);
}

static void note_site(int i, void *caller) {
  for (int k = 0; k < n_sites; k++)
    if (sites[k] == caller) return;
  if (n_sites < N_SITES) {
    site_pred[n_sites] = i;
    sites[n_sites++] = caller;
  }
}

/* The k-th differing call site: its return address as an offset into the object holding it (-1: none). */
long archtrace_site(int k, int *pred) {
  Dl_info info;
  if (k < 0 || k >= n_sites || !dladdr(sites[k], &info)) return -1;
  *pred = site_pred[k];
  return (long)((char *)sites[k] - (char *)info.dli_fbase);
}

static int fork_other_plan(int answer, int other);

static int traced(int i, const target_ref *t, int has_arg, int arg, void *caller) {
  if (child_fd >= 0)  /* a child lowers on as the other arch: every CUDA question gets the other arch's answer */
    return ask(i, ((pred1)real[IS_CUDA])(t) ? &alt : t, has_arg, arg);
  if (alt.obj == NULL || quiet) return ask(i, t, has_arg, arg);
  quiet++;  /* the predicates a traced function asks on its way are part of its own answer */
  int answer = ask(i, t, has_arg, arg);
  /* a non-CUDA target (the host) answers every CUDA predicate "no" whatever the arch: nothing to compare */
  if (((pred1)real[IS_CUDA])(t)) {
    int other = ask(i, &alt, has_arg, arg);
    __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    if (other != answer && i == MAX_VECTOR_BITS && plan_depth == 1 && !plan_other_known) {
      /* The planner's width cap differs, but only the vector size the planner returns can reach the IR: let a
       * child process finish this Plan with the other cap and compare the results (VectorizePlanner below). */
      quiet--;
      return fork_other_plan(answer, other);
    }
    if (other != answer) {
      __atomic_add_fetch(&differing, 1, __ATOMIC_RELAXED);
      __atomic_or_fetch(&differing_mask, 1u << i, __ATOMIC_RELAXED);
      note_site(i, caller);
    }
  }
  quiet--;
  return answer;
}

/* The other arch's answer `other` goes to a forked child, which finishes the Plan in progress as that arch and
 * writes its result back; this process goes on with `answer` and its state untouched. */
static int fork_other_plan(int answer, int other) {
  int fds[2];
  if (pipe(fds) != 0) goto failed;
  pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    goto failed;
  }
  if (pid == 0) {
    close(fds[0]);
    child_fd = fds[1];
    return other;
  }
  close(fds[1]);
  int value = 0, status = 0;
  ssize_t n = read(fds[0], &value, sizeof value);
  close(fds[0]);
  /* reap it (ECHILD: someone set SIGCHLD to be ignored, so the kernel did) */
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {}
  forks++;
  /* the child writes its result only after its Plan returned, just before it exits */
  if (n == (ssize_t)sizeof value) {
    plan_other_known = 1;
    plan_other = value;
    return answer;
  }
failed:
  differing++;
  differing_mask |= 1u << MAX_VECTOR_BITS;
  return answer;
}

/* int VectorizePlanner::Plan(const For &): the vector size of a loop, the only thing of the planner's that its
 * callers (GetVectorizeSize, VectorizeLoop) use. */
int _ZN3tvm2tl16VectorizePlanner4PlanERKNS_4tirx3ForE(void *self, const void *loop) {
  if (!real[PLAN] && archtrace_bind() != 0) abort();
  int (*plan)(void *, const void *) = (int (*)(void *, const void *))real[PLAN];
  if (alt.obj == NULL || quiet || child_fd >= 0) return plan(self, loop);
  plan_depth++;
  int saved_known = plan_other_known;
  plan_other_known = 0;
  int result = plan(self, loop);
  plan_depth--;
  if (child_fd >= 0) {  /* the forked child: its Plan as the other arch is done */
    ssize_t n = write(child_fd, &result, sizeof result);
    _exit(n == (ssize_t)sizeof result ? 0 : 1);
  }
  if (plan_other_known) {
    __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
    if (plan_other != result) {
      differing++;
      differing_mask |= 1u << PLAN;
      note_site(PLAN, __builtin_return_address(0));
    }
  }
  plan_other_known = saved_known;
  return result;
}

/* out[0] forks */
void archtrace_forks(long *out) { out[0] = forks; }

/* Python pauses the comparison around work whose arch questions it accounts for itself (archshare.py). */
void archtrace_quiet(int delta) { quiet += delta; }

#define WRAP1(i, sym) _Bool sym(const target_ref *t) { return traced(i, t, 0, 0, __builtin_return_address(0)) != 0; }
WRAP1(0, _ZN3tvm2tl12TargetIsCudaENS_6TargetE)
WRAP1(1, _ZN3tvm2tl13TargetIsVoltaENS_6TargetE)
WRAP1(2, _ZN3tvm2tl14TargetIsTuringENS_6TargetE)
WRAP1(3, _ZN3tvm2tl14TargetIsAmpereENS_6TargetE)
WRAP1(4, _ZN3tvm2tl14TargetIsHopperENS_6TargetE)
WRAP1(5, _ZN3tvm2tl13TargetIsSm100ENS_6TargetE)
WRAP1(6, _ZN3tvm2tl13TargetIsSM120ENS_6TargetE)
WRAP1(7, _ZN3tvm2tl22TargetCudaHasAsyncCopyENS_6TargetE)
WRAP1(8, _ZN3tvm2tl18TargetHasAsyncCopyENS_6TargetE)
WRAP1(9, _ZN3tvm2tl17TargetHasLdmatrixENS_6TargetE)
WRAP1(10, _ZN3tvm2tl13TargetHasTmemENS_6TargetE)
WRAP1(11, _ZN3tvm2tl17TargetHasBulkCopyENS_6TargetE)
WRAP1(12, _ZN3tvm2tl26TargetSupportsNamedBarrierENS_6TargetE)
WRAP1(13, _ZN3tvm2tl25TargetSupportVectorize256ENS_6TargetE)
_Bool _ZN3tvm2tl17TargetHasStmatrixENS_6TargetEb(const target_ref *t, _Bool is_m16n8) {
  return traced(HAS_STMATRIX, t, 1, is_m16n8, __builtin_return_address(0)) != 0;
}
_Bool _ZN3tvm2tl20TargetHasSMVersionGEENS_6TargetEi(const target_ref *t, int version) {
  return traced(HAS_SM_GE, t, 1, version, __builtin_return_address(0)) != 0;
}
/* int MaxVectorLoadBits(const Target &, bool global_only_access): the vectorizer's width cap. Traced as a whole,
 * because it asks TargetSupportVectorize256 even where global_only_access makes the answer irrelevant. */
int _ZN3tvm2tl17MaxVectorLoadBitsERKNS_6TargetEb(const target_ref *t, _Bool global_only_access) {
  return traced(MAX_VECTOR_BITS, t, 1, global_only_access, __builtin_return_address(0));
}

const char *archtrace_name(int i) { return i >= 0 && i < N_PRED ? NAMES[i] : NULL; }
