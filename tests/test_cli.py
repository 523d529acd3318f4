"""Behaviour every tool shares: help text, man pages, README and CI agree."""

import pathlib
import re
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from tpuperf_cli.cli import COMMANDS, _available, load_command, tpuperf

ROOT = pathlib.Path(__file__).resolve().parent.parent
AVAILABLE = [n for n in COMMANDS if _available(n)]


@pytest.mark.parametrize("name", AVAILABLE)
def test_every_command_has_help(name):
    command = load_command(name)
    assert command.help and len(command.help.strip()) > 40, f"{name} needs real help text"
    result = CliRunner().invoke(tpuperf, [name, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage:" in result.output
    commands = [command]
    if isinstance(command, click.Group):
        commands += [command.get_command(None, n) for n in command.list_commands(None)]
    for c in commands:
        for param in c.params:
            if isinstance(param, click.Option) and not param.hidden:
                assert param.help, f"{name}: option {param.opts} has no help"


def test_man_pages_are_current():
    result = subprocess.run([sys.executable, str(ROOT / "tools" / "gen_man.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("name", AVAILABLE)
def test_every_command_has_a_man_page(name):
    page = name if name in {"hlo-split", "featurize", "measure", "predict", "score"} \
        else f"tpuperf-{name}"
    text = (ROOT / "man" / "man1" / f"{page}.1").read_text()
    assert ".SH DESCRIPTION" in text and ".SH OPTIONS" in text


def readme_commands():
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```(?:sh|bash|console)?\n(.*?)```", readme, re.S)
    return [l.strip() for b in blocks[:2] for l in b.strip().splitlines()]


def test_ci_runs_the_readme_test_command():
    commands = readme_commands()
    assert len(commands) == 2, "README must open with exactly two commands"
    test_command = commands[1]
    assert "pytest" in test_command
    assert test_command in (ROOT / ".ci" / "run").read_text()


def test_unknown_command_is_a_usage_error():
    result = subprocess.run([sys.executable, "-m", "tpuperf_cli", "no-such-tool"],
                            capture_output=True, text=True)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_readme_main_job_names_files_that_exist():
    main_job = readme_commands()[0]
    paths = re.findall(r"\bexamples/\S+", main_job)
    assert paths, main_job
    for path in paths:
        assert (ROOT / path).is_file(), f"README main job names a missing file: {path}"


def test_man_finds_the_pages_through_the_readme_manpath():
    """README: `export MANPATH="$PWD/man:"` in the checkout, then `man tpuperf`."""
    import os
    import shutil

    if shutil.which("man") is None:
        pytest.skip("no man program here")
    readme = (ROOT / "README.md").read_text()
    assert 'export MANPATH="$PWD/man:"' in readme
    env = dict(os.environ, MANPATH=f"{ROOT / 'man'}:")
    for page in ("tpuperf", "tpuperf-split", "score"):
        p = subprocess.run(["man", "-w", page], capture_output=True, text=True, env=env)
        assert p.returncode == 0 and p.stdout.strip() == str(ROOT / "man" / "man1" / f"{page}.1")


@pytest.mark.parametrize("name", AVAILABLE)
def test_man_pages_have_examples(name):
    page = name if name in {"hlo-split", "featurize", "measure", "predict", "score"} \
        else f"tpuperf-{name}"
    text = (ROOT / "man" / "man1" / f"{page}.1").read_text()
    assert ".SH EXAMPLES" in text
    description = text.split(".SH DESCRIPTION", 1)[1].split(".SH OPTIONS", 1)[0]
    assert "Examples:" not in description


def test_errors_quoting_hostile_names_stay_one_line():
    # found by the fuzz suite: a program name holding a newline split the error
    from tpuperf_cli.errors import one_line
    from tpuperf_cli.records import locate

    where = locate(3, "f.msgpack", {"program": "a\nb", "kernel": "k" * 500})
    assert "\n" not in where and len(where) < 200 and "'a\\nb'" in where
    assert one_line("x\ny") == "x\\ny" and len(one_line("z" * 10_000)) < 2100
