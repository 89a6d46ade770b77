"""TileLang kernel definitions, one module per operator. Build time only.

Each module defines ``build(params, arch) -> PrimFunc`` and PASS_CONFIGS. What may be built (the compile-time
parameters, their values and constraints) and the launch-argument names are the op's contract in
python/kernelkiln_contract, which names the module. Importing a module needs no TileLang (build() imports it).
"""
