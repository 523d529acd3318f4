"""A fast parser for XLA's HLO text, into tpuperf_cli.hlo.ir.

It reads what XLA prints: `jax.jit(f).lower(...).compile().as_text()` on
CPU, GPU and TPU, `--xla_dump_to` files and hand-written modules. The grammar
follows XLA's own parser (xla/hlo/parser/hlo_parser.cc):

    module       ::= 'HloModule' name (',' attr)*  computation*  section*
    computation  ::= ['ENTRY'] name [param_list '->' shape] '{' instruction* '}'
    instruction  ::= ['ROOT'] name '=' shape opcode '(' operands ')' (',' attr)*
    operand      ::= [shape] name          (constant: a literal; parameter: N)
    attr         ::= key '=' value         (value kept as raw text)
    section      ::= ('FileNames' | 'FunctionNames' | 'FileLocations'
                      | 'StackFrames') (N text)*

Names may be printed with or without their leading `%`. Comments (`/* */`,
`//`) are allowed anywhere XLA allows them.

The design is line-oriented and regex-driven, for speed: XLA prints one
instruction per line (an instruction that spans lines is joined first).
The usual lines are read in one regex pass over the whole module (rows),
each distinct attribute text parsed once; a line the rows cannot read
whole (comments, odd spacing, a literal with parentheses, an error) goes
the careful way, which builds the same IR and says what is wrong.
Attribute values stay raw strings (`attrs["window"] == "{size=3x3}"`);
tpuperf_cli.hlo.attrs decodes the ones a tool needs. Shapes are parsed once
per distinct text and shared.

Errors are ParseError with `file:line:col: what was expected`.
"""

import re

from tpuperf_cli.errors import ParseError, read_file
from tpuperf_cli.hlo.ir import CALL_ATTRS, OPCODES, Computation, Instruction, Module, async_base
from tpuperf_cli.hlo.syntax import (
    CLOSE,
    NAME,
    RE_ARRAY,
    RE_ATTR,
    RE_PARENS,
    Unterminated,
    array_shape,
    bad_callee,
    check_signature,
    match_bracket,
    parse_shape,
    parse_shape_at,
    shape_cache,
    split_top,
    value_pos,
)

_CALL_SET = frozenset(CALL_ATTRS)
# ... of which these take a braced list (XLA's kBracedHloComputationList),
# the others exactly one name.
_LIST_CALL_ATTRS = frozenset({"branch_computations", "called_computations"})

# Sections that may follow the computations (stack-frame index).
SECTIONS = frozenset({"FileNames", "FunctionNames", "FileLocations", "StackFrames"})

_RE_INSTR = re.compile(r"[ \t]*(ROOT[ \t]+)?%?(" + NAME + r")[ \t]*=\s*")
_RE_OPCODE = re.compile(r"\s*([a-z][a-z0-9\-]*)\s*\(")
# The common case in one match: [ROOT] %name = array-shape opcode(
_RE_HEAD = re.compile(r"[ \t]*(ROOT[ \t]+)?%?(" + NAME + r")[ \t]*=[ \t]*"
                      r"([a-z][a-z0-9]*\[[^\]\n]*\](?:\{[^}\n]*\})?)[ \t]+([a-z][a-z0-9\-]*)\(")
_RE_COMP = re.compile(r"[ \t]*(ENTRY[ \t]+)?%?(" + NAME + r")[ \t]*(.*?)[ \t]*\{[ \t]*$")
_RE_HEADER = re.compile(r"[ \t]*HloModule[ \t]+%?([^\s,]+)[ \t]*(?:,[ \t]*(.*))?$")
_RE_CALLEE = re.compile(r"%?(" + NAME + r")")
_RE_CALLEE_FULL = re.compile(r"%?(" + NAME + r")\Z")
_RE_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"|/\*.*?\*/|//[^\n]*', re.S)
# Every line of a module in one C-level pass (findall, one row per line): an
# instruction as XLA prints it -- [ROOT] %name = shape opcode(%a, %b)<rest> --
# in groups (operands as %names in group 5, any other text such as a
# parameter number or a literal in group 6), or else nothing. The parser
# builds instructions from these rows and takes the careful way for a row
# it cannot use whole.
_NAME_P = r"[A-Za-z_][\w.\-]*+"       # NAME, possessive
_RE_ROWS = re.compile(
    r"^(?:[ \t]*+(?!HloModule)(ROOT[ \t]+)?%?(" + _NAME_P + r")[ \t]*=[ \t]*"
    r"([a-z][a-z0-9]*\[[^\]\n]*\](?:\{[^}\n]*\})?|\([^()\n]*\))[ \t]+([a-z][a-z0-9\-]*+)"
    r"\((?:((?:%" + _NAME_P + r"(?:, %" + _NAME_P + r")*+)?)|([^()\"\n]*+))\)(.*))?.*$", re.M | re.A)


# Attribute text after an instruction's ')' -> (attrs, called): the same
# metadata and reducers recur line after line, kernel after kernel.
_attr_cache = {}
_ATTR_CACHE_SIZE = 50000


def clear_caches() -> None:
    """Forget the shapes and attribute texts parsed so far (as in a fresh
    process; for benchmarks)."""
    shape_cache.clear()
    _attr_cache.clear()
    _good_signatures.clear()


def _called(attrs, s, attrs_at):
    """The computations an instruction's attributes name, in XLA's order
    (body before condition), or None; s[attrs_at:] is the attribute text,
    for the position in an error."""
    if _CALL_SET.isdisjoint(attrs):
        return None
    called = None
    keys = [k for k in attrs if k in _CALL_SET]
    if len(keys) > 1:
        keys.sort(key=CALL_ATTRS.index)      # XLA's order: body before condition
    for key in keys:
        v = attrs[key]
        if called is None:
            called = []
        if key in _LIST_CALL_ATTRS:
            if v[:1] != "{" or v[-1:] != "}":
                raise ValueError((value_pos(s, attrs_at, key), f"expected '{{' (a list of "
                                  f"computation names) after '{key}=', found {v[:20]!r}"))
            names = [x.strip() for x in v[1:-1].split(",")]
            if names == [""]:
                continue
        else:
            names = [v]
        for x in names:
            m = _RE_CALLEE_FULL.match(x)
            if m is None:
                raise ValueError((value_pos(s, attrs_at, key), bad_callee(key, x)))
            called.append(m.group(1))
    return called


# How a row's parentheses read, by opcode: 0 operands, 1 a parameter
# number, 2 a literal.
_ROW_KIND = dict.fromkeys(OPCODES, 0) | {"parameter": 1, "constant": 2}

# Computation signatures already checked (they recur across kernels).
_good_signatures = set()


# ---------------------------------------------------------------- module

class _Parser:
    def __init__(self, text, filename):
        self.filename = filename
        self.text = text
        self.lines = text.split("\n")
        self.i = 0

    def error(self, lineno, col, msg):
        raise ParseError(f"{self.filename}:{lineno}:{col}: {msg}")

    def parse(self):
        lines = self.lines
        n = len(lines)
        name = None
        header_attrs = {}
        computations = {}
        entry = None
        sections = {}
        current = None           # (Computation header info, instruction list)
        closed = None            # (name, line) of the last computation closed
        section = None
        seen_content = False
        rows = None
        if "\r" not in self.text:
            rows = _RE_ROWS.findall(self.text)
            if len(rows) != n:
                rows = None
        comments = "/*" in self.text or "//" in self.text
        row_instruction = self._row_instruction
        i = 0
        while i < n:
            if current is not None and rows is not None:
                # the instructions of a computation, as long as their rows serve
                append = current[1].append
                while i < n:
                    row = rows[i]
                    if not row[1] or (comments and ("/*" in lines[i] or "//" in lines[i])):
                        break
                    instr = row_instruction(row, i + 1)
                    if instr is None:
                        break
                    append(instr)
                    i += 1
                else:
                    break
            line = lines[i]
            lineno = i + 1
            i += 1
            if not line:
                continue
            if "/*" in line or "//" in line:
                line, extra = self._strip_comments(line, i)
                i += extra
            if line.endswith("\r"):
                line = line[:-1]
            s = line.strip()
            if not s:
                continue
            if current is not None:
                if s == "}" or (s[0] == "}" and s[1:].lstrip().startswith(",")):
                    comp = self._finish(current, lineno)
                    if s != "}":
                        comp.attrs = self._attrs(line, line.index(",") + 1, lineno)
                    if comp.name in computations:
                        self.error(current[2], 1, f"computation '{comp.name}' is defined twice")
                    computations[comp.name] = comp
                    if comp.is_entry:
                        if entry is not None:
                            self.error(current[2], 1, "a second ENTRY computation")
                        entry = comp
                    closed = (comp.name, lineno)
                    current = None
                    continue
                if s[0] == "}":
                    rest = s[1:].lstrip()
                    self.error(lineno, len(line) - len(line.lstrip()) + len(s) - len(rest) + 1,
                               f"expected ',' or end of line after the '}}' closing computation "
                               f"'{current[0][0]}', found {rest[:20]!r}")
                if s[-1] == "{" or s in SECTIONS or s.startswith("HloModule"):
                    self._check_unclosed(line, s, lineno, current)
                instr, i = self._instruction(line, lineno, i)
                current[1].append(instr)
                continue
            if section is not None and s[0].isdigit():
                sections[section].append(s)
                continue
            section = None
            if s in SECTIONS:
                section = s
                sections[s] = []
                continue
            if s.startswith("HloModule"):
                if seen_content:
                    self.error(lineno, 1, "'HloModule' must come first")
                m = _RE_HEADER.match(line)
                if not m:
                    self.error(lineno, 1, "expected 'HloModule NAME'")
                name = m.group(1)
                if m.group(2):
                    header_attrs = self._attrs(line, m.start(2), lineno)
                seen_content = True
                continue
            if s.endswith("{"):
                m = _RE_COMP.match(line)
                if not m:
                    self.error(lineno, 1, "expected a computation: [ENTRY] %name (params) -> shape {")
                sig = m.group(3)
                if sig and not sig.startswith("("):
                    self.error(lineno, m.start(3) + 1,
                               f"expected '(' (parameter list) or '{{', found {sig[:20]!r}")
                if sig:
                    self._signature(sig, lineno, m.start(3))
                current = ((m.group(2), bool(m.group(1)), sig), [], lineno)
                seen_content = True
                continue
            if s[0] == "}":
                after = (f" (the last one, '{closed[0]}', was closed on line {closed[1]})"
                         if closed else "")
                self.error(lineno, line.index("}") + 1,
                           f"unbalanced '}}': no computation is open{after}")
            self.error(lineno, len(line) - len(line.lstrip()) + 1,
                       "expected 'HloModule', a computation ('[ENTRY] %name ... {') or '}'")
        if current is not None:
            self.error(n, len(lines[-1]) + 1 if lines else 1,
                       f"expected '}}' to close computation '{current[0][0]}' "
                       f"(opened on line {current[2]}) before the end of the file")
        if not computations:
            self.error(1, 1, "no computation found (empty file?)")
        if entry is None:
            self.error(1, 1, "no ENTRY computation")
        self._check_calls(computations)
        module = Module(name or entry.name, header_attrs, computations, entry, self.filename)
        module.sections = sections
        return module

    def _signature(self, sig, lineno, at):
        """Check a computation's `(name: shape, ...) -> shape` the way XLA's
        parser reads it; at is where sig starts on its line."""
        if sig in _good_signatures:
            return
        try:
            check_signature(sig)
            if len(_good_signatures) >= _ATTR_CACHE_SIZE:
                _good_signatures.clear()
            _good_signatures.add(sig)
        except Unterminated as e:
            closer = '"' if e.opener == '"' else CLOSE[e.opener]
            self.error(lineno, at + e.pos + 1, f"expected '{closer}' to close '{e.opener}'")
        except ValueError as e:
            pos, msg = e.args[0]
            self.error(lineno, at + pos + 1, msg)

    def _check_unclosed(self, line, s, lineno, current):
        """Inside computation `current`, a line that starts something else (a
        computation header, a section, HloModule) means its '}' is missing:
        say so, rather than that this is no instruction. Returns for a line
        that may be an instruction after all."""
        if s[-1] == "{":
            if _RE_INSTR.match(line):
                return
            m = _RE_COMP.match(line)
            if m is None:
                return
            what = f"the next computation, '{m.group(2)}'"
        else:
            what = f"'{s.split()[0]}'"
        (name, _, _), _, start = current
        self.error(lineno, 1, f"computation '{name}' (opened on line {start}) is not closed: "
                              f"expected '}}' before {what}")

    def _strip_comments(self, line, i):
        """Remove /* */ and // comments outside strings; a /* */ comment may
        run over several lines. Returns (line, extra lines consumed)."""
        extra = 0
        while True:
            out = []
            last = 0
            unterminated = False
            for m in _RE_COMMENT.finditer(line):
                t = m.group()
                if t[0] == '"':
                    continue
                out.append(line[last:m.start()])
                out.append(" " if t[0] == "/" and t[1] == "*" else "")
                last = m.end()
            rest = line[last:]
            k = rest.find("/*")
            if k >= 0 and rest.count('"', 0, k) % 2 == 0:
                unterminated = True
            if not unterminated:
                out.append(rest)
                return "".join(out), extra
            if i + extra >= len(self.lines):
                self.error(i, len(line) + 1, "unterminated /* comment")
            line = line + "\n" + self.lines[i + extra]
            extra += 1

    # -------------------------------------------------------- instructions

    def _instruction(self, line, lineno, i):
        """Parse one instruction; joins following lines while brackets are
        open. Returns (Instruction, index of the next line)."""
        joined = 0
        while True:
            try:
                return self._instruction_line(line, lineno), i + joined
            except Unterminated as e:
                nxt = i + joined
                if nxt >= len(self.lines) or self.lines[nxt].strip() == "}" or joined > 10000:
                    ln, col = self._line_and_column(lineno, line, e.pos)
                    closer = '"' if e.opener == '"' else CLOSE[e.opener]
                    where = "end of line" if nxt < len(self.lines) else "end of file"
                    self.error(ln, col, f"expected '{closer}' to close '{e.opener}' before {where}")
                line = line + "\n" + self.lines[nxt]
                joined += 1
            except ValueError as e:
                if e.args and isinstance(e.args[0], tuple):
                    pos, msg = e.args[0]
                    ln, col = self._line_and_column(lineno, line, pos)
                    self.error(ln, col, msg)
                raise

    def _line_and_column(self, lineno, joined, pos):
        """(line, col) of position pos in a line that may have been joined."""
        if "\n" in joined[:pos]:
            lineno += joined.count("\n", 0, pos)
            return lineno, pos - joined.rindex("\n", 0, pos)
        return lineno, pos + 1

    def _instruction_line(self, s, lineno):
        m = _RE_HEAD.match(s)
        if m is None:
            return self._instruction_slow(s, lineno)
        root, name, text, opcode = m.groups()
        if opcode not in OPCODES:
            return self._instruction_slow(s, lineno)
        shape = shape_cache.get(text)
        if shape is None:
            am = RE_ARRAY.match(s, m.start(3))
            if am.end() != m.end(3):
                return self._instruction_slow(s, lineno)
            shape = array_shape(am, m.start(3))
            shape_cache[text] = shape
        return self._instruction_rest(s, lineno, root is not None, name, shape, opcode, m.end() - 1)

    def _instruction_slow(self, s, lineno):
        m = _RE_INSTR.match(s)
        if not m:
            raise ValueError((len(s) - len(s.lstrip()),
                              "expected an instruction: [ROOT] %name = shape opcode(operands)"))
        is_root = m.group(1) is not None
        name = m.group(2)
        pos = m.end()
        if pos < len(s) and s[pos] == "(":
            close = match_bracket(s, pos)
            shape = parse_shape(s[pos:close + 1]) if s[pos:close + 1] in shape_cache else None
            if shape is None:
                shape, end = parse_shape_at(s, pos)
            pos = close + 1
        else:
            am = RE_ARRAY.match(s, pos)
            if not am:
                raise ValueError((pos, "expected a shape such as f32[8,128]{1,0}"))
            text = am.group()
            shape = shape_cache.get(text)
            if shape is None:
                shape = array_shape(am, pos)
                shape_cache[text] = shape
            pos = am.end()
        om = _RE_OPCODE.match(s, pos)
        if not om:
            raise ValueError((pos, "expected an opcode followed by '(' after the shape"))
        opcode = om.group(1)
        if opcode not in OPCODES and async_base(opcode) is None:
            raise ValueError((om.start(1), f"unknown opcode '{opcode}'"))
        return self._instruction_rest(s, lineno, is_root, name, shape, opcode, om.end() - 1)

    def _instruction_rest(self, s, lineno, is_root, name, shape, opcode, open_):
        instr = Instruction(name, opcode, shape, [], is_root=is_root, line=lineno)
        if opcode == "constant":
            close = match_bracket(s, open_, RE_PARENS)
            lit = s[open_ + 1:close].strip()
            if lit.count("{") != lit.count("}"):
                raise ValueError((close, "expected '}' to close '{' in the literal"))
            instr.literal = lit
        else:
            close = s.find(")", open_)
            inner = s[open_ + 1:close] if close >= 0 else ""
            if close >= 0 and "(" not in inner and "[" not in inner and '"' not in inner:
                if opcode == "parameter":
                    try:
                        instr.parameter_number = int(inner)
                    except ValueError:
                        raise ValueError((open_ + 1, "expected a parameter number")) from None
                elif inner.strip():
                    ops = []
                    for op in inner.split(","):
                        op = op.strip()
                        if op[:1] == "%":
                            op = op[1:]
                        elif " " in op:
                            op = op.rsplit(None, 1)[-1].lstrip("%")
                        if not op:
                            raise ValueError((open_ + 1, "expected an operand name"))
                        ops.append(op)
                    instr.operands = ops
            else:
                close = match_bracket(s, open_)
                ops = []
                for off, piece in split_top(s, open_ + 1, close):
                    if " " in piece or "%" not in piece:
                        piece = piece.rsplit(None, 1)[-1]
                    op = piece.lstrip("%")
                    if not re.fullmatch(NAME, op):
                        raise ValueError((off, f"expected an operand name, found {piece[:30]!r}"))
                    ops.append(op)
                if opcode == "parameter":
                    raise ValueError((open_ + 1, "expected a parameter number"))
                instr.operands = ops
        rest = close + 1
        if s[rest:rest + 1] == ",":          # the usual case: attributes right after ')'
            t = s
            tail = None
        else:
            tail = s[rest:]
            t = tail.lstrip() if tail.strip() else None
        if t is not None:
            if tail is not None:
                if t[0] != ",":
                    raise ValueError((rest + len(tail) - len(t), f"expected ',' or end of line, "
                                                                 f"found {t[:20]!r}"))
                attrs_at = rest + len(tail) - len(t) + 1
            else:
                attrs_at = rest + 1
            attrs = self._attr_dict(s, attrs_at, lineno)
            instr.attrs = attrs
            called = _called(attrs, s, attrs_at)
            if called:
                instr.called = called
        return instr

    def _row_instruction(self, row, lineno):
        """The Instruction of a row of _RE_ROWS, or None where the row is
        not one the careful way would read the same (that way then reads
        the line, and says what is wrong with it)."""
        root, name, text, opcode, ops, other, rest = row
        shape = shape_cache.get(text)
        kind = _ROW_KIND.get(opcode)
        if shape is None or kind is None:
            return None
        number = literal = None
        if kind == 0:
            if other:
                return None
            operands = ops[1:].split(", %") if ops else []
        elif kind == 1:
            try:
                number = int(ops or other)
            except ValueError:
                return None
            operands = []
        else:
            literal = (ops or other).strip()
            if literal.count("{") != literal.count("}"):
                return None
            operands = []
        if not rest:
            return Instruction(name, opcode, shape, operands, {}, bool(root), lineno, number,
                               literal, [])
        hit = _attr_cache.get(rest)
        if hit is None:
            if rest[0] != ",":
                return None
            try:
                attrs = self._attr_dict(rest, 1, lineno)
                called = _called(attrs, rest, 1)
            except (ValueError, Unterminated):
                return None
            if len(_attr_cache) >= _ATTR_CACHE_SIZE:
                _attr_cache.clear()
            hit = _attr_cache[rest] = (attrs, called)
        attrs, called = hit
        return Instruction(name, opcode, shape, operands, attrs.copy(), bool(root), lineno,
                           number, literal, called[:] if called else [])

    def _attr_dict(self, s, start, lineno):
        # fast path: one regex match per attribute
        attrs = {}
        pos = start
        end = len(s)
        match = RE_ATTR.match
        while True:
            m = match(s, pos)
            if m is None:
                break
            key, value = m.groups()
            if key in attrs:
                break
            attrs[key] = value
            pos = m.end()
            if pos >= end:
                if s[pos - 1] != ",":
                    return attrs
                break
        # slow path, which also finds what is wrong
        attrs = {}
        for off, piece in split_top(s, start):
            k = piece.find("=")
            if k <= 0:
                raise ValueError((off, f"expected attribute 'name=value', found {piece[:30]!r}"))
            key = piece[:k].strip()
            if key in attrs:
                raise ValueError((off, f"attribute '{key}' given twice"))
            attrs[key] = piece[k + 1:].strip()
        return attrs

    def _attrs(self, line, start, lineno):
        try:
            return self._attr_dict(line, start, lineno)
        except Unterminated as e:
            self.error(lineno, e.pos + 1, f"expected '{CLOSE.get(e.opener, e.opener)}' "
                                          f"to close '{e.opener}'")
        except ValueError as e:
            pos, msg = e.args[0]
            self.error(lineno, pos + 1, msg)

    # -------------------------------------------------------- computations

    def _finish(self, current, close_line):
        (name, is_entry, sig), instrs, lineno = current
        comp = Computation(name, instrs, is_entry=is_entry, line=lineno)
        comp.signature = sig
        if len(comp.by_name) != len(instrs):
            seen = set()
            for ins in instrs:
                if ins.name in seen:
                    self.error(ins.line, 1, f"instruction '{ins.name}' is defined twice in '{name}'")
                seen.add(ins.name)
        if not instrs:
            self.error(lineno, 1, f"computation '{name}' has no instructions")
        by_name = comp.by_name
        roots = 0
        used = set()
        for ins in instrs:
            if ins.is_root:
                roots += 1
            used.update(ins.operands)
        if not by_name.keys() >= used:
            for ins in instrs:
                for op in ins.operands:
                    if op not in by_name:
                        self.error(ins.line, 1, f"instruction '{ins.name}' uses '{op}', which is "
                                                f"not defined in computation '{name}'")
        if roots > 1:
            self.error(lineno, 1, f"computation '{name}' has more than one ROOT")
        return comp

    def _check_calls(self, computations):
        # XLA's parser looks a callee up among the computations parsed so
        # far: callees come first, and so the call graph has no cycles
        order = {name: k for k, name in enumerate(computations)}
        for k, comp in enumerate(computations.values()):
            for ins in comp.instructions:
                for c in ins.called:
                    if c not in computations:
                        self.error(ins.line, 1, f"instruction '{ins.name}' calls computation "
                                                f"'{c}', which is not defined")
                    if order[c] >= k:
                        self.error(ins.line, 1, f"instruction '{ins.name}' calls computation "
                                                f"'{c}', which is not defined before "
                                                f"'{comp.name}' (a callee comes first)")


def parse_module(text: str, filename: str = "<string>") -> Module:
    """Parse HLO module text into an ir.Module.

    filename is used in error messages only (`file:line:col: what`).
    Raises tpuperf_cli.errors.ParseError for text that is not HLO (exit 2).

        >>> m = parse_module(open("prog.hlo").read(), "prog.hlo")
        >>> m.entry.root.opcode
        'tuple'
    """
    if not text or text.isspace():
        raise ParseError(f"{filename}:1:1: empty input: expected an HLO module")
    return _Parser(text, filename).parse()


def parse_file(path: str | None) -> Module:
    """Read and parse one HLO text file (`-` for stdin)."""
    import sys

    if path == "-" or path is None:
        return parse_module(sys.stdin.read(), "<stdin>")
    text = read_file(path, "r", encoding="utf-8", errors="replace")
    return parse_module(text, str(path))
