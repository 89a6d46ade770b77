"""The declaration of one op: what the build may specialize, how the runtime picks a variant, what the kernel takes.

An ``OpContract`` is the one place that says, for an op,

* its compile-time parameters (``Param``: name, the values a manifest may ask for, a default for knobs added after
  manifests were written), and the cross-constraints between them (``constraints``);
* the kernel module that builds it (``kernel``: the build imports it; the runtime never does);
* the launch-argument names of its PrimFunc, in order (``args``): the build checks them against the IR it lowers,
  and the runtime binds its values by these names, never by position;
* the rules the runtime uses to pick a variant (``select``: plain functions of host values, so the build's
  manifests, the presets test and the runtime all call the same code);
* one representative variant (``representative``) that the CI subset builds without a manifest entry of its own;
* its specification (``doc``: what it computes and the numerics that decide its bits), which docs/spec/ is
  generated from.

Nothing here imports torch, TileLang or the runtime: the kernels, build_tools and the runtime all import it.
"""
from dataclasses import dataclass, field
from typing import Callable, Mapping, Optional, Union

_NO_DEFAULT = object()


@dataclass(frozen=True)
class Param:
    """A compile-time parameter: ``values`` are those a manifest may ask for (the kernel builds each of them)."""
    name: str
    values: tuple
    default: object = _NO_DEFAULT

    @property
    def has_default(self):
        return self.default is not _NO_DEFAULT

    def problem(self, value):
        # bool is an int: a flag given as 0/1 or a count given as True are both refused
        if any(type(value) is type(v) and value == v for v in self.values):
            return None
        return f"{self.name} must be one of {list(self.values)}, got {value!r}"


def _key_function(op, params):
    """``key(**values)``: the compile-time values in parameter order after the defaults, unchecked (the per-call lookup
    key; a value the build does not offer finds no variant in the store, whose error lists what exists). Generated as
    a plain function of keyword parameters, which costs a fraction of merging dicts."""
    defaults = {f"_d{i}": p.default for i, p in enumerate(params) if p.has_default}
    signature = ", ".join(p.name + (f"={f'_d{i}'}" if p.has_default else "") for i, p in enumerate(params))
    body = ", ".join(p.name for p in params) + ("," if len(params) == 1 else "")
    namespace = dict(defaults)
    exec(f"def key(*, {signature}):\n    return ({body})\n", namespace)  # names checked to be identifiers
    key = namespace["key"]
    key.__qualname__ = f"{op}.key"
    return key


@dataclass(frozen=True)
class OpContract:
    op: str
    kernel: str  # the kernel module (kernels.<family>.<name>), imported by the build only
    params: tuple  # of Param, in variant-key order
    # launch-argument names of the PrimFunc, in order; a function of the compile-time values where a parameter picks
    # between PrimFuncs of different arguments (e5m6's encode and decode)
    args: Union[tuple, Callable[[Mapping], tuple]]
    constraints: Optional[Callable[[Mapping], Optional[str]]] = None  # cross-constraints: a reason, or None
    select: Mapping[str, Callable] = field(default_factory=dict)  # the runtime's variant-selection rules
    doc: str = ""
    representative: Optional[Mapping] = None  # the variant manifests with ``representatives = true`` build
    # the op's Ascend kernel (docs/ASCEND.md): an OpContract of its own (kernel module, compile-time params, select
    # rules, launch-argument names) for the same op and semantics; None where the op has no Ascend kernel
    ascend: Optional["OpContract"] = None

    def __post_init__(self):
        names = tuple(p.name for p in self.params)
        for n in names:
            if not n.isidentifier():
                raise ValueError(f"{self.op}: parameter name {n!r} is not an identifier")
        object.__setattr__(self, "_param_names", names)  # read on every lookup: computed once
        object.__setattr__(self, "key", _key_function(self.op, self.params))
        if self.representative is not None:
            reason = self.invalid_reason({**self.defaults, **self.representative})
            if reason:
                raise ValueError(f"{self.op}: its representative variant cannot be built: {reason}")

    @property
    def param_names(self):
        return self._param_names

    @property
    def defaults(self):
        return {p.name: p.default for p in self.params if p.has_default}

    def invalid_reason(self, values):
        """Why the compile-time ``values`` (a mapping of every parameter) cannot be built, or None."""
        names = self.param_names
        missing = [n for n in names if n not in values]
        unknown = [n for n in values if n not in names]
        if missing or unknown:
            return f"{self.op} takes exactly the parameters {list(names)}; missing {missing}, unknown {unknown}"
        for p in self.params:
            problem = p.problem(values[p.name])
            if problem:
                return problem
        return self.constraints(values) if self.constraints else None

    def variant(self, **values):
        """The compile-time values in parameter order (the runtime's lookup key), after the defaults; a
        ``ValueError`` names what is wrong with them."""
        full = {**self.defaults, **values}
        reason = self.invalid_reason(full)
        if reason:
            raise ValueError(f"{self.op}: {reason}")
        return tuple(full[n] for n in self.param_names)

    def args_for(self, values):
        """The launch-argument names of the variant ``values`` (a mapping of every parameter)."""
        return tuple(self.args(values)) if callable(self.args) else self.args
