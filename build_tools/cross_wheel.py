"""An aarch64 wheel from the x86_64 one: same cubins, index and Python code, the launch shim
cross-compiled for aarch64 with zig's C compiler (pip package ``ziglang``, pinned in noxfile.py).

    python -m build_tools.cross_wheel dist/kernelkiln-*-x86_64.whl --out dist --arch aarch64 --manylinux 2_28

Why this is sound: the wheel is ``py3-none`` and its only native file is ``libkernelkiln_launch.so``,
which links nothing (not even libc symbols it does not need), so it is the one piece to rebuild; the
cubins do not depend on the host CPU. ``auditwheel repair`` only retags wheels of the host's arch, so
with ``--manylinux`` the ``linux_<arch>`` wheel is checked with ``auditwheel show`` (which reads any
arch's ELF) and written again under the manylinux tag it allows (noxfile.py, session ``wheel_cross``).
"""
import re
import argparse
import base64
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

SHIM = "kernelkiln/_runtime/libkernelkiln_launch.so"
ZIG_TARGETS = {"aarch64": "aarch64-linux-gnu.2.28"}  # glibc 2.28 = manylinux_2_28
ROOT = Path(__file__).resolve().parent.parent


def compile_shim(arch, out):
    cmd = [sys.executable, "-m", "ziglang", "cc", "-target", ZIG_TARGETS[arch], "-O2", "-shared", "-fPIC",
           "-s", "-o", str(out), str(ROOT / "csrc" / "launch_shim.c")]
    subprocess.run(cmd, check=True)
    machine = out.read_bytes()[18:20]  # ELF e_machine, little endian
    if int.from_bytes(machine, "little") != {"aarch64": 183}[arch]:
        raise SystemExit(f"{out}: not an {arch} ELF (e_machine {machine.hex()})")


def _record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def cross_wheel(src, out_dir, arch, platform=None):
    src = Path(src)
    parts = src.name[:-len(".whl")].split("-")  # name-version-py-abi-platform
    if len(parts) != 5 or parts[3] != "none":
        raise SystemExit(f"{src.name}: expected a py3-none-<platform> wheel")
    platform = platform or f"linux_{arch}"
    dst = Path(out_dir) / ("-".join(parts[:4] + [platform]) + ".whl")
    with tempfile.TemporaryDirectory() as tmp:
        shim = Path(tmp) / "shim.so"
        compile_shim(arch, shim)
        with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
            record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
            records = []
            for info in zin.infolist():
                # (auditwheel repair writes directory entries; a wheel lists files only, and a directory in
                # RECORD makes `auditwheel show` fail with IsADirectoryError)
                if info.filename == record_name or info.is_dir():
                    continue
                data = zin.read(info)
                if info.filename == SHIM:
                    data = shim.read_bytes()
                elif info.filename.endswith(".dist-info/WHEEL"):
                    data = "".join(line for line in data.decode().splitlines(True) if not line.startswith("Tag:"))
                    data = (data + f"Tag: {parts[2]}-none-{platform}\n").encode()
                out_info = zipfile.ZipInfo(info.filename, date_time=info.date_time)
                out_info.external_attr = info.external_attr
                out_info.compress_type = zipfile.ZIP_DEFLATED
                zout.writestr(out_info, data)
                records.append(_record_line(info.filename, data))
            records.append(f"{record_name},,")
            zout.writestr(zipfile.ZipInfo(record_name, date_time=(1980, 1, 1, 0, 0, 0)), "\n".join(records) + "\n")
    return dst


def manylinux_tag(wheel, arch, wanted):
    """The manylinux tag ``wanted`` (e.g. "2_28") if ``auditwheel show`` finds the wheel consistent with it."""
    out = subprocess.run([sys.executable, "-m", "auditwheel", "show", str(wheel)], capture_output=True, text=True,
                         check=True).stdout
    m = re.search(r'platform tag:\s*"manylinux_(\d+)_(\d+)_' + arch + '"', out)
    if not m:
        raise SystemExit(f"auditwheel show found no manylinux tag for {wheel}:\n{out}")
    have, want = (int(m.group(1)), int(m.group(2))), tuple(int(v) for v in wanted.split("_"))
    if have > want:
        raise SystemExit(f"{wheel} needs manylinux_{have[0]}_{have[1]}, newer than the requested {wanted}")
    return f"manylinux_{wanted}_{arch}"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheel")
    ap.add_argument("--out", default="dist")
    ap.add_argument("--arch", default="aarch64", choices=sorted(ZIG_TARGETS))
    ap.add_argument("--manylinux", help="retag as manylinux_<this>_<arch> after auditwheel's check, e.g. 2_28")
    args = ap.parse_args(argv)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    if not args.manylinux:
        print(cross_wheel(args.wheel, args.out, args.arch))
        return
    with tempfile.TemporaryDirectory() as tmp:
        plain = cross_wheel(args.wheel, tmp, args.arch)
        tag = manylinux_tag(plain, args.arch, args.manylinux)
    print(cross_wheel(args.wheel, args.out, args.arch, tag))


if __name__ == "__main__":
    main()
