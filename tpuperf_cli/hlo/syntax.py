"""The pieces of HLO text inside an instruction line: brackets, attribute
values, shapes and computation signatures (the parser's building blocks).

Errors are ValueError((offset, message)) or Unterminated(offset, opener);
the parser turns them into ParseError with `file:line:col`. Shapes are
parsed once per distinct text and shared (shape_cache): treat them as
read-only.
"""

import re

from tpuperf_cli.hlo.ir import ELEMENT_TYPES, Shape

NAME = r"[A-Za-z_][\w.\-]*"
RE_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]\n]*)\](\{[^}\n]*\})?")
# Tokens that matter for bracket matching: whole strings, brackets, commas.
RE_TOKENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|[\[\](){},"]')
RE_PARENS = re.compile(r'"(?:[^"\\\n]|\\.)*"|[()"]')
_RE_TILE = re.compile(r"T((?:\([^)]*\))+)")
_RE_MEMSPACE = re.compile(r"(?<![A-Z])S\(([^)]*)\)")
CLOSE = {"(": ")", "[": "]", "{": "}"}


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


RE_ATTR = _attr_regex()


def value_pos(s: str, start: int, key: str) -> int:
    """Where the value of attribute `key` starts in s (attributes from
    start on); for error messages only."""
    for off, piece in split_top(s, start):
        k = piece.find("=")
        if k > 0 and piece[:k].strip() == key:
            return off + k + 1 + len(piece[k + 1:]) - len(piece[k + 1:].lstrip())
    return start


def bad_callee(key: str, value: str) -> str:
    if not value:
        return f"expected a computation name after '{key}='"
    if value[0] == "{":
        return (f"expected a computation name after '{key}=' (inline computations "
                f"'{key}={{...}}' are not supported), found {value[:20]!r}")
    return f"expected a computation name after '{key}=', found {value[:20]!r}"


class Unterminated(Exception):
    """A bracket opened on this line is not closed before its end."""

    def __init__(self, pos, opener):
        super().__init__(pos)
        self.pos = pos
        self.opener = opener


# ---------------------------------------------------------------- brackets

def match_bracket(s: str, pos: int, tokens: re.Pattern = RE_TOKENS) -> int:
    """Index of the bracket closing the one at s[pos]; strings are skipped.

    Raises Unterminated when the text ends first, ParseError-ready
    (pos, message) tuples via ValueError for a mismatched bracket.
    """
    stack = [(s[pos], pos)]
    for m in tokens.finditer(s, pos + 1):
        t = m.group()
        c = t[0]
        if c == '"':
            if len(t) == 1:
                raise Unterminated(m.start(), '"')
            continue
        if c in "([{":
            stack.append((c, m.start()))
        elif c in ")]}":
            opener, at = stack.pop()
            if CLOSE[opener] != c:
                raise ValueError((m.start(), f"expected '{CLOSE[opener]}' to close '{opener}', found '{c}'"))
            if not stack:
                return m.start()
    raise Unterminated(stack[-1][1], stack[-1][0])


def split_top(s: str, start: int = 0, end: int | None = None) -> list[tuple[int, str]]:
    """Split s[start:end] at commas outside brackets and strings.

    Returns a list of (offset, piece) with pieces stripped of spaces.
    """
    if end is None:
        end = len(s)
    pieces = []
    stack = []
    last = start
    for m in RE_TOKENS.finditer(s, start, end):
        c = m.group()[0]
        if c == '"':
            if len(m.group()) == 1:
                raise Unterminated(m.start(), '"')
        elif c in "([{":
            stack.append((c, m.start()))
        elif c in ")]}":
            if not stack:
                raise ValueError((m.start(), f"unexpected '{c}'"))
            opener, at = stack.pop()
            if CLOSE[opener] != c:
                raise ValueError((m.start(), f"expected '{CLOSE[opener]}' to close '{opener}', found '{c}'"))
        elif not stack:  # a comma
            pieces.append((last, s[last:m.start()]))
            last = m.end()
    if stack:
        raise Unterminated(stack[-1][1], stack[-1][0])
    pieces.append((last, s[last:end]))
    out = []
    for off, p in pieces:
        stripped = p.strip()
        if stripped:
            out.append((off + len(p) - len(p.lstrip()), stripped))
    return out


# ---------------------------------------------------------------- shapes

shape_cache = {}


def parse_shape(text: str) -> Shape:
    """Parse one shape (`f32[8,128]{1,0:T(8,128)}`, `(s32[], f32[2])`,
    `token[]`, `bf16[<=16,?]`) into an ir.Shape; raises ValueError((offset,
    message)) on bad text. Shapes are cached by text and shared: treat them
    as read-only.
    """
    shape = shape_cache.get(text)
    if shape is None:
        shape, end = parse_shape_at(text, 0)
        if end != len(text):
            raise ValueError((end, f"unexpected text after shape: {text[end:end + 20]!r}"))
        if len(shape_cache) > 200000:
            shape_cache.clear()
        shape_cache[text] = shape
    return shape


def parse_shape_at(s: str, pos: int) -> tuple[Shape, int]:
    """Parse a shape starting at s[pos]; returns (Shape, end position)."""
    if pos < len(s) and s[pos] == "(":
        try:
            close = match_bracket(s, pos)
        except Unterminated:
            raise ValueError((pos, "expected ')' to close the tuple shape")) from None
        text = s[pos:close + 1]
        shape = shape_cache.get(text)
        if shape is None:
            elements = []
            for off, piece in split_top(s, pos + 1, close):
                sub, end = parse_shape_at(s, off)
                if end != off + len(piece):
                    raise ValueError((end, "expected ',' or ')' in tuple shape"))
                elements.append(sub)
            shape = Shape("tuple", tuple_shapes=tuple(elements), text=text)
            shape_cache[text] = shape
        return shape, close + 1
    m = RE_ARRAY.match(s, pos)
    if not m:
        raise ValueError((pos, "expected a shape such as f32[8,128]{1,0} or (s32[], f32[4])"))
    text = m.group()
    shape = shape_cache.get(text)
    if shape is None:
        shape = array_shape(m, pos)
        shape_cache[text] = shape
    return shape, m.end()


def array_shape(m: re.Match, pos: int) -> Shape:
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
_RE_PARAM = re.compile(r"[ \t]*" + NAME + r"(?::|(?=[ \t]))[ \t]*")
_RE_SPACE = re.compile(r"[ \t]*")


_ARRAY = r"[a-z][a-z0-9]*\[[^\]\n]*\](?:\{[^}\n]*\})?"
# The common case, as XLA prints it: array shapes only, one space after ':' and ','.
_RE_SIG_FAST = re.compile(r"\((?:" + NAME + ": " + _ARRAY + "(?:, " + NAME + ": " + _ARRAY
                          + r")*)?\) -> " + _ARRAY)
_RE_ARRAY_ALL = re.compile(_ARRAY)


def check_signature(sig: str) -> None:
    """Raise ValueError((offset, message)) unless sig is XLA's
    `(name: shape, ...) -> shape` (param_list_to_shape)."""
    if _RE_SIG_FAST.fullmatch(sig):
        try:
            for text in _RE_ARRAY_ALL.findall(sig):
                if text not in shape_cache:
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
            _, pos = parse_shape_at(sig, m.end())
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
    _, pos = parse_shape_at(sig, pos)
    if pos != len(sig):
        raise ValueError((pos, f"expected '{{' after the result shape, found {sig[pos:pos + 20]!r}"))
