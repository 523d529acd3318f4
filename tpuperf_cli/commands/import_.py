"""tpuperf import: tile-size data from elsewhere -> record streams."""

import sys

import click

from tpuperf_cli.commands.options import CONTEXT, output_option, quiet_option, record_writer

_OUTPUT = output_option(help="Where to write the records: a file (zstd-compressed if it ends "
                             "in .zst) or - for stdout.")
_QUIET = quiet_option(help="No progress line on stderr.")


def _write(records, output, what, files=None, quiet=False, pipe="featurize"):
    """Write records; on an error, those already written stay valid. On a
    terminal, a progress line on stderr (files done, records written)."""
    tty = sys.stderr.isatty() and not quiet
    with record_writer(output, pipe) as out:
        for r in records:
            out.write(r)
            if tty and files and out.count % 1000 == 0:
                print(f"\rimport {what}: {out.count} records, file {files[0]} of {files[1]}",
                      end="", file=sys.stderr, flush=True)
        if tty:
            print(f"\rimport {what}: wrote {out.count} records" + " " * 20, file=sys.stderr)


@click.group("import", context_settings=CONTEXT)
def cli():
    """Turn tile-size tuning data from elsewhere into tpuperf records.

    Each subcommand reads one outside format and writes a record stream with
    one record per (kernel, tile configuration): the kernel fields, the
    configuration (config, config_index), the measured runtime (runtime_ns)
    and target {"platform": "tpu", ...}. Records of one kernel share
    program and kernel, so `tpuperf train --task tile` can rank them and
    `tpuperf select` and `tpuperf eval` can group them.

    \b
    Examples:
      tpuperf import tuning-json tpu_tile_sample.json | featurize > tile.msgpack
      tpuperf import tpugraphs ~/data/tpugraphs/npz/tile/xla/train -o train.zst

    Exit status: 0 on success; 1 for a file that is not in the documented
    format (the message names the file, the kernel or array key, and what is
    wrong; records of the good kernels before it are already written); 2 for
    JSON that does not parse or a usage error.
    """


@cli.command("tuning-json")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False))
@click.option("--program", metavar="NAME",
              help="Program name for the records (default: each file's name without "
                   "its extension).")
@click.option("--device-kind", metavar="KIND",
              help="The TPU the runtimes were measured on, e.g. 'TPU v4', written to "
                   "target.device_kind (default: unknown, null).")
@_OUTPUT
@_QUIET
def tuning_json(files, program, device_kind, output, quiet):
    """Import real TPU tile-tuning data (JSON) as kernel records.

    Reads JSON files holding a list of kernels, each
    {"kernel_fingerprint": int, "hlo": str, "configs": [{"tile":
    {"kernel_bounds": [...], "output_bounds": [...], "input_bounds": [...]},
    "runtime_ns": int, "is_default": bool}, ...]} (absent bounds are empty),
    the format of tpu_graphs' tuning test data. Each kernel's hlo must be a
    whole HloModule whose ENTRY computation's ROOT is the tuned kernel.

    Failed configurations (runtime_ns null or absent: the run failed; or
    no tile) are skipped, and how many is said on stderr per file; a file
    where every configuration failed is an error.

    Writes one kernel record per good configuration, with the fields hlo-split
    writes (program, kernel = kernel_<fingerprint in hex>, index = the
    kernel's position in the file, count 1 with count_known false, hlo as
    given, opcode and fusion_kind of the ENTRY root, fingerprint, computation)
    plus config {"kernel_bounds", "output_bounds", "input_bounds"},
    config_index, is_default (the tiling XLA's own analytical model chose),
    runtime_ns (measured), target {"platform": "tpu", "device_kind",
    "source": "tuning-json", "file"} and kernel_fingerprint (as in the file).

    featurize fills config_feat (24 features) from config; train, predict,
    select and eval take the records from there.

    \b
    Examples:
      tpuperf import tuning-json data/tpu_tile_sample.json | featurize > tile.msgpack
      tpuperf import tuning-json --program resnet runs/*.json -o resnet.zst
    """
    from tpuperf_cli.tile import tuning_json as tj

    def records():
        from collections import Counter

        seen = {}   # one --program for several files: repeated kernels stay apart
        for path in files:
            failed = Counter()
            yield from tj.records(path, program=program, device_kind=device_kind,
                                  seen=seen if program else None, failed=failed)
            if failed:
                reasons = ", ".join(f"{n} {why}" for why, n in sorted(failed.items()))
                print(f"import tuning-json: {path}: skipped {sum(failed.values())} failed "
                      f"configuration(s) ({reasons})", file=sys.stderr)

    _write(records(), output, "tuning-json", quiet=quiet)


@cli.command("tpugraphs")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--runtime", "runtime", type=click.Choice(["scaled", "ratio", "raw"]),
              default="scaled", show_default=True,
              help="What goes into runtime_ns: scaled = config_runtime / "
                   "config_runtime_normalizers times the file's mean normalizer (TpuGraphs' "
                   "normalised order, in nanoseconds); ratio = the normalised ratio itself; "
                   "raw = config_runtime unnormalised.")
@click.option("--max-configs", type=click.IntRange(min=1), metavar="N",
              help="Keep at most N configurations per file, drawn at random (seeded; file "
                   "order kept). Large kernels have thousands.")
@click.option("--seed", type=int, default=0, show_default=True,
              help="Seed for --max-configs.")
@_OUTPUT
@_QUIET
def tpugraphs(paths, runtime, max_configs, seed, output, quiet):
    """Import TpuGraphs tile-collection .npz files as graph records.

    Reads .npz files of the TpuGraphs tile collection
    (google-research-datasets/tpu_graphs: npz/tile/xla/{train,valid,test}/),
    named one by one or as directories searched recursively. Each file is one
    kernel with node_feat (n x 140), node_opcode (n), edge_index (m x 2),
    config_feat (c x 24), config_runtime (c) and config_runtime_normalizers
    (c). Files of the layout collection (node_config_feat, node_config_ids)
    are refused: not supported yet.

    Writes one graph record per configuration: program and kernel from the
    file name (`alexnet_train_batch_32_-1bae27a41d70f4dc.npz` gives program
    alexnet_train_batch_32, kernel kernel_-1bae27a41d70f4dc), index, count 1,
    hlo null (TpuGraphs has no HLO text), node_opcode, node_feat, edge_index
    (TpuGraphs' layout and conventions are tpuperf's own, so unchanged),
    config_feat (that configuration's row), config (the bound lists read back
    from it), config_index, fingerprint (a digest of the graph), target
    {"platform": "tpu", "source": "tpugraphs", "file"}, tile_id, and the
    runtimes: runtime_norm = config_runtime / config_runtime_normalizers as
    TpuGraphs prescribes, runtime_raw, runtime_normalizer, and runtime_ns
    (see --runtime). The default, scaled, keeps TpuGraphs' normalised order
    and per-kernel relative differences while staying in nanoseconds, so
    fusion-style thresholds and APE weights still make sense. There is no
    is_default (TpuGraphs does not mark XLA's choice) and no kernel_feat.

    Every file is checked whole before its records are written.

    \b
    Examples:
      tpuperf import tpugraphs npz/tile/xla/train -o tile_train.zst
      tpuperf import tpugraphs --max-configs 64 npz/tile/xla/valid/*.npz > valid.msgpack
    """
    from tpuperf_cli.tile import tpugraphs as tg

    files = tg.find_files(paths)
    progress = [0, len(files)]

    def on_file(number, path):
        progress[0] = number

    _write(tg.import_files(files, runtime=runtime, max_configs=max_configs, seed=seed,
                           on_file=on_file), output, "tpugraphs", progress, quiet,
           "predict --model tile.pt")
