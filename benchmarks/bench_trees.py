#!/usr/bin/env python3
"""How fast the walk down gradient-boosted trees runs: numpy's, the loop
numba compiles (tpuperf_cli/model/trees.py: eight rows down a tree at
once), and, as the reference, the same compiled loop walking one (row,
tree) at a time (the walk predict ran until 2026-12-07), on the rows
predict builds.

The model's trees (a tree model, or the trees of a model joined with
them, as `tpuperf ensemble` makes) walk the pooled rows of the committed
CPU corpus's first --programs programs' kernels, in predict's batches of
512. Figures, all from this run: each walk's CPU time (the best of
--repeat) and ns per (row, tree), the compiled walk's speed as a ratio of
numpy's and of the one-at-a-time loop's, the time numba's import and
first call cost in a fresh process (its cache on disk warm, as after the
first use), and how many (row,
tree) walks numpy makes in that time: the budget COMPILE_AFTER stands
for. The walks' sums are checked to agree.

    .venv/bin/python benchmarks/bench_trees.py --model JOINED.pt [--programs 30] [--repeat 3]
"""

import argparse
import glob
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402  (after the thread count)

START_UP = """
import time
import numpy as np
t = time.perf_counter()
from tpuperf_cli.model import trees
walk = trees._compiled_walk()
one = trees.lane_arrays(np.zeros(1, np.int64), np.zeros(1, np.int64), np.zeros(1), np.full(1, -1),
                        np.full(1, -2), np.zeros(2))
walk(np.zeros((1, 1), np.float32), *one[:2], one[2], *one[4:])
print(time.perf_counter() - t)
"""


def one_at_a_time(rows, roots, feature, threshold, left, right, leaf_value):
    """The reference: the compiled walk predict ran until 2026-12-07, one
    (row, tree) at a time, tree by tree over the rows."""
    n = rows.shape[0]
    out = np.zeros(n, np.float64)
    for t in range(roots.shape[0]):
        root = roots[t]
        for r in range(n):
            node = root
            while node >= 0:
                if rows[r, feature[node]] <= threshold[node]:
                    node = left[node]
                else:
                    node = right[node]
            out[r] += leaf_value[~node]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a tree model, or a model joined with trees")
    ap.add_argument("--programs", type=int, default=30, help="corpus programs whose kernels walk (default 30)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()

    from tpuperf_cli.model import trees
    from tpuperf_cli.model.examples import example
    from tpuperf_cli.model.predict import load_model
    from tpuperf_cli.stream import read_records

    model = load_model(args.model)
    net = model.trees if model.trees is not None else model.net
    if not isinstance(net, trees.TreeNet):
        sys.exit(f"bench_trees: {args.model} holds no trees")
    shards = sorted(glob.glob(os.path.join(ROOT, "examples/corpus/graphs/*.zst")))[:args.programs]
    if not shards:
        sys.exit("bench_trees: no corpus graphs (examples/corpus/graphs/*.zst)")
    exs = model.check_examples([example(r) for p in shards for r in read_records(p)])
    rows = [trees.pooled_rows(model.batch(exs[i:i + 512]), net.cfg.num_opcodes) for i in range(0, len(exs), 512)]
    arrays = (net.roots, net.feature, net.threshold, net.left, net.right, net.leaf_value)
    roots, feature, threshold32, _, child, value, leaves_from = trees.lane_arrays(*arrays)
    lanes = trees._compiled_walk()
    if lanes is trees._numpy_walk:
        sys.exit("bench_trees: numba is not installed")
    import numba

    reference = numba.njit(nogil=True)(one_at_a_time)

    def compiled(r, *_):
        return lanes(r, roots, feature, threshold32, child, value, leaves_from)
    walks = len(exs) * net.roots.size
    print(f"model {model.name}: {net.roots.size} trees, {net.feature.size} splits; "
          f"{len(exs)} kernels of {len(shards)} programs, {len(rows)} batches of <= 512")

    def timed(walk):
        best = float("inf")
        for _ in range(args.repeat):
            t = time.process_time()
            out = [walk(r, *arrays) for r in rows]
            best = min(best, time.process_time() - t)
        return best, np.concatenate(out)

    for walk in (compiled, reference):        # compiled (or loaded from its cache) outside the timing
        walk(rows[0][:1], *arrays)
    t_np, y_np = timed(trees._numpy_walk)
    t_ref, y_ref = timed(reference)
    t_c, y_c = timed(compiled)
    if not (np.allclose(y_np, y_c, rtol=1e-9, atol=1e-9) and np.allclose(y_ref, y_c, rtol=1e-9, atol=1e-9)):
        sys.exit("bench_trees: the walks disagree")
    env = {**os.environ, "PYTHONPATH": ROOT}
    start = min(float(subprocess.run([sys.executable, "-c", START_UP], capture_output=True, text=True,
                                     env=env, check=True).stdout) for _ in range(args.repeat))
    print(f"numpy walk        {t_np:7.3f} s CPU   {t_np / walks * 1e9:6.1f} ns per (row, tree)")
    print(f"one at a time     {t_ref:7.3f} s CPU   {t_ref / walks * 1e9:6.1f} ns per (row, tree)   "
          f"{t_np / t_ref:.1f}x numpy's speed (the reference)")
    print(f"compiled walk     {t_c:7.3f} s CPU   {t_c / walks * 1e9:6.1f} ns per (row, tree)   "
          f"{t_np / t_c:.1f}x numpy's speed, {t_ref / t_c:.2f}x the reference's")
    print(f"numba's import and first call, fresh process (cache warm): {start:.2f} s wall, the time "
          f"numpy takes for {start / (t_np / walks) / 1e6:.1f}M walks (COMPILE_AFTER: "
          f"{trees.COMPILE_AFTER / 1e6:.1f}M)")


if __name__ == "__main__":
    main()
