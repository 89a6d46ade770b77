"""Compare two kernel stores built from the same manifest, byte for byte: the lowered CUDA and launch specs of their
gen dirs (<store>-gen, beside each store), every cubin, and the index apart from the manifest's own hash.

    python scripts/compare_stores.py OLD_STORE NEW_STORE

Exit status 1 when anything differs. Used to show that a refactor of the build changed no kernel.
"""
import json
import sys
from pathlib import Path


def _files(d, suffix):
    return {p.name: p.read_bytes() for p in sorted(Path(d).glob(f"*{suffix}"))}


def main(old, new):
    bad = 0
    for what, a_dir, b_dir, suffix in (("lowered CUDA", f"{old}-gen", f"{new}-gen", ".cu"),
                                       ("launch specs", f"{old}-gen", f"{new}-gen", ".json"),
                                       ("cubins", old, new, ".cubin")):
        a, b = _files(a_dir, suffix), _files(b_dir, suffix)
        differ = sorted(n for n in a.keys() & b.keys() if a[n] != b[n])
        only = sorted(a.keys() ^ b.keys())
        print(f"{what}: {len(a)} vs {len(b)} files, {len(differ)} differ, {len(only)} in one store only"
              + (f" (e.g. {(differ + only)[:3]})" if differ or only else ""))
        bad += bool(differ or only)
    ia, ib = (json.loads((Path(d) / "index.json").read_text()) for d in (old, new))
    keys = sorted(k for k in ia.keys() | ib.keys() if k != "manifest_sha256" and ia.get(k) != ib.get(k))
    print(f"index.json: {'identical' if not keys else 'differs in ' + ', '.join(keys)} (manifest_sha256 aside)")
    return 1 if bad or keys else 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]))
