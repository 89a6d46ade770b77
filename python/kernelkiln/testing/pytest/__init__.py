"""Pytest plugins for suites that test kernels (the peer's ``tile_kernels.testing.pytest``), loaded by name from a
root ``conftest.py``; a conftest written for the peer keeps working after ``tile_kernels`` -> ``kernelkiln``::

    pytest_plugins = [
        "kernelkiln.testing.pytest.benchmark",         # --run-benchmark, baselines, regression report
        "kernelkiln.testing.pytest.gpu_mem",           # per-test peak GPU memory, large_gpu_mem marker
        "kernelkiln.testing.pytest.random",            # --seed, the autouse ``seed`` fixture
        "kernelkiln.testing.pytest.tilelang_warning",  # summary of TileLang warnings in captured output
        "kernelkiln.testing.pytest.xdist_failfast",    # pytest -n N -x stops at the first failure
        "kernelkiln.testing.pytest.precompile",        # TK_PRECOMPILE=1 pass (here: preload, nothing to compile)
    ]

Nothing is imported here: ``import kernelkiln.testing`` (and this package) must not pull in pytest for code that
only uses the test helpers. ``common`` holds what several plugins share and is not a plugin; the GPU timer behind
``benchmark_timer`` is ``kernelkiln.testing.timing`` (the benchmarks' own, no pytest import either).

Where the data lives: benchmark baselines in ``$TK_BENCHMARK_BASELINES_DIR``, else ``$TK_TESTS_DIR/benchmark_baselines``;
GPU memory profiles in ``$TK_GPU_MEM_PROFILES_DIR``. Both are directories of JSONL shards, one per test file, in the
peer's format, so the two packages can share them (but see ``benchmark``: timings of a different timer).
"""
