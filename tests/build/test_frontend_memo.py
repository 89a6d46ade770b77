"""build_tools.frontend_memo: TileLang's front-end rewrite reused across closures only where its answers agree."""
import pytest

tilelang = pytest.importorskip("tilelang")

from build_tools import frontend_memo  # noqa: E402


def _kernel(dt, n):
    import tilelang.language as T

    @T.prim_func
    def k(a: T.Tensor((n,), dt), s: T.float32):
        with T.Kernel(1, threads=32) as bx:
            a[bx] = a[bx] + a[bx]

    return k


def test_a_rewrite_is_reused_only_where_the_evaluated_answers_agree(monkeypatch):
    if frontend_memo.supported() is not None:
        pytest.skip(frontend_memo.supported())
    from tilelang.language.eager import ast as eager_ast
    from tilelang.language.eager import builder
    plain = [_kernel("float32", 8).script(), _kernel("float16", 16).script()]  # TileLang's own rewrite
    monkeypatch.setattr(builder, "mutate", frontend_memo.mutate)
    monkeypatch.setattr(frontend_memo, "_cache", {})
    rewrites = []
    real = frontend_memo._rewrite
    monkeypatch.setattr(frontend_memo, "_rewrite", lambda f, n, e: rewrites.append(f) or real(f, n, e))
    memo = [_kernel("float32", 8).script(), _kernel("float32", 16).script(), _kernel("float16", 16).script()]
    # dtype and size are closure values the generated code reads when it runs: one rewrite serves all three
    assert len(rewrites) == 1 and memo[0] == plain[0] and memo[2] == plain[1]
    assert memo[1] != memo[0]
    (key, (code, source, hints, evals)), = frontend_memo._cache.items()
    assert any(expr == "T.Kernel" for expr, _ in evals)  # the with item the transformer resolves
    # an evaluation that answers differently (here: a recorded answer that no longer holds) means a new rewrite
    frontend_memo._cache[key] = (code, source, hints, [(expr, (object, 0)) for expr, _ in evals])
    assert _kernel("float32", 8).script() == plain[0] and len(rewrites) == 2
    assert eager_ast.mutate is not frontend_memo.mutate  # TileLang's own function is left as it is
