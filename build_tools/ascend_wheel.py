"""The ``kernelkiln-ascend`` wheel: the Ascend kernel binaries of a store as package data (docs/ASCEND.md).

    python -m build_tools ascend-wheel --store S --out-dir D

One ``py3-none-any`` wheel: device binaries do not depend on the host (x86_64 or aarch64 Ascend servers alike), and
there is no Python code besides a path. It holds ``kernelkiln_ascend/_kernels/`` (the store's ``ascend/``: index.json,
runtime/, *.aibin) and requires ``kernelkiln`` of the same version. Written byte-reproducibly (sorted entries, fixed
timestamps: SOURCE_DATE_EPOCH or 1980-01-01). A store whose Ascend part was not compiled (no bisheng where it was
built) is refused: the wheel would hold nothing to run.
"""
import base64
import hashlib
import json
import os
import re
import time
import zipfile
from pathlib import Path

from build_tools import ascend

NAME = "kernelkiln_ascend"
DIST = "kernelkiln-ascend"

_INIT = '''"""Ascend kernel binaries of kernelkiln {version} (docs/ASCEND.md in the kernelkiln sources): package data only.
kernelkiln's ACL loader reads STORE; nothing here is imported by anything else."""
from pathlib import Path

__version__ = "{version}"
STORE = Path(__file__).resolve().parent / "_kernels"
'''


def _version():
    text = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    m = re.search(r'^version\s*=\s*"([^"]+)"', text, re.M)
    if m is None:
        raise ascend.AscendError("no version in pyproject.toml")
    return m.group(1)


def _record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def build(store, out_dir, version=None):
    """Write the wheel into ``out_dir``; returns its path."""
    index = ascend.check_store(store)
    if index is None:
        raise ascend.AscendError(f"{store}: no {ascend.STORE_DIR}/index.json (build with an Ascend target first)")
    if index["status"] != "built" or not index["variants"]:
        raise ascend.AscendError(f"{store}: its Ascend kernels were not compiled ({index.get('reason', 'no binaries')}"
                                 "): a kernelkiln-ascend wheel needs a build where the CANN toolkit's bisheng exists")
    version = version or _version()
    if index.get("kernelkiln") not in (None, version):
        raise ascend.AscendError(f"{store}: built by kernelkiln {index['kernelkiln']}, not {version}")
    folder = Path(store) / ascend.STORE_DIR
    files = {f"{NAME}/__init__.py": _INIT.format(version=version).encode()}
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            files[f"{NAME}/_kernels/{p.relative_to(folder).as_posix()}"] = p.read_bytes()
    info = f"{NAME}-{version}.dist-info"
    files[f"{info}/METADATA"] = (
        "Metadata-Version: 2.1\n"
        f"Name: {DIST}\nVersion: {version}\n"
        "Summary: Ascend 950 (CANN) kernel binaries for kernelkiln\n"
        "Requires-Python: >=3.10\n"
        f"Requires-Dist: kernelkiln=={version}\n"
        f"Description-Content-Type: text/plain\n\n"
        f"Kernel binaries for {', '.join(index['arches'])} built with {index['toolchain'].get('bisheng')}; "
        f"ops: {', '.join(sorted({v['op'] for v in index['variants']}))}.\n").encode()
    files[f"{info}/WHEEL"] = ("Wheel-Version: 1.0\nGenerator: kernelkiln build_tools.ascend_wheel\n"
                              "Root-Is-Purelib: true\nTag: py3-none-any\n").encode()
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in files.items())
    files[f"{info}/RECORD"] = (record + f"{info}/RECORD,,\n").encode()
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH", "315532800"))
    stamp = time.gmtime(max(epoch, 315532800))[:6]
    out = Path(out_dir) / f"{NAME}-{version}-py3-none-any.whl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as z:
        for name, data in files.items():
            zi = zipfile.ZipInfo(name, date_time=stamp)
            zi.compress_type = zipfile.ZIP_DEFLATED
            zi.external_attr = 0o644 << 16
            z.writestr(zi, data)
    return out


def summary(path):
    """(file names, METADATA text) of a built wheel (for tests and logs)."""
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    return names, meta


if __name__ == "__main__":  # pragma: no cover
    import sys
    print(json.dumps(summary(sys.argv[1])[0], indent=1))
