"""tpuperf split: split files of programs, and tile records by configuration or kernel."""

import json

import pytest
from click.testing import CliRunner

from tpuperf_cli.commands.baseline import cli as baseline_cli
from tpuperf_cli.commands.split import cli
from tpuperf_cli.errors import TpuperfError
from tpuperf_cli.records import new_record
from tpuperf_cli.split import assign_records, family_folds, load_split, split_units
from tpuperf_cli.stream import RecordWriter, read_records

NAMES = [f"{fam}_{size}_train" for fam in ("gpt", "mlp", "cnn", "vit", "gru") for size in "sml"]


def write(path, records):
    with RecordWriter(str(path)) as w:
        for r in records:
            w.write(r)
    return str(path)


def test_random_split_is_repeatable_and_complete():
    a = split_units(NAMES, valid=0.2, test=0.2, seed=0)
    assert a == split_units(NAMES, valid=0.2, test=0.2, seed=0)
    assert (len(a["train"]), len(a["valid"]), len(a["test"])) == (9, 3, 3)
    assert sorted(a["train"] + a["valid"] + a["test"]) == sorted(NAMES)
    assert a != split_units(NAMES, valid=0.2, test=0.2, seed=1)


def test_family_split_keeps_families_whole():
    for seed in range(5):
        s = split_units(NAMES, valid=0.2, test=0.2, seed=seed, family=r"^([a-z]+)_")
        for which in s:
            families = {n.split("_")[0] for n in s[which]}
            assert len(s[which]) == 3 * len(families)   # every member of each family
        assert len(s["test"]) == 3 and len(s["valid"]) == 3


def test_named_test_programs():
    s = split_units(NAMES, valid=0.0, test=0.0, test_names=["gpt_*", "vit_l_train"])
    assert s["test"] == ["gpt_l_train", "gpt_m_train", "gpt_s_train", "vit_l_train"]
    assert s["valid"] == [] and len(s["train"]) == 11
    with pytest.raises(TpuperfError, match="'xyz' matches no program"):
        split_units(NAMES, test_names=["xyz"])


def shards(tmp_path):
    paths = []
    for name in NAMES:
        paths.append(write(tmp_path / f"{name}.zst",
                           [new_record("graph", program=name, kernel=f"k{i}", runtime_ns=1000.0)
                            for i in range(2)]))
    return paths


def test_programs_command_writes_a_split_file(tmp_path):
    shards(tmp_path)
    out = tmp_path / "split.json"
    r = CliRunner().invoke(cli, ["programs", str(tmp_path / "*.zst"), "--family", "^[a-z]+",
                                 "--test", "0.2", "--valid", "0", "-o", str(out)])
    assert r.exit_code == 0, r.output
    s = json.loads(out.read_text())
    assert len(s["test"]) == 3 and s["valid"] == [] and len(s["train"]) == 12
    assert "12 train, 0 valid, 3 test programs of 15" in r.stderr
    r = CliRunner().invoke(cli, ["programs", str(tmp_path / "gpt_s_train.zst"), "--test", "gpt*",
                                 "--valid", "0"])
    assert json.loads(r.stdout) == {"train": [], "valid": [], "test": ["gpt_s_train"]}
    assert "warning: no training programs" in r.stderr
    r = CliRunner().invoke(cli, ["programs", str(tmp_path / "none*.zst")])
    assert r.exit_code == 1 and "no file matches" in str(r.exception)


def test_baseline_fit_reads_the_training_programs_of_a_split(tmp_path):
    import numpy as np

    recs = []
    for name, scale in (("fast", 1.0), ("slow", 100.0)):
        for i in range(8):
            flops = 1e6 * (i + 1)
            recs.append(new_record("graph", program=name, kernel=f"k{i}", opcode="fusion",
                                   fusion_kind="kLoop",
                                   kernel_feat=np.array([flops, 0, flops, flops, flops], np.float32),
                                   runtime_ns=scale * flops / 1e3))
    shard = write(tmp_path / "all.zst", recs)
    split = tmp_path / "split.json"
    split.write_text(json.dumps({"train": ["fast"], "test": ["slow"]}))
    r = CliRunner().invoke(baseline_cli, ["fit", "--split", str(split), "-q", shard])
    assert r.exit_code == 0, r.output
    fitted = json.loads(r.stdout)
    assert fitted["kernels"] == 8 and r.stderr == ""


def tile_records():
    recs = []
    for kernel, n in (("a", 10), ("b", 6), ("c", 1)):
        for c in range(n):
            recs.append(new_record("graph", program="p", kernel=kernel, config_index=c,
                                   is_default=(c == 2), runtime_ns=100.0 + c))
    return recs


def test_split_by_config_puts_every_kernel_everywhere_and_xla_choice_in_test():
    recs = tile_records()
    where = assign_records([("p", r["kernel"]) for r in recs], [r["is_default"] for r in recs],
                           by="config", valid=0.2, test=0.4, seed=0)
    by = {}
    for r, w in zip(recs, where):
        by.setdefault((r["kernel"], w), []).append(r)
        if r["is_default"]:
            assert w == "test"
    assert (len(by["a", "train"]), len(by["a", "valid"]), len(by["a", "test"])) == (4, 2, 4)
    assert ("b", "train") in by and ("b", "test") in by
    assert [w for r, w in zip(recs, where) if r["kernel"] == "c"] == ["train"]


def test_split_by_kernel_keeps_kernels_whole():
    recs = tile_records()
    where = assign_records([("p", r["kernel"]) for r in recs], [False] * len(recs),
                           by="kernel", test=0.34, seed=3)
    sets = {}
    for r, w in zip(recs, where):
        sets.setdefault(r["kernel"], set()).add(w)
    assert all(len(s) == 1 for s in sets.values())
    assert sum(s == {"test"} for s in sets.values()) == 1


def test_records_command_writes_one_file_per_set(tmp_path):
    src = write(tmp_path / "tile.msgpack", tile_records())
    template = str(tmp_path / "tile-{}.zst")
    r = CliRunner().invoke(cli, ["records", "--test", "0.5", src, "-o", template])
    assert r.exit_code == 0, r.output
    train = list(read_records(template.replace("{}", "train")))
    test = list(read_records(template.replace("{}", "test")))
    assert len(train) + len(test) == 17
    assert not (tmp_path / "tile-valid.zst").exists()
    assert {(r["kernel"], r["config_index"]) for r in train}.isdisjoint(
        {(r["kernel"], r["config_index"]) for r in test})
    assert "train.zst: " in r.stderr and "records of 3 kernels" in r.stderr
    # the same from stdin
    r2 = CliRunner().invoke(cli, ["records", "--test", "0.5", "-q", "-o",
                                  str(tmp_path / "s-{}.msgpack")],
                            input=open(src, "rb").read())
    assert r2.exit_code == 0 and r2.stderr == ""
    assert [x["config_index"] for x in read_records(str(tmp_path / "s-test.msgpack"))] == \
        [x["config_index"] for x in test]
    r = CliRunner().invoke(cli, ["records", src, "-o", "no-template.msgpack"])
    assert r.exit_code == 2 and "needs one {}" in r.output


def test_split_lists_take_patterns_for_generated_programs():
    from tpuperf_cli.split import ProgramSet, records_of

    train = ProgramSet(["cnn_s_train", "ops:*", "fusions:cnn_*"])
    assert "cnn_s_train" in train and "ops:dot" in train and "fusions:cnn_m_train" in train
    assert "fusions:gpt_s_train" not in train and "cnn_m_train" not in train
    recs = [{"program": p} for p in ("ops:fft", "gpt_s_train", "cnn_s_train")]
    assert [r["program"] for r in records_of(recs, train)] == ["ops:fft", "cnn_s_train"]
    assert not ProgramSet([]) and len(train) == 3


def test_training_records_leave_out_kernels_drawn_from_held_out_programs(tmp_path):
    from tpuperf_cli.split import training_records

    split = tmp_path / "s.json"
    split.write_text(json.dumps({"train": ["cnn_s_train", "fusions:*", "ops:*"],
                                 "valid": ["vit_s_train"], "test": ["gru_s_train"]}))
    recs = [{"program": "cnn_s_train"}, {"program": "vit_s_train"},
            {"program": "fusions:cnn_s_train", "origin": "cnn_s_train"},
            {"program": "fusions:vit_s_train", "origin": "vit_s_train"},
            {"program": "fusions:gru_s_train", "origin": "gru_s_train"}, {"program": "ops:dot"}]
    kept = [r["program"] for r in training_records(recs, str(split))]
    assert kept == ["cnn_s_train", "fusions:cnn_s_train", "ops:dot"]


FOLD_SPLIT = {"train": [n for n in NAMES if not n.startswith(("gru", "vit"))] + ["ops:*"],
              "valid": [n for n in NAMES if n.startswith("vit")],
              "test": [n for n in NAMES if n.startswith("gru")]}


def test_family_folds_validate_each_family_once_and_keep_the_test_out():
    folds = family_folds(FOLD_SPLIT, 2, seed=0)
    assert len(folds) == 2
    valid = [n for f in folds for n in f["valid"]]
    # every train-or-valid program is validated on once, in the fold of its family
    assert sorted(valid) == sorted(n for n in NAMES if not n.startswith("gru"))
    for f in folds:
        assert f["test"] == sorted(FOLD_SPLIT["test"])
        assert "ops:*" in f["train"] and not set(f["train"]) & set(f["valid"])
        assert not {n.split("_")[0] for n in f["train"]} & {n.split("_")[0] for n in f["valid"]}
        assert sorted(f["train"] + f["valid"]) == sorted(FOLD_SPLIT["train"] + FOLD_SPLIT["valid"])
        assert len(f["valid"]) == 6   # four families of 3 programs: two a fold
    assert family_folds(FOLD_SPLIT, 2, seed=0) == folds
    with pytest.raises(TpuperfError, match="--folds 5: needs 2 to 4"):
        family_folds(FOLD_SPLIT, 5)


def test_folds_command_writes_one_split_file_a_fold(tmp_path):
    base = tmp_path / "split.json"
    base.write_text(json.dumps(FOLD_SPLIT))
    out = str(tmp_path / "fold{}.json")
    r = CliRunner().invoke(cli, ["folds", str(base), "--folds", "4", "-o", out])
    assert r.exit_code == 0, r.output
    folds = [json.loads((tmp_path / f"fold{i}.json").read_text()) for i in range(4)]
    assert folds == family_folds(FOLD_SPLIT, 4)
    assert "fold3.json: valid 3 programs of 1 families" in r.stderr
    r = CliRunner().invoke(cli, ["folds", str(base), "-o", str(tmp_path / "f.json")])
    assert r.exit_code == 2 and "needs one {}" in r.output
    r = CliRunner().invoke(cli, ["folds", str(base), "--folds", "9", "-o", out])
    assert r.exit_code != 0 and "--folds 9: needs 2 to 4" in str(r.exception)
    base.write_text("{")
    r = CliRunner().invoke(cli, ["folds", str(base), "-o", out])
    assert r.exit_code == 1 and "not JSON" in str(r.exception)


def test_committed_fold_files_are_what_split_folds_writes():
    """examples/splits/folds/: the manual split's family folds and the
    random split's program folds, as the README's commands make them (a
    split file edited since would leave its folds stale)."""
    from pathlib import Path

    splits = Path(__file__).resolve().parents[1] / "examples" / "splits"
    for name, family in (("manual", r"^[a-z]+"), ("random", r"^.*$")):
        folds = family_folds(load_split(str(splits / f"{name}.json")), 4, seed=0, family=family)
        committed = [json.loads((splits / "folds" / f"{name}-fold{i}.json").read_text()) for i in range(4)]
        assert committed == folds, name
