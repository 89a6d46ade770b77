"""KernelKiln's ahead-of-time compiler: manifest -> lower (TileLang) -> nvcc -> cubin + launch spec.

Build time only. Nothing under python/kernelkiln imports this package.
"""
