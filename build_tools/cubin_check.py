"""Inspect and validate ahead-of-time compiled cubins against a launch spec.

KernelKiln ships cubins together with a JSON launch spec.  This module reads a
cubin with ``cuobjdump`` (no GPU needed) and checks that what the spec says
about each kernel -- symbol name, target architecture, parameter layout,
shared memory budget -- matches what ptxas actually produced, and flags
register spills.

Public API
----------
``find_cuobjdump() -> str``
    Locate the ``cuobjdump`` binary.
``inspect_cubin(path) -> CubinInfo``
    Parse ``cuobjdump -elf`` and ``cuobjdump -res-usage`` output.
``check_cubin(path, expected_arch, kernels) -> list[str]``
    Human-readable problems; an empty list means the cubin matches the spec.

Notes on the data (verified against nvcc/ptxas 13.0 and an H200 driver):

* Parameter sizes come from ``EIATTR_KPARAM_INFO`` entries in
  ``.nv.info.<kernel>``; cuobjdump lists them in reverse ordinal order, so they
  are sorted by ``Ordinal``.  A ``const __grid_constant__ CUtensorMap`` is a
  128-byte parameter (64-byte aligned in the parameter bank).
* For sm_90 and newer, ptxas folds a 1 KiB system-reserved shared memory window
  into the shared size of every kernel that touches shared memory (the ELF
  then carries a ``.nv.reservedSmem.offset0`` symbol, and on sm_100+ a
  ``.nv.reservedSmem.cap`` symbol whose value is the window size).
  ``cuobjdump -res-usage`` reports e.g. ``SHARED:66560`` for a 64 KiB static
  array, while the driver reports ``CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES`` =
  65536 and accepts static + dynamic up to the opt-in limit (232448 on H100/
  H200).  ``KernelInfo.static_shared_bytes`` is therefore the driver-visible
  value (reserved window removed); the raw value is kept in
  ``shared_section_bytes``.
* A cubin does not record spill counts (only ptxas ``-v`` prints them); it
  records the stack frame size (``STACK`` / ``EIATTR_FRAME_SIZE``) and
  ``LOCAL``.  Stack is also used by genuine local arrays and ABI calls, so a
  kernel is classified as *likely spilling* when it uses stack/local memory
  while its register count sits at (or within a few registers of) its
  register cap (``EIATTR_MAXREG_COUNT``, from ``-maxrregcount`` or
  ``__launch_bounds__``).  A spec may set ``max_stack_bytes`` to replace the
  heuristic with an explicit budget.  For certainty at build time, compile
  with ``-Xptxas -warn-spills``.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from importlib import metadata as _metadata
from pathlib import Path
from typing import Any, Iterable, Optional

__all__ = [
    "CubinInfo",
    "CubinInspectError",
    "KernelInfo",
    "KernelParam",
    "DEFAULT_MAX_SHARED_BYTES",
    "check_cubin",
    "find_cuobjdump",
    "inspect_cubin",
    "normalize_arch",
]

ENV_VAR = "KERNELKILN_CUOBJDUMP"
DIST_NAME = "nvidia-cuda-cuobjdump"
_INSTALL_HINT = f"pip install {DIST_NAME}"

# Register allocation: a kernel whose register count is within this many
# registers of its cap is considered register-limited (pair/quad alignment of
# 64/128-bit values can leave up to 3 registers of the cap unused).
_SPILL_REG_SLACK = 3

# Per-block opt-in shared memory limits (static + dynamic, bytes) by SM major
# and minor version, used when a kernel spec gives no 'max_shared_bytes'.
DEFAULT_MAX_SHARED_BYTES: dict[int, int] = {
    80: 166912,  # A100: 163 KiB
    86: 101376,  # GA10x: 99 KiB
    87: 166912,  # Orin
    89: 101376,  # Ada
    90: 232448,  # H100/H200: 227 KiB
    100: 232448,  # B200: 227 KiB
    103: 232448,  # B300
    120: 101376,  # consumer Blackwell: 99 KiB
}

_SUBPROCESS_TIMEOUT_S = 120


class CubinInspectError(RuntimeError):
    """cuobjdump could not read the file, or its output made no sense."""


# --------------------------------------------------------------------------
# Locating cuobjdump
# --------------------------------------------------------------------------


def _is_executable_file(p: os.PathLike | str) -> bool:
    return os.path.isfile(p) and os.access(p, os.X_OK)


def _cuobjdump_from_distribution() -> Optional[str]:
    """Path of bin/cuobjdump from the installed nvidia-cuda-cuobjdump wheel."""
    try:
        dist = _metadata.distribution(DIST_NAME)
    except _metadata.PackageNotFoundError:
        return None
    for f in dist.files or ():
        posix = f.as_posix()
        if posix == "bin/cuobjdump" or posix.endswith("/bin/cuobjdump"):
            located = Path(dist.locate_file(f))
            if _is_executable_file(located):
                return str(located.resolve())
    return None


def _cuobjdump_from_cuda_install() -> Optional[str]:
    """Last resort: next to nvcc, or under $CUDA_HOME / $CUDA_PATH."""
    candidates = []
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            candidates.append(Path(root) / "bin" / "cuobjdump")
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(Path(os.path.realpath(nvcc)).parent / "cuobjdump")
    for c in candidates:
        if _is_executable_file(c):
            return str(c)
    return None


def find_cuobjdump() -> str:
    """Return the path of a usable ``cuobjdump`` binary.

    Order: ``$KERNELKILN_CUOBJDUMP`` (must exist if set), ``PATH``, the installed
    ``nvidia-cuda-cuobjdump`` pip distribution, then (last resort) the CUDA
    install that provides ``nvcc``.  Raises FileNotFoundError otherwise.
    """
    env = os.environ.get(ENV_VAR)
    if env:
        if _is_executable_file(env):
            return env
        found = shutil.which(env)  # allow a bare command name
        if found:
            return found
        raise FileNotFoundError(
            f"${ENV_VAR}={env!r} is not an executable file "
            f"(unset it, or {_INSTALL_HINT})"
        )
    found = shutil.which("cuobjdump")
    if found:
        return found
    found = _cuobjdump_from_distribution()
    if found:
        return found
    found = _cuobjdump_from_cuda_install()
    if found:
        return found
    raise FileNotFoundError(
        "cuobjdump not found: set $" + ENV_VAR + ", put it on PATH, or "
        f"`{_INSTALL_HINT}`"
    )


# --------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------


@dataclass
class KernelParam:
    ordinal: int
    offset: int  # byte offset within the kernel parameter block
    size: int  # bytes


@dataclass
class KernelInfo:
    symbol: str
    params: list[KernelParam] = field(default_factory=list)
    param_bytes: Optional[int] = None  # EIATTR_CBANK_PARAM_SIZE
    registers: Optional[int] = None  # EIATTR_REGCOUNT / res-usage REG
    max_registers: Optional[int] = None  # EIATTR_MAXREG_COUNT (register cap)
    static_shared_bytes: int = 0  # as the driver counts it (reserved excluded)
    shared_section_bytes: int = 0  # as cuobjdump reports it (SHARED)
    max_threads: Optional[tuple[int, int, int]] = None  # EIATTR_MAX_THREADS
    required_threads: Optional[tuple[int, int, int]] = None  # EIATTR_REQNTID
    stack_bytes: int = 0  # res-usage STACK (per-thread stack frame)
    local_bytes: int = 0  # res-usage LOCAL
    frame_bytes: Optional[int] = None  # EIATTR_FRAME_SIZE
    min_stack_bytes: Optional[int] = None  # EIATTR_MIN_STACK_SIZE
    resources: dict[str, int] = field(default_factory=dict)  # raw res-usage
    attributes: dict[str, list[str]] = field(default_factory=dict)  # raw EIATTR

    @property
    def param_sizes(self) -> list[int]:
        return [p.size for p in self.params]

    @property
    def param_offsets(self) -> list[int]:
        return [p.offset for p in self.params]

    @property
    def max_threads_per_block(self) -> Optional[int]:
        dims = self.required_threads or self.max_threads
        if dims is None:
            return None
        return dims[0] * dims[1] * dims[2]

    @property
    def uses_local_memory(self) -> bool:
        """True when the kernel has a stack frame or local memory."""
        return (
            self.stack_bytes > 0
            or self.local_bytes > 0
            or bool(self.frame_bytes)
        )

    @property
    def likely_spill(self) -> bool:
        """Heuristic: local memory used while register-limited.

        A cubin does not store spill counts; see the module docstring.
        """
        if not self.uses_local_memory:
            return False
        if self.registers is None or self.max_registers is None:
            return True  # cannot tell; be conservative
        return self.registers >= self.max_registers - _SPILL_REG_SLACK

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["param_sizes"] = self.param_sizes
        d["max_threads_per_block"] = self.max_threads_per_block
        d["uses_local_memory"] = self.uses_local_memory
        d["likely_spill"] = self.likely_spill
        return d


@dataclass
class CubinInfo:
    path: str
    arch: str  # as cuobjdump prints it, e.g. 'sm_90a'
    toolkit: Optional[str] = None  # e.g. '13.0'
    virtual_arch: Optional[str] = None  # e.g. 'sm_90' (.note.nv.cuinfo)
    ptxas_args: Optional[str] = None  # .note.nv.tkinfo command line
    reserved_shared_bytes: int = 0  # system-reserved smem folded into SHARED
    kernels: dict[str, KernelInfo] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "kernels"}
        d["kernels"] = {k: v.to_dict() for k, v in self.kernels.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "CubinInfo":
        """The inverse of ``to_dict`` (its derived keys are dropped)."""
        names = {f.name for f in dataclasses.fields(KernelInfo)}

        def kernel(k):
            k = {n: v for n, v in k.items() if n in names}
            k["params"] = [KernelParam(**p) for p in k.get("params", [])]
            for n in ("max_threads", "required_threads"):
                if k.get(n) is not None:
                    k[n] = tuple(k[n])
            return KernelInfo(**k)
        rest = {n: v for n, v in d.items() if n != "kernels"}
        return cls(**rest, kernels={s: kernel(k) for s, k in d.get("kernels", {}).items()})


# --------------------------------------------------------------------------
# Running cuobjdump
# --------------------------------------------------------------------------


def _run_cuobjdump(exe: str, option: str, path: str) -> str:
    try:
        proc = subprocess.run(
            [exe, option, path],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            timeout=_SUBPROCESS_TIMEOUT_S,
            check=False,
        )
    except subprocess.TimeoutExpired as e:
        raise CubinInspectError(f"cuobjdump {option} {path}: timed out") from e
    out = proc.stdout.decode("utf-8", errors="replace")
    err = proc.stderr.decode("utf-8", errors="replace").strip()
    if proc.returncode != 0:
        msg = err or out.strip() or f"exit status {proc.returncode}"
        raise CubinInspectError(f"cuobjdump {option} {path} failed: {msg}")
    return out


# --------------------------------------------------------------------------
# Parsing helpers
# --------------------------------------------------------------------------

_NUM = r"(?:0[xX][0-9a-fA-F]+|\d+)"
_ELF_HEADER_RE = re.compile(r"^\s*(?:32|64)-bit ELF:\s*(.*)$")
_HEADER_SM_RE = re.compile(r"\bsm\s*=\s*(\w+)")
_HEADER_TOOLKIT_RE = re.compile(r"\btoolkit\s*=\s*([\w.]+)")
_FATBIN_ARCH_RE = re.compile(r"^\s*arch\s*=\s*(sm_\w+)\s*$")
_SECTION_RE = re.compile(r"^(?:\.section\s+)?(\.[^\s]+)")
_ENTRY_IDX_RE = re.compile(r"^\s*<\s*" + _NUM + r"\s*>\s*$")
_FIELD_RE = re.compile(r"^\s*(Attribute|Format|Value)\s*:\s*(.*?)\s*$")
_FUNC_VALUE_RE = re.compile(
    r"^\s*function\s*:\s*(\S+?)\s*\(\s*" + _NUM + r"\s*\)\s*(.*)$"
)
_KPARAM_FIELD_RE = {
    name: re.compile(name + r"\s*:\s*(" + _NUM + r")")
    for name in ("Ordinal", "Offset", "Size")
}
_TRAILING_NUM_RE = re.compile(r":\s*(" + _NUM + r")\s*$")
_RES_FUNC_RE = re.compile(r"^\s*Function\s+(.+?)\s*:\s*$")
_RES_KV_RE = re.compile(r"([A-Za-z_]+(?:\[\d+\])?)\s*:\s*(\d+)")


def _int(s: str) -> int:
    return int(s, 0) if not re.fullmatch(r"0\d+", s) else int(s, 10)


def _nums(s: str) -> list[int]:
    return [_int(t) for t in re.findall(_NUM, s)]


def normalize_arch(arch: str) -> str:
    """'sm90a' / 'SM_90a' / '90a' -> 'sm_90a'."""
    a = arch.strip().lower()
    m = re.fullmatch(r"(?:sm_?)?(\d+[a-z]?)", a)
    return f"sm_{m.group(1)}" if m else a


def _arch_number(arch: str) -> Optional[int]:
    m = re.fullmatch(r"sm_(\d+)[a-z]?", normalize_arch(arch))
    return int(m.group(1)) if m else None


@dataclass
class _InfoEntry:
    attribute: str
    value: str


def _split_elf_images(text: str) -> list[list[str]]:
    """Split cuobjdump -elf output into one list of lines per ELF image.

    The lines of an optional fatbin preamble ('arch = sm_90a', ...) stay with
    the image that follows them.
    """
    images: list[list[str]] = []
    pending: list[str] = []
    for line in text.splitlines():
        if _ELF_HEADER_RE.match(line):
            images.append(pending + [line])
            pending = []
        elif images:
            images[-1].append(line)
        else:
            pending.append(line)
    # A 'Fatbin elf code:' preamble belongs to the *next* image; move it.
    fixed: list[list[str]] = []
    carry: list[str] = []
    for img in images:
        cut = len(img)
        for i in range(len(img) - 1, 0, -1):
            if img[i].strip().startswith("Fatbin ") and img[i].strip().endswith(
                "code:"
            ):
                cut = i
                break
        fixed.append(carry + img[:cut])
        carry = img[cut:]
    return fixed


def _parse_sections(lines: Iterable[str]) -> dict[str, list[str]]:
    """Group the lines of one ELF image by the section header above them."""
    sections: dict[str, list[str]] = {}
    current: Optional[str] = None
    for line in lines:
        if line and not line[0].isspace() and line.startswith("."):
            m = _SECTION_RE.match(line)
            if m:
                current = m.group(1)
                sections.setdefault(current, [])
                continue
        if current is not None:
            sections[current].append(line)
    return sections


def _parse_info_entries(lines: list[str]) -> list[_InfoEntry]:
    """Parse the '<0xN> / Attribute: / Format: / Value:' blocks of .nv.info*."""
    entries: list[_InfoEntry] = []
    attr: Optional[str] = None
    value_parts: list[str] = []
    in_value = False

    def flush() -> None:
        nonlocal attr, value_parts, in_value
        if attr is not None:
            entries.append(_InfoEntry(attr, "\t".join(value_parts).strip()))
        attr, value_parts, in_value = None, [], False

    for line in lines:
        if not line.strip():
            continue
        if _ENTRY_IDX_RE.match(line):
            flush()
            continue
        m = _FIELD_RE.match(line)
        if m:
            key, val = m.groups()
            if key == "Attribute":
                if attr is not None:
                    flush()
                attr = val
                in_value = False
            elif key == "Value":
                value_parts = [val]
                in_value = True
            else:
                in_value = False
            continue
        if in_value:
            value_parts.append(line.strip())
    flush()
    return entries


def _parse_symtab(lines: list[str]) -> tuple[list[str], dict[str, int]]:
    """Return (entry function names, {symbol name: value}) from .symtab rows."""
    entries: list[str] = []
    values: dict[str, int] = {}
    for line in lines:
        cols = line.split()
        if len(cols) < 8 or cols[0] == "Num":
            continue
        try:
            value = int(cols[1], 16)
        except ValueError:
            continue
        name = cols[-1]
        values[name] = value
        if cols[3] == "FUNC" and "ENTRY" in cols[4:-1]:
            entries.append(name)
    return entries, values


def _parse_res_usage(text: str) -> list[tuple[Optional[str], dict[str, dict[str, int]]]]:
    """Parse cuobjdump -res-usage: [(arch or None, {function: {KEY: int}})]."""
    blocks: list[tuple[Optional[str], dict[str, dict[str, int]]]] = []
    arch: Optional[str] = None
    current: Optional[dict[str, dict[str, int]]] = None
    func: Optional[str] = None
    for line in text.splitlines():
        m = _FATBIN_ARCH_RE.match(line)
        if m:
            arch = m.group(1)
            continue
        if line.strip().startswith("Resource usage"):
            current = {}
            blocks.append((arch, current))
            arch = None
            func = None
            continue
        if current is None:
            continue
        m = _RES_FUNC_RE.match(line)
        if m:
            func = m.group(1)
            current[func] = {}
            continue
        if line.strip().startswith("Common"):
            func = None
            continue
        if func is not None:
            for k, v in _RES_KV_RE.findall(line):
                current[func][k] = int(v)
    return blocks


def _tuple3(vals: list[int]) -> Optional[tuple[int, int, int]]:
    if not vals:
        return None
    vals = (vals + [1, 1, 1])[:3]
    return (vals[0], vals[1], vals[2])


def _apply_attribute(k: KernelInfo, attr: str, value: str) -> None:
    k.attributes.setdefault(attr, []).append(value)
    if attr == "EIATTR_KPARAM_INFO":
        fields = {}
        for name, rx in _KPARAM_FIELD_RE.items():
            m = rx.search(value)
            if m:
                fields[name] = _int(m.group(1))
        if "Ordinal" in fields and "Size" in fields:
            k.params.append(
                KernelParam(fields["Ordinal"], fields.get("Offset", -1), fields["Size"])
            )
        return
    nums = _nums(value)
    if attr == "EIATTR_REGCOUNT":
        m = _TRAILING_NUM_RE.search(value)
        k.registers = _int(m.group(1)) if m else (nums[-1] if nums else None)
    elif attr == "EIATTR_FRAME_SIZE":
        m = _TRAILING_NUM_RE.search(value)
        k.frame_bytes = _int(m.group(1)) if m else (nums[-1] if nums else None)
    elif attr == "EIATTR_MIN_STACK_SIZE":
        m = _TRAILING_NUM_RE.search(value)
        k.min_stack_bytes = _int(m.group(1)) if m else (nums[-1] if nums else None)
    elif attr == "EIATTR_MAXREG_COUNT" and nums:
        k.max_registers = nums[0]
    elif attr == "EIATTR_MAX_THREADS":
        k.max_threads = _tuple3(nums)
    elif attr == "EIATTR_REQNTID":
        k.required_threads = _tuple3(nums)
    elif attr == "EIATTR_CBANK_PARAM_SIZE" and nums:
        k.param_bytes = nums[0]


# --------------------------------------------------------------------------
# inspect_cubin
# --------------------------------------------------------------------------


def inspect_cubin(path: os.PathLike | str, cuobjdump: Optional[str] = None) -> CubinInfo:
    """Describe a single-architecture cubin using ``cuobjdump``.

    Raises FileNotFoundError if the cubin or cuobjdump is missing, and
    CubinInspectError if cuobjdump fails or the file holds != 1 ELF image.
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"cubin not found: {path}")
    exe = cuobjdump or find_cuobjdump()
    elf_text = _run_cuobjdump(exe, "-elf", path)
    res_text = _run_cuobjdump(exe, "-res-usage", path)
    return _parse_cubin(path, elf_text, res_text)


def _parse_cubin(path: str, elf_text: str, res_text: str) -> CubinInfo:
    images = _split_elf_images(elf_text)
    if not images:
        raise CubinInspectError(f"{path}: cuobjdump -elf printed no ELF image")
    if len(images) > 1:
        archs = []
        for img in images:
            m = next((_HEADER_SM_RE.search(line) for line in img if _ELF_HEADER_RE.match(line)), None)
            archs.append(f"sm_{m.group(1)}" if m else "?")
        raise CubinInspectError(
            f"{path}: holds {len(images)} ELF images ({', '.join(archs)}); "
            "expected a single-architecture cubin"
        )
    lines = images[0]

    arch: Optional[str] = None
    toolkit: Optional[str] = None
    for line in lines:
        m = _ELF_HEADER_RE.match(line)
        if m:
            hm = _HEADER_SM_RE.search(m.group(1))
            tm = _HEADER_TOOLKIT_RE.search(m.group(1))
            arch = f"sm_{hm.group(1)}" if hm else None
            toolkit = tm.group(1) if tm else None
            break
    if arch is None:  # fall back on a fatbin preamble 'arch = sm_XX'
        for line in lines:
            m = _FATBIN_ARCH_RE.match(line)
            if m:
                arch = m.group(1)
                break
    if arch is None:
        raise CubinInspectError(f"{path}: could not find the target architecture")

    sections = _parse_sections(lines)
    info = CubinInfo(path=path, arch=arch, toolkit=toolkit)

    for line in sections.get(".note.nv.tkinfo", []):
        if "Command Line Arguments" in line:
            info.ptxas_args = line.split(":", 1)[1].strip()
    for line in sections.get(".note.nv.cuinfo", []):
        if "Virtual SM" in line:
            info.virtual_arch = line.split(":", 1)[1].strip()

    entry_names, symbol_values = _parse_symtab(sections.get(".symtab", []))
    if ".nv.reservedSmem.cap" in symbol_values:
        info.reserved_shared_bytes = symbol_values[".nv.reservedSmem.cap"]
    elif ".nv.reservedSmem.offset0" in symbol_values:
        info.reserved_shared_bytes = 1024

    names = list(entry_names)
    if not names:  # symtab format changed: fall back on .nv.info.<kernel>
        names = [s[len(".nv.info."):] for s in sections if s.startswith(".nv.info.")]
    kernels = {n: KernelInfo(symbol=n) for n in names}

    # Module-wide .nv.info: 'function: name(0xIDX)\t<what>: value'
    for e in _parse_info_entries(sections.get(".nv.info", [])):
        m = _FUNC_VALUE_RE.match(e.value)
        if m and m.group(1) in kernels:
            _apply_attribute(kernels[m.group(1)], e.attribute, m.group(2))
    # Per-kernel .nv.info.<kernel>
    for name, k in kernels.items():
        for e in _parse_info_entries(sections.get(f".nv.info.{name}", [])):
            _apply_attribute(k, e.attribute, e.value)
        k.params.sort(key=lambda p: p.ordinal)

    # Resource usage
    blocks = _parse_res_usage(res_text)
    usage: dict[str, dict[str, int]] = {}
    if len(blocks) == 1:
        usage = blocks[0][1]
    elif blocks:
        match = [b for a, b in blocks if a is None or a == arch]
        usage = match[0] if match else blocks[0][1]
    for name, k in kernels.items():
        res = usage.get(name)
        if res is None:
            continue
        k.resources = dict(res)
        if k.registers is None and "REG" in res:
            k.registers = res["REG"]
        k.stack_bytes = res.get("STACK", 0)
        k.local_bytes = res.get("LOCAL", 0)
        k.shared_section_bytes = res.get("SHARED", 0)

    for k in kernels.values():
        if not k.resources and k.frame_bytes:
            k.stack_bytes = k.frame_bytes
        sh = k.shared_section_bytes
        if sh > 0 and info.reserved_shared_bytes and sh >= info.reserved_shared_bytes:
            k.static_shared_bytes = sh - info.reserved_shared_bytes
        else:
            k.static_shared_bytes = sh

    info.kernels = kernels
    return info


# --------------------------------------------------------------------------
# check_cubin
# --------------------------------------------------------------------------


def _validate_spec(i: int, spec: Any) -> tuple[str, list[int]]:
    if not isinstance(spec, dict):
        raise ValueError(f"kernel spec #{i} is not a dict: {spec!r}")
    sym = spec.get("symbol")
    if not isinstance(sym, str) or not sym:
        raise ValueError(f"kernel spec #{i} has no 'symbol'")
    sizes = spec.get("param_sizes")
    if not isinstance(sizes, (list, tuple)) or not all(
        isinstance(s, int) and not isinstance(s, bool) for s in sizes
    ):
        raise ValueError(f"kernel spec {sym!r}: 'param_sizes' must be a list of ints")
    return sym, list(sizes)


def check_cubin(
    path: os.PathLike | str,
    expected_arch: str,
    kernels: list[dict],
    cuobjdump: Optional[str] = None,
    info: Optional[CubinInfo] = None,
) -> list[str]:
    """Compare a cubin against its launch spec; return problems (empty = OK). ``info``: the cubin's
    ``inspect_cubin`` result, if the caller has it already (cuobjdump is most of a check's time).

    Each kernel dict needs 'symbol' and 'param_sizes' (bytes per parameter in
    order: 8 for pointers, 128 for a by-value CUtensorMap, 4/8 for scalars).
    Optional keys:

    * 'dyn_smem_bytes' (default 0) and 'max_shared_bytes' (static + dynamic
      limit; default from DEFAULT_MAX_SHARED_BYTES for the cubin's arch, the
      check is skipped for unknown archs).
    * 'max_stack_bytes': allowed per-thread stack + local bytes.  When given,
      anything above it is reported; when absent, stack/local memory is
      reported only if it looks like register spilling (see
      KernelInfo.likely_spill).
    * 'block_threads': threads per block the launcher uses; checked against
      __launch_bounds__ and the 64K-register file.

    A missing cuobjdump raises FileNotFoundError; a missing or unreadable
    cubin is reported as a problem.
    """
    specs = [_validate_spec(i, s) for i, s in enumerate(kernels)]
    path = os.fspath(path)
    name = os.path.basename(path)
    if not os.path.isfile(path):
        return [f"{name}: cubin file not found ({path})"]
    if info is None:
        exe = cuobjdump or find_cuobjdump()
        try:
            info = inspect_cubin(path, cuobjdump=exe)
        except CubinInspectError as e:
            return [f"{name}: cannot inspect cubin: {e}"]

    problems: list[str] = []
    want_arch = normalize_arch(expected_arch)
    if normalize_arch(info.arch) != want_arch:
        problems.append(
            f"{name}: arch mismatch: cubin is {info.arch}, spec expects {want_arch}"
        )

    for (sym, want_sizes), spec in zip(specs, kernels):
        k = info.kernels.get(sym)
        where = f"{name}: kernel {sym!r}"
        if k is None:
            avail = ", ".join(sorted(info.kernels)) or "none"
            problems.append(f"{where}: symbol not found in cubin (kernels: {avail})")
            continue
        problems.extend(_check_params(where, k, want_sizes))
        problems.extend(_check_shared(where, k, spec, info.arch))
        problems.extend(_check_stack(where, k, spec))
        problems.extend(_check_threads(where, k, spec))
    return problems


def _check_params(where: str, k: KernelInfo, want: list[int]) -> list[str]:
    got = k.param_sizes
    out = []
    ordinals = [p.ordinal for p in k.params]
    if ordinals != list(range(len(ordinals))):
        out.append(f"{where}: parameter ordinals are not contiguous: {ordinals}")
    if len(got) != len(want):
        out.append(
            f"{where}: parameter count differs: cubin has {len(got)} {got}, "
            f"spec has {len(want)} {want}"
        )
        return out
    diffs = [
        f"#{i}: cubin {g} B, spec {w} B"
        for i, (g, w) in enumerate(zip(got, want))
        if g != w
    ]
    if diffs:
        out.append(f"{where}: parameter sizes differ ({'; '.join(diffs)})")
    return out


def _check_shared(where: str, k: KernelInfo, spec: dict, arch: str) -> list[str]:
    dyn = int(spec.get("dyn_smem_bytes", 0) or 0)
    limit = spec.get("max_shared_bytes")
    if limit is None:
        limit = DEFAULT_MAX_SHARED_BYTES.get(_arch_number(arch) or -1)
    if limit is None:
        return []
    total = k.static_shared_bytes + dyn
    if total > int(limit):
        return [
            f"{where}: shared memory over limit: static {k.static_shared_bytes} B "
            f"+ dynamic {dyn} B = {total} B > {int(limit)} B"
        ]
    return []


def _check_stack(where: str, k: KernelInfo, spec: dict) -> list[str]:
    if not k.uses_local_memory:
        return []
    used = max(k.stack_bytes, k.frame_bytes or 0) + k.local_bytes
    detail = (
        f"STACK {k.stack_bytes} B, LOCAL {k.local_bytes} B, "
        f"registers {k.registers}/{k.max_registers if k.max_registers is not None else '?'}"
    )
    budget = spec.get("max_stack_bytes")
    if budget is not None:
        if used > int(budget):
            return [
                f"{where}: local memory {used} B exceeds max_stack_bytes "
                f"{int(budget)} B ({detail})"
            ]
        return []
    if k.likely_spill:
        return [
            f"{where}: register spills: kernel uses local memory while at its "
            f"register cap ({detail}); set 'max_stack_bytes' if intended"
        ]
    return []


def _check_threads(where: str, k: KernelInfo, spec: dict) -> list[str]:
    threads = spec.get("block_threads")
    if threads is None:
        return []
    if isinstance(threads, (list, tuple)):
        n = 1
        for t in threads:
            n *= int(t)
    else:
        n = int(threads)
    out = []
    cap = k.max_threads_per_block
    if cap is not None and n > cap:
        out.append(f"{where}: block of {n} threads exceeds __launch_bounds__ {cap}")
    if k.registers:
        warps = -(-n // 32)
        per_thread = -(-k.registers // 8) * 8
        regs = warps * 32 * per_thread
        if regs > 65536:
            out.append(
                f"{where}: {n} threads x {k.registers} registers needs {regs} "
                "registers per block > 65536"
            )
    return out


if __name__ == "__main__":  # pragma: no cover - debugging aid
    import json
    import sys

    for p in sys.argv[1:]:
        print(json.dumps(inspect_cubin(p).to_dict(), indent=2))
