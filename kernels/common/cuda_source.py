"""CUDA helper source that kernels inject with T.import_source.

Injected code lands in the lowered file's preamble, before TileLang's (guarded) includes. Several
variants of one op are compiled as one translation unit (build_tools/units.py), each with its own
preamble, so a helper must be defined once however often it appears: ``guarded`` wraps it in an
include guard. Only the preprocessor sees the guard; the compiled code is the same.
"""


def guarded(name, source):
    macro = f"TK_HELPER_{name.upper()}"
    return f"\n#ifndef {macro}\n#define {macro}\n{source.strip()}\n#endif\n"
