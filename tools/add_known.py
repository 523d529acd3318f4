#!/usr/bin/env python3
"""Give a model file trained before known kernels (model.known) the
measured runtimes of its training kernels, as `tpuperf train` now writes.

The training data is read again as the file records it (trained.data, the
split and the options that choose records), and the feature scaling
learnt from it anew must equal the file's: otherwise the data is not what
the model was trained on, and nothing is written.

    .venv/bin/python tools/add_known.py tpuperf_cli/data/default.pt
    .venv/bin/python tools/add_known.py model.pt -o with-known.pt
"""

import argparse
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("-o", "--output", help="write here (default: the model file itself)")
    args = ap.parse_args()

    from tpuperf_cli.errors import TpuperfError
    from tpuperf_cli.model.options import TrainOptions
    from tpuperf_cli.model.predict import _same_numbers, read_model_file, save_atomic
    from tpuperf_cli.model.train import known_entry, load_data

    try:
        d = read_model_file(args.model)
        t = d.get("trained") or {}
        names = set(TrainOptions.__dataclass_fields__)
        opts = TrainOptions(**{k: v for k, v in (t.get("options") or {}).items() if k in names})
        if opts.teacher_data:
            sys.exit(f"add_known: {args.model} was trained with --teacher-data; retrain it instead")
        os.chdir(ROOT)          # the file records the data relative to the checkout
        train_set, _, scaler = load_data(t["data"], None, t.get("split"), opts,
                                         progress=lambda m: print(m, file=sys.stderr))
    except (TpuperfError, KeyError) as e:
        sys.exit(f"add_known: {args.model}: {e}")
    if not _same_numbers(scaler.to_dict(), d["scaling"]) or train_set.examples != t.get("examples"):
        sys.exit(f"add_known: {args.model}: the data it records ({', '.join(t['data'])}) is not "
                 f"the data it was trained on (another feature scaling, or {train_set.examples} "
                 f"examples against {t.get('examples')}); nothing written")
    d["known"] = known_entry(train_set, opts)
    out = args.output or args.model
    save_atomic(d, out)
    n = int(d["known"]["runtime_ns"].shape[0]) if d["known"] is not None else 0
    print(f"add_known: wrote {out} ({n} known kernels of {train_set.examples} training examples; "
          f"{os.path.getsize(out) / 1e6:.2f} MB)", file=sys.stderr)


if __name__ == "__main__":
    main()
