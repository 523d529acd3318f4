#!/usr/bin/env python3
"""How fast the walk down gradient-boosted trees runs: numpy's against the
loop numba compiles (tpuperf_cli/model/trees.py), on the rows predict
builds.

The model's trees (a tree model, or the trees of a model joined with
them, as `tpuperf ensemble` makes) walk the pooled rows of the committed
CPU corpus's first --programs programs' kernels, in predict's batches of
512. Figures, all from this run: each walk's CPU time (the best of
--repeat) and ns per (row, tree), the compiled walk's speed as a ratio of
numpy's, the time numba's import and first call cost in a fresh process
(its cache on disk warm, as after the first use), and how many (row,
tree) walks numpy makes in that time: the budget COMPILE_AFTER stands
for. The two walks' sums are checked to agree.

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

START_UP = """
import time
import numpy as np
t = time.perf_counter()
from tpuperf_cli.model import trees
walk = trees._compiled_walk()
walk(np.zeros((1, 1), np.float32), *(np.zeros(1, np.int64),) * 2, np.zeros(1), np.full(1, -1),
     np.full(1, -1), np.zeros(1))
print(time.perf_counter() - t)
"""


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="a tree model, or a model joined with trees")
    ap.add_argument("--programs", type=int, default=30, help="corpus programs whose kernels walk (default 30)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

    import numpy as np

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
    compiled = trees._compiled_walk()
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

    compiled(rows[0][:1], *arrays)                     # compiled (or loaded from its cache) outside the timing
    t_np, y_np = timed(trees._numpy_walk)
    t_c, y_c = timed(compiled)
    if not np.allclose(y_np, y_c, rtol=1e-9, atol=1e-9):
        sys.exit("bench_trees: the two walks disagree")
    env = {**os.environ, "PYTHONPATH": ROOT}
    start = min(float(subprocess.run([sys.executable, "-c", START_UP], capture_output=True, text=True,
                                     env=env, check=True).stdout) for _ in range(args.repeat))
    print(f"numpy walk        {t_np:7.3f} s CPU   {t_np / walks * 1e9:6.1f} ns per (row, tree)")
    print(f"compiled walk     {t_c:7.3f} s CPU   {t_c / walks * 1e9:6.1f} ns per (row, tree)   "
          f"{t_np / t_c:.1f}x numpy's speed")
    print(f"numba's import and first call, fresh process (cache warm): {start:.2f} s wall, the time "
          f"numpy takes for {start / (t_np / walks) / 1e6:.1f}M walks (COMPILE_AFTER: "
          f"{trees.COMPILE_AFTER / 1e6:.1f}M)")


if __name__ == "__main__":
    main()
