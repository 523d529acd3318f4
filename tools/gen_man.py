#!/usr/bin/env python3
"""Write man/man1/*.1 from the click commands, so the man pages say what --help says.

    python tools/gen_man.py          # rewrite man/man1/
    python tools/gen_man.py --check  # exit 1 if man/man1/ is out of date (a test runs this)

man/ is a man directory (MANPATH="$PWD/man:" man tpuperf). A `\b` block
of a docstring that starts with "Examples:" goes to the EXAMPLES section.
"""

import argparse
import inspect
import pathlib
import sys

import click

from tpuperf_cli import __version__
from tpuperf_cli.cli import COMMANDS, STANDALONE, _available, load_command, tpuperf

MAN_DIR = pathlib.Path(__file__).resolve().parent.parent / "man" / "man1"
# Tools installed as their own programs (STANDALONE) keep their bare name;
# the rest are `tpuperf NAME`, paged as tpuperf-NAME(1).


def page_name(command_name):
    return command_name if command_name in STANDALONE else f"tpuperf-{command_name}"


def esc(text):
    """Escape text for roff: backslashes, and leading dots/quotes."""
    text = text.replace("\\", "\\e").replace("-", "\\-")
    lines = []
    for line in text.split("\n"):
        if line.startswith((".", "'")):
            line = "\\&" + line
        lines.append(line)
    return "\n".join(lines)


def is_examples(block):
    lines = block.lstrip("\b").strip("\n").splitlines()
    return block.startswith("\b") and lines and lines[0].strip() in ("Examples:", "Example:")


def examples(text):
    """The example lines of a docstring's "Examples:" blocks."""
    out = []
    for block in inspect.cleandoc(text or "").split("\n\n"):
        if is_examples(block):
            out += inspect.cleandoc("\n".join(block.strip("\b\n").splitlines()[1:])).splitlines()
    return out


def paragraphs(text):
    """Docstring text to roff: blank lines split paragraphs, `\\b` keeps a
    block verbatim (click's own marker for no rewrapping). Examples blocks
    are left out (they go to EXAMPLES)."""
    out = []
    for block in inspect.cleandoc(text or "").split("\n\n"):
        block = block.strip("\n")
        if not block.strip() or is_examples(block):
            continue
        if block.startswith("\b"):
            out.append(".PP\n.nf\n.RS 2\n" + esc(block[1:].strip("\n")) + "\n.RE\n.fi")
        else:
            out.append(".PP\n" + esc(" ".join(l.strip() for l in block.splitlines())))
    return "\n".join(out)


def options_section(command, ctx):
    out = []
    for param in command.get_params(ctx):
        if isinstance(param, click.Argument):  # described in the text
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        names, help_text = record
        out.append(f".TP\n.B {esc(names)}\n{esc(help_text) if help_text else ''}")
    return "\n".join(out)


def render(command, full_name, page, ctx_parent=None):
    ctx = click.Context(command, info_name=full_name, parent=ctx_parent,
                        **command.context_settings)
    doc = inspect.cleandoc(command.help or "")
    summary = doc.split("\n")[0].rstrip(".")
    rest = doc.split("\n", 1)[1] if "\n" in doc else ""
    usage = " ".join(command.collect_usage_pieces(ctx))
    example_lines = examples(command.help)
    parts = [
        f'.TH {page.upper()} 1 "" "tpuperf {__version__}" "tpuperf manual"',
        ".SH NAME",
        f"{esc(page)} \\- {esc(summary)}",
        ".SH SYNOPSIS",
        f".B {esc(full_name)}\n{esc(usage)}",
        ".SH DESCRIPTION",
        paragraphs(rest) or ".PP\n" + esc(summary),
        ".SH OPTIONS",
        options_section(command, ctx),
    ]
    if command is tpuperf:
        parts.append(".SH COMMANDS")
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            parts.append(f".TP\n.B {esc(name)}\n{esc(sub.get_short_help_str(80))} "
                         f"See \\fB{esc(page_name(name))}\\fR(1).")
    elif isinstance(command, click.Group):
        parts.append(".SH COMMANDS")
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            sub_ctx = click.Context(sub, info_name=f"{full_name} {name}", parent=ctx,
                                    **sub.context_settings)
            sub_usage = " ".join(sub.collect_usage_pieces(sub_ctx))
            parts.append(f".SS {esc(full_name)} {esc(name)} {esc(sub_usage)}")
            parts.append(paragraphs(sub.help or ""))
            opts = options_section(sub, sub_ctx)
            if opts:
                parts.append(".PP\nOptions:\n" + opts)
            example_lines += [line for line in examples(sub.help) if line not in example_lines]
    if example_lines:
        parts.append(".SH EXAMPLES\n.nf\n.RS 2\n" + esc("\n".join(example_lines)) + "\n.RE\n.fi")
    parts.append(completion_section(full_name))
    parts.append(".SH EXIT STATUS\n0 on success; 1 when the input data or a run is bad; "
                 "2 for a usage error or HLO text that does not parse; 130 when interrupted.")
    others = sorted({page_name(n) for n in COMMANDS if _available(n)} | {"tpuperf"} - {page})
    parts.append(".SH SEE ALSO\n" + ",\n".join(f".BR {p} (1)" for p in others))
    return "\n".join(p for p in parts if p) + "\n"


def completion_section(full_name):
    """How to turn on click's shell completion for the program that runs
    this command (the tool itself, or tpuperf for its subcommands)."""
    program = full_name.split()[0]
    var = "_" + program.replace("-", "_").upper() + "_COMPLETE"
    lines = [".SH SHELL COMPLETION",
             "Options, choices, subcommands and file names complete in bash, zsh and fish "
             "(click's completion). Add the line for your shell to its start-up file:",
             ".PP\n.nf\n.RS 2",
             esc(f'eval "$({var}=bash_source {program})"     # ~/.bashrc'),
             esc(f'eval "$({var}=zsh_source {program})"      # ~/.zshrc'),
             esc(f"{var}=fish_source {program} > ~/.config/fish/completions/{program}.fish"),
             ".RE\n.fi"]
    if program != full_name:
        lines.append(".PP\n" + esc(f"This completes `{full_name}` as part of {program}."))
    return "\n".join(lines)


def pages():
    result = {"tpuperf.1": render(tpuperf, "tpuperf", "tpuperf")}
    for name in COMMANDS:
        if not _available(name):
            continue
        page = page_name(name)
        full = name if name in STANDALONE else f"tpuperf {name}"
        result[f"{page}.1"] = render(load_command(name), full, page)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if man/ is out of date")
    args = parser.parse_args()
    wanted = pages()
    if args.check:
        stale = [n for n, text in wanted.items()
                 if not (MAN_DIR / n).exists() or (MAN_DIR / n).read_text() != text]
        extra = [p.name for p in MAN_DIR.glob("*.1") if p.name not in wanted]
        if stale or extra:
            print("man pages out of date: " + ", ".join(stale + extra) +
                  "\nrun: python tools/gen_man.py", file=sys.stderr)
            return 1
        return 0
    MAN_DIR.mkdir(exist_ok=True)
    for p in MAN_DIR.glob("*.1"):
        if p.name not in wanted:
            p.unlink()
    for n, text in wanted.items():
        (MAN_DIR / n).write_text(text)
    print(f"wrote {len(wanted)} man pages to {MAN_DIR}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
