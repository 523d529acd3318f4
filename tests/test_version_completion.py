"""--version on every tool, and click's shell completion through the same
entry points pyproject installs."""

import os
import pathlib
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tpuperf_cli import __version__
from tpuperf_cli.cli import COMMANDS, STANDALONE, _available, load_command

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _entry(name, args=(), env=None):
    """Run an installed entry point (tpuperf_cli.cli.<name>_main) as its program."""
    func = "main" if name == "tpuperf" else name.replace("-", "_") + "_main"
    code = f"import sys; sys.argv[0] = {name!r}; from tpuperf_cli.cli import {func}; {func}()"
    full_env = {**os.environ, **(env or {})}
    full_env["PYTHONPATH"] = str(ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                          env=full_env)


def test_standalone_tools_are_the_pyproject_scripts():
    text = (ROOT / "pyproject.toml").read_text()
    for name in STANDALONE:
        assert f'{name} = "tpuperf_cli.cli:{name.replace("-", "_")}_main"' in text


@pytest.mark.parametrize("name", STANDALONE)
def test_every_standalone_tool_has_version(name):
    result = _entry(name, ["--version"])
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"{name}, version {__version__}"


@pytest.mark.parametrize("name", [n for n in COMMANDS if _available(n)])
def test_every_subcommand_has_version(name):
    result = CliRunner().invoke(load_command(name), ["--version"])
    assert result.exit_code == 0
    prog = name if name in STANDALONE else f"tpuperf {name}"
    assert result.output.strip() == f"{prog}, version {__version__}"


def test_bash_completion_of_a_standalone_tool():
    script = _entry("hlo-split", env={"_HLO_SPLIT_COMPLETE": "bash_source"})
    assert script.returncode == 0
    assert "_hlo_split_completion()" in script.stdout and "complete " in script.stdout
    options = _entry("hlo-split", env={"_HLO_SPLIT_COMPLETE": "bash_complete",
                                       "COMP_WORDS": "hlo-split --mod", "COMP_CWORD": "1"})
    assert options.stdout.split() == ["plain,--module"]
    choices = _entry("hlo-split", env={"_HLO_SPLIT_COMPLETE": "bash_complete",
                                       "COMP_WORDS": "hlo-split --compile ", "COMP_CWORD": "2"})
    assert choices.stdout.split() == ["plain,cpu", "plain,gpu", "plain,tpu"]


def test_completion_of_tpuperf_subcommands():
    words = _entry("tpuperf", env={"_TPUPERF_COMPLETE": "bash_complete",
                                   "COMP_WORDS": "tpuperf com", "COMP_CWORD": "1"})
    assert words.stdout.split() == ["plain,compare"]
    zsh = _entry("tpuperf", env={"_TPUPERF_COMPLETE": "zsh_source"})
    assert "#compdef tpuperf" in zsh.stdout


def test_man_pages_and_readme_say_how_to_turn_completion_on():
    for page in ["hlo-split", "featurize", "measure", "predict", "score", "tpuperf"]:
        text = (ROOT / "man" / "man1" / f"{page}.1").read_text().replace("\\-", "-")
        var = "_" + page.replace("-", "_").upper() + "_COMPLETE"
        assert ".SH SHELL COMPLETION" in text and f"{var}=bash_source {page}" in text
    readme = (ROOT / "README.md").read_text()
    assert "_HLO_SPLIT_COMPLETE=bash_source hlo-split" in readme
