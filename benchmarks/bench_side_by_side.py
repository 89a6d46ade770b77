"""KernelKiln and the peer (tile_kernels 2.1.0) side by side in one process, on the same inputs.

  PYTHONPATH=<kernelkiln install>:<tile_kernels + tilelang install> python benchmarks/bench_side_by_side.py --out side.json

For every case of benchmarks/side_by_side/ (every op both packages have, at the DeepSeek-V3/V4 shapes and at least
one other model's): whether the results are equal (bitwise, NaN by position; the peer's tolerance where the peer
itself is not deterministic), the device time of each by CUDA-graph replay, the ratio peer / ours (> 1: we are
faster), and the first call of each in this process.

The peer compiles each kernel on its first call (TileLang JIT, nvcc). ``--warm-peer K/N`` runs only the peer's
first calls of every N-th case (from the K-th) and writes their times to ``--warm-out``; several such processes
in parallel fill TileLang's disk cache before the measuring run (scripts/gpu_side_by_side.sh), whose table then
shows the peer's cold first call (the JIT, from the warm-up processes, measured while they ran in parallel) beside
its first call from the disk cache and ours.
"""
import argparse
import json
import sys
import time
import traceback
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_foundation import event_time_us, graph_time_us  # noqa: E402
from side_by_side import FAMILIES, all_cases  # noqa: E402


def _flat(out):
    if out is None or isinstance(out, (torch.Tensor, int, float, bool)):
        return [out]
    return [t for o in out for t in _flat(o)]


def _max_abs_diff(x, y):
    if not (x.is_floating_point() and y.is_floating_point()) or x.numel() == 0:
        return None
    d = (x.double() - y.double()).abs()
    d = d[~(torch.isnan(x) & torch.isnan(y))]
    return float(d.max()) if d.numel() else 0.0


def compare(ours, peer, tol=None):
    """(equal, detail): bitwise per tensor (NaN by position, since NaN payloads are not part of the contract), or
    within ``tol = (atol, rtol)``."""
    a, b = _flat(ours), _flat(peer)
    if len(a) != len(b):
        return False, f"{len(a)} results vs the peer's {len(b)}"
    worst = 0.0
    for i, (x, y) in enumerate(zip(a, b)):
        if not isinstance(x, torch.Tensor) or not isinstance(y, torch.Tensor):
            if x != y:
                return False, f"result {i}: {x!r} vs the peer's {y!r}"
            continue
        if x.dtype != y.dtype or x.shape != y.shape:
            return False, f"result {i}: {x.dtype}{list(x.shape)} vs the peer's {y.dtype}{list(y.shape)}"
        if tol is not None and x.is_floating_point() and x.element_size() > 1:
            if not torch.allclose(x.float(), y.float(), atol=tol[0], rtol=tol[1], equal_nan=True):
                return False, f"result {i}: max |diff| {_max_abs_diff(x, y)} beyond atol {tol[0]}, rtol {tol[1]}"
            worst = max(worst, _max_abs_diff(x, y) or 0.0)
            continue
        nx = torch.isnan(x) if x.is_floating_point() and x.element_size() > 1 else None
        if nx is not None:
            if not torch.equal(nx, torch.isnan(y)):
                return False, f"result {i}: NaN at different positions"
            x, y = x[~nx], y[~nx]
        if not torch.equal(x.contiguous().view(torch.uint8), y.contiguous().view(torch.uint8)):
            diff = (x.contiguous().view(torch.uint8) != y.contiguous().view(torch.uint8)).sum().item()
            return False, f"result {i}: {diff} bytes differ; max |diff| {_max_abs_diff(x, y)}"
    return True, ("bitwise" if tol is None else f"within atol {tol[0]}, rtol {tol[1]}; max |diff| {worst}")


def _first_call_s(fn):
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def _seeded(calls, m):
    def call():
        if calls.seed is not None:
            m.rand.set_seed(calls.seed)
        return calls.compare_call()(m)
    return call


def _device_time_us(fn):
    """CUDA-graph replay; an op whose host part cannot be captured is timed by events around eager calls."""
    try:
        return graph_time_us(fn), "graph"
    except Exception:  # noqa: BLE001 - capture failures come in many types; the fallback says which timing
        torch.cuda.synchronize()
        return event_time_us(fn), "events"


def _selected(args):
    for i, case in enumerate(all_cases(families=args.families)):
        if args.match and not any(s in case.name for s in args.match):
            continue
        yield i, case


def warm_peer(args, tk):
    k, n = (int(v) for v in args.warm_peer.split("/"))
    with open(args.warm_out, "a") as out:
        for i, case in _selected(args):
            if i % n != k:
                continue
            rec = {"index": i, "name": case.name, "params": case.params}
            try:
                calls = case.build("cuda")
                rec["peer_jit_s"] = round(_first_call_s(_seeded(calls, tk))[0], 3)
            except Exception as e:  # noqa: BLE001 - the measuring run reports it in full
                rec["error"] = f"{type(e).__name__}: {e}"[:300]
            out.write(json.dumps(rec) + "\n")
            out.flush()
            del calls
            torch.cuda.empty_cache()


def measure(case, tk, kk, jit):
    rec = {"name": case.name, "params": case.params}
    calls = case.build("cuda")
    peer_first, peer_out = _first_call_s(_seeded(calls, tk))
    ours_first, ours_out = _first_call_s(_seeded(calls, kk))
    rec["equal"], rec["detail"] = compare(ours_out, peer_out, calls.tol)
    rec["first_call_s"] = {"peer_jit": jit, "peer": round(peer_first, 4), "ours": round(ours_first, 4)}
    del peer_out, ours_out
    peer_us, timing = _device_time_us(lambda: calls.run(tk))
    ours_us, ours_timing = _device_time_us(lambda: calls.run(kk))
    rec.update(peer_us=round(peer_us, 2), ours_us=round(ours_us, 2), speedup=round(peer_us / ours_us, 3),
               timing=timing if timing == ours_timing else f"peer {timing}, ours {ours_timing}")
    return rec


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", help="the JSON of every record (the measuring run)")
    p.add_argument("--families", default=",".join(FAMILIES), type=lambda s: tuple(s.split(",")))
    p.add_argument("--match", nargs="*", help="only cases whose name contains one of these")
    p.add_argument("--warm-peer", metavar="K/N", help="only the peer's first calls of cases i with i %% N == K")
    p.add_argument("--warm-out", help="jsonl of the warm-up's first-call (JIT) times; read by the measuring run")
    a = p.parse_args()
    import tile_kernels as tk
    torch.manual_seed(0)
    if a.warm_peer:
        return warm_peer(a, tk)
    import kernelkiln as kk
    jit = {}
    for w in Path(a.warm_out).parent.glob(Path(a.warm_out).name + "*") if a.warm_out else ():
        for line in w.read_text().splitlines():
            r = json.loads(line)
            jit[r["index"]] = r.get("peer_jit_s")
    records = []
    for i, case in _selected(a):
        try:
            rec = measure(case, tk, kk, jit.get(i))
        except Exception as e:  # noqa: BLE001 - one broken case must not stop the others
            rec = {"name": case.name, "params": case.params, "error": f"{type(e).__name__}: {e}"[:500],
                   "trace": traceback.format_exc()[-1500:]}
        print(json.dumps(rec), flush=True)
        records.append(rec)
        torch.cuda.empty_cache()
        if a.out:  # after each case: a run cut off by its time limit keeps what finished
            Path(a.out).write_text(json.dumps({"device": torch.cuda.get_device_name(), "tile_kernels": tk.__version__,
                                               "records": records}, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
