"""Compile units: up to UNIT_SIZE variants compiled by one nvcc call into one cubin; the variants of one op, or of
the small ops of one kernel family (fewer than SMALL_OP variants each: mHC and Engram have many ops of one or two
variants) pooled together.

Why: nvcc's fixed cost per translation unit (mostly TileLang's CUDA headers) dominated the cold
build. On the 2-core build machine one per_token_cast variant alone took 1.43 s, sixteen in one unit
2.46 s (about 0.07 s per further kernel), sixteen separately 25 s; `nvcc --time` of one per_channel_cast
variant: preprocessing 275 ms, cicc 1117 ms, ptxas 211 ms. ptxas compiles each kernel of a unit on its
own, so a kernel's SASS does not depend on its unit (tests/build/test_units.py compares the disassembly).

Pooling: a unit costs ~1.4 s of nvcc before its first kernel (the headers; the smallest of the 138 units of a cold
default build took 1.40 s), so the 21 one-variant mHC ops alone cost ~57 s of CPU over the two arches. TileLang's
helpers in the preambles are include-guarded and each body has a namespace, so members of different ops share a
unit as members of one op do. The price: a small op that gains or loses a variant moves its family's pooled
chunks, so those few units compile again.

A unit's members are a deterministic function of the manifest (the group's variants sorted by stem,
cut into chunks), never of a shard or a lowering result: shards build whole units, so
`--shard i/n` + merge gives the same bytes as one build. Each lowered source already has a kernel
symbol unique to its variant (build_tools.lower), so a unit is the members' sources one after
another, each body in a namespace of its own for any file-local helpers; the preamble (#includes,
all guarded) is repeated as it is.
"""
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

UNIT_SIZE = 16
SMALL_OP = 8  # an op with fewer variants is pooled with the other small ops of its family
_KERNEL_START = 'extern "C"'


@dataclass(frozen=True)
class Unit:
    group: str  # the op, or "<family>-ops" for pooled small ops
    stems: tuple  # member variant stems, sorted

    @property
    def name(self):
        digest = hashlib.sha256(" ".join(self.stems).encode()).hexdigest()[:12]
        return f"{self.group}-unit-{digest}"


def family(op):
    """The kernel family of an op: the package of its kernel module (kernels/<family>/<op>.py)."""
    from build_tools import manifest
    return manifest.KERNEL_MODULES[op].split(".")[1]


def plan(variants, size=UNIT_SIZE, small_op=SMALL_OP):
    """Units of ``variants`` (manifest order does not matter): per group (an op with at least ``small_op``
    variants, else its family's pool), sorted stems in chunks of ``size``."""
    by_op = {}
    for v in variants:
        by_op.setdefault(v.op, set()).add(v.stem)
    groups = {}
    for op, stems in by_op.items():
        groups.setdefault(op if len(stems) >= small_op else f"{family(op)}-ops", set()).update(stems)
    units = []
    for group in sorted(groups):
        stems = sorted(groups[group])
        units += [Unit(group, tuple(stems[i:i + size])) for i in range(0, len(stems), size)]
    return units


def split_source(text):
    """(preamble, body) of a lowered source: the body starts at the first kernel declaration."""
    i = text.find(_KERNEL_START)
    if i < 0:
        raise ValueError("lowered source has no extern \"C\" kernel")
    return text[:i], text[i:]


def member_stems(unit_text):
    """The variant stems of a unit source, in order (for error messages)."""
    return re.findall(r"^// ---- (\S+)$", unit_text, flags=re.M)


def unit_source(gen_dir, unit, arch):
    parts = []
    for stem in unit.stems:
        preamble, body = split_source((Path(gen_dir) / f"{stem}.{arch}.cu").read_text())
        ns = "tk_" + re.sub(r"\W", "_", stem)
        parts.append(f"// ---- {stem}\n{preamble}namespace {ns} {{\n{body}\n}}  // namespace {ns}\n")
    return "".join(parts)


def write_sources(gen_dir, units, arch):
    """Write ``<unit>.<arch>.cu`` for each unit, keeping the mtime of unchanged files (ninja)."""
    from build_tools.lower import write_if_changed
    for u in units:
        write_if_changed(Path(gen_dir) / f"{u.name}.{arch}.cu", unit_source(gen_dir, u, arch))
