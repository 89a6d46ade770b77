/* Answers a repeated Z3 query of TileLang's prover from memory instead of solving it again (docs/LOWERING.md §4).
 *
 * TileLang's arith::Analyzer asks Z3 whenever its own rewriting cannot settle a condition, and every Analyzer has a
 * Z3 context and solver of its own. The simplifier runs several times per lowering and asks the same questions each
 * time, so most checks repeat an earlier one exactly. This library interposes the solver entry points TVM imports
 * and keys each check on its whole content: the solver's parameters, the formulas asserted on it in order (push and
 * pop included) and the assumptions of the check, every formula by a 128-bit digest of its structure (operators,
 * constant names, numerals, sorts, arguments). The digest is computed through Z3's term API: printing terms as text
 * cost more than the solving it saved. Two different queries share a key only if digests collide.
 *
 * A remembered verdict is one Z3 gave to this very query, but not always the one the solver at hand would give:
 * checks are incremental and bounded by a resource limit, so a solver's history can turn a proof into "unknown".
 * The lowered CUDA is therefore compared with and without this library over the whole default manifest
 * (docs/LOWERING.md §4) and the build cache keys every lowering on whether it was used.
 *
 * build_tools/z3memo.py loads it with RTLD_GLOBAL before TileLang, so that TVM's references bind here, and hands
 * over the libz3 the real entry points come from. z3memo_clear() forgets the answers: build_tools.lower calls it
 * before each variant, so a variant's lowering never depends on what else its process lowered. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void *ctx_t, *solver_t, *ast_t, *params_t, *symbol_t, *model_t, *sort_t, *app_t, *decl_t;

static int (*real_check_assumptions)(ctx_t, solver_t, unsigned, const ast_t *);
static int (*real_check)(ctx_t, solver_t);
static void (*real_assert)(ctx_t, solver_t, ast_t);
static void (*real_push)(ctx_t, solver_t);
static void (*real_pop)(ctx_t, solver_t, unsigned);
static solver_t (*real_mk_solver)(ctx_t);
static params_t (*real_mk_params)(ctx_t);
static void (*real_params_set_uint)(ctx_t, params_t, symbol_t, unsigned);
static void (*real_params_set_bool)(ctx_t, params_t, symbol_t, int);
static void (*real_solver_set_params)(ctx_t, solver_t, params_t);
static model_t (*real_get_model)(ctx_t, solver_t);
static const char *(*real_ast_to_string)(ctx_t, ast_t);
static const char *(*real_symbol_string)(ctx_t, symbol_t);
static void (*real_inc_ref)(ctx_t, ast_t);
static int (*real_get_ast_kind)(ctx_t, ast_t);
static app_t (*real_to_app)(ctx_t, ast_t);
static decl_t (*real_get_app_decl)(ctx_t, app_t);
static unsigned (*real_get_app_num_args)(ctx_t, app_t);
static ast_t (*real_get_app_arg)(ctx_t, app_t, unsigned);
static int (*real_get_decl_kind)(ctx_t, decl_t);
static symbol_t (*real_get_decl_name)(ctx_t, decl_t);
static unsigned (*real_get_decl_num_parameters)(ctx_t, decl_t);
static int (*real_get_decl_parameter_kind)(ctx_t, decl_t, unsigned);
static int (*real_get_decl_int_parameter)(ctx_t, decl_t, unsigned);
static const char *(*real_func_decl_to_string)(ctx_t, decl_t);
static sort_t (*real_get_sort)(ctx_t, ast_t);
static int (*real_get_sort_kind)(ctx_t, sort_t);
static unsigned (*real_get_bv_sort_size)(ctx_t, sort_t);
static const char *(*real_sort_to_string)(ctx_t, sort_t);
static const char *(*real_get_numeral_string)(ctx_t, ast_t);
static void (*real_del_context)(ctx_t);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static long n_checks, n_hits;

static void fail(const char *what) {
  fprintf(stderr, "kernelkiln z3memo: %s\n", what);
  abort();
}

static void *grow(void *p, size_t bytes) {
  p = realloc(p, bytes);
  if (!p) fail("out of memory");
  return p;
}

/* ---- growable uint32 vectors ---- */
typedef struct {
  uint32_t *v;
  size_t n, cap;
} vec_t;

static void vec_push(vec_t *a, uint32_t x) {
  if (a->n == a->cap) a->cap = a->cap ? 2 * a->cap : 16, a->v = grow(a->v, a->cap * sizeof *a->v);
  a->v[a->n++] = x;
}

static uint64_t hash_bytes(const void *p, size_t n, uint64_t h) {
  const unsigned char *s = p;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ULL;
  return h;
}
#define HASH0 1469598103934665603ULL

/* ---- interned texts: text -> permanent id; equality by strcmp ---- */
typedef struct {
  char *text;
  uint64_t hash;
  uint32_t id;
} text_t;
static text_t *texts;
static uint32_t next_id; /* ids of texts and of digests: one sequence, 0 unused */
static size_t texts_cap, texts_n;

static void texts_rehash(void) {
  size_t cap = texts_cap ? 2 * texts_cap : 1 << 12;
  text_t *t = calloc(cap, sizeof *t);
  if (!t) fail("out of memory");
  for (size_t i = 0; i < texts_cap; i++)
    if (texts[i].text) {
      size_t j = texts[i].hash & (cap - 1);
      while (t[j].text) j = (j + 1) & (cap - 1);
      t[j] = texts[i];
    }
  free(texts);
  texts = t, texts_cap = cap;
}

static uint32_t text_id(const char *text) {
  if (2 * (texts_n + 1) > texts_cap) texts_rehash();
  uint64_t h = hash_bytes(text, strlen(text), HASH0);
  size_t j = h & (texts_cap - 1);
  while (texts[j].text && !(texts[j].hash == h && strcmp(texts[j].text, text) == 0)) j = (j + 1) & (texts_cap - 1);
  if (!texts[j].text) {
    texts[j].text = strdup(text);
    if (!texts[j].text) fail("out of memory");
    texts[j].hash = h, texts[j].id = ++next_id, texts_n++;
  }
  return texts[j].id;
}

/* ---- the digest of a term: 128 bits over its structure (operator, constant names, numerals, sorts, arguments),
 * the same in every context, computed through Z3's API rather than its slow printer. Remembered per context and
 * term; each remembered term is pinned (Z3_inc_ref), so that its address cannot be reused for another term
 * before its context is deleted. Two different queries would share a key only if their digests collided. ---- */
typedef struct {
  uint64_t a, b;
} digest_t;

static uint64_t mix64(uint64_t x) { /* splitmix64's finalizer */
  x ^= x >> 30, x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27, x *= 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
static void feed(digest_t *d, uint64_t x) {
  d->a = mix64(d->a ^ (x + 0x9e3779b97f4a7c15ULL));
  d->b = mix64((d->b + x) * 0xff51afd7ed558ccdULL ^ 0xc4ceb9fe1a85ec53ULL);
}
static void feed_text(digest_t *d, const char *t) {
  size_t n = strlen(t);
  feed(d, n);
  feed(d, hash_bytes(t, n, HASH0));
  feed(d, hash_bytes(t, n, 0x84222325cbf29ce4ULL));
}

typedef struct {
  ast_t ast;
  digest_t digest;
} ast_digest_t;
typedef struct {
  ctx_t ctx;
  ast_digest_t *tab;
  size_t cap, n;
} ctx_cache_t;
static ctx_cache_t *ctxs;
static size_t ctxs_cap;

static ctx_cache_t *ctx_cache(ctx_t c) {
  for (size_t i = 0; i < ctxs_cap; i++)
    if (ctxs[i].ctx == c) return &ctxs[i];
  for (size_t i = 0; i < ctxs_cap; i++)
    if (!ctxs[i].ctx) return ctxs[i].ctx = c, &ctxs[i];
  size_t old = ctxs_cap;
  ctxs_cap = ctxs_cap ? 2 * ctxs_cap : 16;
  ctxs = grow(ctxs, ctxs_cap * sizeof *ctxs);
  memset(ctxs + old, 0, (ctxs_cap - old) * sizeof *ctxs);
  ctxs[old].ctx = c;
  return &ctxs[old];
}

static ast_digest_t *ctx_slot(ctx_cache_t *cc, ast_t a) {
  if (2 * (cc->n + 1) > cc->cap) {
    size_t cap = cc->cap ? 2 * cc->cap : 256;
    ast_digest_t *t = calloc(cap, sizeof *t);
    if (!t) fail("out of memory");
    for (size_t i = 0; i < cc->cap; i++)
      if (cc->tab[i].ast) {
        size_t j = ((uintptr_t)cc->tab[i].ast >> 4) & (cap - 1);
        while (t[j].ast) j = (j + 1) & (cap - 1);
        t[j] = cc->tab[i];
      }
    free(cc->tab);
    cc->tab = t, cc->cap = cap;
  }
  size_t j = ((uintptr_t)a >> 4) & (cc->cap - 1);
  while (cc->tab[j].ast && cc->tab[j].ast != a) j = (j + 1) & (cc->cap - 1);
  return &cc->tab[j];
}

enum { AST_NUMERAL = 0, AST_APP = 1 };                 /* Z3_ast_kind */
enum { SORT_BV = 4 };                                  /* Z3_sort_kind */
enum { OP_UNINTERPRETED = 45102, PARAM_INT = 0 };      /* Z3_decl_kind, Z3_parameter_kind */

static void feed_sort(digest_t *d, ctx_t c, sort_t s) {
  int kind = real_get_sort_kind(c, s);
  feed(d, 0x50 + kind);
  if (kind == SORT_BV)
    feed(d, real_get_bv_sort_size(c, s));
  else if (kind == 0 || kind > 3) /* not bool, int or real: name it in full */
    feed_text(d, real_sort_to_string(c, s));
}

static digest_t term_digest(ctx_t c, ctx_cache_t *cc, ast_t a) {
  ast_digest_t *slot = ctx_slot(cc, a);
  if (slot->ast) return slot->digest;
  digest_t d = {0x6a09e667f3bcc908ULL, 0xbb67ae8584caa73bULL};
  int kind = real_get_ast_kind(c, a);
  feed(&d, kind);
  if (kind == AST_NUMERAL) {
    feed_sort(&d, c, real_get_sort(c, a));
    feed_text(&d, real_get_numeral_string(c, a));
  } else if (kind == AST_APP) {
    app_t app = real_to_app(c, a);
    decl_t f = real_get_app_decl(c, app);
    int op = real_get_decl_kind(c, f);
    feed(&d, op);
    if (op == OP_UNINTERPRETED) feed_text(&d, real_symbol_string(c, real_get_decl_name(c, f)));
    unsigned np = real_get_decl_num_parameters(c, f);
    feed(&d, np);
    for (unsigned i = 0; i < np; i++) {
      if (real_get_decl_parameter_kind(c, f, i) == PARAM_INT) {
        feed(&d, (uint64_t)(int64_t)real_get_decl_int_parameter(c, f, i));
      } else { /* a rational, symbol or sort parameter: the declaration's text says it */
        feed_text(&d, real_func_decl_to_string(c, f));
        break;
      }
    }
    feed_sort(&d, c, real_get_sort(c, a));
    unsigned n = real_get_app_num_args(c, app);
    feed(&d, n);
    for (unsigned i = 0; i < n; i++) {
      digest_t child = term_digest(c, cc, real_get_app_arg(c, app, i));
      feed(&d, child.a), feed(&d, child.b);
    }
    slot = ctx_slot(cc, a); /* the table may have grown during the recursion */
  } else { /* quantifiers and bound variables (TVM makes none): the full text */
    feed_text(&d, real_ast_to_string(c, a));
  }
  real_inc_ref(c, a);
  slot->ast = a, slot->digest = d, cc->n++;
  return d;
}

/* ---- digests -> permanent ids (exact over the 128 bits) ---- */
typedef struct {
  digest_t d;
  uint32_t id;
} digest_id_t;
static digest_id_t *dids;
static size_t dids_cap, dids_n;

static uint32_t digest_id(digest_t d) {
  if (2 * (dids_n + 1) > dids_cap) {
    size_t cap = dids_cap ? 2 * dids_cap : 1 << 12;
    digest_id_t *t = calloc(cap, sizeof *t);
    if (!t) fail("out of memory");
    for (size_t i = 0; i < dids_cap; i++)
      if (dids[i].id) {
        size_t j = dids[i].d.a & (cap - 1);
        while (t[j].id) j = (j + 1) & (cap - 1);
        t[j] = dids[i];
      }
    free(dids);
    dids = t, dids_cap = cap;
  }
  size_t j = d.a & (dids_cap - 1);
  while (dids[j].id && !(dids[j].d.a == d.a && dids[j].d.b == d.b)) j = (j + 1) & (dids_cap - 1);
  if (!dids[j].id) dids[j].d = d, dids[j].id = ++next_id, dids_n++;
  return dids[j].id;
}

static uint32_t ast_text_id(ctx_t c, ast_t a) { return digest_id(term_digest(c, ctx_cache(c), a)); }

void Z3_del_context(ctx_t c) {
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < ctxs_cap; i++)
    if (ctxs[i].ctx == c) {
      free(ctxs[i].tab);
      memset(&ctxs[i], 0, sizeof ctxs[i]);
    }
  pthread_mutex_unlock(&lock);
  real_del_context(c); /* frees the pinned terms with everything else */
}

/* ---- per-solver and per-params state, by pointer (reset when Z3 hands out the pointer again) ---- */
typedef struct {
  void *ptr;
  uint32_t params; /* text id of the parameters set on the solver, 0: none */
  vec_t asserted;  /* text ids of the asserted formulas, in order */
  vec_t marks;     /* asserted.n at each push */
  char *params_text;
} obj_t;
static obj_t *objs;
static size_t objs_cap, objs_n;

static obj_t *obj(void *ptr, int fresh) {
  if (2 * (objs_n + 1) > objs_cap) {
    size_t cap = objs_cap ? 2 * objs_cap : 1 << 10;
    obj_t *t = calloc(cap, sizeof *t);
    if (!t) fail("out of memory");
    for (size_t i = 0; i < objs_cap; i++)
      if (objs[i].ptr) {
        size_t j = ((uintptr_t)objs[i].ptr >> 4) & (cap - 1);
        while (t[j].ptr) j = (j + 1) & (cap - 1);
        t[j] = objs[i];
      }
    free(objs);
    objs = t, objs_cap = cap;
  }
  size_t j = ((uintptr_t)ptr >> 4) & (objs_cap - 1);
  while (objs[j].ptr && objs[j].ptr != ptr) j = (j + 1) & (objs_cap - 1);
  obj_t *o = &objs[j];
  if (!o->ptr) o->ptr = ptr, objs_n++;
  if (fresh) {
    o->params = 0, o->asserted.n = 0, o->marks.n = 0;
    free(o->params_text);
    o->params_text = NULL;
  }
  return o;
}

/* ---- the answers: key (uint32 sequence) -> verdict ---- */
typedef struct {
  uint32_t *key;
  size_t n;
  uint64_t hash;
  int verdict;
} answer_t;
static answer_t *answers;
static size_t answers_cap, answers_n;

static void answers_rehash(void) {
  size_t cap = answers_cap ? 2 * answers_cap : 1 << 12;
  answer_t *t = calloc(cap, sizeof *t);
  if (!t) fail("out of memory");
  for (size_t i = 0; i < answers_cap; i++)
    if (answers[i].key) {
      size_t j = answers[i].hash & (cap - 1);
      while (t[j].key) j = (j + 1) & (cap - 1);
      t[j] = answers[i];
    }
  free(answers);
  answers = t, answers_cap = cap;
}

static answer_t *answer_slot(const vec_t *key, uint64_t h) {
  if (2 * (answers_n + 1) > answers_cap) answers_rehash();
  size_t j = h & (answers_cap - 1);
  while (answers[j].key && !(answers[j].hash == h && answers[j].n == key->n &&
                             memcmp(answers[j].key, key->v, key->n * sizeof *key->v) == 0))
    j = (j + 1) & (answers_cap - 1);
  return &answers[j];
}

/* ---- the interposed entry points ---- */
static solver_t skipped_solver; /* the solver whose last check was answered from memory */
static ctx_t skipped_ctx;
static ast_t *skipped_assumptions;
static unsigned skipped_n;

solver_t Z3_mk_solver(ctx_t c) {
  solver_t s = real_mk_solver(c);
  pthread_mutex_lock(&lock);
  obj(s, 1);
  pthread_mutex_unlock(&lock);
  return s;
}

params_t Z3_mk_params(ctx_t c) {
  params_t p = real_mk_params(c);
  pthread_mutex_lock(&lock);
  obj(p, 1);
  pthread_mutex_unlock(&lock);
  return p;
}

static void params_append(ctx_t c, params_t p, symbol_t k, const char *value) {
  pthread_mutex_lock(&lock);
  obj_t *o = obj(p, 0);
  const char *name = real_symbol_string(c, k);
  size_t old = o->params_text ? strlen(o->params_text) : 0;
  o->params_text = grow(o->params_text, old + strlen(name) + strlen(value) + 3);
  sprintf(o->params_text + old, "%s=%s;", name, value);
  pthread_mutex_unlock(&lock);
}

void Z3_params_set_uint(ctx_t c, params_t p, symbol_t k, unsigned v) {
  char buf[24];
  snprintf(buf, sizeof buf, "%u", v);
  params_append(c, p, k, buf);
  real_params_set_uint(c, p, k, v);
}

void Z3_params_set_bool(ctx_t c, params_t p, symbol_t k, int v) {
  params_append(c, p, k, v ? "true" : "false");
  real_params_set_bool(c, p, k, v);
}

void Z3_solver_set_params(ctx_t c, solver_t s, params_t p) {
  pthread_mutex_lock(&lock);
  obj_t *po = obj(p, 0);
  uint32_t id = text_id(po->params_text ? po->params_text : "");
  obj_t *so = obj(s, 0);
  /* parameters accumulate (a later set overrides one name); keep the whole history in the key */
  if (so->params) {
    char buf[32];
    snprintf(buf, sizeof buf, "%u+%u", so->params, id);
    id = text_id(buf);
  }
  so->params = id;
  pthread_mutex_unlock(&lock);
  real_solver_set_params(c, s, p);
}

void Z3_solver_assert(ctx_t c, solver_t s, ast_t a) {
  pthread_mutex_lock(&lock);
  vec_push(&obj(s, 0)->asserted, ast_text_id(c, a));
  pthread_mutex_unlock(&lock);
  real_assert(c, s, a);
}

void Z3_solver_push(ctx_t c, solver_t s) {
  pthread_mutex_lock(&lock);
  obj_t *o = obj(s, 0);
  vec_push(&o->marks, (uint32_t)o->asserted.n);
  pthread_mutex_unlock(&lock);
  real_push(c, s);
}

void Z3_solver_pop(ctx_t c, solver_t s, unsigned n) {
  pthread_mutex_lock(&lock);
  obj_t *o = obj(s, 0);
  if (n > o->marks.n) fail("pop below the first push");
  o->marks.n -= n;
  if (n) o->asserted.n = o->marks.v[o->marks.n]; /* back to the earliest popped push */
  pthread_mutex_unlock(&lock);
  real_pop(c, s, n);
}

int Z3_solver_check_assumptions(ctx_t c, solver_t s, unsigned n, const ast_t *a) {
  vec_t key = {0};
  pthread_mutex_lock(&lock);
  n_checks++;
  skipped_solver = NULL;
  obj_t *o = obj(s, 0);
  key.n = 0;
  vec_push(&key, o->params);
  for (size_t i = 0; i < o->asserted.n; i++) vec_push(&key, o->asserted.v[i]);
  vec_push(&key, 0); /* no text has id 0: separates the assertions from the assumptions */
  for (unsigned i = 0; i < n; i++) vec_push(&key, ast_text_id(c, a[i]));
  uint64_t h = hash_bytes(key.v, key.n * sizeof *key.v, HASH0);
  answer_t *slot = answer_slot(&key, h);
  if (slot->key) {
    int verdict = slot->verdict;
    n_hits++;
    skipped_solver = s, skipped_ctx = c, skipped_n = n;
    skipped_assumptions = grow(skipped_assumptions, (n ? n : 1) * sizeof *skipped_assumptions);
    memcpy(skipped_assumptions, a, n * sizeof *a);
    pthread_mutex_unlock(&lock);
    free(key.v);
    return verdict;
  }
  pthread_mutex_unlock(&lock);
  int verdict = real_check_assumptions(c, s, n, a);
  pthread_mutex_lock(&lock);
  slot = answer_slot(&key, h); /* the table may have changed while unlocked */
  if (!slot->key) {
    slot->key = grow(NULL, (key.n ? key.n : 1) * sizeof *key.v);
    memcpy(slot->key, key.v, key.n * sizeof *key.v);
    slot->n = key.n, slot->hash = h, slot->verdict = verdict;
    answers_n++;
  }
  pthread_mutex_unlock(&lock);
  free(key.v);
  return verdict;
}

int Z3_solver_check(ctx_t c, solver_t s) {
  pthread_mutex_lock(&lock);
  skipped_solver = NULL;
  pthread_mutex_unlock(&lock);
  return real_check(c, s);
}

model_t Z3_solver_get_model(ctx_t c, solver_t s) {
  /* a model exists only after a real check: solve the remembered query now (it is the same query) */
  pthread_mutex_lock(&lock);
  int redo = s == skipped_solver;
  skipped_solver = NULL;
  pthread_mutex_unlock(&lock);
  if (redo) real_check_assumptions(c, s, skipped_n, skipped_assumptions);
  return real_get_model(c, s);
}

/* ---- control, from build_tools/z3memo.py ---- */
int z3memo_init(const char *libz3) {
  void *h = dlopen(libz3, RTLD_NOW | RTLD_LOCAL);
  if (!h) return -1;
#define BIND(var, name)                                  \
  if (!(*(void **)&var = dlsym(h, name))) return -2;
  BIND(real_check_assumptions, "Z3_solver_check_assumptions");
  BIND(real_check, "Z3_solver_check");
  BIND(real_assert, "Z3_solver_assert");
  BIND(real_push, "Z3_solver_push");
  BIND(real_pop, "Z3_solver_pop");
  BIND(real_mk_solver, "Z3_mk_solver");
  BIND(real_mk_params, "Z3_mk_params");
  BIND(real_params_set_uint, "Z3_params_set_uint");
  BIND(real_params_set_bool, "Z3_params_set_bool");
  BIND(real_solver_set_params, "Z3_solver_set_params");
  BIND(real_get_model, "Z3_solver_get_model");
  BIND(real_ast_to_string, "Z3_ast_to_string");
  BIND(real_symbol_string, "Z3_get_symbol_string");
  BIND(real_inc_ref, "Z3_inc_ref");
  BIND(real_get_ast_kind, "Z3_get_ast_kind");
  BIND(real_to_app, "Z3_to_app");
  BIND(real_get_app_decl, "Z3_get_app_decl");
  BIND(real_get_app_num_args, "Z3_get_app_num_args");
  BIND(real_get_app_arg, "Z3_get_app_arg");
  BIND(real_get_decl_kind, "Z3_get_decl_kind");
  BIND(real_get_decl_name, "Z3_get_decl_name");
  BIND(real_get_decl_num_parameters, "Z3_get_decl_num_parameters");
  BIND(real_get_decl_parameter_kind, "Z3_get_decl_parameter_kind");
  BIND(real_get_decl_int_parameter, "Z3_get_decl_int_parameter");
  BIND(real_func_decl_to_string, "Z3_func_decl_to_string");
  BIND(real_get_sort, "Z3_get_sort");
  BIND(real_get_sort_kind, "Z3_get_sort_kind");
  BIND(real_get_bv_sort_size, "Z3_get_bv_sort_size");
  BIND(real_sort_to_string, "Z3_sort_to_string");
  BIND(real_get_numeral_string, "Z3_get_numeral_string");
  BIND(real_del_context, "Z3_del_context");
#undef BIND
  return 0;
}

void z3memo_clear(void) {
  pthread_mutex_lock(&lock);
  for (size_t i = 0; i < answers_cap; i++) free(answers[i].key);
  free(answers);
  answers = NULL, answers_cap = answers_n = 0;
  skipped_solver = NULL;
  pthread_mutex_unlock(&lock);
}

void z3memo_counts(long *out) {
  pthread_mutex_lock(&lock);
  out[0] = n_checks, out[1] = n_hits;
  pthread_mutex_unlock(&lock);
}
