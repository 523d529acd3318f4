"""Train/valid/test splits: of programs into a split file, and of tile records.

A split file is JSON {"train": [...], "valid": [...], "test": [...]} of
program names (or shell patterns such as "ops:*", for the pseudo-programs
of generated kernels); `tpuperf train --split`, `tpuperf baseline fit --split` and
`tpuperf eval --split` read it. Programs are split whole (random with a
seed, by name pattern, or by family: a regular expression maps each program
name to a family and whole families go to one side, so a test family is
absent from training). Training on a split learns nothing generated from
its valid or test programs, whatever its train patterns say: a generated
kernel's ORIGIN names the program it was drawn from (training_records).

Tile records (many configurations per kernel) are split either by
configuration (every kernel in every set, its configurations divided) or by
kernel (whole kernels to one set).

    names = programs_in(paths)
    split = split_units(names, valid=0.1, test=0.1, seed=0, family=r"^[a-z]+")
    for which, record in split_records(sources, by="config", test=0.5): ...
"""

import fnmatch
import glob
import json
import os
import re

import numpy as np

from tpuperf_cli.errors import TpuperfError, read_file
from tpuperf_cli.records import ORIGIN

SETS = ("train", "valid", "test")


# ---------------------------------------------------------------- split files

def load_split(path):
    """The three program lists of a split file (absent lists are empty)."""
    text = read_file(path, "r", what="--split")
    try:
        d = json.loads(text)
    except json.JSONDecodeError as e:
        raise TpuperfError(f"--split {path}: not JSON ({e})") from None
    if not isinstance(d, dict) or not all(isinstance(d.get(k, []), list) for k in SETS):
        raise TpuperfError(f'--split {path}: expected {{"train": [programs], "valid": [...], '
                           f'"test": [...]}} (tpuperf split programs writes one)')
    return {k: [str(p) for p in d.get(k) or []] for k in SETS}


class ProgramSet:
    """The programs of a split list: names, and shell patterns (an entry
    with * ? or [, e.g. "ops:*" for every kernel `tpuperf generate --source
    ops` wrote: its records' program is "ops:OPCODE"). `name in set`."""

    def __init__(self, entries):
        entries = [str(e) for e in entries]
        self.names = {e for e in entries if not glob.has_magic(e)}
        self.patterns = [e for e in entries if glob.has_magic(e)]
        self._seen = {}

    def __contains__(self, name):
        if name in self.names:
            return True
        if not self.patterns:
            return False
        hit = self._seen.get(name)
        if hit is None:
            hit = self._seen[name] = any(fnmatch.fnmatchcase(name, p) for p in self.patterns)
        return hit

    def __bool__(self):
        return bool(self.names or self.patterns)

    def __len__(self):
        return len(self.names) + len(self.patterns)


def split_programs(path, which, split=None):
    """The programs of one list of a split file (a ProgramSet); `split`:
    the file's lists, where load_split has read them already."""
    names = ProgramSet((split or load_split(path))[which])
    if not names:
        raise TpuperfError(f"--split {path}: its {which!r} list is empty")
    return names


def train_in_all(paths):
    """The programs in the train list of every split file of `paths`, sorted:
    the ones a generator may draw from or sweep, so that no kernel made from
    a program on the valid or test side of any split enters training.
    Patterns ("ops:*") and generated pseudo-programs ("SOURCE:NAME") are
    no programs to draw from and are left out."""
    lists = [set(load_split(p)["train"]) for p in paths]
    if not lists:
        raise TpuperfError("no split file given")
    return sorted(n for n in set.intersection(*lists) if ":" not in n and not glob.has_magic(n))


def held_out(split):
    """The programs of a split (load_split's lists) that its training must
    not learn from, its valid and test programs, as a ProgramSet."""
    return ProgramSet(split["valid"] + split["test"])


def drawn_from(record, programs):
    """Whether `record` was generated from one of `programs` (a ProgramSet):
    fusions, variants and sweeps carry the program they were drawn from as
    ORIGIN. A split's training leaves such records out when their origin is
    held out, whatever its train patterns ("fusions:*") say, so a model is
    never judged on a program whose kernels it learnt in another guise."""
    origin = record.get(ORIGIN)
    return origin is not None and str(origin) in programs


def records_of(records, programs):
    """The records whose program is one of `programs`."""
    for r in records:
        if str(r.get("program", "")) in programs:
            yield r


def training_records(records, path):
    """The records a split file's training learns from: those of its train
    list, less any generated from its valid or test programs (drawn_from)."""
    split = load_split(path)
    held = held_out(split)
    for r in records_of(records, split_programs(path, "train", split)):
        if not drawn_from(r, held):
            yield r


def expand(patterns, what="input"):
    """Files of paths and quoted glob patterns, in order, each once."""
    out = []
    for p in patterns:
        hits = sorted(glob.glob(p)) if glob.has_magic(p) else [p]
        if not hits:
            raise TpuperfError(f"{what} {p!r}: no file matches")
        for h in hits:
            if not os.path.isfile(h):
                raise TpuperfError(f"{h}: No such file")
            if h not in out:
                out.append(h)
    return out


def programs_in(paths):
    """Program names of the records in shards, in first-seen order."""
    from tpuperf_cli.stream import read_records

    seen = {}
    for path in paths:
        for r in read_records(path):
            seen.setdefault(str(r.get("program", "")), None)
    return list(seen)


def family_of(name, pattern):
    """The family a program belongs to: the pattern's first group where it
    has one, else its whole match; a name it does not match is its own
    family."""
    m = pattern.search(name)
    if m is None:
        return name
    return m.group(1) if pattern.groups else m.group(0)


def family_pattern(family):
    """--family's regular expression, compiled (a usage error if it is not one)."""
    try:
        return re.compile(family)
    except re.error as e:
        raise TpuperfError(f"--family {family!r}: not a regular expression ({e})",
                           exit_code=2) from None


def _counts(n, valid, test):
    """How many of n units go to valid and test (rounded, train keeps one
    where n > 1)."""
    n_test = int(round(n * test))
    n_valid = int(round(n * valid))
    while n > 1 and n_test + n_valid > n - 1:
        if n_valid >= n_test and n_valid > 0:
            n_valid -= 1
        else:
            n_test -= 1
    return n_valid, n_test


def split_units(names, valid=0.1, test=0.1, seed=0, family=None, test_names=(), valid_names=()):
    """{"train", "valid", "test": sorted program names}.

    Programs matching a glob of test_names (valid_names) go to test (valid);
    the rest are grouped into families (family: a regular expression, or
    None for one program per family) and whole families are drawn at random
    (numpy seed `seed`) for the valid and test fractions of all families,
    for each set not given by name; the others train.
    """
    pattern = family_pattern(family) if family else None
    fixed = {}
    for which, globs in (("test", test_names), ("valid", valid_names)):
        for g in globs:
            hits = [n for n in names if fnmatch.fnmatchcase(n, g)]
            if not hits:
                raise TpuperfError(f"--{which} {g!r} matches no program "
                                   f"(programs: {', '.join(names[:8])}"
                                   f"{', ...' if len(names) > 8 else ''})")
            for n in hits:
                if fixed.get(n, which) != which:
                    raise TpuperfError(f"program {n!r} matches both --test and --valid")
                fixed[n] = which
    families = {}
    for n in names:
        families.setdefault(family_of(n, pattern) if pattern else n, []).append(n)
    units = [f for f, members in families.items() if not any(m in fixed for m in members)]
    n_valid, n_test = _counts(len(families), 0 if valid_names else valid, 0 if test_names else test)
    n_test = min(n_test, len(units))
    n_valid = min(n_valid, len(units) - n_test)
    order = np.random.default_rng(seed).permutation(len(units))
    drawn = {}
    for rank, i in enumerate(order):
        drawn[units[i]] = ("test" if rank < n_test else
                           "valid" if rank < n_test + n_valid else "train")
    out = {k: [] for k in SETS}
    for f, members in families.items():
        for n in members:
            out[fixed.get(n) or drawn.get(f, "train")].append(n)
    return {k: sorted(v) for k, v in out.items()}


def family_folds(split, folds, seed=0, family=r"^[a-z]+"):
    """K split files from one, for cross-validation over families.

    The split's test list stays every fold's test list; its train and valid
    programs (names, not patterns) are grouped into families (`family`, as
    split_units) and dealt to `folds` folds: in a seeded random order, each
    family to the fold with the fewest programs so far, so folds hold about
    as many programs. Fold i validates on its families and trains on the
    rest, with the split's patterns ("ops:*": generated kernels) in every
    fold's train list (training leaves out those drawn from the fold's
    valid programs: drawn_from). Each train-or-valid program is validated on in
    exactly one fold, so K models, one per fold, give a validation figure
    over all those families, not the few a single split holds out."""
    pattern = family_pattern(family)
    pooled = [n for n in split["train"] + split["valid"] if not glob.has_magic(n)]
    patterns = [n for n in split["train"] if glob.has_magic(n)]
    families = {}
    for n in pooled:
        families.setdefault(family_of(n, pattern), []).append(n)
    if folds < 2 or folds > len(families):
        raise TpuperfError(f"--folds {folds}: needs 2 to {len(families)} (the families of "
                           f"the split's train and valid programs)", exit_code=2)
    names = sorted(families)
    order = np.random.default_rng(seed).permutation(len(names))
    sizes, dealt = [0] * folds, [[] for _ in range(folds)]
    for i in order:
        k = min(range(folds), key=lambda j: (sizes[j], j))
        dealt[k].append(names[i])
        sizes[k] += len(families[names[i]])
    out = []
    for k in range(folds):
        valid = sorted(n for f in dealt[k] for n in families[f])
        train = sorted(set(pooled) - set(valid)) + patterns
        out.append({"train": train, "valid": valid, "test": sorted(split["test"])})
    return out


# ---------------------------------------------------------------- tile records

def _key(r):
    return (str(r.get("program", "")), str(r.get("kernel", r.get("fingerprint", ""))))


def assign_records(keys, defaults, by="config", valid=0.0, test=0.5, seed=0):
    """Which set each record goes to, as a list of "train"/"valid"/"test".

    keys: (program, kernel) per record; defaults: is_default per record.
    by="config": per kernel, its configurations are shuffled (numpy seed
    `seed`) and the valid and test fractions drawn from them; a
    configuration marked is_default (XLA's own choice) goes to test when
    test > 0, so XLA's pick can be compared there. by="kernel": whole
    kernels are drawn.
    """
    if by not in ("config", "kernel"):
        raise ValueError(f"unknown split {by!r}")
    rng = np.random.default_rng(seed)
    groups = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    out = ["train"] * len(keys)
    if by == "kernel":
        names = list(groups)
        n_valid, n_test = _counts(len(names), valid, test)
        for rank, j in enumerate(rng.permutation(len(names))):
            which = "test" if rank < n_test else "valid" if rank < n_test + n_valid else "train"
            for i in groups[names[j]]:
                out[i] = which
        return out
    for idx in groups.values():
        free = [i for i in idx if not (test > 0 and defaults[i])]
        for i in idx:
            if i not in free:
                out[i] = "test"
        n_valid, n_test = _counts(len(idx), valid, test)
        n_test = max(0, n_test - (len(idx) - len(free)))
        for rank, j in enumerate(rng.permutation(len(free))):
            if rank < n_test:
                out[free[j]] = "test"
            elif rank < n_test + n_valid:
                out[free[j]] = "valid"
    return out


def split_records(sources, by="config", valid=0.0, test=0.5, seed=0):
    """Yield (set name, record) for the records of sources (paths, or "-"
    for stdin), in input order. Files are read twice (keys first, then the
    records), so memory stays small; stdin is held in memory."""
    from tpuperf_cli.stream import read_many

    sources = list(sources) or ["-"]
    if "-" in sources:
        records = list(read_many(sources))
        stream = lambda: iter(records)  # noqa: E731
    else:
        stream = lambda: read_many(sources)  # noqa: E731
    keys, defaults = [], []
    for r in stream():
        keys.append(_key(r))
        defaults.append(bool(r.get("is_default")))
    if not keys:
        raise TpuperfError(f"{', '.join(sources)}: no records")
    where = assign_records(keys, defaults, by, valid, test, seed)
    for which, r in zip(where, stream()):
        yield which, r
