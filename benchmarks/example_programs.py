"""The example program the benchmarks time by default."""

import glob
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def largest_example():
    """The path of the largest examples/hlo/*.hlo.zst by its text (the
    files are zstd, so their sizes on disk rank them otherwise)."""
    sys.path.insert(0, ROOT)
    from tpuperf_cli.hlo.dump import read_hlo

    files = glob.glob(os.path.join(ROOT, "examples", "hlo", "*.hlo.zst"))
    if not files:
        sys.exit("no examples/hlo/*.hlo.zst; name HLO files to time")
    return max(files, key=lambda p: len(read_hlo(p).text))
