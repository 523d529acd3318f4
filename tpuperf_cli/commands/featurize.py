"""`featurize`: kernel records -> graph records (TpuGraphs layout + static costs)."""

import sys
import time

import click

from tpuperf_cli.commands.options import CONTEXT, output_option, quiet_option, record_writer
from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.records import GRAPH_RECORD, TYPE, locate


@click.command("featurize", context_settings=CONTEXT)
@click.argument("inputs", nargs=-1, type=click.Path(dir_okay=False, allow_dash=True))
@output_option(help="Where to write graph records: a file (zstd if it ends in .zst) or - for "
                    "stdout.")
@click.option("--skip-bad", is_flag=True,
              help="Skip records that cannot be featurized (bad HLO inside, unknown shape, "
                   "no hlo field) instead of stopping; say on stderr how many were skipped "
                   "and why (the first few).")
@quiet_option()
def cli(inputs, output, skip_bad, quiet):
    """Turn kernel records into graph records a performance model reads.

    Reads msgpack kernel records (from hlo-split or `tpuperf import`) from
    INPUTS or stdin (`-` or none; plain or zstd-compressed), parses each
    record's standalone HLO module ("hlo") and writes one graph record per
    kernel record to stdout or -o FILE (never to a terminal), in order:
    every input field kept, "type" set to "graph", and five array fields
    added. HLO text itself goes to hlo-split first.

    The node, edge and config fields use the layout of the TpuGraphs dataset
    (google-research-datasets/tpu_graphs), so a model trained on its .npz
    files reads them the same way, and the static costs follow the
    conventions of XLA's own HloCostAnalysis.

    \b
    Fields added (arrays as {"dtype", "shape", "data"} maps):
      node_opcode  int32 (n)        opcode id per node: TpuGraphs' numbering
                                    (hlo_opcode.h, 1..120); newer XLA
                                    opcodes 121..138; 0 unknown
      node_feat    float32 (n,140)  TpuGraphs "Node Features", index for index
      edge_index   int32 (m,2)      row [u, v] means node u consumes node v's
                                    output (TpuGraphs convention: edges
                                    point from user to operand); one row per
                                    distinct operand, and one from a caller
                                    to each called computation's root
      kernel_feat  float32 (27)     flops, transcendentals, bytes_read,
                                    bytes_written, output_bytes,
                                    matmul_batch, matmul_m, matmul_n,
                                    matmul_k, matmul_m_align,
                                    matmul_n_align, matmul_k_align,
                                    matmul_lhs_k_minor, matmul_rhs_k_minor,
                                    relayout_bytes, output_minor_dim,
                                    output_minor_align, indexed_slices,
                                    touched_bytes, relayout_stride,
                                    relayout_stride_align, reduce_bytes,
                                    reduce_kept_minor_bytes,
                                    reduce_kept_minor_align,
                                    minor_loop_unrolled,
                                    matmul_rhs_row_align, needed_flops
      config_feat  float32 (24)     tile config: kernel_bounds, output_bounds,
                                    input_bounds, each 6 entries + sum +
                                    product (zeros without a "config" field)

    \b
    Nodes: the instructions of the kernel's computation, in topological
    order (operands first): for a fusion, its fused computation; for an
    unfused op, its parameters and the op. The computations a node calls
    (reducers, scatter combiners, sort comparators, map, while and
    conditional bodies, to_apply of call and custom-call, nested fusions)
    are nodes too, as TpuGraphs encodes a module: each called computation's
    instructions once, just before its first caller, with an edge from the
    caller to the called root; is_root marks each computation's root.

    \b
    node_feat layout (N entries + sum + product; a missing entry is 0, an
    empty list has sum 0, product 1):
      0        is_root            1        element_size_in_bits (always 0)
      2-20     element type one-hot: invalid pred s8 s16 s32 s64 u8 u16 u32
               u64 f16 f32 f64 bf16 c64 c128 tuple opaque token
      21-28    shape dims 0..5, sum, product     29  tuple size
      30       parameter number                  31-36  dimensions 0..5
      37-92    window size, stride, pad low, pad high, window (rhs)
               dilation, base (lhs) dilation: 6+sum+product each;
               reversal: 6 + true count + false count
      93-106   convolution dims: input batch, feature, spatial 0..3; kernel
               input feature, output feature, spatial 0..3; output batch,
               feature
      107-108  feature_group_count, batch_group_count
      109-120  slice start, stride, limit (2+sum+product each)
      121-124  dynamic_slice_sizes (2+sum+product)
      125-132  pad edge low, edge high (2+sum+product each)
      133      is_stable (sort)                  134-139  minor_to_major 0..5

    \b
    kernel_feat, by XLA's HloCostAnalysis rules (our own implementation,
    no jaxlib needed): an FMA is 2 flops, elementwise ops 1 flop per
    element, exp/log/tanh/rsqrt/... are transcendentals, reducers count per
    reduction, fusions sum their fused ops. bytes_read: what the kernel
    reads of its inputs (only the slices of a sliced input); bytes_written:
    what it writes (a dynamic-update-slice only its update); output_bytes:
    the size of its result. matmul_*: the largest dot or convolution (by
    flops, in the kernel or a fusion it runs) as a GEMM, batch x (m x k) .
    (k x n): a dot's batch, free and contracting sizes; a convolution's
    feature groups, batch x output positions, output features per group,
    and input features per group x window taps; zeros without one.
    matmul_*_align: log2 of the largest power of two dividing m, n and k,
    at most 7 (a GEMM whose sizes fill the vector lanes runs faster).
    matmul_lhs_k_minor, matmul_rhs_k_minor: 1 where the operand's
    minor-most physical dimension is one the product contracts over (a
    dot's contracting dims, a convolution's input features), else 0.
    relayout_bytes: the bytes that elementwise ops and copies (in the kernel
    or a fusion it runs) read in another physical layout than they write,
    an operand of the same dims whose minor_to_major differs from the
    result's: a transposition in memory. output_minor_dim: the size of
    the result's minor-most physical dimension (of its largest array, for
    a tuple; 0 for a scalar): XLA:CPU's elementwise loops run several times
    slower an element when it is 9 to 34; output_minor_align: log2 of the
    largest power of two dividing it, at most 7 (those loops ran fastest
    with 8, 40, 48, 56, 64 or 128, though not with every multiple of 8).
    indexed_slices: how many slices the kernel's gathers and scatters
    address (their index tuples): XLA:CPU's scatter loop costs about 3 ns a
    tuple however little each one moves. touched_bytes: what the kernel
    needs of its inputs, following which of their elements its result
    depends on (through elementwise ops, slices, broadcasts, pads, gathers,
    reduces; all of a dot's or convolution's operands): a fusion that
    slices every second row of a parameter, then every second of those,
    reads a quarter of it, where bytes_read, as XLA counts it, is all.
    relayout_stride: the bytes between two elements of the operand read in
    another layout (the largest) that are neighbours in the result's
    minor-most dimension, how far the copy's inner loop jumps; and its
    alignment, log2 of the largest power of two dividing it, at most 14
    (in the corpus a relayout at a power-of-two stride of 1 to 4 KiB runs
    about 1.9x slower a byte than at strides off it). reduce_bytes: the
    operand bytes of the kernel's largest reduce; reduce_kept_minor_bytes:
    the bytes of that operand's minor-most dimension when the reduce keeps
    it (a column reduction; 0 for a row reduction), and its alignment, at
    most 14: XLA:CPU sums keeping 32 or 64 floats run 2x slower a byte
    than those keeping 48 to 72 at 0.1 to 1 MB, 3.6x to 6.2x at 3 to 5 MB.
    Kernel features are only appended: a model reads the first ones, as
    many as it was trained with.

    \b
    Examples:
      hlo-split prog.hlo | featurize | predict --model m.pt | score
      featurize kernels.zst -o graphs.zst
      tpuperf import tuning-json tile.json | featurize --skip-bad > tile.msgpack

    \b
    Exit status:
      0  success (also when --skip-bad skipped records)
      1  a record cannot be featurized or a stream is corrupt; the message
         names the input, record number and kernel, and every record
         before it has been written
      2  a record's HLO does not parse
    """
    import gc

    from tpuperf_cli.features import featurize_kernel
    from tpuperf_cli.stream import read_records

    # Each record's parse makes thousands of short-lived objects and no
    # cycles: collect rarely, and never walk what was loaded at start-up.
    gc.freeze()
    gc.set_threshold(100_000, 50, 1000)

    err = sys.stderr
    progress = not quiet and err.isatty()
    skipped = []
    n_skipped = 0
    written = 0
    start = last = time.monotonic()
    writer = record_writer(output, "predict")
    try:
        for source in inputs or ["-"]:
            name = "<stdin>" if source == "-" else source
            for number, record in enumerate(read_records(source, name=name), 1):
                try:
                    fields = featurize_kernel(record)
                except TpuperfError as e:
                    where = locate(number, name, record)
                    if not skip_bad:
                        raise type(e)(f"{where}: {e}", exit_code=e.exit_code) from None
                    n_skipped += 1
                    if len(skipped) < 5:
                        skipped.append(f"{where}: {e}")
                    continue
                record.update(fields)
                record[TYPE] = GRAPH_RECORD
                writer.write(record)
                written += 1
                if progress and written % 256 == 0:
                    now = time.monotonic()
                    if now - last > 0.5:
                        last = now
                        print(f"\rfeaturize: {written} kernels, "
                              f"{written / (now - start):.0f}/s", end="", file=err)
    finally:
        try:
            writer.close()
        except BrokenPipeError:
            pass
        if progress and written >= 256:
            print(file=err)
        if n_skipped and not quiet:
            print(f"featurize: skipped {n_skipped} record(s) that could not be featurized "
                  f"({written} written)", file=err)
            for line in skipped:
                print(f"featurize:   {line}", file=err)
            if n_skipped > len(skipped):
                print(f"featurize:   ... and {n_skipped - len(skipped)} more", file=err)
