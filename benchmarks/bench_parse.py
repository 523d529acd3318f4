"""How fast hlo-split parses HLO text, against XLA's own C++ parser.

Times tpuperf_cli.hlo.parser.parse_module and jaxlib's hlo_module_from_text
on the same text in one run (best of --repeat each, interleaved so both see
the same machine load) and prints our speed as a fraction of XLA's
(1.0 = as fast). Also times the whole of hlo-split's work (parse, find the
kernels, write each standalone module and fingerprint) for reference.

    .venv/bin/python benchmarks/bench_parse.py                 # largest example
    .venv/bin/python benchmarks/bench_parse.py examples/hlo/*.hlo.zst --repeat 5
"""

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from example_programs import largest_example  # noqa: E402

from tpuperf_cli.hlo import parser  # noqa: E402
from tpuperf_cli.hlo.dump import read_hlo  # noqa: E402
from tpuperf_cli.hlo.split import find_kernels, fingerprint, kernel_module  # noqa: E402


def best(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def ours(text):
    parser.clear_caches()               # as in a fresh process
    return parser.parse_module(text)


def split_all(text):
    parser.clear_caches()
    m = parser.parse_module(text)
    for k in find_kernels(m):
        kernel_module(m, k)
        fingerprint(m, k)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="*", help="HLO files (default: the largest examples/hlo/*.hlo.zst)")
    ap.add_argument("--repeat", type=int, default=7, help="runs per timing; the best counts")
    args = ap.parse_args()
    files = args.files or [largest_example()]
    from jax._src.lib import xla_client as xc

    print(f"{'file':<32} {'MB':>6} {'instrs':>7} {'xla ms':>8} {'ours ms':>8} "
          f"{'speed vs xla':>12} {'split ms':>9}")
    ratios = []
    for path in files:
        text = read_hlo(path).text
        m = ours(text)
        n = sum(len(c.instructions) for c in m.computations.values())
        xla_t = our_t = float("inf")
        for _ in range(args.repeat):      # interleaved: both see the same load
            xla_t = min(xla_t, best(lambda: xc._xla.hlo_module_from_text(text), 1))
            our_t = min(our_t, best(lambda: ours(text), 1))
        split_t = best(lambda: split_all(text), max(1, args.repeat // 2))
        ratios.append(xla_t / our_t)
        print(f"{os.path.basename(path).removesuffix('.zst'):<32} {len(text) / 1e6:6.2f} {n:7d} {xla_t * 1e3:8.1f} "
              f"{our_t * 1e3:8.1f} {xla_t / our_t:11.2f}x {split_t * 1e3:9.1f}")
    if len(ratios) > 1:
        import statistics

        print(f"median speed vs XLA over {len(ratios)} files: {statistics.median(ratios):.2f}x")


if __name__ == "__main__":
    main()
