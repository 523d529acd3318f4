"""Examples -> batches, and shards -> examples for training and evaluation.

Pure numpy (no torch, no DGL), so batching costs no start-up time and tests
can check it alone. The examples and their scaling are model.examples'.

* `make_batch(examples, scaler, ...)` concatenates many small graphs into
  one numpy batch (node rows, offset edges, truncated neighbour lists,
  positions for the sequence reductions).
* `Corpus` reads shards (plain or zstd record streams, many files): one
  pass learns the scaling and counts each program's examples; each epoch
  then draws examples evenly across programs. When the decoded examples fit
  the memory budget they stay in memory; otherwise every epoch streams the
  shards again through a bounded shuffle buffer, so a corpus larger than
  memory trains in bounded memory. With `shard=(rank, world)` (data-parallel
  training, model.dist) a corpus still counts every record but decodes,
  keeps and yields only the examples of its rank.
"""

from __future__ import annotations

import glob
import os
from array import array
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from tpuperf_cli.errors import StreamError, TpuperfError
from tpuperf_cli.model.config import minor_tokens
from tpuperf_cli.model.dist import owner
from tpuperf_cli.model.examples import Example, Scaler, example, slog, topological_order, use_kernel_features
from tpuperf_cli.model.known import Collector
from tpuperf_cli.records import KERNEL, NODE_FEATURES, PROGRAM, TARGET, locate, measured_runtime, target_identity
from tpuperf_cli.split import ProgramSet, drawn_from
from tpuperf_cli.stream import read_records

# ---------------------------------------------------------------- batches

class Batch:
    """Many graphs as one: node rows concatenated, edges offset."""

    __slots__ = ("opcode", "x", "kernel_x", "minor", "n_nodes", "in_src", "in_dst", "out_src", "out_dst",
                 "seq_keep", "seq_graph", "seq_pos", "seq_len", "seq_lengths", "y", "noise", "group")

    def __len__(self):
        return self.n_nodes.shape[0]


def _first_per_dst(dst, k):
    """Mask keeping, for each destination, its first k edges (in edge order)."""
    if dst.size == 0:
        return np.zeros(0, bool)
    order = np.argsort(dst, kind="stable")
    d = dst[order]
    start = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
    sizes = np.diff(np.r_[start, d.size])
    rank = np.arange(d.size) - np.repeat(start, sizes)
    keep = np.zeros(d.size, bool)
    keep[order[rank < k]] = True
    return keep


def set_sequences(b: Batch, rows: list, lengths: np.ndarray) -> None:
    """The sequence reduction's fields of a batch: rows are each graph's
    node ids (batch-wide, in topological order, at most max_nodes), lengths
    their sizes."""
    b.seq_keep = np.concatenate(rows)
    b.seq_graph = np.repeat(np.arange(len(rows)), lengths)
    starts = np.r_[0, np.cumsum(lengths)[:-1]]
    b.seq_pos = np.arange(b.seq_keep.size) - np.repeat(starts, lengths)
    b.seq_len = int(lengths.max())
    b.seq_lengths = lengths


def make_batch(examples: Sequence[Example], scaler: Scaler, lut: np.ndarray, neighbors: int = 20,
               sequence: bool = False, max_nodes: int = 512, groups: np.ndarray | None = None) -> Batch:
    """A Batch of examples: features scaled, opcode ids mapped through lut,
    neighbour lists truncated to `neighbors` per node and direction; with
    sequence=True also the positions of each graph's last `max_nodes` nodes
    in topological order (for the LSTM and Transformer reductions)."""
    b = Batch()
    n_nodes = np.fromiter((ex.n for ex in examples), np.int64, len(examples))
    offsets = np.r_[0, np.cumsum(n_nodes)[:-1]]
    b.n_nodes = n_nodes
    op = np.concatenate([ex.opcode for ex in examples])
    b.opcode = lut[np.clip(op, 0, lut.size - 1)] * ((op >= 0) & (op < lut.size))

    nf = NODE_FEATURES
    x = np.empty((int(n_nodes.sum()), scaler.width), np.float32)
    node = np.concatenate([ex.node_feat for ex in examples])
    node = slog(node)
    node -= scaler.lo[:nf]
    node *= scaler.inv[:nf]
    x[:, :nf] = node
    kc = np.stack([np.concatenate([ex.kernel_feat, ex.config_feat]) for ex in examples])
    b.minor = minor_tokens(kc[:, :scaler.kernel_features], scaler.minor_column)   # --minor-embedding's tokens (B,)
    kc = (slog(kc) - scaler.lo[nf:]) * scaler.inv[nf:]
    x[:, nf:] = np.repeat(kc, n_nodes, axis=0)
    b.x = x
    b.kernel_x = kc.astype(np.float32)                # (B, kernel + config features)

    m = np.fromiter((ex.edges.shape[0] for ex in examples), np.int64, len(examples))
    if m.sum():
        e = np.concatenate([ex.edges for ex in examples]) + np.repeat(offsets, m)[:, None]
    else:
        e = np.zeros((0, 2), np.int64)
    user, operand = e[:, 0], e[:, 1]
    keep = _first_per_dst(user, neighbors)            # operands -> user, data direction
    b.in_src, b.in_dst = operand[keep], user[keep]
    keep = _first_per_dst(operand, neighbors)         # users -> operand
    b.out_src, b.out_dst = user[keep], operand[keep]

    b.seq_keep = None
    if sequence:
        rows = []
        lengths = np.minimum(n_nodes, max_nodes)
        for i, ex in enumerate(examples):
            order = topological_order(ex)[-max_nodes:]
            rows.append(order + offsets[i])
        set_sequences(b, rows, lengths)
    rt = np.fromiter((ex.runtime for ex in examples), np.float64, len(examples))
    with np.errstate(invalid="ignore", divide="ignore"):
        b.y = np.where(rt > 0, scaler.target(np.where(rt > 0, rt, 1.0)), np.nan).astype(np.float32)
    b.noise = np.fromiter((ex.noise for ex in examples), np.float32, len(examples))
    b.group = groups
    return b


# ---------------------------------------------------------------- shards

def expand(patterns: Iterable[str], what: str = "--data") -> list[str]:
    """Paths of shards from file names and glob patterns, in order, once each."""
    paths, seen = [], set()
    for pat in patterns:
        found = sorted(glob.glob(os.path.expanduser(pat))) if glob.has_magic(pat) else [pat]
        if not found:
            raise TpuperfError(f"{what} {pat}: no files match")
        for p in found:
            if os.path.isdir(p):
                raise TpuperfError(f"{what} {p}: is a directory (give files, e.g. {p}/*.zst)")
            if not os.path.exists(p):
                raise TpuperfError(f"{what} {p}: no such file")
            if p not in seen:
                seen.add(p)
                paths.append(p)
    return paths


class Corpus:
    """Graph records from shards, as examples for training or evaluation.

    programs: keep only records of these programs (a split), or None for all.
    held_out: programs no kept record may have been generated from (a
    split's valid and test programs): a record whose ORIGIN is one of them
    is left out and counted in `drawn_from_held_out`.
    listed: every program a split names (its three lists), when programs
    is its train list: records of a program in none of them are counted in
    `unlisted` by program, or by source for generated ones ("layers:*"),
    so that a split written before a source existed does not drop that
    source's kernels unsaid.
    task: "fusion" (items are examples) or "tile" (items are a kernel's
    configurations, up to `configs` of them drawn per epoch).
    memory_mb: budget for decoded examples kept in memory; a corpus larger
    than that is streamed from the shards every epoch instead.
    shard: (rank, world) of a data-parallel run: `sizes` and `examples`
    count all ranks' examples (the even draw's quotas are global), but only
    this rank's (dist.owner) are kept, drawn and iterated; `local` counts
    them. The scan still decodes every record, so the scaling and errors
    are the same on every rank.
    """

    def __init__(self, paths: Iterable[str], programs: Iterable[str] | None = None, task: str = "fusion",
                 memory_mb: float = 2048, configs: int = 16, interleave: int = 4, shuffle_items: int = 4096,
                 shard: tuple[int, int] = (0, 1), held_out: Iterable[str] | None = None,
                 listed: Iterable[str] | None = None):
        self.paths = list(paths)
        self.programs = ProgramSet(programs) if programs is not None else None
        self.held_out = ProgramSet(held_out) if held_out else None
        self.drawn_from_held_out = 0
        self.listed = ProgramSet(listed) if listed is not None else None
        self.unlisted = Counter()   # program, or "SOURCE:*" -> records in no list of the split
        self.task = task
        self.budget = int(memory_mb * (1 << 20))
        self.configs = configs
        self.interleave = interleave
        self.shuffle_items = shuffle_items
        self.cache = None          # path -> [Example] when everything fits
        self.sizes = Counter()     # program -> items (examples, or kernels for tile)
        # program -> count x runtime of each example (fusion, real programs;
        # 8 bytes an example, for --time-weight)
        self.times = {}
        self.examples = 0
        self.skipped = Counter()   # why records were left out
        self.targets = Counter()
        self.target_dicts = {}
        self.nbytes = 0
        self.rank, self.world = shard
        self.local = 0             # examples of this rank
        self.kernel_features = None   # kernel features kept of each example (None: all)
        self.columns = None           # which, where not the first ones (Scaler.columns)
        self.known = {}            # path -> known.Collector of its measured kernels (fusion)

    # -------------------------------------------------------- one pass
    def _records(self, path, mine_only=False):
        """(example or None without runtime, record, number, name, whether
        this rank owns it); mine_only skips other ranks' records undecoded."""
        name = path
        index = self.paths.index(path) if self.world > 1 else 0   # spreads small shards' first records
        for number, record in enumerate(read_records(path), 1):
            program = str(record.get(PROGRAM, ""))
            if self.programs is not None and program not in self.programs:
                if self.listed is not None and not mine_only and program not in self.listed:
                    self.unlisted[program.split(":")[0] + ":*" if ":" in program else program] += 1
                continue
            if self.held_out is not None and drawn_from(record, self.held_out):
                if not mine_only:       # counted on the scan, not again every streamed epoch
                    self.drawn_from_held_out += 1
                continue
            if measured_runtime(record) is None:
                yield None, record, number, name, False
                continue
            mine = True
            if self.world > 1:
                group = (str(record.get(PROGRAM, "")), str(record.get(KERNEL, ""))) \
                    if self.task == "tile" else None
                mine = owner(index, self.world, group) == self.rank
                index += 1
                if mine_only and not mine:
                    continue
            ex = example(record, number, name)
            if ex is not None and self.columns is not None:
                wrong = use_kernel_features(ex, self.kernel_features, locate(number, name, record), record,
                                            columns=self.columns)
                if wrong:
                    raise StreamError(wrong)
            elif ex is not None and self.kernel_features and ex.kernel_feat.size > self.kernel_features:
                ex.kernel_feat = ex.kernel_feat[:self.kernel_features]   # a model reads the first
            yield ex, record, number, name, mine

    def scan(self, scaler: Scaler | None = None, kernel_features: int | None = None,
             columns: tuple[int, ...] | None = None) -> Corpus:
        """The first pass: fit scaler (if given), count programs, cache if it
        fits. kernel_features: the kernel_feat length every example must
        have (that of a scaling learnt before; columns: which, where not
        the first ones), StreamError otherwise."""
        cache = {}
        keep = True
        groups = {}
        self.kernel_features = kernel_features or (scaler.kernel_features if scaler else None)
        self.columns = columns or (scaler.columns if scaler else None)
        for path in self.paths:
            kept = []
            known = self.known.setdefault(path, Collector())
            for ex, record, number, name, mine in self._records(path):
                if ex is None:
                    self.skipped["no runtime_ns (unmeasured or failed)"] += 1
                    continue
                if self.task == "fusion":
                    known.add(ex.fingerprint, ex.runtime)
                if scaler is not None:
                    scaler.update(ex, locate(number, name, record))
                elif kernel_features is not None and ex.kernel_feat.size != kernel_features:
                    wrong = use_kernel_features(ex, kernel_features, locate(number, name, record),
                                                record, f"; the training data has {kernel_features}")
                    if wrong:
                        raise StreamError(wrong)
                self.examples += 1
                key = target_identity(record.get(TARGET))
                if key is not None:
                    self.targets[key] += 1
                    self.target_dicts.setdefault(key, record[TARGET])
                if self.task == "tile":
                    groups.setdefault(ex.program, set()).add(ex.kernel)
                else:
                    self.sizes[ex.program] += 1
                    if not is_generated(ex.program):
                        self.times.setdefault(ex.program, array("d")).append(ex.count * ex.runtime)
                if not mine:
                    continue
                self.local += 1
                if keep:
                    self.nbytes += ex.nbytes()
                    if self.nbytes > self.budget:
                        keep = False
                        cache = None
                    else:
                        kept.append(ex)
            if keep:
                cache[path] = kept
        if self.task == "tile":
            self.sizes = Counter({p: len(k) for p, k in groups.items()})
        self.cache = cache if keep else None
        return self

    def known_table(self, exclude: Iterable[str] = ()) -> dict[str, float]:
        """{fingerprint: measured ns} of the scanned records (model.known),
        the shards in `exclude` left out (a teacher's labels are no
        measurements)."""
        out = Collector()
        skip = set(exclude)
        for path, collected in self.known.items():
            if path not in skip:
                out.merge(collected)
        return out.table()

    @property
    def streaming(self) -> bool:
        return self.cache is None

    def target(self) -> dict | None:
        """The most common measurement target of the records, or None."""
        if not self.targets:
            return None
        return self.target_dicts[self.targets.most_common(1)[0][0]]

    # -------------------------------------------------------- reading
    def _examples(self, path):
        if self.cache is not None:
            yield from self.cache[path]
            return
        for ex, *_ in self._records(path, mine_only=True):
            if ex is not None:
                yield ex

    def iter_examples(self) -> Iterator[Example]:
        """Every example (of this rank) once, in shard order (for evaluation)."""
        for path in self.paths:
            yield from self._examples(path)

    def _items(self, paths, rng):
        """Fusion: examples; tile: lists of one kernel's configurations (at
        most `configs`, a random subset when there are more). Shards are
        read `interleave` at a time, round robin."""
        streams = [self._examples(p) for p in paths]
        active = list(range(min(self.interleave, len(streams))))
        pending = len(active)
        tile = self.task == "tile"
        open_groups = {}            # key -> [seen, reservoir]
        while active:
            nxt = []
            for s in active:
                ex = next(streams[s], None)
                if ex is None:
                    if pending < len(streams):
                        nxt.append(pending)
                        pending += 1
                    if tile:
                        # groups never span shards: close this shard's groups
                        for key in [k for k in open_groups if k[0] == s]:
                            yield open_groups.pop(key)[1]
                    continue
                nxt.append(s)
                if not tile:
                    yield ex
                    continue
                key = (s, ex.group)
                g = open_groups.get(key)
                if g is None:
                    g = open_groups[key] = [0, []]
                    if len(open_groups) > 256 and self.cache is None:
                        oldest = next(iter(open_groups))
                        yield open_groups.pop(oldest)[1]
                g[0] += 1
                if len(g[1]) < self.configs or self.cache is not None:
                    g[1].append(ex)
                else:   # reservoir sampling keeps memory bounded
                    j = rng.integers(g[0])
                    if j < self.configs:
                        g[1][j] = ex
            active = nxt
        for g in open_groups.values():
            yield g[1]

    def time_factors(self, power: float) -> dict:
        """{program: n / sum of (count x runtime)^power over its n examples}:
        an example's draw weight is its factor times its own (count x
        runtime)^power, so a program's kernels keep their total draws and
        share them by their part of its time (power 1), evenly (0) or
        between."""
        out = {}
        for program, times in self.times.items():
            total = float(np.sum(np.frombuffer(times, np.float64) ** power))
            if total > 0:
                out[program] = len(times) / total
        return out

    def epoch(self, rng: np.random.Generator, even: bool = True,
              generated_share: float = -1.0, generated_even: str = "program",
              source_weights: dict | None = None, time_weight: float = 0.0
              ) -> Iterator[Example | list[Example]]:
        """The items of one training epoch, shuffled. With even=True every
        program contributes the same expected number of items (small
        programs are repeated, large ones subsampled). generated_share in
        [0, 1) sets the share of the epoch drawn from generated kernels
        (pseudo-programs "SOURCE:NAME", evenly across them), the programs
        drawing as many items as they hold; -1 counts a pseudo-program as a
        program. generated_even, source_weights: see draw_rates.
        time_weight > 0 (fusion): a real program's kernels share its draws
        by their time in it to that power (time_factors), so the kernels
        that make up its runtime are fitted more often."""
        sizes = self.sizes
        if not sizes:
            return
        rates = draw_rates(sizes, even, generated_share, generated_even, source_weights)
        factors = self.time_factors(time_weight) if time_weight > 0 and self.task == "fusion" else {}
        paths = [self.paths[i] for i in rng.permutation(len(self.paths))]
        cap = None if self.cache is not None else max(64, self.shuffle_items)
        buffer = []
        for item in self._items(paths, rng):
            if self.task == "tile":
                if len(item) < 2:
                    continue
                if len(item) > self.configs:
                    item = [item[i] for i in rng.choice(len(item), self.configs, replace=False)]
                program = item[0].program
            else:
                program = item.program
            rate = rates[program]
            if program in factors:
                rate *= factors[program] * (item.count * item.runtime) ** time_weight
            copies = int(rate) + (rng.random() < rate - int(rate))
            for _ in range(copies):
                buffer.append(item)
                if cap is not None and len(buffer) >= cap:
                    j = rng.integers(len(buffer))
                    buffer[j], buffer[-1] = buffer[-1], buffer[j]
                    yield buffer.pop()
        for j in rng.permutation(len(buffer)):
            yield buffer[j]

    def batches(self, rng: np.random.Generator, batch_size: int, even: bool = True,
                generated_share: float = -1.0, generated_even: str = "program",
                source_weights: dict | None = None, time_weight: float = 0.0
                ) -> Iterator[tuple[list[Example], np.ndarray | None]]:
        """Lists of examples for one epoch (tile: whole kernels per batch, and
        the group id of each example)."""
        batch, groups = [], []
        for item in self.epoch(rng, even, generated_share, generated_even, source_weights, time_weight):
            if self.task == "tile":
                groups.extend([groups[-1] + 1 if groups else 0] * len(item))
                batch.extend(item)
            else:
                batch.append(item)
            if len(batch) >= batch_size:
                yield batch, (np.asarray(groups) if groups else None)
                batch, groups = [], []
        if batch:
            yield batch, (np.asarray(groups) if groups else None)


def is_generated(program: str) -> bool:
    """Whether a program name is a generated kernel's pseudo-program
    ("ops:dot", "fusions:cnn_s_train": `tpuperf generate`)."""
    return ":" in program


def generated_source(program: str) -> str:
    """The source of a generated kernel's pseudo-program ("ops" of "ops:dot")."""
    return program.split(":", 1)[0]


def draw_rates(sizes: dict, even: bool = True, generated_share: float = -1.0,
               generated_even: str = "program", source_weights: dict | None = None) -> dict:
    """Expected draws per epoch of each item of each program. even: every
    program the same number of draws in all (the mean program's size);
    otherwise each item once. With generated_share in [0, 1) and both kinds
    present, the programs keep their draws and the generated pseudo-programs
    share generated_share of the epoch between them (evenly with even), so
    that hundreds of pseudo-programs do not crowd out the real ones.
    generated_even "source": each source ("ops" of "ops:dot") gets the same
    part of that share first, then its pseudo-programs share it, so that a
    source of few pseudo-programs (heavy's 2) is not drowned by one of many
    (sweeps' 135). source_weights {source: w} (default 1 each) scales a
    source's part against the others' (0.5: half a part, 0: none)."""
    if generated_share < 0:
        groups = [list(sizes)]
        totals = [sum(sizes.values())]
    else:
        real = [p for p in sizes if not is_generated(p)]
        gen = [p for p in sizes if is_generated(p)]
        if not real or not gen:
            return draw_rates(sizes, even)
        real_total = sum(sizes[p] for p in real)
        gen_total = real_total * generated_share / (1 - generated_share)
        if generated_even == "source":
            sources = {}
            for p in gen:
                sources.setdefault(generated_source(p), []).append(p)
            source_weights = source_weights or {}
            unknown = sorted(set(source_weights) - set(sources))
            if unknown:
                raise TpuperfError(f"--source-weight {', '.join(unknown)}: the training data has "
                                   f"no generated kernels of that source (it has "
                                   f"{', '.join(sorted(sources))})", exit_code=2)
            weights = {s: source_weights.get(s, 1.0) for s in sources}
            weight_sum = sum(weights.values())
            if not weight_sum:
                raise TpuperfError("--source-weight: every source weighs 0; give one a weight "
                                   "above 0, or --generated-share 0", exit_code=2)
            groups = [real] + list(sources.values())
            totals = [real_total] + [gen_total * weights[s] / weight_sum for s in sources]
        else:
            groups = [real, gen]
            totals = [real_total, gen_total]
    rates = {}
    for programs, total in zip(groups, totals):
        items = sum(sizes[p] for p in programs)
        for p in programs:
            rates[p] = total / len(programs) / sizes[p] if even else total / items
    return rates
