"""Compile the launch spec's integer expressions (grid dims, TMA dims) once per kernel.

Expressions come from our own sha256-checked artifacts, but they are still
parsed against a whitelist (integer arithmetic, min/max, names of scalar
parameters) before being compiled, so a corrupt index cannot run code.
"""
import ast

_ALLOWED_BINOPS = (ast.Add, ast.Sub, ast.Mult, ast.FloorDiv, ast.Mod, ast.LShift, ast.RShift)
_ALLOWED_FUNCS = {"min", "max"}


def _check(node, names):
    if isinstance(node, ast.Expression):
        return _check(node.body, names)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return
    if isinstance(node, ast.Name) and node.id in names:
        return
    if isinstance(node, ast.BinOp) and isinstance(node.op, _ALLOWED_BINOPS):
        _check(node.left, names)
        _check(node.right, names)
        return
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        _check(node.operand, names)
        return
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in _ALLOWED_FUNCS \
            and not node.keywords:
        for a in node.args:
            _check(a, names)
        return
    raise ValueError(f"launch expression not allowed: {ast.dump(node)}")


def compile_tuple(exprs, param_names, constants=None):
    """A function args -> tuple of ints, evaluating each expression on positional args.

    ``param_names[i]`` is the name that expressions use for ``args[i]``; names in ``constants`` (name -> int)
    are folded in as those values (a launch plan's fixed arguments).
    """
    # only integers fold; an expression naming any other constant fails the whitelist check
    constants = {n: v for n, v in (constants or {}).items()
                 if n not in param_names and isinstance(v, int) and not isinstance(v, bool)}
    index = {n: i for i, n in enumerate(param_names)}
    allowed = set(index) | set(constants)
    parts = []
    for e in exprs:
        if isinstance(e, int):
            parts.append(str(e))
            continue
        tree = ast.parse(str(e), mode="eval")
        _check(tree, allowed)
        # Substitute names with positional lookups or constants, then build one lambda.
        src = ast.unparse(_Subst(index, constants).visit(tree).body)
        parts.append(f"({src})")
    return eval(f"lambda a: ({', '.join(parts)},)", {"min": min, "max": max})  # noqa: S307 - whitelisted above


class _Subst(ast.NodeTransformer):
    def __init__(self, index, constants):
        self.index = index
        self.constants = constants

    def visit_Name(self, node):
        if node.id in self.constants:
            return ast.Constant(self.constants[node.id])
        if node.id in self.index:
            return ast.Subscript(value=ast.Name("a", ast.Load()), slice=ast.Constant(self.index[node.id]),
                                 ctx=ast.Load())
        return node
