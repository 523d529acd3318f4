"""One option vocabulary for every tool, binary output kept off terminals, and
hints for input given to the wrong tool."""

import os
import pathlib
import pty
import subprocess
import sys

import click
import pytest

from tpuperf_cli.cli import COMMANDS, _available, load_command
from tpuperf_cli.commands.options import resolve_model
from tpuperf_cli.model import default_model_path

ROOT = pathlib.Path(__file__).resolve().parent.parent
HLO = ROOT / "examples" / "hlo" / "mlp_s_train.hlo.zst"
KERNELS = ROOT / "examples" / "corpus" / "kernels" / "mlp_s_train.zst"
GRAPHS = ROOT / "examples" / "corpus" / "graphs" / "mlp_s_train.zst"
TILE = ROOT / "examples" / "tile" / "tpu_tile_sample.json"


def all_commands():
    """(name, click command) of every tool and subcommand."""
    out = []
    for name in COMMANDS:
        if not _available(name):
            continue
        command = load_command(name)
        if isinstance(command, click.Group):
            out += [(f"{name} {sub}", command.get_command(None, sub))
                    for sub in command.list_commands(None)]
        else:
            out.append((name, command))
    return out


def visible_opts(param):
    hidden = getattr(param, "hidden_aliases", set())
    return [o for o in param.opts + param.secondary_opts if o not in hidden]


@pytest.mark.parametrize("name,command", all_commands(), ids=[n for n, _ in all_commands()])
def test_one_spelling_per_meaning(name, command):
    for param in command.params:
        if not isinstance(param, click.Option):
            continue
        opts = visible_opts(param)
        for long, short in (("--output", "-o"), ("--quiet", "-q"), ("--model", "-m"),
                            ("--format", "-f"), ("--baseline", "-b")):
            if long in opts:
                assert short in opts, f"{name}: {long} without {short}"
            if short in opts:
                assert long in opts, f"{name}: {short} is not {long}"
        assert "--out" not in opts, f"{name}: --out is spelled --output"


# every tool that writes a file names it with -o; every tool that talks on
# stderr beyond errors has -q
WRITERS = ["hlo-split", "featurize", "measure", "predict", "score", "train", "eval",
           "baseline fit", "baseline apply", "import tuning-json", "import tpugraphs", "select",
           "split programs", "split records", "split folds"]
TALKERS = ["hlo-split", "featurize", "measure", "predict", "train", "eval", "baseline fit",
           "import tuning-json", "import tpugraphs", "select", "split programs", "split records",
           "split folds"]


def test_writers_have_output_and_talkers_quiet():
    commands = dict(all_commands())
    for name in WRITERS:
        assert any(p.name == "output" for p in commands[name].params), name
    for name in TALKERS:
        assert any(p.name == "quiet" for p in commands[name].params), name


@pytest.mark.parametrize("name,args,param,value", [
    ("train", ["--out", "m.pt"], "output", "m.pt"),
    ("train", ["-v", "v.zst", "-o", "m.pt"], "valid", ("v.zst",)),
    ("baseline fit", ["--out", "b.json"], "output", "b.json"),
    ("predict", ["-b", "8"], "batch_size", 8),
])
def test_old_spellings_still_parse_but_are_not_shown(name, args, param, value):
    command = dict(all_commands())[name]
    ctx = command.make_context(name, list(args), resilient_parsing=True)
    assert ctx.params[param] == value
    help_text = command.get_help(ctx)
    old = args[0]
    assert f"{old}, " not in help_text and f", {old} " not in help_text


def test_model_default_names_the_bundled_model(tmp_path, monkeypatch):
    assert resolve_model("default") == default_model_path()
    assert resolve_model("m.pt") == "m.pt"
    from tpuperf_cli.commands.eval import _split_model

    # `default` is the default model, chosen for the records' target when loaded
    assert _split_model("default") == ("default", None)
    assert _split_model("mine=default") == ("mine", None)
    assert _split_model("bundled") == ("bundled", default_model_path())
    monkeypatch.chdir(tmp_path)
    (tmp_path / "default").write_bytes(b"")   # a file of that name wins
    assert resolve_model("default") == "default"


# ---------------------------------------------------------------- terminals

def run_on_terminal(args, stdin=None):
    """Run a tool with stdout on a pseudo-terminal; (exit status, stderr,
    bytes that reached the terminal)."""
    master, slave = pty.openpty()
    try:
        p = subprocess.run([sys.executable, "-m", "tpuperf_cli", *args], stdout=slave,
                           stdin=stdin if stdin is not None else subprocess.DEVNULL,
                           stderr=subprocess.PIPE, timeout=120, cwd=ROOT)
        os.close(slave)
        slave = None
        seen = b""
        try:
            while True:
                chunk = os.read(master, 4096)
                if not chunk:
                    break
                seen += chunk
        except OSError:
            pass
        return p.returncode, p.stderr.decode(), seen
    finally:
        if slave is not None:
            os.close(slave)
        os.close(master)


@pytest.mark.parametrize("args,pipe", [
    (["hlo-split", str(HLO)], "featurize"),
    (["featurize", str(KERNELS)], "predict"),
    (["measure", "--backend", "cpu", str(KERNELS)], "predict"),
    (["predict", str(GRAPHS)], "score"),
    (["select", str(GRAPHS)], "tpuperf eval"),
    (["import", "tuning-json", str(TILE)], "featurize"),
    (["score", "-f", "msgpack", str(GRAPHS)], None),
], ids=lambda a: a[0] if isinstance(a, list) else None)
def test_binary_records_are_refused_on_a_terminal(args, pipe):
    code, err, seen = run_on_terminal(args)
    assert code == 2, err
    assert "not writing binary msgpack records to a terminal" in err and "-o FILE" in err
    if pipe:
        assert f"| {pipe}" in err
    else:
        assert "--format table or json" in err
    assert "Traceback" not in err and seen == b""


def test_baseline_apply_refuses_a_terminal_too(tmp_path):
    fitted = tmp_path / "b.json"
    p = subprocess.run([sys.executable, "-m", "tpuperf_cli", "baseline", "fit", "-q", "-o",
                        str(fitted), str(GRAPHS)], capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    code, err, seen = run_on_terminal(["baseline", "apply", "-b", str(fitted), str(GRAPHS)])
    assert code == 2 and "| tpuperf eval" in err and seen == b""


def test_score_on_a_terminal_prints_its_table(tmp_path):
    from tpuperf_cli.records import new_record
    from tpuperf_cli.stream import RecordWriter

    path = tmp_path / "pred.msgpack"
    with RecordWriter(str(path)) as w:
        w.write(new_record("graph", program="p", kernel="k", pred_ns=2000.0, count=1))
    code, err, seen = run_on_terminal(["score", str(path)])
    assert code == 0, err
    assert b"program" in seen and b"2 us" in seen


# ---------------------------------------------------------------- hints

def tool(args, stdin_path=None):
    with open(stdin_path, "rb") if stdin_path else open(os.devnull, "rb") as f:
        return subprocess.run([sys.executable, "-m", "tpuperf_cli", *args], stdin=f,
                              capture_output=True, timeout=120)


def test_hlo_text_piped_into_a_record_reader_names_hlo_split():
    for name in ("featurize", "score"):
        p = tool([name], HLO)
        err = p.stderr.decode()
        assert p.returncode != 0
        assert "<stdin>: this is HLO text, not a msgpack record stream" in err
        assert "hlo-split prog.hlo | featurize" in err and "Traceback" not in err


def test_json_and_records_given_to_the_wrong_tool():
    p = tool(["featurize", str(TILE)])
    assert "this is JSON" in p.stderr.decode() and "import tuning-json" in p.stderr.decode()
    p = tool(["hlo-split", str(KERNELS)])
    assert p.returncode == 2
    assert "this is a msgpack record stream, not HLO text" in p.stderr.decode()
    p = tool(["hlo-split", str(TILE)])
    assert p.returncode == 2 and "import tuning-json" in p.stderr.decode()


def test_the_default_model_note_names_the_machine_its_labels_are_from(capsys):
    """A user reads off the note whether the chosen model describes their
    machine: the chip, and on a CPU its family and model."""
    from types import SimpleNamespace

    from tpuperf_cli.commands.options import note_model, trained_on

    cpu = {"platform": "cpu", "chip": "AMD EPYC", "cpu": {"family": "25", "model": "1"}}
    assert trained_on(cpu) == "AMD EPYC, family 25 model 1"
    assert trained_on({"platform": "gpu", "chip": "NVIDIA H200"}) == "NVIDIA H200"
    intel = {"chip": "Intel(R) Xeon(R) Processor", "cpu": {"family": "6", "model": "207"}}
    assert trained_on(intel) == "Intel Xeon, family 6 model 207"
    assert trained_on(None) == "" and trained_on({"chip": ""}) == ""
    note_model("predict", SimpleNamespace(name="m", path="m.pt", chosen="the bundled model",
                                          target=cpu))
    assert capsys.readouterr().err == ("predict: model m (m.pt): the bundled model; its labels "
                                       "are from AMD EPYC, family 25 model 1\n")
    note_model("predict", SimpleNamespace(name="m", path="m.pt", chosen="", target=cpu))
    assert capsys.readouterr().err == ""
