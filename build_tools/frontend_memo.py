"""Remembered front-end rewrites for TileLang's eager builder (docs/LOWERING.md §6).

Every ``@T.prim_func`` and ``@T.macro`` that a kernel module's ``build(p, arch)`` defines is rewritten by TileLang's
``mutate``: parse the function's source, transform the AST into an IR generator (DSLMutator), unparse it and
compile it. The rewrite is a function of the source text, of the names the function closes over and of the few
expressions the transformer evaluates on the way (annotations, ``with`` items), never of the other values of the
closure, which only the generated code reads when it runs. The variants of one op share their source, so the
rewrite is the same for all of them, and it was a third of a per_token_cast variant's lowering (`python
benchmarks/lowering_profile.py --ops per_token_cast --variants 5 --cprofile`, with and without the memo).

``activate()`` wraps ``mutate`` in this process: the first rewrite of a function is done as TileLang does it while
recording each evaluation the transformer makes (the expression and what it gave); a later function with the
same source, file, line, closure names and module globals reuses the compiled rewrite only after evaluating every
recorded expression again with the new closure and getting the same answer (equal dtypes and numbers, the same
object otherwise), else it is rewritten afresh. The generated code then runs with the new closure as usual.

Only for the TileLang release whose ``mutate`` this mirrors (``supported()``); KERNELKILN_FRONTEND_MEMO=off turns it
off. The build cache keys every lowering on this file; the whole default manifest lowers to the same sources with
and without it (benchmarks/results/build-farm.md).
"""
import ast
import importlib.metadata
import inspect
import os
from pathlib import Path

TILELANG_VERSION = "0.1.15"  # the release whose eager ``mutate`` this reproduces
_cache = {}  # key -> (code object, unparsed source, extra_type_hints, [(expression source, answer)])
_active = False


def enabled():
    return os.environ.get("KERNELKILN_FRONTEND_MEMO", "on").lower() not in ("off", "0", "no")


def supported():
    """None if the memo can be used with the installed TileLang, else why not."""
    try:
        version = importlib.metadata.version("tilelang")
    except importlib.metadata.PackageNotFoundError:
        return "tilelang is not installed"
    if version != TILELANG_VERSION:
        return f"tilelang {version} is not {TILELANG_VERSION}, whose eager front end this memo mirrors"
    return None


def _answer(value):
    """What an evaluation gave, comparable across closures: dtypes, strings and numbers by value, the rest (proxy
    singletons such as T.Tensor, launch factories such as T.Kernel, the failure sentinel) by identity."""
    from tilelang.language import dtypes
    if isinstance(value, (dtypes.dtype, str, int, float, bool, type(None))):
        return (type(value), value)
    return (type(value), id(value))


def _key(func, nonlocals):
    lines, start = inspect.getsourcelines(func)
    filename = os.path.abspath(inspect.getsourcefile(func) or inspect.getfile(func))
    return (filename, start, "".join(lines), tuple(nonlocals), id(func.__globals__))


def _evaluate(source, nonlocals, globalns):
    from tilelang.language.eager import ast as eager_ast
    return eager_ast._try_eval(ast.parse(source, mode="eval").body, nonlocals, globalns)


def _rewrite(func, nonlocals, evals):
    """TileLang's mutate, recording each evaluation the transformer makes into ``evals``."""
    from tilelang.language.eager import ast as eager_ast
    from tilelang.language.eager import utils

    class Recording(eager_ast.DSLMutator):
        def _try_eval(self, node):
            value = super()._try_eval(node)
            evals.append((ast.unparse(node), _answer(value)))
            return value

    tree = utils.get_ast(func)
    filename = str(Path(inspect.getsourcefile(func) or inspect.getfile(func)).absolute())
    mut = Recording(nonlocals, func.__globals__, filename)
    tree = mut.visit(tree)
    ast.fix_missing_locations(tree)
    code = compile(tree, filename, "exec")
    return code, ast.unparse(tree), dict(mut.extra_type_hints)


def _closure(code, func, nonlocals):
    scope = {}
    exec(code, func.__globals__, scope)
    return scope["make_closure"](**nonlocals)


def mutate(func):
    """Drop-in for tilelang.language.eager.ast.mutate (see the module doc)."""
    from tilelang.language.eager import ast as eager_ast
    from tilelang.language.eager import utils
    nonlocals = utils.get_func_nonlocals(func)
    try:
        key = _key(func, nonlocals)
    except (OSError, TypeError):  # no source to key on: TileLang's own path
        return eager_ast.mutate(func)
    entry = _cache.get(key)
    if entry is None or not all(_answer(_evaluate(expr, nonlocals, func.__globals__)) == answer
                                for expr, answer in entry[3]):
        evals = []
        entry = _cache[key] = (*_rewrite(func, nonlocals, evals), evals)
    code, source, hints, _ = entry
    return eager_ast.IRGenerator(gen=_closure(code, func, nonlocals), source=source, extra_type_hints=dict(hints))


def activate():
    """Route the eager builder's rewrites (prim_func and macro) through ``mutate`` in this process."""
    global _active
    if _active or not enabled() or supported() is not None:
        return
    from tilelang.language.eager import builder
    builder.mutate = mutate
    _active = True

