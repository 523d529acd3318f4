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
Attribute values stay raw strings (`attrs["window"] == "{size=3x3}"`);
tpuperf_cli.hlo.attrs decodes the ones a tool needs. Shapes are parsed once
per distinct text and shared.

Errors are ParseError with `file:line:col: what was expected`.
"""

import re

from tpuperf_cli.errors import ParseError
from tpuperf_cli.hlo.ir import ELEMENT_BYTES, Computation, Instruction, Module, Shape

# Every opcode XLA's HloOpcode knows (xla/hlo/ir/hlo_opcode.h).
OPCODES = frozenset("""
abs acos acosh add add-dependency after-all all-gather all-gather-done
all-gather-start all-reduce all-reduce-done all-reduce-start all-to-all and asin
asinh async-done async-start async-update atan atan2 atanh batch-norm-grad
batch-norm-inference batch-norm-training bitcast bitcast-convert broadcast call
cbrt ceil cholesky clamp count-leading-zeros collective-broadcast
collective-permute collective-permute-done collective-permute-start
collective-reduce compare complex concatenate conditional constant convert
convolution copy copy-done copy-start cosine cosh custom-call divide domain dot
dynamic-reshape dynamic-slice dynamic-update-slice erf exponential
exponential-minus-one fft floor fusion gather get-dimension-size
get-tuple-element imag infeed iota is-finite log log-plus-one logistic map
maximum minimum mulhi multiply negate not opt-barrier or outfeed pad parameter
partition-id popcnt power ragged-all-to-all ragged-dot real recv recv-done
reduce reduce-precision reduce-scatter reduce-window remainder replica-id
reshape reverse rng rng-bit-generator rng-get-and-update-state
round-nearest-afz round-nearest-even rsqrt scaled-dot scan scatter select
select-and-scatter send send-done set-dimension-size shift-left
shift-right-arithmetic shift-right-logical shuffle sign sine sinh slice sort
sqrt stochastic-convert subtract tan tanh topk transpose triangular-solve tuple
while xor
""".split())

# Element types a shape may have besides the numeric ones in ir.ELEMENT_BYTES.
ELEMENT_TYPES = frozenset(ELEMENT_BYTES) | {"token", "opaque", "s1", "u1"}

# Attributes whose value names computations, and so build the call graph.
CALL_ATTRS = ("calls", "to_apply", "body", "condition", "branch_computations",
              "called_computations", "true_computation", "false_computation",
              "select", "scatter")

_CALL_SET = frozenset(CALL_ATTRS)
# ... of which these take a braced list (XLA's kBracedHloComputationList),
# the others exactly one name.
_LIST_CALL_ATTRS = frozenset({"branch_computations", "called_computations"})

# Sections that may follow the computations (stack-frame index).
SECTIONS = frozenset({"FileNames", "FunctionNames", "FileLocations", "StackFrames"})

_NAME = r"[A-Za-z_][\w.\-]*"
_RE_INSTR = re.compile(r"[ \t]*(ROOT[ \t]+)?%?(" + _NAME + r")[ \t]*=\s*")
_RE_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]\n]*)\](\{[^}\n]*\})?")
_RE_OPCODE = re.compile(r"\s*([a-z][a-z0-9\-]*)\s*\(")
# The common case in one match: [ROOT] %name = array-shape opcode(
_RE_HEAD = re.compile(r"[ \t]*(ROOT[ \t]+)?%?(" + _NAME + r")[ \t]*=[ \t]*"
                      r"([a-z][a-z0-9]*\[[^\]\n]*\](?:\{[^}\n]*\})?)[ \t]+([a-z][a-z0-9\-]*)\(")
_RE_COMP = re.compile(r"[ \t]*(ENTRY[ \t]+)?%?(" + _NAME + r")[ \t]*(.*?)[ \t]*\{[ \t]*$")
_RE_HEADER = re.compile(r"[ \t]*HloModule[ \t]+%?([^\s,]+)[ \t]*(?:,[ \t]*(.*))?$")
_RE_CALLEE = re.compile(r"%?(" + _NAME + r")")
_RE_CALLEE_FULL = re.compile(r"%?(" + _NAME + r")\Z")
# Tokens that matter for bracket matching: whole strings, brackets, commas.
_RE_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|[\[\](){},"]')
_RE_PARENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|[()"]')
_RE_TILE = re.compile(r"T((?:\([^)]*\))+)")
_RE_MEMSPACE = re.compile(r"(?<![A-Z])S\(([^)]*)\)")
_RE_COMMENT = re.compile(r'"(?:[^"\\\n]|\\.)*"|/\*.*?\*/|//[^\n]*', re.S)
_CLOSE = {"(": ")", "[": "]", "{": "}"}


def _attr_regex(depth=4):
    """One attribute `key=value` and the comma after it, for the fast path:
    strings, brackets and braces nested up to `depth` deep (possessive, so
    no backtracking blow-up). Lines it cannot read whole go the slow way."""
    string = r'"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+"'     # unrolled: a run of plain characters at a time
    brace = r"\{(?:[^{}\"]++|" + string + r")*+\}"
    for _ in range(depth - 1):
        brace = r"\{(?:[^{}\"]++|" + string + "|" + brace + r")*+\}"
    value = r"(?:" + string + "|" + brace + r"|\[[^\]\n]*+\]|[^,{}\[\]\"\s]++|[ \t]++(?=[^,\s]))++"
    return re.compile(r"[ \t]*+([\w.\-]++)[ \t]*+=[ \t]*+(" + value + r")[ \t]*+(?:,|$)")


_RE_ATTR = _attr_regex()


def _value_pos(s, start, key):
    """Where the value of attribute `key` starts in s (attributes from
    start on); for error messages only."""
    for off, piece in _split_top(s, start):
        k = piece.find("=")
        if k > 0 and piece[:k].strip() == key:
            return off + k + 1 + len(piece[k + 1:]) - len(piece[k + 1:].lstrip())
    return start


def _bad_callee(key, value):
    if not value:
        return f"expected a computation name after '{key}='"
    if value[0] == "{":
        return (f"expected a computation name after '{key}=' (inline computations "
                f"'{key}={{...}}' are not supported), found {value[:20]!r}")
    return f"expected a computation name after '{key}=', found {value[:20]!r}"


class _Unterminated(Exception):
    """A bracket opened on this line is not closed before its end."""

    def __init__(self, pos, opener):
        super().__init__(pos)
        self.pos = pos
        self.opener = opener




def async_base(opcode):
    """For XLA's async sugar (`negate-start`, `fusion-update`,
    `custom-call-done`: an async-start/-update/-done wrapping one op), the
    wrapped opcode; None for any other opcode."""
    for suffix in ("-start", "-update", "-done"):
        if opcode.endswith(suffix):
            base = opcode[: -len(suffix)]
            if base in OPCODES:
                return base
    return None


# ---------------------------------------------------------------- brackets

def _match(s, pos, tokens=_RE_TOKENS):
    """Index of the bracket closing the one at s[pos]; strings are skipped.

    Raises _Unterminated when the text ends first, ParseError-ready
    (pos, message) tuples via ValueError for a mismatched bracket.
    """
    stack = [(s[pos], pos)]
    for m in tokens.finditer(s, pos + 1):
        t = m.group()
        c = t[0]
        if c == '"':
            if len(t) == 1:
                raise _Unterminated(m.start(), '"')
            continue
        if c in "([{":
            stack.append((c, m.start()))
        elif c in ")]}":
            opener, at = stack.pop()
            if _CLOSE[opener] != c:
                raise ValueError((m.start(), f"expected '{_CLOSE[opener]}' to close '{opener}', found '{c}'"))
            if not stack:
                return m.start()
    raise _Unterminated(stack[-1][1], stack[-1][0])


def _split_top(s, start=0, end=None):
    """Split s[start:end] at commas outside brackets and strings.

    Returns a list of (offset, piece) with pieces stripped of spaces.
    """
    if end is None:
        end = len(s)
    pieces = []
    stack = []
    last = start
    for m in _RE_TOKENS.finditer(s, start, end):
        c = m.group()[0]
        if c == '"':
            if len(m.group()) == 1:
                raise _Unterminated(m.start(), '"')
        elif c in "([{":
            stack.append((c, m.start()))
        elif c in ")]}":
            if not stack:
                raise ValueError((m.start(), f"unexpected '{c}'"))
            opener, at = stack.pop()
            if _CLOSE[opener] != c:
                raise ValueError((m.start(), f"expected '{_CLOSE[opener]}' to close '{opener}', found '{c}'"))
        elif not stack:  # a comma
            pieces.append((last, s[last:m.start()]))
            last = m.end()
    if stack:
        raise _Unterminated(stack[-1][1], stack[-1][0])
    pieces.append((last, s[last:end]))
    out = []
    for off, p in pieces:
        stripped = p.strip()
        if stripped:
            out.append((off + len(p) - len(p.lstrip()), stripped))
    return out


# ---------------------------------------------------------------- shapes

_shape_cache = {}


def parse_shape(text):
    """Parse one shape (`f32[8,128]{1,0:T(8,128)}`, `(s32[], f32[2])`,
    `token[]`, `bf16[<=16,?]`) into an ir.Shape; raises ValueError((offset,
    message)) on bad text. Shapes are cached by text and shared: treat them
    as read-only.
    """
    shape = _shape_cache.get(text)
    if shape is None:
        shape, end = _parse_shape_at(text, 0)
        if end != len(text):
            raise ValueError((end, f"unexpected text after shape: {text[end:end + 20]!r}"))
        if len(_shape_cache) > 200000:
            _shape_cache.clear()
        _shape_cache[text] = shape
    return shape


def _parse_shape_at(s, pos):
    """Parse a shape starting at s[pos]; returns (Shape, end position)."""
    if pos < len(s) and s[pos] == "(":
        try:
            close = _match(s, pos)
        except _Unterminated:
            raise ValueError((pos, "expected ')' to close the tuple shape")) from None
        text = s[pos:close + 1]
        shape = _shape_cache.get(text)
        if shape is None:
            elements = []
            for off, piece in _split_top(s, pos + 1, close):
                sub, end = _parse_shape_at(s, off)
                if end != off + len(piece):
                    raise ValueError((end, "expected ',' or ')' in tuple shape"))
                elements.append(sub)
            shape = Shape("tuple", tuple_shapes=tuple(elements), text=text)
            _shape_cache[text] = shape
        return shape, close + 1
    m = _RE_ARRAY.match(s, pos)
    if not m:
        raise ValueError((pos, "expected a shape such as f32[8,128]{1,0} or (s32[], f32[4])"))
    text = m.group()
    shape = _shape_cache.get(text)
    if shape is None:
        shape = _array_shape(m, pos)
        _shape_cache[text] = shape
    return shape, m.end()


def _array_shape(m, pos):
    etype, dims_text, layout = m.groups()
    if etype not in ELEMENT_TYPES:
        raise ValueError((pos, f"unknown element type '{etype}'"))
    dims = []
    dynamic = []
    if dims_text.strip():
        for d in dims_text.split(","):
            d = d.strip()
            if d.isdigit():
                dims.append(int(d))
                dynamic.append(False)
            elif d.startswith("<=") and d[2:].strip().isdigit():
                dims.append(int(d[2:]))
                dynamic.append(True)
            elif d == "?":
                dims.append(-1)
                dynamic.append(True)
            else:
                raise ValueError((m.start(2), f"bad dimension '{d}' in shape {m.group()}"))
    minor_to_major = None
    tiles = ()
    memory_space = 0
    if layout is not None:
        body = layout[1:-1]
        order, _, rest = body.partition(":")
        order = order.strip()
        try:
            minor_to_major = tuple(int(x) for x in order.split(",")) if order else ()
        except ValueError:
            raise ValueError((m.start(3), f"bad layout '{layout}'")) from None
        if minor_to_major and sorted(minor_to_major) != list(range(len(dims))):
            raise ValueError((m.start(3), f"layout {layout} does not fit rank {len(dims)}"))
        if rest:
            at = m.start(3) + 1 + len(body) - len(rest)        # where rest starts in the text
            t = _RE_TILE.search(rest)
            if t:
                tiles = _tiles(t.group(1), at + t.start(1))
            ms = _RE_MEMSPACE.search(rest)
            if ms:
                if not ms.group(1).strip().isdigit():
                    raise ValueError((at + ms.start(1), f"expected an integer memory space in "
                                                        f"S(...), found {ms.group(1)[:20]!r}"))
                memory_space = int(ms.group(1))
    return Shape(etype, tuple(dims), tuple(dynamic), minor_to_major, tiles, memory_space,
                 text=m.group())


def _tiles(text, pos):
    """`(8,128)(2,1)` -> ((8, 128), (2, 1)); `*` (XLA's combined dimension)
    is -1. pos is where text starts, for errors. XLA's parser wants each
    size an integer (and aborts on a negative one); `T()` is an empty tile.
    """
    out = []
    for grp in text[1:-1].split(")("):
        sizes = []
        items = grp.split(",")
        for x in items:
            v = x.strip()
            if v == "*":
                sizes.append(-1)
            elif v.isdigit():
                sizes.append(int(v))
            elif v or len(items) > 1:
                raise ValueError((pos, f"expected tile sizes (integers or '*') in T(...), "
                                       f"found {grp[:30]!r}"))
        out.append(tuple(sizes))
        pos += len(grp) + 2
    return tuple(out)


# XLA's lexer reads `name:` as one token (no '%', no space before ':').
_RE_PARAM = re.compile(r"[ \t]*" + _NAME + r"(?::|(?=[ \t]))[ \t]*")
_RE_SPACE = re.compile(r"[ \t]*")


_ARRAY = r"[a-z][a-z0-9]*\[[^\]\n]*\](?:\{[^}\n]*\})?"
# The common case, as XLA prints it: array shapes only, one space after ':' and ','.
_RE_SIG_FAST = re.compile(r"\((?:" + _NAME + ": " + _ARRAY + "(?:, " + _NAME + ": " + _ARRAY
                          + r")*)?\) -> " + _ARRAY)
_RE_ARRAY_ALL = re.compile(_ARRAY)


def _check_signature(sig):
    """Raise ValueError((offset, message)) unless sig is XLA's
    `(name: shape, ...) -> shape` (param_list_to_shape)."""
    if _RE_SIG_FAST.fullmatch(sig):
        try:
            for text in _RE_ARRAY_ALL.findall(sig):
                if text not in _shape_cache:
                    parse_shape(text)
            return
        except ValueError:
            pass        # again the slow way, for the position
    pos = _RE_SPACE.match(sig, 1).end()
    if sig[pos:pos + 1] != ")":
        while True:
            m = _RE_PARAM.match(sig, pos)
            if m is None:
                raise ValueError((pos, f"expected a parameter 'name: shape' or ')' in the "
                                       f"parameter list, found {sig[pos:pos + 20]!r}"))
            _, pos = _parse_shape_at(sig, m.end())
            pos = _RE_SPACE.match(sig, pos).end()
            c = sig[pos:pos + 1]
            if c == ")":
                break
            if c != ",":
                raise ValueError((pos, "expected ',' or ')' after a parameter's shape, found "
                                       f"{sig[pos:pos + 20]!r}"))
            pos = _RE_SPACE.match(sig, pos + 1).end()
    pos = _RE_SPACE.match(sig, pos + 1).end()
    if sig[pos:pos + 2] != "->":
        raise ValueError((pos, f"expected '->' and the result shape after the parameter list, "
                               f"found {sig[pos:pos + 20]!r}"))
    pos = _RE_SPACE.match(sig, pos + 2).end()
    _, pos = _parse_shape_at(sig, pos)
    if pos != len(sig):
        raise ValueError((pos, f"expected '{{' after the result shape, found {sig[pos:pos + 20]!r}"))


# ---------------------------------------------------------------- module

class _Parser:
    def __init__(self, text, filename):
        self.filename = filename
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
        i = 0
        while i < n:
            line = lines[i]
            lineno = i + 1
            i += 1
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
        try:
            _check_signature(sig)
        except _Unterminated as e:
            closer = '"' if e.opener == '"' else _CLOSE[e.opener]
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
            except _Unterminated as e:
                nxt = i + joined
                if nxt >= len(self.lines) or self.lines[nxt].strip() == "}" or joined > 10000:
                    ln, col = self._where(lineno, line, e.pos)
                    closer = '"' if e.opener == '"' else _CLOSE[e.opener]
                    where = "end of line" if nxt < len(self.lines) else "end of file"
                    self.error(ln, col, f"expected '{closer}' to close '{e.opener}' before {where}")
                line = line + "\n" + self.lines[nxt]
                joined += 1
            except ValueError as e:
                if e.args and isinstance(e.args[0], tuple):
                    pos, msg = e.args[0]
                    ln, col = self._where(lineno, line, pos)
                    self.error(ln, col, msg)
                raise

    def _where(self, lineno, joined, pos):
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
        shape = _shape_cache.get(text)
        if shape is None:
            am = _RE_ARRAY.match(s, m.start(3))
            if am.end() != m.end(3):
                return self._instruction_slow(s, lineno)
            shape = _array_shape(am, m.start(3))
            _shape_cache[text] = shape
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
            close = _match(s, pos)
            shape = parse_shape(s[pos:close + 1]) if s[pos:close + 1] in _shape_cache else None
            if shape is None:
                shape, end = _parse_shape_at(s, pos)
            pos = close + 1
        else:
            am = _RE_ARRAY.match(s, pos)
            if not am:
                raise ValueError((pos, "expected a shape such as f32[8,128]{1,0}"))
            text = am.group()
            shape = _shape_cache.get(text)
            if shape is None:
                shape = _array_shape(am, pos)
                _shape_cache[text] = shape
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
            close = _match(s, open_, _RE_PARENS)
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
                close = _match(s, open_)
                ops = []
                for off, piece in _split_top(s, open_ + 1, close):
                    if " " in piece or "%" not in piece:
                        piece = piece.rsplit(None, 1)[-1]
                    op = piece.lstrip("%")
                    if not re.fullmatch(_NAME, op):
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
            called = None
            keys = [k for k in attrs if k in _CALL_SET] if not _CALL_SET.isdisjoint(attrs) else ()
            if len(keys) > 1:
                keys.sort(key=CALL_ATTRS.index)      # XLA's order: body before condition
            for key in keys:
                v = attrs[key]
                if called is None:
                    called = []
                if key in _LIST_CALL_ATTRS:
                    if v[:1] != "{" or v[-1:] != "}":
                        raise ValueError((_value_pos(s, attrs_at, key), f"expected '{{' (a list of "
                                          f"computation names) after '{key}=', found {v[:20]!r}"))
                    names = [x.strip() for x in v[1:-1].split(",")]
                    if names == [""]:
                        continue
                else:
                    names = [v]
                for x in names:
                    m = _RE_CALLEE_FULL.match(x)
                    if m is None:
                        raise ValueError((_value_pos(s, attrs_at, key), _bad_callee(key, x)))
                    called.append(m.group(1))
            if called:
                instr.called = called
        return instr

    def _attr_dict(self, s, start, lineno):
        # fast path: one regex match per attribute
        attrs = {}
        pos = start
        end = len(s)
        match = _RE_ATTR.match
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
        for off, piece in _split_top(s, start):
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
        except _Unterminated as e:
            self.error(lineno, e.pos + 1, f"expected '{_CLOSE.get(e.opener, e.opener)}' "
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
        for ins in instrs:
            if ins.is_root:
                roots += 1
            for op in ins.operands:
                if op not in by_name:
                    self.error(ins.line, 1, f"instruction '{ins.name}' uses '{op}', which is not "
                                            f"defined in computation '{name}'")
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


def parse_module(text, filename="<string>"):
    """Parse HLO module text into an ir.Module.

    filename is used in error messages only (`file:line:col: what`).
    Raises tpuperf_cli.errors.ParseError for text that is not HLO (exit 2).

        >>> m = parse_module(open("prog.hlo").read(), "prog.hlo")
        >>> m.entry.root.opcode
        'tuple'
    """
    if not text.strip():
        raise ParseError(f"{filename}:1:1: empty input: expected an HLO module")
    return _Parser(text, filename).parse()


def parse_file(path):
    """Read and parse one HLO text file (`-` for stdin)."""
    import sys

    from tpuperf_cli.errors import TpuperfError

    if path == "-" or path is None:
        return parse_module(sys.stdin.read(), "<stdin>")
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
    except OSError as e:
        raise TpuperfError(f"{path}: {e.strerror}") from None
    return parse_module(text, str(path))
