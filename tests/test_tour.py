"""The README's tour runs as written, in a fresh directory, so it cannot rot.

The directory holds only a link to the checkout's examples/ (the tour runs
in a checkout's root); the tools come from this environment's bin/, as after
`. .venv/bin/activate`. Each code block of the tour runs in bash with -e and
pipefail, in order, in that one directory.
"""

import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


def tour_blocks():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## A tour\n", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"```(?:sh|bash|console)?\n(.*?)```", section, re.S)]


def test_tour_names_only_files_it_has():
    """The fast check: every path the tour reads is in the checkout or made
    by an earlier command of the tour, and every tool it runs exists."""
    from tpuperf_cli.cli import COMMANDS

    blocks = tour_blocks()
    assert len(blocks) >= 4
    text = "\n".join(blocks)
    assert "../" not in text and "zstd >" not in text
    for path in re.findall(r"\bexamples/[\w/.{},*-]+", text):
        if "{" in path or "*" in path:
            continue
        assert (ROOT / path).exists(), f"the tour reads {path}, which is not in the checkout"
    for used in re.findall(r"^tpuperf (\S+)", text, re.M):
        assert used in COMMANDS, f"the tour runs tpuperf {used}, which does not exist"
    made = set()
    for block in blocks:
        words = shlex.split(block, comments=True)      # quotes may span lines
        for i, w in enumerate(words):
            if w in ("-o", "--output", ">") and i + 1 < len(words):
                made.add(words[i + 1])
        for i, w in enumerate(words):
            if w in made or (i and words[i - 1] in ("-o", "--output", ">")):
                continue
            if re.fullmatch(r"[\w./-]+\.(msgpack|zst|pt|json|hlo)", w) and not (ROOT / w).exists():
                # a template's files (tile-{}.msgpack) count as made
                assert any("{}" in m and re.fullmatch(re.escape(m).replace(r"\{\}", r"\w+"), w)
                           for m in made), f"the tour reads {w} before making it"


@pytest.mark.slow
def test_tour_runs_as_written(tmp_path):
    work = tmp_path / "checkout"
    work.mkdir()
    (work / "examples").symlink_to(ROOT / "examples")
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")       # a fresh measurement cache
    env["MPLBACKEND"] = "Agg"
    for number, block in enumerate(tour_blocks(), 1):
        p = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block], cwd=work, env=env,
                           capture_output=True, timeout=600)
        assert p.returncode == 0, (f"tour block {number} failed:\n{block}\n--- stderr:\n"
                                   + p.stderr.decode()[-3000:])
    for made in ("prog.hlo", "shards/prog.zst", "split.json", "model.pt", "baseline.json",
                 "eval.png", "tile-train.msgpack", "tile-test.msgpack", "tile.pt",
                 "shortlist.msgpack", "trees.pt"):
        assert (work / made).is_file() and (work / made).stat().st_size > 0, made
