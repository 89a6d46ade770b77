"""TileKiln's ahead-of-time compiler: manifest -> lower (TileLang) -> nvcc -> cubin + launch spec.

Build time only. Nothing under python/tilekiln imports this package.
"""
