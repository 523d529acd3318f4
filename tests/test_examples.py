"""The committed example programs: manifest, HLO files and splits agree."""

import json
import os
import re
import sys
import types
from pathlib import Path

import pytest

from tpuperf_cli.hlo.dump import read_hlo

EX = Path(__file__).resolve().parent.parent / "examples"
NAME_RE = re.compile(r"^[a-z0-9]+(_[a-z0-9]+)+$")


def _manifest():
    return json.loads((EX / "programs.json").read_text())["programs"]


def _split(kind):
    return json.loads((EX / "splits" / f"{kind}.json").read_text())


def test_manifest_matches_files():
    progs = _manifest()
    names = [p["name"] for p in progs]
    assert len(names) == len(set(names)), "duplicate program names in programs.json"
    # NAME.hlo.zst and nothing else (no uncompressed copy)
    files = {p.name for p in (EX / "hlo").iterdir()}
    want = {f"{n}.hlo.zst" for n in names}
    assert want == files, (f"in manifest only: {sorted(want - files)}; "
                           f"files only: {sorted(files - want)}")
    for p in progs:
        assert NAME_RE.match(p["name"]), p["name"]
        assert p["name"].startswith(f"{p['family']}_{p['size']}_"), p["name"]
        assert p["file"] == f"hlo/{p['name']}.hlo.zst"
        assert p["dtype"] in ("f32", "bf16")
        assert p["batch"] > 0
        for key in ("family", "size", "mode", "variant", "kernels_hint"):
            assert key in p, (p["name"], key)


def test_corpus_size():
    progs = _manifest()
    assert len(progs) >= 30
    assert sum(p["kernels_hint"] for p in progs) >= 5000
    plain = [p for p in progs if p["variant"] == "base"]
    assert len(plain) >= 8
    assert sum(p["kernels_hint"] for p in plain) >= 1000
    families = {p["family"] for p in progs}
    for fam in ("mlp", "cnn", "resnet", "transformer", "lstm", "embedattn"):
        assert fam in families, fam
        assert len({p["size"] for p in progs if p["family"] == fam}) >= 2, fam


def test_files_are_optimized_hlo():
    for f in sorted((EX / "hlo").glob("*.hlo.zst")):
        text = read_hlo(f).text
        assert text.startswith("HloModule "), f
        assert "is_scheduled=true" in text.splitlines()[0], f"{f}: not post-optimization HLO"
        assert "ENTRY " in text, f


def test_scan_loops_have_known_trip_counts():
    rnn = [p for p in _manifest() if p["family"] in ("lstm", "gru")]
    assert rnn
    for p in rnn:
        text = read_hlo(EX / p["file"]).text
        whiles = [l for l in text.splitlines() if " while(" in l]
        assert whiles, p["name"]
        for w in whiles:
            assert re.search(r'"known_trip_count":\{"n":"\d+"\}', w), (p["name"], w[:200])


@pytest.mark.parametrize("kind", ["random", "manual"])
def test_splits_partition_programs(kind):
    split = _split(kind)
    assert set(split) == {"train", "valid", "test"}
    names = {p["name"] for p in _manifest()}
    seen = []
    for part in ("train", "valid", "test"):
        assert split[part], f"{kind}: empty {part}"
        seen += [n for n in split[part] if ":" not in n]
    # generated kernels' pseudo-programs, one pattern a source: training only
    from tpuperf_cli.generate import SOURCES

    assert sorted(n for n in split["train"] if ":" in n) == sorted(f"{s}:*" for s in SOURCES)
    assert len(seen) == len(set(seen)), f"{kind}: a program is in two parts"
    assert set(seen) == names, f"{kind}: split does not cover every program exactly once"


def test_manual_split_holds_out_whole_families():
    fam = {p["name"]: p["family"] for p in _manifest()}
    split = _split("manual")
    parts = {part: {fam[n] for n in names if ":" not in n} for part, names in split.items()}
    assert not parts["train"] & parts["test"]
    assert not parts["train"] & parts["valid"]
    assert not parts["valid"] & parts["test"]


def test_random_split_proportions():
    split = {k: [n for n in v if ":" not in n] for k, v in _split("random").items()}
    n = sum(len(v) for v in split.values())
    assert len(split["train"]) >= 0.7 * n
    assert 1 <= len(split["test"]) <= 0.2 * n + 1


def _generator():
    """examples/make_programs.py as a module (it imports jax only when
    compiling, so this is cheap)."""
    import importlib.util
    import sys

    if "make_programs" not in sys.modules:
        spec = importlib.util.spec_from_file_location("make_programs", EX / "make_programs.py")
        mod = importlib.util.module_from_spec(spec)
        sys.modules["make_programs"] = mod  # dataclasses look the module up
        spec.loader.exec_module(mod)
    return sys.modules["make_programs"]


def test_manifest_lists_what_the_script_builds():
    gen = _generator()
    built = {s.name: s for s in gen.all_specs()}
    progs = {p["name"]: p for p in _manifest()}
    assert set(built) == set(progs)
    for name, p in progs.items():
        s = built[name]
        assert (s.family, s.size, s.mode, s.batch, s.dtype, s.variant) == (
            p["family"], p["size"], p["mode"], p["batch"], p["dtype"], p["variant"]), name
        assert p["xla_options"] == gen.VARIANTS[s.variant]


def test_committed_splits_are_what_the_script_draws():
    """Families added after the splits were drawn (LATE_FAMILIES) train in
    both splits; the earlier programs' validation and test lists stay the
    draw every earlier figure was measured on."""
    gen = _generator()
    drawn = gen.make_splits(_manifest())
    late = {p["name"] for p in _manifest() if p["family"] in gen.LATE_FAMILIES}
    assert late, "no late family in the manifest"
    for kind in ("random", "manual"):
        committed = _split(kind)
        assert {k: sorted(v) for k, v in drawn[kind].items()} == \
            {k: sorted(v) for k, v in committed.items()}, kind
        assert late <= set(committed["train"]), kind
    # without the late families the draw is the same, less them
    early = gen.make_splits([p for p in _manifest() if p["name"] not in late])
    for kind in ("random", "manual"):
        for part in ("valid", "test"):
            assert early[kind][part] == drawn[kind][part], (kind, part)


def test_programs_stay_small():
    # zstd level 19 makes the 77 programs' 23 MiB of text 1.5 MiB: the checkout must stay small
    total = sum(f.stat().st_size for f in (EX / "hlo").iterdir())
    assert total < 4 * 2**20, f"examples/hlo is {total / 2**20:.1f} MiB"
    for p in _manifest():
        assert p["max_elements"] <= 4_200_000, (p["name"], p["max_elements"])


def test_kernel_counter_on_a_tiny_module():
    gen = _generator()
    text = """HloModule m, is_scheduled=true

%fused (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %t = f32[4]{0} tanh(%p)
}

%body (s: (s32[], f32[4])) -> (s32[], f32[4]) {
  %s = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[4]{0} get-tuple-element(%s), index=1
  %f = f32[4]{0} fusion(%x), kind=kLoop, calls=%fused
  ROOT %r = (s32[], f32[4]{0}) tuple(%i, %f)
}

%cond (s: (s32[], f32[4])) -> pred[] {
  %s = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

ENTRY %main (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  %e = f32[4]{0} exponential(%a)
  %f = f32[4]{0} fusion(%e), kind=kLoop, calls=%fused
  %z = s32[] constant(0)
  %t = (s32[], f32[4]{0}) tuple(%z, %f)
  %w = (s32[], f32[4]{0}) while(%t), condition=%cond, body=%body
  ROOT %o = f32[4]{0} get-tuple-element(%w), index=1
}
"""
    n, bodies = gen.count_kernels(text)
    # exponential + fusion in ENTRY, fusion in the body, compare in the condition
    assert n == 4
    assert len(bodies) == 3  # the two tanh fusions are the same kernel


def test_a_checkout_without_generates_output_measures_the_committed_chunks_again(
        tmp_path, monkeypatch):
    """build_corpus.py --force on a fresh checkout (no .work/) measures the
    generated kernels again: the committed chunks' kernels, in order, their
    measurements taken off."""
    import importlib.util

    from tpuperf_cli.stream import RecordWriter, read_records

    spec = importlib.util.spec_from_file_location("build_corpus", EX / "build_corpus.py")
    bc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bc)
    monkeypatch.setattr(bc, "WORK", tmp_path / ".work")
    monkeypatch.setattr(bc, "GENERATED", tmp_path / "generated")
    (tmp_path / "generated").mkdir()
    for k in range(2):
        with RecordWriter(str(tmp_path / "generated" / f"heavy-{k:03d}.zst"), compress=True) as w:
            for i in range(3):
                w.write({"fingerprint": f"f{k}{i}", "hlo": "...", "runtime_ns": 5.0,
                         "runs": [5.0], "noise": 0.1, "target": {"platform": "cpu"}})
    got = bc.unmeasured_kernels("heavy")
    assert [r["fingerprint"] for r in got] == ["f00", "f01", "f02", "f10", "f11", "f12"]
    assert all(set(r) == {"fingerprint", "hlo"} for r in got)
    assert bc.unmeasured_kernels("ops") == []

    # and measures them: .work/ (where each chunk's input goes) is made
    # first (it once failed with FileNotFoundError here); a stand-in for
    # measure labels each record, so only the script's own steps run
    labeler = ("import sys, msgpack, zstandard\n"
               "raw = zstandard.ZstdDecompressor().stream_reader(open(sys.argv[-1], 'rb')).read()\n"
               "for r in msgpack.Unpacker(__import__('io').BytesIO(raw), raw=False):\n"
               "    r['runtime_ns'] = 7.0; r['runs'] = [7.2, 6.9]\n"
               "    sys.stdout.buffer.write(msgpack.packb(r))\n")
    monkeypatch.setattr(bc, "measure_command", lambda args: [sys.executable, "-c", labeler])
    monkeypatch.setattr(bc, "CHUNK", 4)
    args = types.SimpleNamespace(force=True)
    assert not (tmp_path / ".work").exists()
    bc.measure_generated("heavy", 6, args)
    chunks = sorted((tmp_path / "generated").glob("heavy-*.zst"))
    assert [c.name for c in chunks] == ["heavy-000.zst", "heavy-001.zst"]
    got = [r for c in chunks for r in read_records(str(c))]
    assert [r["fingerprint"] for r in got] == ["f00", "f01", "f02", "f10", "f11", "f12"]
    assert all(r["runtime_ns"] == 7.0 and r["runs"] == [7, 7] for r in got)
    assert list((tmp_path / ".work").iterdir()) == []     # the chunk inputs are removed

    # a smaller plan: the chunks past it go, rather than stay beside this
    # build's (their labels may be another machine's), and their graphs too
    (tmp_path / "graphs").mkdir()
    bc.measure_generated("heavy", 3, args)
    chunks = sorted((tmp_path / "generated").glob("heavy-*.zst"))
    assert [c.name for c in chunks] == ["heavy-000.zst"]
    assert [r["fingerprint"] for r in read_records(str(chunks[0]))] == ["f00", "f01", "f02"]
    for name in ("heavy-000.zst", "heavy-001.zst"):
        (tmp_path / "graphs" / name).write_bytes(b"")
    monkeypatch.setattr(bc, "tool", lambda name: [sys.executable, "-c",
                                                   "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"])
    bc.featurize_generated(tmp_path / "graphs")
    assert sorted(p.name for p in (tmp_path / "graphs").iterdir()) == ["heavy-000.zst"]


def test_unlabelled_step_generates_excluding_the_corpus(tmp_path, monkeypatch):
    """build_corpus.py unlabelled: each source of the plan generated with
    its own seed, from the programs of every split's train list, every
    kernel shard of the corpus excluded, written to unlabelled/S.zst;
    featurize makes their graphs beside the others'."""
    import importlib.util

    from tpuperf_cli.stream import read_records

    spec = importlib.util.spec_from_file_location("build_corpus", EX / "build_corpus.py")
    bc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bc)
    for name, path in (("CORPUS", tmp_path), ("WORK", tmp_path / ".work"),
                       ("GENERATED", tmp_path / "generated"), ("UNLABELLED", tmp_path / "unlabelled")):
        monkeypatch.setattr(bc, name, path)
    (tmp_path / "kernels").mkdir()
    (tmp_path / "generated").mkdir()
    (tmp_path / "kernels" / "p.zst").write_bytes(b"")
    (tmp_path / "generated" / "ops-000.zst").write_bytes(b"")
    monkeypatch.setattr(bc, "UNLABELLED_PLAN", {"fusions": 2, "sweeps": 3})
    # a stand-in for tpuperf generate: one record per --limit, its argv inside
    fake = ("import sys, msgpack\n"
            "a = sys.argv[1:]\n"
            "with open(a[a.index('-o') + 1], 'wb') as f:\n"
            "    for i in range(int(a[a.index('--limit') + 1])):\n"
            "        f.write(msgpack.packb({'fingerprint': str(i), 'argv': a}))\n")
    monkeypatch.setattr(bc, "tool", lambda name: [sys.executable, "-c", fake])
    bc.main(["unlabelled"])
    for source, n in (("fusions", 2), ("sweeps", 3)):
        got = list(read_records(str(tmp_path / "unlabelled" / f"{source}.zst")))
        assert len(got) == n
        argv = got[0]["argv"]
        assert argv[argv.index("--source") + 1] == source and argv[argv.index("--seed") + 1] == "11"
        excluded = [argv[i + 1] for i, a in enumerate(argv) if a == "--exclude"]
        assert excluded == [str(tmp_path / "kernels" / "p.zst"), str(tmp_path / "generated" / "ops-000.zst")]
        drawn = [a for a in argv if a.endswith(".hlo.zst")]
        assert drawn and all(Path(a).name.replace(".hlo.zst", "") in bc.draw_from() for a in drawn)
    assert not list((tmp_path / ".work").iterdir())
    monkeypatch.setattr(bc, "tool", lambda name: [sys.executable, "-c",
                                                   "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"])
    bc.featurize_unlabelled(tmp_path / "graphs" / "unlabelled")
    assert sorted(p.name for p in (tmp_path / "graphs" / "unlabelled").iterdir()) == ["fusions.zst", "sweeps.zst"]
    with pytest.raises(SystemExit):
        bc.main(["unlabelled", "featurize"])


def test_a_larger_plan_appends_to_the_committed_chunks(tmp_path, monkeypatch):
    """Growing a source keeps its measured chunks as they are: the
    regenerated list (generate's .work/SOURCE.zst, which need not begin
    with the committed kernels: XLA may compile a swept program a little
    differently another day) adds only the kernels the chunks lack, after
    them; only the new chunk is measured."""
    import importlib.util

    from tpuperf_cli.stream import RecordWriter, read_records

    spec = importlib.util.spec_from_file_location("build_corpus", EX / "build_corpus.py")
    bc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bc)
    monkeypatch.setattr(bc, "WORK", tmp_path / ".work")
    monkeypatch.setattr(bc, "GENERATED", tmp_path / "generated")
    monkeypatch.setattr(bc, "CHUNK", 3)
    (tmp_path / "generated").mkdir()
    (tmp_path / ".work").mkdir()
    committed = tmp_path / "generated" / "sweeps-000.zst"
    with RecordWriter(str(committed), compress=True) as w:
        for f in ("a", "b", "c"):
            w.write({"fingerprint": f, "hlo": "...", "runtime_ns": 5.0, "runs": [5.0]})
    before = committed.read_bytes()
    # regenerated with --limit 6: "b" compiled differently ("b2"), the
    # order changed, and new kernels after
    with RecordWriter(str(tmp_path / ".work" / "sweeps.zst"), compress=True) as w:
        for f in ("c", "a", "b2", "d", "e", "f"):
            w.write({"fingerprint": f, "hlo": "..."})
    got = bc.unmeasured_kernels("sweeps")
    assert [r["fingerprint"] for r in got] == ["a", "b", "c", "b2", "d", "e", "f"]
    assert bc._planned_kernels("sweeps") == 7

    measured = []
    labeler = ("import sys, msgpack, zstandard\n"
               "raw = zstandard.ZstdDecompressor().stream_reader(open(sys.argv[-1], 'rb')).read()\n"
               "for r in msgpack.Unpacker(__import__('io').BytesIO(raw), raw=False):\n"
               "    r['runtime_ns'] = 7.0\n"
               "    sys.stdout.buffer.write(msgpack.packb(r))\n")

    def measure_command(args):
        measured.append(1)
        return [sys.executable, "-c", labeler]

    monkeypatch.setattr(bc, "measure_command", measure_command)
    bc.measure_generated("sweeps", 6, types.SimpleNamespace(force=False))
    assert committed.read_bytes() == before            # kept, not measured again
    assert len(measured) == 1
    grown = tmp_path / "generated" / "sweeps-001.zst"
    assert [r["fingerprint"] for r in read_records(str(grown))] == ["b2", "d", "e"]


def build_corpus_in(tmp_path, monkeypatch):
    """examples/build_corpus.py as a module whose corpus is tmp_path (with
    empty kernels/ and generated/)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_corpus", EX / "build_corpus.py")
    bc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bc)
    monkeypatch.setattr(bc, "CORPUS", tmp_path)
    monkeypatch.setattr(bc, "WORK", tmp_path / ".work")
    monkeypatch.setattr(bc, "GENERATED", tmp_path / "generated")
    (tmp_path / "kernels").mkdir()
    (tmp_path / "generated").mkdir()
    return bc


def stand_in_measure(bc, monkeypatch, log, target, runtime_ns, default):
    """build_corpus's measure replaced by a script that checks each record
    comes untimed and with --no-cache, writes its fingerprint to log, and
    labels it runtime_ns.get(fingerprint, default) (runs the same, noise
    0.5) on the machine `target`."""
    script = ("import sys, io, json, zstandard, msgpack\n"
              "raw = zstandard.ZstdDecompressor().stream_reader(open(sys.argv[-1], 'rb')).read()\n"
              "target, times, default = json.loads(sys.argv[2]), json.loads(sys.argv[3]), "
              "float(sys.argv[4])\n"
              "for r in msgpack.Unpacker(io.BytesIO(raw), raw=False):\n"
              "    assert 'runtime_ns' not in r and '--no-cache' in sys.argv\n"
              "    open(sys.argv[1], 'a').write(r['fingerprint'] + '\\n')\n"
              "    t = times.get(r['fingerprint'], default)\n"
              "    r.update(runtime_ns=t, runs=[t], noise=0.5, target=target)\n"
              "    sys.stdout.buffer.write(msgpack.packb(r))\n")
    monkeypatch.setattr(bc, "measure_command", lambda args: [
        sys.executable, "-c", script, str(log), json.dumps(target), json.dumps(runtime_ns),
        str(default)])


def test_confirm_keeps_each_kernels_faster_timing_in_the_shards_and_the_cache(
        tmp_path, monkeypatch):
    """build_corpus.py confirm: every distinct measured kernel of the
    programs' shards goes through measure again (no cache), each record gets
    both timings and the faster one's runtime, runs and noise, the cache the
    faster; a second run times nothing, and a second timing from another
    machine is refused with the corpus left as it was."""
    from tpuperf_cli.measure.cache import Cache
    from tpuperf_cli.measure.target import target_key
    from tpuperf_cli.stream import RecordWriter, read_records

    bc = build_corpus_in(tmp_path, monkeypatch)
    monkeypatch.setattr(bc, "CONFIRM_CHUNK", 2)
    target = {"platform": "cpu", "chip": "here", "method": 5, "clock": "process"}
    first = {"a": 100.0, "b": 300.0, "c": 50.0}
    for name, fps in (("p1", ["a", "b"]), ("p2", ["b", "c", "x"])):   # b in both
        with RecordWriter(str(tmp_path / "kernels" / f"{name}.zst"), compress=True) as w:
            for fp in fps:
                w.write({"fingerprint": fp, "hlo": fp, "runtime_ns": first[fp], "runs": [first[fp]],
                         "noise": 0.01, "target": target} if fp in first else
                        {"fingerprint": fp, "hlo": fp, "error": "compile: no"})
    with RecordWriter(str(tmp_path / "generated" / "ops-000.zst"), compress=True) as w:
        w.write({"fingerprint": "g", "hlo": "g", "runtime_ns": 9.0, "target": target})
    # the second timing is 200 for a and b (b was slowed the first time), 60 for others
    log = tmp_path / "timed"
    stand_in_measure(bc, monkeypatch, log, target, {"a": 200.0, "b": 200.0}, 60.0)
    args = types.SimpleNamespace(confirm_generated=False, cache_dir=tmp_path / "cache")
    # c was timed again by a run that was interrupted: not timed a third time
    done = Cache(str(tmp_path / "cache" / "confirm"))
    done.put("c", target_key(target), target, 60.0, [60.0], noise=0.5)
    done.close()
    bc.confirm(args)
    assert sorted(log.read_text().split()) == ["a", "b"]           # once each, not g
    got = {(shard, r["fingerprint"]): r for shard in ("p1", "p2")
           for r in read_records(str(tmp_path / "kernels" / f"{shard}.zst"))}
    assert got["p1", "a"]["timings"] == [100.0, 200.0] and got["p1", "a"]["runtime_ns"] == 100.0
    assert got["p1", "a"]["runs"] == [100] and got["p1", "a"]["noise"] == 0.01
    for shard in ("p1", "p2"):
        b = got[shard, "b"]
        assert b["timings"] == [300.0, 200.0] and b["runtime_ns"] == 200.0 and b["noise"] == 0.5
    assert got["p2", "c"]["runtime_ns"] == 50.0 and got["p2", "c"]["timings"] == [50.0, 60.0]
    assert "timings" not in got["p2", "x"]
    cache = Cache(str(tmp_path / "cache"))
    assert cache.get("b", target_key(target))["runtime_ns"] == 200.0
    assert cache.get("a", target_key(target)) is None             # the first timing stays
    cache.close()
    assert bc.confirm_summary(got.values()) == {"kernels": 4, "median_gap": 0.5,
                                                "slower_first": 2, "slower_second": 1}
    log.unlink()
    assert bc.confirm(args) is None and not log.exists()          # nothing left to confirm

    # another machine's second timing: refused, the shards untouched
    with RecordWriter(str(tmp_path / "kernels" / "p3.zst"), compress=True) as w:
        w.write({"fingerprint": "d", "hlo": "d", "runtime_ns": 100.0, "target": target})
    before = (tmp_path / "kernels" / "p3.zst").read_bytes()
    stand_in_measure(bc, monkeypatch, log, dict(target, chip="there"), {}, 60.0)
    with pytest.raises(SystemExit, match="not the one that measured"):
        bc.confirm(args)
    assert (tmp_path / "kernels" / "p3.zst").read_bytes() == before


def test_labels_travel_to_the_committed_graphs(tmp_path, monkeypatch):
    """build_corpus.py labels writes one machine's labels of the corpus's
    measured kernels (the faster runtime, noise, both timings) in one small
    file; relabel copies graphs/ elsewhere with them: runs and the corpus
    machine's target go, a kernel the file lacks keeps its graph with an
    error, the committed graphs stay as they were; a corpus of two machines
    and files that are not label files are refused by name."""
    import shutil

    from tpuperf_cli.stream import RecordWriter, read_records

    bc = build_corpus_in(tmp_path, monkeypatch)
    here = {"platform": "cpu", "chip": "here", "method": 5, "clock": "process"}
    there = dict(here, chip="there")
    fp = {k: k * 32 for k in "abcde"}

    def shard(path, records):
        path.parent.mkdir(parents=True, exist_ok=True)
        with RecordWriter(str(path), compress=True) as w:
            for r in records:
                w.write(r)

    # this machine's corpus: a confirmed twice, b once, c failed; g generated
    shard(tmp_path / "kernels" / "p1.zst", [
        {"fingerprint": fp["a"], "runtime_ns": 100.0, "runs": [100], "noise": 0.02, "target": here,
         "timings": [100.0, 130.0]},
        {"fingerprint": fp["b"], "runtime_ns": 7.0, "runs": [7], "target": here},
        {"fingerprint": fp["c"], "error": "compile: no"}])
    shard(tmp_path / "generated" / "ops-000.zst", [
        {"fingerprint": fp["d"], "runtime_ns": 50.0, "runs": [50], "noise": 0.1, "target": here}])
    (tmp_path / "manifest.json").write_text(json.dumps({"two_timings": {"median_gap": 0.3},
                                                         "per_program": {"p1": 3}}))
    labels = tmp_path / "labels" / "here.zst"
    assert bc.main(["labels", "--labels", str(labels)]) is None
    [whole] = read_records(str(labels))
    assert whole["manifest"] == {"two_timings": {"median_gap": 0.3}} and whole["kernels"] == 3
    target, table = bc.read_labels(labels)
    assert target == here and table == {fp["a"]: (100.0, pytest.approx(0.02), [100.0, 130.0]),
                                         fp["b"]: (7.0, None, None), fp["d"]: (50.0, pytest.approx(0.1), None)}
    assert labels.stat().st_size < 1000

    # the committed graphs, labelled on another machine: a, b, c (which
    # failed here) and e (not measured here) in a program, d generated
    graphs = tmp_path / "graphs"
    program = [{"fingerprint": fp[k], "program": "p1", "node_feat": b"x", "runtime_ns": 1e3, "runs": [1e3],
                "noise": 0.5, "target": there} for k in "abce"]
    shard(graphs / "p1.zst", program)
    shard(graphs / "generated" / "ops-000.zst",
          [{"fingerprint": fp["d"], "program": "ops:add", "runtime_ns": 9.0, "target": there}])
    before = (graphs / "p1.zst").read_bytes()
    out = tmp_path / "here-graphs"
    assert bc.relabel(labels, out) == (3, 2)
    got = {r["fingerprint"][0]: r for r in read_records(str(out / "p1.zst"))}
    assert list(got) == list("abce")
    assert got["a"] == {"fingerprint": fp["a"], "program": "p1", "node_feat": b"x", "runtime_ns": 100.0,
                        "noise": pytest.approx(0.02), "timings": [100.0, 130.0], "target": here}
    assert got["b"]["runtime_ns"] == 7.0 and "noise" not in got["b"] and "runs" not in got["b"]
    for k in "ce":
        assert "runtime_ns" not in got[k] and got[k]["error"].startswith("unlabelled: not in")
    [d] = read_records(str(out / "generated" / "ops-000.zst"))
    assert d["runtime_ns"] == 50.0 and d["target"] == here
    assert (graphs / "p1.zst").read_bytes() == before

    # a shard of an earlier relabel that the corpus no longer has goes
    shard(out / "generated" / "ops-999.zst", [{"fingerprint": fp["d"], "runtime_ns": 1.0}])
    assert bc.relabel(labels, out) == (3, 2)
    assert sorted(p.name for p in out.rglob("*.zst")) == ["ops-000.zst", "p1.zst"]

    with pytest.raises(SystemExit, match="the corpus's own graphs"):
        bc.relabel(labels, graphs)
    with pytest.raises(SystemExit, match="not a label file"):
        bc.relabel(graphs / "p1.zst", out)
    (tmp_path / "junk.zst").write_bytes(b"not zstd")
    with pytest.raises(SystemExit, match="junk.zst: not a label file"):
        bc.relabel(tmp_path / "junk.zst", out)
    shutil.rmtree(graphs / "generated")
    with pytest.raises(SystemExit, match="run `python examples/build_corpus.py featurize` first"):
        bc.relabel(labels, out)
    # a corpus timed on two machines has no one machine's labels
    shard(tmp_path / "generated" / "ops-001.zst", [{"fingerprint": fp["e"], "runtime_ns": 5.0, "target": there}])
    with pytest.raises(SystemExit, match=r"ops-001.zst record 1 was measured on another machine"):
        bc.export_labels(tmp_path / "two.zst")
    assert not (tmp_path / "two.zst").exists()


def test_an_interrupted_confirm_keeps_its_second_timings_and_goes_on(tmp_path, monkeypatch):
    """build_corpus.py confirm interrupted (Ctrl-C) after its first chunk:
    it says so, leaves the shards as they were, and a rerun times only the
    kernels the first run had not reached."""
    from tpuperf_cli.stream import RecordWriter, read_records

    bc = build_corpus_in(tmp_path, monkeypatch)
    monkeypatch.setattr(bc, "CONFIRM_CHUNK", 2)
    target = {"platform": "cpu", "chip": "here", "method": 5, "clock": "process"}
    shard = tmp_path / "kernels" / "p.zst"
    with RecordWriter(str(shard), compress=True) as w:
        for fp in "abc":
            w.write({"fingerprint": fp, "hlo": fp, "runtime_ns": 100.0, "target": target})
    before = shard.read_bytes()
    log = tmp_path / "timed"
    stand_in_measure(bc, monkeypatch, log, target, {}, 90.0)
    real_run, calls = bc.subprocess.run, []

    def run_then_interrupt(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real_run(*a, **k)

    monkeypatch.setattr(bc.subprocess, "run", run_then_interrupt)
    args = types.SimpleNamespace(confirm_generated=False, cache_dir=tmp_path / "cache")
    with pytest.raises(SystemExit, match="interrupted; the 2 second timings"):
        bc.confirm(args)
    assert shard.read_bytes() == before and len(log.read_text().split()) == 2
    monkeypatch.setattr(bc.subprocess, "run", real_run)
    log.unlink()
    bc.confirm(args)
    assert len(log.read_text().split()) == 1                       # the one left
    assert [r["timings"] for r in read_records(str(shard))] == [[100.0, 90.0]] * 3


def test_estimate_times_a_sample_of_each_part_and_projects_the_corpus(tmp_path, monkeypatch,
                                                                      capsys):
    """build_corpus.py estimate: a sample of the programs' distinct kernels
    and of each planned source goes through measure (the corpus's settings,
    no cache), and the table projects each part's time by its kernel count;
    the corpus is left as it was."""
    from tpuperf_cli.stream import RecordWriter

    bc = build_corpus_in(tmp_path, monkeypatch)
    for name, fps in (("p1", ["a", "b"]), ("p2", ["b", "c"])):   # b twice: counted once
        with RecordWriter(str(tmp_path / "kernels" / f"{name}.zst"), compress=True) as w:
            for fp in fps:
                w.write({"fingerprint": fp, "hlo": "...", "runtime_ns": 5.0})
    with RecordWriter(str(tmp_path / "generated" / "ops-000.zst"), compress=True) as w:
        for i in range(10):
            w.write({"fingerprint": f"o{i}", "hlo": "...", "runtime_ns": 5.0})
    # a stand-in for measure: counts the records it is given, takes a moment
    counter = ("import sys, time, zstandard, msgpack\n"
               "raw = zstandard.ZstdDecompressor().stream_reader(open(sys.argv[-1], 'rb')).read()\n"
               "n = sum(1 for r in msgpack.Unpacker(__import__('io').BytesIO(raw), raw=False)\n"
               "        if 'runtime_ns' not in r)\n"
               "time.sleep(0.05 * n)\n"
               "open(sys.argv[1], 'a').write(f'{n}\\n')\n")
    log = tmp_path / "counts"
    monkeypatch.setattr(bc, "measure_command",
                        lambda args: [sys.executable, "-c", counter, str(log)])
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    bc.main(["estimate", "--estimate-sample", "4", "--plan", "ops=8", "fusions=0", "sweeps=0",
             "heavy=0"])
    out = capsys.readouterr().out
    # start-up (one kernel), the programs' 3 distinct kernels, 4 of ops' 8
    assert log.read_text().split() == ["1", "3", "4"]
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[3:]}
    assert rows["programs"][0] == "3" and rows["ops"][0] == "8" and rows["total"][0] == "11"
    assert "fusions" not in rows
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")
                  if p.name != "counts" and ".work" not in p.parts) == before


def test_ablation_trains_variants_side_by_side_and_reports_them(tmp_path):
    """examples/ablation.py --jobs 2 on four programs of the corpus: both
    variants train, are evaluated, and the report names the command."""
    import subprocess
    import sys

    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": ["bnmlp_s_train", "mlp_s_train"],
                                 "valid": ["autoenc_s_train"], "test": ["gpt_s_train"]}))
    out = tmp_path / "ablation.md"
    p = subprocess.run([sys.executable, str(EX / "ablation.py"), "--split", str(split),
                        "--only", "none-column,sage-column", "--epochs", "1", "--max-time", "5",
                        "--jobs", "2", "--train-args", "--threads 1", "--work",
                        str(tmp_path / "work"), "--out", str(out)],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    report = out.read_text()
    assert "--jobs 2" in report.splitlines()[2]
    rows = [line for line in report.splitlines() if line.startswith("| sage-column |")
            or line.startswith("| none-column |")]
    # in the order of VARIANTS, whichever finished first
    assert [r.split("|")[1].strip() for r in rows] == ["sage-column", "none-column"]
    assert (tmp_path / "work" / "sage-column.s0.eval.json").exists()


def test_noise_figures_of_another_machine_or_method_are_not_recorded(tmp_path):
    """build_corpus.py manifest: the kept noise report goes when the corpus
    was measured again elsewhere; a --noise-report of another machine is an
    error."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("build_corpus", EX / "build_corpus.py")
    bc = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bc)
    here = {"platform": "cpu", "chip": "AMD EPYC", "cpu": {"family": "25", "model": "1"},
            "method": 5}
    there = dict(here, cpu={"family": "26", "model": "2"}, method=4)
    report = {"target": here, "median": 0.03}
    assert bc.noise_report(None, report, here) == report
    assert bc.noise_report(None, {"target": there, "median": 0.02}, here) is None
    assert bc.noise_report(None, {"target": dict(here, method=4)}, here) is None
    path = tmp_path / "noise.json"
    path.write_text(json.dumps(report))
    assert bc.noise_report(str(path), None, here) == report
    path.write_text(json.dumps({"target": there}))
    with pytest.raises(SystemExit, match="another machine"):
        bc.noise_report(str(path), None, here)


def test_bench_dot_strides_times_each_order_at_every_k(tmp_path):
    """benchmarks/bench_dot_strides.py: the nn and nt dot at each k, timed
    by measure, a row each with the nt dot's speed over the nn dot's, the
    powers of two marked; a --k it cannot read is one line, no traceback."""
    import subprocess

    script = str(EX.parent / "benchmarks" / "bench_dot_strides.py")
    out = tmp_path / "dots.json"
    p = subprocess.run([sys.executable, script, "--m", "8", "--n", "64", "--k", "96,128",
                        "--json", str(out)], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "f32[8,k] by [k,64] (nn) and by the transpose of [64,k] (nt)" in p.stdout
    assert re.search(r"^ +96 +[\d.]+ +[\d.]+ +[\d.]+$", p.stdout, re.M)
    assert re.search(r"^ +128 +[\d.]+ +[\d.]+ +[\d.]+   power of two$", p.stdout, re.M)
    assert "at 1 power(s) of two" in p.stdout and "at the other 1 k" in p.stdout
    figures = json.loads(out.read_text())["figures"]
    assert [(f["k"], f["power_of_two"]) for f in figures] == [(96, False), (128, True)]
    assert all(f["nn"] > 0 and f["nt"] > 0 for f in figures)
    p = subprocess.run([sys.executable, script, "--k", "5:x"], capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 1 and "--k '5:x'" in p.stderr and "Traceback" not in p.stderr


def test_bench_conv_channels_writes_each_convolution_with_every_channel_count():
    """The variants the benchmark times: WaveNet's 1-D convolutions with
    other channel counts, in and out alike, each a module that parses with
    the shapes asked for."""
    import importlib.util

    from tpuperf_cli.hlo.parser import parse_module
    from tpuperf_cli.stream import read_records

    spec = importlib.util.spec_from_file_location(
        "bench_conv_channels", EX.parent / "benchmarks" / "bench_conv_channels.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    records = read_records(str(EX / "corpus" / "graphs" / "wavenet_m_train.zst"))
    rows = bench.variants(records, [47, 48, 64], limit=2)
    assert [(i, c) for i, _, c, _ in rows] == [(0, 47), (0, 48), (0, 64), (1, 47), (1, 48), (1, 64)]
    for _, own, c, rec in rows:
        assert own == 48
        m = parse_module(rec["hlo"], "hlo")
        conv = m.entry.root
        lhs, rhs = (m.entry.by_name[o].shape for o in conv.operands)
        assert conv.opcode == "convolution"
        assert lhs.dims[-1] == rhs.dims[1] == rhs.dims[2] == conv.shape.dims[-1] == c


def test_bench_accuracy_scores_the_first_timing_against_the_second():
    """bench_accuracy's noise floor from build_corpus.py confirm's two
    timings: the first scored against the second per program, as a model
    against its labels; records timed once are left out."""
    sys.path.insert(0, str(EX.parent / "benchmarks"))
    import bench_accuracy

    records = [{"program": "p", "runtime_ns": 9e3, "timings": [12e3, 10e3]},
               {"program": "p", "runtime_ns": 20e3, "timings": [20e3, 25e3]},
               {"program": "q", "runtime_ns": 8e3, "timings": [8e3, 8e3]},
               {"program": "q", "runtime_ns": 6e3}]
    twice, med, by_program = bench_accuracy.two_timings(records, 5e3)
    assert len(twice) == 3
    # p: 12 against 10 (20%), 20 against 25 (20%); q: 0%
    assert med["mape"] == pytest.approx(10.0)
    assert by_program["p"]["mape"] == pytest.approx(20.0)
    assert by_program["q"]["mape"] == pytest.approx(0.0)
    assert bench_accuracy.two_timings(records[3:], 5e3) == ([], None, {})


def test_bench_accuracy_warns_only_for_generated_sources_the_corpus_holds(tmp_path, capsys):
    """A split's train list names every source ("indexed:*"...); the
    benchmark says to featurize only where that source's kernel chunks
    exist without their graphs, not for a source the corpus never had."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "bench_accuracy", EX.parent / "benchmarks" / "bench_accuracy.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    corpus = tmp_path / "corpus"
    (corpus / "graphs").mkdir(parents=True)
    (corpus / "generated").mkdir()
    (corpus / "generated" / "ops-000.zst").write_bytes(b"")
    with pytest.raises(SystemExit, match="no measured records"):
        bench.load(str(corpus / "graphs"), ["ops:*", "indexed:*"])
    err = capsys.readouterr().err
    assert "no graph shards for ops:*" in err and "indexed" not in err


def test_breakdown_groups_loop_fusions_by_what_they_hold():
    """bench_accuracy's kLoop table: a fusion holding a reduce and a
    transpose is in both groups, one holding none in "none of these", and
    other kernels in none."""
    sys.path.insert(0, str(EX.parent / "benchmarks"))
    import bench_accuracy

    def rec(opcode, kind, body):
        return {"opcode": opcode, "fusion_kind": kind, "hlo": f"%f {{\n  {body}\n}}"}
    records = [
        rec("fusion", "kLoop", "%r = f32[4]{0} reduce(%t, %c)\n  %t = f32[4,4]{1,0} transpose(%p)"),
        rec("fusion", "kLoop", "%a = f32[4]{0} add(%p, %q)"),
        rec("fusion", "kLoop", "%w = f32[4]{0} reduce-window(%p, %c)"),     # not a reduce
        rec("fusion", "kInput", "%r = f32[4]{0} reduce(%p, %c)"),           # another kind
        rec("reduce", None, "%r = f32[4]{0} reduce(%p, %c)"),               # not a fusion
        rec("fusion", "kLoop", "%c = bf16[4]{0} convert(%p)"),
    ]
    groups = {k: v.tolist() for k, v in bench_accuracy.fusion_contents(records, "kLoop").items()}
    assert groups == {"reduce": [0], "transpose": [0], "dot": [], "bf16": [5],
                      "none of these": [1, 2]}


def test_compare_seeds_pairs_runs_seed_for_seed(tmp_path):
    """benchmarks/compare_seeds.py: a candidate whose runs are the
    reference's own scores the same, wins no seed, and its joined figures
    are one run's when the runs are one model; a bad argument is a clear
    error."""
    import subprocess

    model = str(EX.parent / "tpuperf_cli" / "data" / "default.pt")
    script = str(EX.parent / "benchmarks" / "compare_seeds.py")
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": [], "valid": ["autoenc_s_train"], "test": []}))
    p = subprocess.run([sys.executable, script, "--split", str(split), "--json",
                        f"a={model},{model}", f"b={model},{model}"],
                       capture_output=True, text=True, check=True)
    out = json.loads(p.stdout)["candidates"]
    assert out["b"]["mape_diff_mean"] == 0 and out["b"]["mape_wins"] == 0
    assert out["b"]["seeds_paired"] == 2
    run = out["a"]["runs"][0]
    assert 0 < run["mape"] < 100 and out["a"]["mape_sd"] == 0
    assert out["a"]["joined"]["mape"] == pytest.approx(run["mape"])
    p = subprocess.run([sys.executable, script, "--split", str(split), "a=nothing.pt"],
                       capture_output=True, text=True)
    assert p.returncode == 1 and "no such model file: nothing.pt" in p.stderr
    assert "Traceback" not in p.stderr

    # --kind: the median APE of that kind's kernels of every size, worked out here again
    p = subprocess.run([sys.executable, script, "--split", str(split), "--json", "--kind", "dot",
                        f"a={model}"], capture_output=True, text=True, check=True)
    got = json.loads(p.stdout)["candidates"]["a"]["runs"][0]["dot"]
    sys.path.insert(0, str(EX.parent / "benchmarks"))
    import bench_accuracy
    import numpy as np

    from tpuperf_cli.model.examples import example
    from tpuperf_cli.model.predict import load_model
    records = bench_accuracy.load(str(EX / "corpus" / "graphs"), ["autoenc_s_train"])
    dots = [r for r in records if r.get("opcode") == "dot"]
    pred = load_model(model).predict_examples([example(r, i) for i, r in enumerate(dots, 1)])
    want = np.median([100 * abs(q - r["runtime_ns"]) / r["runtime_ns"] for q, r in zip(pred, dots)])
    assert len(dots) > 2 and got == pytest.approx(want, rel=1e-4)  # float32, batched otherwise
    p = subprocess.run([sys.executable, script, "--split", str(split), "--kind", "nosuch",
                        f"a={model}"], capture_output=True, text=True)
    assert p.returncode == 1 and "--kind nosuch: no such kernels" in p.stderr


def test_train_default_model_trains_teachers_then_distils(tmp_path):
    """The script's steps, with a stand-in for python that logs each call:
    the teacher seeds, their ensemble, then the seeds taught by it."""
    import subprocess

    log = tmp_path / "calls"
    fake = tmp_path / "py"
    fake.write_text('#!/bin/sh\necho "$*" >> "%s"\n'
                    'while [ $# -gt 0 ]; do [ "$1" = -o ] && : > "$2"; shift; done\n' % log)
    fake.chmod(0o755)
    out = tmp_path / "model.pt"
    script = Path(__file__).resolve().parents[1] / "examples" / "train_default_model.sh"
    env = {"PATH": "/usr/bin:/bin", "PY": str(fake), "OUT": str(out), "SEEDS": "0",
           "TEACHER_SEEDS": "0 1 2"}
    res = subprocess.run(["sh", str(script), "--hidden", "8"], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    calls = [c for c in log.read_text().splitlines() if "build_corpus.py" not in c]
    trains = [c for c in calls if c.startswith("-m tpuperf_cli train")]
    assert len(trains) == 4 and all("--hidden 8" in c for c in trains), calls
    teachers, student = trains[:3], trains[3]
    assert not any("--teacher" in c for c in teachers)
    assert sorted(re.search(r"--seed (\d)", c).group(1) for c in teachers) == ["0", "1", "2"]
    ensemble = calls.index(next(c for c in calls if c.startswith("-m tpuperf_cli ensemble")))
    assert ensemble > max(calls.index(c) for c in teachers) and ensemble < calls.index(student)
    taught = re.search(r"--teacher (\S+) --teacher-weight 0 --teacher-data "
                       r"examples/corpus/graphs/unlabelled/\*.zst --source-weight teacher=2$", student)
    assert taught and calls[ensemble].endswith("-o " + taught.group(1)), (student, calls[ensemble])
    assert out.exists() and calls[-1].startswith("benchmarks/bench_accuracy.py --model " + str(out))

    # the blend instead, without kernels to label
    log.unlink()
    res = subprocess.run(["sh", str(script)], env={**env, "TEACHER_WEIGHT": "0.5", "TEACHER_DATA": ""},
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    student = [c for c in log.read_text().splitlines() if c.startswith("-m tpuperf_cli train")][-1]
    assert student.endswith("--teacher-weight 0.5") and "--teacher-data" not in student, student

    log.unlink()
    env["TEACHER_SEEDS"] = ""
    res = subprocess.run(["sh", str(script)], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    calls = log.read_text()
    assert calls.count("tpuperf_cli train") == 1 and "--teacher" not in calls and "ensemble" not in calls

    # TREES=1: trees on the same data and draw, joined with the network
    log.unlink()
    res = subprocess.run(["sh", str(script)], env={**env, "TREES": "1"}, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    calls = [c for c in log.read_text().splitlines() if "build_corpus.py" not in c]
    net, trees = [c for c in calls if c.startswith("-m tpuperf_cli train")]
    assert "--learner gbdt" in trees and "--lr 0.1" in trees and "--learner" not in net
    for same in ("--split examples/splits/random.json", "--generated-share 0.5", "--kernel-features 16",
                 "--source-weight indexed=0.25"):
        assert same in net and same in trees, same
    joined = next(c for c in calls if c.startswith("-m tpuperf_cli ensemble"))
    assert re.search(r"seed0\.pt \S+trees\.pt --name model -o " + re.escape(str(out)) + "$", joined), joined

    # TEACHER_TREES=1: the teacher joins trees with its networks
    log.unlink()
    res = subprocess.run(["sh", str(script)], env={**env, "TEACHER_SEEDS": "0", "TEACHER_TREES": "1"},
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    calls = [c for c in log.read_text().splitlines() if "build_corpus.py" not in c]
    teacher, trees, student = [c for c in calls if c.startswith("-m tpuperf_cli train")]
    assert "--learner gbdt" in trees and "--learner" not in teacher + student
    ensemble = next(c for c in calls if c.startswith("-m tpuperf_cli ensemble"))
    parts = re.search(r"ensemble (\S+) (\S+) -o (\S+)$", ensemble)
    assert parts and sorted(os.path.basename(p) for p in parts.group(1, 2)) == ["teacher-trees.pt",
                                                                              "teacher0.pt"], ensemble
    assert "--teacher " + parts.group(3) in student and calls.index(ensemble) < calls.index(student)

    # TEACHER_TREES=1 alone would train no teacher: refused before any training
    log.unlink()
    res = subprocess.run(["sh", str(script)], env={**env, "TEACHER_TREES": "1"}, capture_output=True, text=True)
    assert res.returncode == 2 and "set TEACHER_SEEDS too" in res.stderr and not log.exists()

    # LABELS=FILE: relabelled into a folder named by the labels (the path the model records), kept
    res = subprocess.run(["sh", str(script)], env={**env, "TEACHER_SEEDS": "",
                                                   "LABELS": "examples/corpus/labels/amd-epyc-26-2.zst"},
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    calls = log.read_text().splitlines()
    where = "examples/corpus/relabelled/amd-epyc-26-2"
    assert any(c.endswith(f"relabel --labels examples/corpus/labels/amd-epyc-26-2.zst --graphs-dir {where}")
               for c in calls), calls
    train = next(c for c in calls if c.startswith("-m tpuperf_cli train"))
    assert f"--data {where}/*.zst" in train and f"--data {where}/generated/" in train, train
    assert calls[-1].endswith(f"--corpus {where}")


def test_conv_lookalikes_counts_multiply_adds_per_feature_group():
    """benchmarks/bench_conv_lookalikes.py: a convolution's form and
    multiply-adds (output elements x window taps x input features per
    group), a depthwise one marked grouped; other kernels have none."""
    sys.path.insert(0, str(EX.parent / "benchmarks"))
    import bench_conv_lookalikes

    plain = ("HloModule m\n\nENTRY %main (a: f32[8,16,4], b: f32[2,4,6]) -> f32[8,16,6] {\n"
             "  %a = f32[8,16,4]{2,1,0} parameter(0)\n  %b = f32[2,4,6]{2,1,0} parameter(1)\n"
             "  ROOT %c = f32[8,16,6]{2,1,0} convolution(%a, %b), "
             "window={size=2 pad=1_0 rhs_dilate=2}, dim_labels=b0f_0io->b0f\n}\n")
    depthwise = ("HloModule m\n\nENTRY %main (a: f32[1,8,8,4], b: f32[3,3,1,4]) -> f32[1,8,8,4] {\n"
                 "  %a = f32[1,8,8,4]{3,2,1,0} parameter(0)\n"
                 "  %b = f32[3,3,1,4]{3,2,1,0} parameter(1)\n"
                 "  ROOT %c = f32[1,8,8,4]{3,2,1,0} convolution(%a, %b), "
                 "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f, "
                 "feature_group_count=4\n}\n")
    form = bench_conv_lookalikes.conv_form
    assert form({"opcode": "convolution", "hlo": plain}) == (1, "2", "f32", False, 8 * 16 * 6 * 2 * 4, 4, 6)
    assert form({"opcode": "convolution", "hlo": depthwise}) == (2, "3x3", "f32", True, 64 * 4 * 9, 1, 4)
    assert form({"opcode": "dot", "hlo": plain}) is None
    gradient = plain.replace("f32[2,4,6]", "f32[16,4,6]").replace("f32[8,16,6]", "f32[8,1,6]") \
        .replace("size=2 pad=1_0 rhs_dilate=2", "size=16")
    assert form({"opcode": "convolution", "hlo": gradient}) == (1, "whole", "f32", False,
                                                              8 * 6 * 16 * 4, 4, 6)
    # a dilated convolution's filter gradient: 12 of 16 inputs, strided by 4, 2 taps out
    strided = plain.replace("f32[2,4,6]", "f32[12,4,6]").replace("f32[8,16,6]", "f32[8,2,6]") \
        .replace("size=2 pad=1_0 rhs_dilate=2", "size=12 stride=4")
    assert form({"opcode": "convolution", "hlo": strided}) == (1, "whole, strided", "f32", False,
                                                             8 * 2 * 6 * 12 * 4, 4, 6)


def test_measure_drift_divides_out_a_machine_wide_slowdown():
    """benchmarks/bench_measure_drift.py: a slowdown every kernel of a round
    shares is divided out by the round's median; windows then agree."""
    import numpy as np

    sys.path.insert(0, str(EX.parent / "benchmarks"))
    import bench_measure_drift as drift

    rng = np.random.default_rng(0)
    rounds, kernels = 120, 8
    own = np.log(rng.uniform(1e3, 1e6, kernels))                 # each kernel's own time
    machine = np.log(rng.uniform(1.0, 2.0, rounds))[:, None]     # the round's slowdown
    logs = own + machine
    logs[0] = own                                                # one undisturbed round
    raw = drift.pairwise(drift.fastest_in_windows(logs, 30))
    assert raw.size == 6 * kernels and np.median(raw) > 0
    normed, round_factor, _ = drift.divided_by_round(logs)
    assert np.allclose(round_factor, np.r_[0.0, machine[1:, 0]])      # round 0 undisturbed
    assert np.allclose(drift.pairwise(drift.fastest_in_windows(normed, 30)), 0, atol=1e-9)


def test_bench_calibrate_refuses_bad_inputs_before_timing(tmp_path):
    """benchmarks/bench_calibrate.py: a corpus without a manifest or a model
    that is not one fails at once with one line (no traceback), before the
    minutes of timing the test kernels."""
    import subprocess

    script = str(EX.parent / "benchmarks" / "bench_calibrate.py")
    (tmp_path / "graphs").mkdir()
    not_a_model = tmp_path / "m.pt"
    not_a_model.write_text("not a model")
    for argv, said in ((["--corpus", str(tmp_path / "graphs")], "no readable manifest.json"),
                       (["--model", str(tmp_path / "none.pt")], "none.pt: No such file"),
                       (["--scratch-model", str(not_a_model)], "not a tpuperf model file")):
        p = subprocess.run([sys.executable, script, "--budget", "5s", *argv],
                           capture_output=True, text=True, timeout=120)
        assert p.returncode == 1, p.stderr
        assert said in p.stderr and "Traceback" not in p.stderr
        assert "test set:" not in p.stdout


def test_compare_folds_scores_each_fold_model_on_its_fold(tmp_path):
    """benchmarks/compare_folds.py: model i on fold i's validation programs,
    the programs pooled over folds, and one line per family; a candidate
    with a model too few is refused in one line."""
    import subprocess

    script = str(EX.parent / "benchmarks" / "compare_folds.py")
    model = str(EX.parent / "tpuperf_cli" / "data" / "default.pt")
    for i, valid in enumerate((["mlp_s_train", "mlp_m_train"], ["vit_s_train"])):
        (tmp_path / f"fold{i}.json").write_text(json.dumps(
            {"train": ["cnn_s_train"], "valid": valid, "test": ["gpt_s_train"]}))
    folds = ["--folds", str(tmp_path / "fold{}.json")]
    p = subprocess.run([sys.executable, script, *folds, f"a={model},{model}", f"b={model},{model}",
                        "--lightgbm", "--join", "a+b", "--join", "a+lightgbm", "--breakdown", "a+b",
                        "--breakdown", "a"],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr
    assert "2 folds" in p.stdout and "3 validation programs of 2 families" in p.stdout
    assert "+0.0 (0/2 won)" in p.stdout
    assert re.search(r"^worst program: a: \w+ [\d.]+% \([0-3] of 3 above 50%\)$", p.stdout, re.M)
    # the trees, fitted on one training program a fold, are another candidate
    assert re.search(r"^  lightgbm .* \([0-2]/2 won\)$", p.stdout, re.M)
    assert "fitting on" in p.stderr
    # a and b are one model: joined, they score as a; a and the trees are another candidate
    assert re.search(r"^  a\+b .* \+0\.0 \(0/2 won\)$", p.stdout, re.M)
    assert re.search(r"^  a\+lightgbm .* \([0-2]/2 won\)$", p.stdout, re.M)
    assert re.search(r"^  mlp(\s+[\d.]+%){5}$", p.stdout, re.M)    # a, b, lightgbm and the two joined
    assert re.search(r"^  vit\s+[\d.]+%", p.stdout, re.M)
    # where the joined candidate's error is, over both folds' validation kernels
    sys.path.insert(0, str(EX.parent / "benchmarks"))
    import bench_accuracy
    n = len(bench_accuracy.load(str(EX / "corpus" / "graphs"),
                                ["mlp_s_train", "mlp_m_train", "vit_s_train"]))
    assert f"where a+b's error is, over the 2 folds' {n} validation kernels" in p.stdout
    # a join's spread is its candidates': one model twice, every kernel in the first band
    big = sum(r["runtime_ns"] >= 5000 for r in bench_accuracy.load(
        str(EX / "corpus" / "graphs"), ["mlp_s_train", "mlp_m_train", "vit_s_train"]))
    assert re.search(rf"^  0 to 0.05\s+{big}\s+[\d.]+%", p.stdout, re.M)
    assert p.stdout.count("by the members' spread") == 1     # a+b's; a is one network
    # the tail of whole-program error: a and a+b are one model
    tails = dict(re.findall(r"^program error's tail: (\S+): (.*)$", p.stdout, re.M))
    assert tails["a"] == tails["a+b"]
    assert re.fullmatch(r"mean [\d.]+%, 90th percentile [\d.]+%, [0-3] of 3 above 25%", tails["a"])
    import compare_folds
    tail = compare_folds.program_error_tail(
        [{"total_ape": x} for x in (1.0, 2.0, 3.0, 30.0, 90.0, float("nan"))])
    assert tail["mean"] == 25.2 and tail["above_25"] == 2
    assert tail["p90"] == pytest.approx(66.0)       # numpy's linear interpolation of 30 and 90
    # the paired bootstrap: b is a, so every draw differs by nothing
    assert ("  b: MAPE +0.0 to +0.0 points, tau +0.000 to +0.000, prog.err +0.0 to +0.0 points"
            in p.stdout.splitlines())
    ref = [{"program": f"p{i}", "mape": 10.0 + i, "tau": 0.8, "total_ape": 5.0 + i} for i in range(40)]
    better = [dict(r, mape=r["mape"] - 2, total_ape=r["total_ape"] + 1 - 2 * (i % 2)) for i, r in enumerate(ref)]
    ci = compare_folds.paired_bootstrap(better, ref, 500)
    assert ci["mape"] == pytest.approx((-2.0, -2.0)) and ci["tau"] == (0.0, 0.0)
    assert ci["total_ape"][0] < 0 < ci["total_ape"][1]      # as often worse as better: 0 inside
    with pytest.raises(ValueError, match="different programs"):
        compare_folds.paired_bootstrap(better[1:], ref[:-1], 10)
    assert "by what a kLoop fusion holds:" in p.stdout
    assert p.stdout.count("by the shape of its dot or convolution:") == 2   # a+b's, then a's
    assert f"where a's error is, over the 2 folds' {n} validation kernels" in p.stdout
    assert re.search(r"^  dot, every dim > 64\s+\d+\s+[\d.]+%", p.stdout, re.M)
    assert re.search(r"^  reduce\s+\d+\s+[\d.]+%\s+[\d.]+%", p.stdout, re.M)
    p = subprocess.run([sys.executable, script, *folds, f"a={model},{model}", "--breakdown", "c"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "--breakdown 'c': not a candidate (a)" in p.stderr
    p = subprocess.run([sys.executable, script, *folds, f"a={model},{model}", "--against", "a+c"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "--against 'a+c': not a candidate (a)" in p.stderr
    p = subprocess.run([sys.executable, script, *folds, f"a={model},{model}", "--breakdown", "a",
                        "--json"], capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "leave out --json" in p.stderr
    p = subprocess.run([sys.executable, script, *folds, f"a={model}"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "1 model(s) for 2 folds" in p.stderr
    assert "Traceback" not in p.stderr
    p = subprocess.run([sys.executable, script, *folds], capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and "or --lightgbm" in p.stderr
    p = subprocess.run([sys.executable, script, *folds, f"a={model},{model}", "--join", "a+c"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "--join 'a+c': needs A+B (or A+B+C...), two or more of the " \
        "candidates (a)" in p.stderr
    p = subprocess.run([sys.executable, script, *folds, f"a={model},{model}", "--join", "a+a"],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 1 and "two or more of the candidates" in p.stderr


def test_bench_calibrate_labels_a_kernel_timed_three_times_by_the_median():
    """benchmarks/bench_calibrate.py: a test kernel's label is the geometric
    mean of its two timings, or, timed a third time (two timings far apart),
    the median of the three, so that one timing far off does not move it."""
    import importlib.util

    import numpy as np

    spec = importlib.util.spec_from_file_location(
        "bench_calibrate", EX.parent / "benchmarks" / "bench_calibrate.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    first, second = np.array([100.0, 100.0, 100.0]), np.array([121.0, 400.0, 400.0])
    truth = bench.timing_labels(first, second, {1: 110.0})
    assert truth[0] == pytest.approx(110.0)          # sqrt(100 * 121)
    assert truth[1] == pytest.approx(110.0)          # median of 100, 400, 110
    assert truth[2] == pytest.approx(200.0)          # no third timing: sqrt(100 * 400)
    assert 400.0 / 100.0 > bench.THIRD_TIMING > 121.0 / 100.0
