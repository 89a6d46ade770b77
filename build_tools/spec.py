"""Launch spec extraction: read every launch fact of a lowered kernel from its IR.

The spec is what the runtime loader needs and nothing else: for each device
kernel its symbol, its arguments in *device* order (TileLang drops unused
buffers and reorders the rest, so the PrimFunc order cannot be assumed), grid
and block as integer expressions over the PrimFunc's scalar parameters,
dynamic shared memory, cluster dims, PDL and cooperative launch, plus the
TMA descriptors to encode per call. See docs/LOWERING.md §1.2.

The expressions use Python syntax with ``//`` for floor division and only the
operators the runtime's expression compiler accepts.
"""
from tilelang import tvm
from tilelang.jit.adapter.utils import pythonic_expr
from tvm import tirx
from tvm.tirx.stmt_functor import post_order_visit

SCALAR_CTYPES = {"int32", "int64", "uint32", "uint64", "float32", "float64"}
# CUtensorMapDataType values are recorded as the IR gives them; names help readers.
SPEC_VERSION = 1


class SpecError(RuntimeError):
    """The lowered kernel uses a launch feature the loader cannot drive."""


def _expr(e):
    if isinstance(e, int):
        return e
    if isinstance(e, tirx.IntImm):
        return int(e.value)
    return pythonic_expr(e, ignore_cast=True, floor_div_op="//")


def _free_names(e):
    names = set()
    if isinstance(e, tirx.PrimExpr):
        post_order_visit(e, lambda n: names.add(n.name) if isinstance(n, tirx.Var) else None)
    return names


def _names_in(expr_text):
    import ast
    if expr_text.lstrip("-").isdigit():
        return set()
    return {n.id for n in ast.walk(ast.parse(expr_text, mode="eval")) if isinstance(n, ast.Name)}


def _primfunc_params(prim_func):
    """Launch arguments: the PrimFunc's parameters in Python order (buffers by data var,
    scalars), then the dynamic shape symbols of its buffers (``kind: symbol``, with the
    buffer parameter and dimension the caller reads them from)."""
    params, data_var_to_index, seen = [], {}, set()
    for i, p in enumerate(prim_func.params):
        if p in prim_func.buffer_map:
            buf = prim_func.buffer_map[p]
            params.append({"name": buf.name, "kind": "buffer", "dtype": str(buf.dtype)})
            data_var_to_index[buf.data.name] = i
        else:
            params.append({"name": p.name, "kind": "scalar", "ctype": str(p.dtype)})
            seen.add(p.name)
    for i, p in enumerate(prim_func.params):
        if p in prim_func.buffer_map:
            buf = prim_func.buffer_map[p]
            for field, values in (("dim", buf.shape), ("stride", buf.strides)):
                for d, v in enumerate(values):
                    if isinstance(v, tirx.Var) and v.name not in seen:
                        seen.add(v.name)
                        params.append({"name": v.name, "kind": "symbol", "ctype": str(v.dtype), "param": i,
                                       field: d})
    return params, data_var_to_index


def _packed_calls(host_func):
    calls = []

    def visit(n):
        if isinstance(n, tirx.Call) and isinstance(n.op, tvm.ir.Op) and n.op.name == "tirx.tvm_call_packed":
            calls.append(n.args)

    post_order_visit(host_func.body, visit)
    return calls


def _tensormaps(host_func, data_var_to_index):
    attrs = host_func.attrs
    if attrs is None or "tma_descriptor_args" not in attrs:
        return {}
    maps = {}
    for var, args in attrs["tma_descriptor_args"].items():
        kind = args[0].value
        if not kind.endswith("tiled"):
            raise SpecError(f"TMA descriptor {var.name}: only tiled encoding is supported, got {kind}")
        rank = int(args[3])
        rest = list(args[5:])
        fields = [[_expr(x) for x in rest[j * rank:(j + 1) * rank]] for j in range(4)]
        interleave, swizzle, l2, oob = (int(x) for x in rest[4 * rank:4 * rank + 4])
        maps[var.name] = {
            "dtype_enum": int(args[2]),
            "rank": rank,
            "param": data_var_to_index[args[4].name],
            "global_dim": fields[0],
            # Entry 0 of the IR's stride list is the element size; the driver takes the rest.
            "global_stride_bytes": fields[1][1:],
            "box_dim": fields[2],
            "element_strides": fields[3],
            "interleave": interleave,
            "swizzle": swizzle,
            "l2_promotion": l2,
            "oob_fill": oob,
        }
    return maps


def extract(prim_func, artifact):
    """Launch spec (a JSON-able dict) of a lowered artifact."""
    params, data_var_to_index = _primfunc_params(prim_func)
    scalar_names = {p["name"] for p in params if p["kind"] != "buffer"}
    host_funcs = list(artifact.host_mod.functions.values())
    if len(host_funcs) != 1:
        raise SpecError(f"expected one host function, found {len(host_funcs)}")
    host = host_funcs[0]
    tensormaps = _tensormaps(host, data_var_to_index)
    for name, tm in tensormaps.items():
        for field in ("global_dim", "global_stride_bytes", "box_dim", "element_strides"):
            unknown = set().union(*(_names_in(str(e)) for e in tm[field])) - scalar_names
            if unknown:
                raise SpecError(f"TMA descriptor {name}: {field} depends on {sorted(unknown)}, which the "
                                "loader cannot bind (not a scalar parameter or buffer shape symbol)")
    calls = {str(c[0].value): c for c in _packed_calls(host)}

    kernels = []
    for gv, func in artifact.device_mod.functions.items():
        a = func.attrs
        symbol = str(a["global_symbol"]) if "global_symbol" in a else gv.name_hint
        if symbol not in calls:
            raise SpecError(f"{symbol}: no host launch found")
        call_args = calls[symbol][1:1 + len(func.params)]
        args = []
        for dev_param, host_arg in zip(func.params, call_args):
            name = host_arg.name if isinstance(host_arg, tirx.Var) else str(host_arg)
            if name in tensormaps:
                args.append({"kind": "tensormap", "desc": name})
            elif name in data_var_to_index:
                args.append({"kind": "ptr", "param": data_var_to_index[name]})
            elif name in scalar_names and str(dev_param.dtype) in SCALAR_CTYPES:
                idx = next(i for i, p in enumerate(params) if p["name"] == name)
                args.append({"kind": "scalar", "param": idx, "ctype": str(dev_param.dtype)})
            else:
                raise SpecError(f"{symbol}: device argument {dev_param.name} ({dev_param.dtype}) is bound to "
                                f"{name}, which is neither a buffer, a scalar parameter nor a TMA descriptor")
        grid, block = [1, 1, 1], [1, 1, 1]
        for tag, ext in a["thread_extent"].items():
            target = block if "threadIdx" in tag else grid
            target["xyz".index(tag[-1])] = _expr(ext)
            unknown = _free_names(ext) - scalar_names
            if unknown:
                raise SpecError(f"{symbol}: launch dimension {tag} depends on {sorted(unknown)}, "
                                "which are neither scalar parameters nor buffer shape symbols")
        if any(not isinstance(b, int) for b in block):
            raise SpecError(f"{symbol}: block dims must be constants, got {block}")
        kernels.append({
            "symbol": symbol,
            "args": args,
            "grid": grid,
            "block": block,
            "dyn_smem_bytes": int(a["dyn_shared_memory_buf"]) if "dyn_shared_memory_buf" in a else 0,
            "cluster_dims": [int(x) for x in a["cluster_dims"]] if "cluster_dims" in a else None,
            "pdl": "has_cuda_pdl_sync" in a or "has_cuda_pdl_trigger" in a,
            "cooperative": bool(a["use_cooperative_groups"]) if "use_cooperative_groups" in a else False,
        })
    # The host IR launches kernels in this order (tilelang's wrappers sort by it too).
    order = list(calls)
    kernels.sort(key=lambda k: order.index(k["symbol"]))
    return {"spec_version": SPEC_VERSION, "params": params, "tensormaps": tensormaps, "kernels": kernels}
