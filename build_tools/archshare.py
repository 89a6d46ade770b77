"""One lowering for two CUDA arches where TileLang provably takes the same path on both (docs/LOWERING.md §5).

A variant's lowering can depend on the arch in three ways only: the kernel module builds another PrimFunc for it
(``build(p, arch)``), TileLang's C++ asks about it, or TileLang's Python asks about it. ``trace`` watches all three
while the variant is lowered for its first arch, and asks every question about the other arch as well:

- the PrimFunc the kernel module builds for the other arch must be structurally equal to this one (or its
  ``build`` provably never looks at the arch: ``frontend_ignores_arch``), and the two targets must agree on every
  attribute but the arch;
- TileLang's C++ reads the arch in one file (src/cuda/target_utils.cc) and the rest of it asks the predicates that
  file exports; build_tools/archtrace.c takes them over. Two callers are compared by what they decide instead of
  by the predicate they ask: the vectorizer's width cap (MaxVectorLoadBits asks about 256-bit accesses even where
  it then answers 128 on every arch) and the vector size VectorizePlanner::Plan returns, which archtrace.c has a
  forked child compute as the other arch whenever the cap differs (the parent's state stays as it was);
- TileLang's Python reads the arch through ``Target.attrs``: its readers on the lowering path (tilelang.contrib.nvcc's
  have_tma / have_pdl / ..., tilelang._ffi_api's target predicates) are compared by their answers, any other read
  of a CUDA target's attributes during the lowering counts as a difference, and the two passes that only act on
  another arch (LowerBlackwell2SM: T.gemm; InjectTcgen05Fence: tcgen05 / TMEM operations) count only if the module
  holds what they would rewrite.

If nothing differed, the other arch's lowering would see the same inputs and get the same answer at every branch,
so its CUDA is this one's and its launch spec differs only in the arch it names. ``supported()`` refuses (and the
build lowers every arch) for another TileLang release than the audited one, when its sources read the arch
anywhere else, declare a predicate archtrace.c does not know, or when calls do not reach the interposer.

KERNELKILN_ARCH_SHARE=off lowers every arch on its own.
"""
import contextlib
import ctypes
import functools
import os
import re
from pathlib import Path

from build_tools import cshim

SOURCE = Path(__file__).with_name("archtrace.c")
OFF_SWITCH = "KERNELKILN_ARCH_SHARE=off"
_lib = None
_why_not = None  # why sharing is unavailable in this process, once known


def enabled():
    return os.environ.get("KERNELKILN_ARCH_SHARE", "on").lower() not in ("off", "0", "no")


def explain():
    """KERNELKILN_ARCH_SHARE=explain: share as usual, and the lowering processes print (stderr) each lowering and,
    for every variant not shared, the differences found (with the C++ call sites, see _differing_sites)."""
    return os.environ.get("KERNELKILN_ARCH_SHARE", "on").lower() == "explain"


def activate():
    """Load the interposer (before TileLang, as z3memo does); a failure only turns sharing off."""
    global _lib, _why_not
    if _lib is not None or _why_not is not None:
        return
    if not enabled():
        _why_not = f"{OFF_SWITCH} is set"
    elif cshim.tilelang_loaded():
        _why_not = "TileLang was loaded before build_tools.archshare"
    else:
        try:
            # -fexceptions: a TVM error thrown inside a wrapped predicate or Plan must unwind through these C frames
            # to TileLang's Python binding, as it did before, not terminate the process
            lib = cshim.compiled(SOURCE, OFF_SWITCH, ("-fexceptions", "-ldl"))
            _lib = ctypes.CDLL(str(lib), mode=ctypes.RTLD_GLOBAL)
        except (cshim.ShimError, OSError) as e:
            _why_not = f"build_tools/archtrace.c is not available ({e})"


# The C++ predicates archtrace.c takes over: every function of src/cuda/target_utils.cc that takes a Target.
_TRACED = {"TargetIsCuda", "TargetIsVolta", "TargetIsTuring", "TargetIsAmpere", "TargetIsHopper", "TargetIsSm100",
           "TargetIsSM120", "TargetCudaHasAsyncCopy", "TargetHasLdmatrix", "TargetHasTmem", "TargetHasBulkCopy",
           "TargetSupportsNamedBarrier", "TargetSupportVectorize256", "TargetHasStmatrix", "TargetHasSMVersionGE"}
_ARCH_FREE = {"TargetIsCuTeDSL", "TargetCudaGetWarpSize"}  # read the target's keys / nothing, never its arch
_ARCH_READ = re.compile(r'"arch"')  # any mention of the attribute's name, however it is read


# The TileLang release whose sources the argument above was checked against: that MaxVectorLoadBits asks only
# TargetSupportVectorize256, that VectorizePlanner::Plan asks it before it changes any state and that its callers
# use nothing of it but its result, and what LowerBlackwell2SM and InjectTcgen05Fence rewrite. Another release
# lowers every arch on its own until re-checked.
AUDITED_TILELANG = "0.1.15"


@functools.cache
def _tilelang_check():
    """None if the installed TileLang reads the CUDA arch only where archtrace.c watches it, else why not."""
    import importlib.metadata

    import tilelang
    version = importlib.metadata.version("tilelang")
    if version != AUDITED_TILELANG:
        return (f"TileLang {version} is installed; build_tools/archshare.py was checked against "
                f"{AUDITED_TILELANG} only")
    src = Path(tilelang.__file__).parent / "src"
    utils = src / "cuda" / "target_utils.cc"
    header = src / "cuda" / "target_utils.h"
    if not utils.is_file() or not header.is_file():
        return f"TileLang's sources ({utils}) are not installed, so where it reads the arch cannot be checked"
    readers = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.suffix in (".cc", ".h", ".cu")
                     and not str(p.relative_to(src)).startswith(("rocm/", "metal/", "ascend/", "cpu/"))
                     and _ARCH_READ.search(p.read_text(errors="replace")))
    if readers != ["cuda/target_utils.cc"]:
        return f"TileLang reads the CUDA arch attribute in {readers}, not only in cuda/target_utils.cc"
    declared = set(re.findall(r"^\s*(?:bool|int)\s+(Target\w+)\s*\(\s*Target\b", header.read_text(), re.M))
    if declared - _ARCH_FREE != _TRACED:
        return (f"TileLang's cuda/target_utils.h declares {sorted(declared)}; archtrace.c knows "
                f"{sorted(_TRACED | _ARCH_FREE)}")
    if _lib.archtrace_bind() != 0:
        return "libtilelang.so lacks a predicate archtrace.c expects"
    if _lib.archtrace_interposed() != 1:
        return "libtilelang's target predicates do not resolve to build_tools/archtrace.c"
    return None


def supported():
    """None if lowerings in this process can be shared between arches, else the reason they cannot."""
    if _why_not is not None:
        return _why_not
    if _lib is None:
        return "build_tools.archshare.activate() was not called before TileLang was loaded"
    return _tilelang_check()


class Trace:
    """What one lowering asked about the arch; ``reasons`` lists every difference found (empty: shareable)."""

    def __init__(self, arch, other):
        self.arch, self.other, self.reasons, self.python_calls = arch, other, [], 0
        self.cpp_calls, self.forks, self.sites = 0, 0, []  # C++ questions compared, planner forks, differing sites

    def differ(self, reason):
        if reason not in self.reasons:
            self.reasons.append(reason)


_active = None  # the Trace of the lowering in progress
_sanctioned = 0  # > 0 while a wrapped reader compares both arches (its own attribute reads are accounted for)


def _arch_of(target):
    """The arch of a CUDA target (read without tracing), else None."""
    try:
        if target is None or target.kind.name != "cuda":
            return None
        attrs = _ORIGINAL_ATTRS.__get__(target) if _ORIGINAL_ATTRS is not None else target.attrs
        return str(attrs["arch"])
    except (KeyError, AttributeError):
        return None


def _other_target(target, arch):
    from tvm.target import Target
    config = {k: v for k, v in target.export().items() if k != "host"}
    config["arch"] = arch
    return Target(config, host=target.host) if target.host is not None else Target(config)


def _compare(name, fn):
    """``fn`` wrapped: asked about the primary arch's target during a trace, it is asked about the other too. A
    wrapped function called by another one (have_tma calls get_target_compute_version) is part of the outer
    answer and not compared on its own."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        global _sanctioned
        trace = _active
        if trace is None or _sanctioned:
            return fn(*args, **kwargs)
        from tvm.target import Target
        _sanctioned += 1
        _lib.archtrace_quiet(1)
        try:
            target = args[0] if args else kwargs.get("target")
            if target is None:
                target = Target.current(allow_none=True)
                call = lambda t: fn(*args, **kwargs) if t is target else fn(**dict(kwargs, target=t))  # noqa: E731
            else:
                call = (lambda t: fn(t, *args[1:], **kwargs)) if args else (lambda t: fn(**dict(kwargs, target=t)))
            answer = call(target)
            if isinstance(target, Target) and _arch_of(target) == trace.arch:
                other_answer = call(_other_target(target, trace.other))
                trace.python_calls += 1
                if other_answer != answer:
                    trace.differ(f"python {name}: {answer!r} on {trace.arch}, {other_answer!r} on {trace.other}")
            elif not isinstance(target, Target):
                trace.differ(f"python {name} asked without a target")
            return answer
        finally:
            _lib.archtrace_quiet(-1)
            _sanctioned -= 1
    return wrapper


def _ir_mentions(mod, words):
    """The intrinsic calls of ``mod`` whose name contains one of ``words``, and "shared.tmem" if it has a buffer in
    tensor memory (what InjectTcgen05Fence looks for besides tcgen05 calls)."""
    from tvm import tirx
    from tvm.tirx.stmt_functor import post_order_visit
    found = set()

    def visit(node):
        if isinstance(node, tirx.Call) and hasattr(node.op, "name"):
            if any(w in node.op.name.lower() for w in words):
                found.add(node.op.name)
    for _, func in mod.functions.items():
        if isinstance(func, tirx.PrimFunc):
            post_order_visit(func.body, visit)
    if "tmem" in words and "shared.tmem" in mod.script():
        found.add("shared.tmem")
    return sorted(found)


def _pass_without(name, factory, words):
    """A pass that does nothing on the primary arch and on the other arch only rewrites what ``words`` name
    (LowerBlackwell2SM: T.gemm; InjectTcgen05Fence: tcgen05 / TMEM operations): its arch question does not
    count if the module it is applied to mentions none of them."""
    @functools.wraps(factory)
    def make(*args, **kwargs):
        real = factory(*args, **kwargs)

        def apply(mod):
            trace = _active
            if trace is None:
                return real(mod)
            found = _ir_mentions(mod, words)
            if found:
                trace.differ(f"{name} rewrites {found} on {trace.other}")
            _lib.archtrace_quiet(1)
            try:
                return real(mod)
            finally:
                _lib.archtrace_quiet(-1)
        return apply
    return make


_ORIGINAL_ATTRS = None


def _watched_attrs(self):
    trace = _active
    if trace is not None and not _sanctioned and _arch_of(self) is not None:
        trace.differ("python read a CUDA target's attributes outside the wrapped readers")
    return _ORIGINAL_ATTRS.__get__(self)


# TileLang's Python functions that answer a question about a CUDA target: each is compared as a whole
_NVCC_READERS = ("get_target_compute_version", "get_target_arch_and_code", "have_tensorcore", "have_tma", "have_pdl",
                 "have_mbarrier", "is_hopper")
_PASSES_WITHOUT = {"LowerBlackwell2SM": ("gemm",), "InjectTcgen05Fence": ("tcgen05", "tmem")}


@functools.cache
def _install_python_wrappers():
    """Wrap TileLang's Python readers of the arch (once per process), wherever a module bound them by name."""
    global _ORIGINAL_ATTRS
    import sys

    import tilelang._ffi_api as ffi_api
    import tilelang.contrib.nvcc as nvcc
    import tilelang.cuda.pipeline  # noqa: F401  (imports its readers by name)
    import tilelang.cuda.transform as cuda_transform
    from tvm.target import Target
    _ORIGINAL_ATTRS = Target.__dict__["attrs"]
    Target.attrs = property(_watched_attrs)
    originals = {}
    for name in _NVCC_READERS:
        originals[id(getattr(nvcc, name))] = _compare(name, getattr(nvcc, name))
    for name in sorted(n for n in dir(ffi_api) if n.startswith("Target")):
        originals[id(getattr(ffi_api, name))] = _compare(name, getattr(ffi_api, name))
    for name, words in _PASSES_WITHOUT.items():
        originals[id(getattr(cuda_transform, name))] = _pass_without(name, getattr(cuda_transform, name), words)
    for mod_name, module in list(sys.modules.items()):
        if module is None or not (mod_name == "tilelang" or mod_name.startswith("tilelang.")):
            continue
        for attr, value in list(vars(module).items()):
            if id(value) in originals:
                setattr(module, attr, originals[id(value)])


_FRAME_READERS = {"locals", "vars", "eval", "exec", "_getframe", "currentframe", "globals"}


def frontend_ignores_arch(build):
    """Whether ``build(p, arch)`` provably never looks at its arch argument: its bytecode only deletes or
    overwrites it, no nested function captures it, and it reads no frames. Building the PrimFunc is a large part
    of some variants' lowering (per_token_cast: the eager front end parses the kernel each time), so such a
    module's PrimFunc is not built a second time for the other arch."""
    import dis
    code = getattr(build, "__code__", None)
    if code is None or code.co_argcount < 2:
        return False
    name = code.co_varnames[1]
    if name in code.co_cellvars or _FRAME_READERS & set(code.co_names):
        return False
    return all(ins.opname in ("DELETE_FAST", "STORE_FAST") for ins in dis.get_instructions(code)
               if ins.argval == name and ins.opname.endswith("_FAST"))


def _same_but_arch(a, b):
    strip = lambda t: {k: v for k, v in t.export().items() if k != "arch"}  # noqa: E731
    return strip(a) == strip(b)


@contextlib.contextmanager
def trace(prim, other_prim, target, other_target):
    """Trace the lowering of ``prim`` for ``target`` against ``other_target`` (whose kernel module built
    ``other_prim``); yields a Trace, complete when the block ends. Nothing is traced if ``supported()`` is not None
    (the Trace then carries that reason)."""
    global _active
    from tvm import ir
    t = Trace(_arch_of(target), _arch_of(other_target))
    why = supported()
    if why is not None:
        t.differ(why)
        yield t
        return
    if not ir.structural_equal(prim, other_prim):
        t.differ(f"the kernel module builds another PrimFunc for {t.other}")
    if not _same_but_arch(target, other_target):
        t.differ("the two targets differ in more than the arch")
    _install_python_wrappers()
    other_target_keepalive = other_target
    _lib.archtrace_start(ctypes.c_void_p(other_target.__chandle__()))
    _active = t
    try:
        yield t
    finally:
        _active = None
        _lib.archtrace_stop()
        counts = (ctypes.c_long * 3)()
        _lib.archtrace_counts(counts)
        forks = (ctypes.c_long * 1)()
        _lib.archtrace_forks(forks)
        t.forks = forks[0]
        del other_target_keepalive
        t.cpp_calls = counts[0]
        if counts[1]:
            _lib.archtrace_name.restype = ctypes.c_char_p
            names = [_lib.archtrace_name(i).decode() for i in range(32) if counts[2] >> i & 1]
            t.sites = _differing_sites()
            where = ", ".join(f"{name} at +{offset:#x}" for name, offset in t.sites[:4])
            t.differ(f"TileLang's C++ answered {counts[1]} arch questions differently ({', '.join(names)}; "
                     f"asked from {where or 'unknown sites'})")


def _differing_sites():
    """(predicate, return-address offset in its library) of each call site whose answers differed: where to look
    in TileLang's C++ (addr2line -e <libtilelang.so> <offset>) when a variant one expects shareable is not."""
    _lib.archtrace_site.restype = ctypes.c_long
    pred, sites = ctypes.c_int(), []
    for k in range(64):
        offset = _lib.archtrace_site(k, ctypes.byref(pred))
        if offset < 0:
            break
        sites.append((_lib.archtrace_name(pred.value).decode(), offset))
    return sites


def state():
    """What the build cache keys lowerings on: whether and by which source arches may be shared."""
    return f"archshare-{cshim.digest(SOURCE)}" if enabled() else "off"
