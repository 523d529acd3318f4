"""`tpuperf machine`: what this machine is, and whether it is a corpus's."""

import json
import sys

import click

from tpuperf_cli.commands.options import CONTEXT, format_option
from tpuperf_cli.errors import TpuperfError


@click.command("machine", context_settings=CONTEXT)
@click.option("--check", "manifest", metavar="MANIFEST", type=click.Path(exists=True),
              help="A corpus manifest (or its directory), or a label file of the corpus "
                   "(examples/corpus/labels/NAME.zst: another machine's labels): compare this "
                   "machine's target with it and time its reference kernels here.")
@click.option("--backend", type=click.Choice(["auto", "cpu", "gpu", "tpu"]), default="auto",
              show_default=True, help="XLA backend, as for measure.")
@format_option(["text", "json"], "text")
def cli(manifest, backend, fmt):
    """Print this machine's target, as measure records it; check it against
    a corpus.

    Without --check, prints the target measure would write with its default
    settings (one pinned CPU, process clock on CPU): platform, chip, CPU
    vendor, family, model and stepping, cache sizes, CPUs, clock, the
    timing method's version, jax and jaxlib versions.

    With --check MANIFEST (examples/corpus/manifest.json, say), it also
    compares the target with the one the manifest records, field by field,
    and times the manifest's reference kernels (a dozen steady kernels of
    the common kinds, taken from the corpus's own shards) here with
    measure's method. The machine is the corpus's when no machine field
    differs, the timing method is the same, every reference kernel is
    within 1.5x of its recorded time and their median within 15%. Then a
    corpus may be extended here and a model's accuracy compared with the
    README's; otherwise measure the whole corpus again on this machine, in
    one session, and train on that. A label file of the corpus (written by
    `examples/build_corpus.py labels`) stands for the machine that measured
    it: its target and its timings of the same reference kernels.

    \b
    Examples:
      tpuperf machine
      tpuperf machine --check examples/corpus/manifest.json
      tpuperf machine --check examples/corpus -f json
      tpuperf machine --check examples/corpus/labels/amd-epyc-26-2.zst

    Exit status: 0 when the machine is the corpus's (or without --check), 1
    when it is not, or on an error.
    """
    from tpuperf_cli.measure.check import check_machine
    from tpuperf_cli.measure.device import MeasureError
    from tpuperf_cli.measure.worker import IsolatedMeasurer

    try:
        measurer = IsolatedMeasurer(backend, cpus=1)
    except MeasureError as e:
        raise TpuperfError(e.message) from None
    try:
        if manifest is None:
            report = {"target": measurer.target}
        else:
            report = check_machine(manifest, measurer)
    finally:
        measurer.close()
    if fmt == "json":
        json.dump(report, sys.stdout, indent=1, sort_keys=True)
        print()
    else:
        _print_text(report)
    if manifest is not None and not report["same"]:
        sys.exit(1)


def _print_text(report):
    print("target: " + json.dumps(report["target"], sort_keys=True))
    if "kernels" not in report:
        return
    for field in report["target_differs"]:
        print(f"differs: {field}: corpus {json.dumps(report['manifest_target'].get(field))}, "
              f"here {json.dumps(report['target'].get(field))}")
    if report["method_differs"]:
        print(f"differs: the timing method (the corpus: method "
              f"{report['manifest_target'].get('method')}, measure now: method "
              f"{report['target'].get('method')}); its labels and new ones do not mix")
    print(f"{'kernel':<40} {'kind':<12} {'corpus us':>10} {'here us':>10} {'ratio':>7}")
    for r in report["kernels"]:
        now = f"{r['now_ns'] / 1e3:10.1f}" if r["now_ns"] else f"{'failed':>10}"
        ratio = f"{r['ratio']:7.2f}" if r["ratio"] else f"{'-':>7}"
        print(f"{r['kernel'][:40]:<40} {r['kind']:<12} {r['runtime_ns'] / 1e3:10.1f} {now} {ratio}")
    median = report["median_ratio"]
    print(f"median ratio here/corpus: {median:.2f}" if median else "no reference kernel ran")
    print("same machine: yes" if report["same"] else
          "same machine: no (measure the corpus again here before extending or comparing it)")
