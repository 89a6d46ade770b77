"""Remembered Z3 answers (build_tools/z3memo.c, docs/LOWERING.md §4): what counts as the same query, and that a
lowering with them gives the CUDA a lowering without them gives.

The interposer is loaded with RTLD_GLOBAL, so every case runs in a subprocess of its own: this pytest process may
already hold TileLang, whose Z3 references would then be bound past it."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from build_tools import cache, z3memo  # noqa: E402

pytest.importorskip("z3", reason="z3-solver (a TileLang dependency) is not installed")


def _run(script, **env):
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                       cwd=ROOT, env={**os.environ, **env}, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


# Drives the interposed solver entry points directly through the shim's handle (z3py would bind past it: it loads
# libz3 privately) and builds the terms with the real libz3.
_SOLVER_SCRIPT = """
import ctypes, json, sys
sys.path.insert(0, ".")
from build_tools import z3memo
z3 = ctypes.CDLL(str(z3memo._libz3()))
shim = ctypes.CDLL(str(z3memo._compiled()), mode=ctypes.RTLD_GLOBAL)
assert shim.z3memo_init(str(z3memo._libz3()).encode()) == 0
P = ctypes.c_void_p
def fn(lib, name, res, *args):
    f = getattr(lib, name); f.restype = res; f.argtypes = list(args); return f
mk_config = fn(z3, "Z3_mk_config", P)
mk_context = fn(z3, "Z3_mk_context_rc", P, P)
int_sort = fn(z3, "Z3_mk_int_sort", P, P)
sym = fn(z3, "Z3_mk_string_symbol", P, P, ctypes.c_char_p)
const = fn(z3, "Z3_mk_const", P, P, P, P)
num = fn(z3, "Z3_mk_int", P, P, ctypes.c_int, P)
gt = fn(z3, "Z3_mk_gt", P, P, P, P)
lt = fn(z3, "Z3_mk_lt", P, P, P, P)
inc = fn(z3, "Z3_inc_ref", None, P, P)
solver_inc = fn(z3, "Z3_solver_inc_ref", None, P, P)
params_inc = fn(z3, "Z3_params_inc_ref", None, P, P)
mk_solver = fn(shim, "Z3_mk_solver", P, P)
mk_params = fn(shim, "Z3_mk_params", P, P)
set_uint = fn(shim, "Z3_params_set_uint", None, P, P, P, ctypes.c_uint)
set_params = fn(shim, "Z3_solver_set_params", None, P, P, P)
assert_ = fn(shim, "Z3_solver_assert", None, P, P, P)
push = fn(shim, "Z3_solver_push", None, P, P)
pop = fn(shim, "Z3_solver_pop", None, P, P, ctypes.c_uint)
check = fn(shim, "Z3_solver_check_assumptions", ctypes.c_int, P, P, ctypes.c_uint, ctypes.POINTER(P))
get_model = fn(shim, "Z3_solver_get_model", P, P, P)

def counts():
    buf = (ctypes.c_long * 2)(); shim.z3memo_counts(buf); return [buf[0], buf[1]]

class Ctx:
    def __init__(self):
        self.c = mk_context(mk_config())
    def term(self, t):
        inc(self.c, t); return t
    def x(self, name="x"):
        return self.term(const(self.c, sym(self.c, name.encode()), int_sort(self.c)))
    def n(self, v):
        return self.term(num(self.c, v, int_sort(self.c)))
    def solver(self, rlimit=None):
        s = mk_solver(self.c); solver_inc(self.c, s)
        if rlimit is not None:
            p = mk_params(self.c); params_inc(self.c, p)
            set_uint(self.c, p, sym(self.c, b"rlimit"), rlimit); set_params(self.c, s, p)
        return s
    def check(self, s, *assumptions):
        arr = (P * max(1, len(assumptions)))(*assumptions)
        return check(self.c, s, len(assumptions), arr)

out = {}
a = Ctx(); x = a.x(); s = a.solver()
push(a.c, s); assert_(a.c, s, a.term(gt(a.c, x, a.n(5))))
out["pushed"] = a.check(s, a.term(lt(a.c, x, a.n(3))))            # x > 5, x < 3: unsat
pop(a.c, s, 1)
out["popped"] = a.check(s, a.term(lt(a.c, x, a.n(3))))            # the assertion is gone: sat, not remembered
out["counts_fresh"] = counts()
push(a.c, s); assert_(a.c, s, a.term(gt(a.c, x, a.n(5))))
out["repeated"] = a.check(s, a.term(lt(a.c, x, a.n(3))))           # the first query again, from memory
pop(a.c, s, 1)
out["repeated_sat"] = a.check(s, a.term(lt(a.c, x, a.n(3))))       # the second one again, from memory
out["model_after_hit"] = bool(get_model(a.c, s))                     # a model needs the real check: it is redone
out["counts_repeated"] = counts()
b = Ctx(); s2 = b.solver()                                            # same query built anew in another context
assert_(b.c, s2, b.term(gt(b.c, b.x(), b.n(5))))
out["other_context"] = b.check(s2, b.term(lt(b.c, b.x(), b.n(3))))
out["counts_other_context"] = counts()
s3 = b.solver()                                                       # other constant, other name: new queries
assert_(b.c, s3, b.term(gt(b.c, b.x(), b.n(1))))
out["other_constant"] = b.check(s3, b.term(lt(b.c, b.x(), b.n(3))))
s4 = b.solver()
assert_(b.c, s4, b.term(gt(b.c, b.x("y"), b.n(5))))
out["other_name"] = b.check(s4, b.term(lt(b.c, b.x(), b.n(3))))
s5 = b.solver(rlimit=10000)                                          # other parameters: a new query
assert_(b.c, s5, b.term(gt(b.c, b.x(), b.n(5))))
out["other_params"] = b.check(s5, b.term(lt(b.c, b.x(), b.n(3))))
out["counts_new_queries"] = counts()
shim.z3memo_clear()
s6 = b.solver()
assert_(b.c, s6, b.term(gt(b.c, b.x(), b.n(5))))
out["after_clear"] = b.check(s6, b.term(lt(b.c, b.x(), b.n(3))))
out["counts_after_clear"] = counts()
print(json.dumps(out))
"""

SAT, UNSAT = 1, -1  # Z3_lbool


def test_the_same_query_is_answered_from_memory_and_only_the_same():
    out = _run(_SOLVER_SCRIPT)
    assert out["pushed"] == UNSAT and out["popped"] == SAT
    assert out["counts_fresh"] == [2, 0]
    # both repeats come from memory, with the verdict of the real check
    assert out["repeated"] == UNSAT and out["repeated_sat"] == SAT
    assert out["counts_repeated"] == [4, 2]
    assert out["model_after_hit"] is True
    # a term's key is its structure, not its address: the same query in another context is a repeat
    assert out["other_context"] == UNSAT and out["counts_other_context"] == [5, 3]
    # a different constant, constant name or solver parameter is a different query, solved for real
    assert out["other_constant"] == SAT and out["other_name"] == SAT and out["other_params"] == UNSAT
    assert out["counts_new_queries"] == [8, 3]
    assert out["after_clear"] == UNSAT and out["counts_after_clear"] == [9, 3]


_LOWER_SCRIPT = """
import json, sys, warnings
sys.path.insert(0, ".")
warnings.simplefilter("ignore")
from build_tools import lower, manifest, z3memo
op = "engram_gate_fwd"
v = manifest.expand(op, [dict(manifest.CONTRACTS[op].representative)])[0]
src, launch, _ = lower.lower_variant(v, "sm_90a")
print(json.dumps({"state": z3memo.state(), "counts": z3memo.counts(), "src": src, "launch": launch}))
"""


def test_lowering_with_remembered_answers_gives_the_same_kernel():
    pytest.importorskip("tilelang", reason="lowering needs TileLang (requirements/build.txt)")
    on = _run(_LOWER_SCRIPT)
    off = _run(_LOWER_SCRIPT, KERNELKILN_Z3_MEMO="off")
    assert on["state"].startswith("z3memo-") and off["state"] == "off"
    checks, hits = on["counts"]
    assert hits > checks // 2, on["counts"]  # this kernel's simplifier repeats most of its Z3 queries
    assert off["counts"] == [0, 0]
    assert on["src"] == off["src"] and on["launch"] == off["launch"]


def test_the_lowering_cache_key_names_the_memo_state(monkeypatch):
    class V:
        key = "op(a=1)"

    module = ROOT / "kernels" / "engram" / "engram_gate_fwd.py"
    monkeypatch.setattr(z3memo, "state", lambda: "off")
    off = cache.lower_key(V, "sm_90a", module)
    monkeypatch.setattr(z3memo, "state", lambda: "z3memo-0123456789abcdef")
    assert cache.lower_key(V, "sm_90a", module) != off


def test_off_switch(monkeypatch):
    for value in ("off", "0", "no", "OFF"):
        monkeypatch.setenv("KERNELKILN_Z3_MEMO", value)
        assert not z3memo.enabled()
    monkeypatch.delenv("KERNELKILN_Z3_MEMO")
    assert z3memo.enabled()


def test_a_missing_compiler_says_how_to_do_without(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("CC", str(tmp_path / "no-such-cc"))
    with pytest.raises(z3memo.Z3MemoError, match="KERNELKILN_Z3_MEMO=off"):
        z3memo._compiled()
