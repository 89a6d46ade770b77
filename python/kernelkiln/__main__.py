"""``python -m kernelkiln info``: what this installation contains and whether this machine can run it."""
import argparse
import collections
import sys


def info(out=sys.stdout):
    import torch

    import kernelkiln
    from kernelkiln._runtime import artifacts, driver, launcher, store

    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"kernelkiln {kernelkiln.__version__} (torch {torch.__version__}, launch path: {launcher.LAUNCH_PATH})")
    s = store()
    try:
        index = s.index
    except artifacts.MissingSpecializationError as e:
        p(f"kernels: none ({e})")
        for line in ascend_lines(None, s.directory):
            p(line)
        return 1
    tc = index.get("toolchain", {})
    for line in ascend_lines(index["arches"], s.directory):
        p(line)
    p(f"kernel store: {s.directory}")
    p(f"built with: tilelang {tc.get('tilelang', '?')}, nvcc {tc.get('nvcc', '?')}; arches {index['arches']}")
    counts = collections.Counter((e["op"], e["arch"]) for e in index["variants"])
    for op in sorted({op for op, _ in counts}):
        p(f"  {op:28s} " + ", ".join(f"{a}: {counts[(op, a)]}" for a in index["arches"]))
    presets = index.get("presets") or {}
    if presets:
        def state(c):
            return "covered" if c["missing"] == 0 else f"{c['missing']} variant(s) missing"
        p("model presets (manifests/presets): " + ", ".join(f"{name} {state(c)}" for name, c in sorted(presets.items())))
    try:
        d = driver.get_driver()
        v = d.version()
        p(f"driver: CUDA {v // 1000}.{v % 1000 // 10}")
        n = torch.cuda.device_count()
        for i in range(n):
            try:
                p(f"  cuda:{i} {torch.cuda.get_device_name(i)}: runs {s.device_arch(i)} kernels")
            except artifacts.UnsupportedDeviceError as e:
                p(f"  cuda:{i}: cannot run: {e}")
        if n == 0:
            p("  no CUDA device visible")
    except driver.DriverError as e:
        p(f"driver: not usable here: {e}")
    return 0


ASCEND_STATUS = ("Ascend: lowered and loader-tested; compiled and run only where CANN and an Ascend 950 exist "
                 "(not run by this project)")


def ascend_lines(cuda_arches, cuda_store_dir):
    """The backends line of ``info`` (which backends the installed stores contain) and the Ascend status."""
    from kernelkiln._runtime import ascend
    a = ascend.AscendStore(ascend._default_directories(cuda_store_dir))
    summary = a.summary()
    if summary.get("status") == "absent":
        asc = "none"
    elif a.arches():
        asc = f"{', '.join(a.arches())} ({', '.join(summary.get('ops') or [])}; {a.directory})"
    else:
        asc = f"none (lowered, not compiled: {summary.get('reason') or summary.get('status')}; {a.directory})"
    cuda = ", ".join(cuda_arches) if cuda_arches else "none"
    return [f"backends: CUDA {cuda}; Ascend {asc}", ASCEND_STATUS]


def main(argv=None):
    ap = argparse.ArgumentParser(prog="python -m kernelkiln")
    ap.add_argument("command", choices=["info"])
    ap.parse_args(argv)
    return info()


if __name__ == "__main__":
    sys.exit(main())
