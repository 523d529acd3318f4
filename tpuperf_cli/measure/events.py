"""Kernel time read off the profiler's events: measure's `--clock events`.

On a GPU, method 4's timing loop is the wrong tool: XLA:GPU runs a while
loop whose trip count it cannot see by reading its condition back to the
host every trip, which costs more than most kernels. The paper times
kernels on the device, and so does this clock:

1. the kernel is compiled alone (`hlo.compilable.compilable_module`, no
   loop) and given its inputs once;
2. inside one profiler session (jaxlib's ProfilerSession: CUPTI activity
   on a GPU, the device's own trace on a TPU) every kernel of a batch is
   called `samples` times in turn, each burst of calls inside a host
   annotation `tpuperf:INDEX`, each call waited for;
3. the session's XSpace (a protobuf) is read here with a small wire-format
   reader (jaxlib 0.6 has no Python reader of its own): the device's
   kernel events inside a kernel's annotation are its calls' work, the
   gaps between calls (a host round trip each) split them into calls, and
   a sample is the device time of one call: the sum of its events'
   durations, by the device's clock.

On CPU the same path reads the thunk events of XLA:CPU's client thread
(the work of each thunk as the runtime traced it): that is how the tests
check this module without a GPU, not a replacement for the CPU's clocks.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

ANNOTATION = "tpuperf:"

# Events of XLA:CPU's client thread that are the runtime's own, not a
# kernel's work (their names, or the prefix of their names).
_CPU_RUNTIME = ("ThunkExecutor", "ThreadpoolListener", "end: ", "Wait for", "wait for",
                "PjRtCpuExecutable", "CommonPjRtLoadedExecutable", "TfrtCpuExecutable",
                "PjitFunction", "ParseArguments", ANNOTATION)


# Lines a GPU plane may hold beside its streams, summaries of their events.
_GPU_DERIVED = frozenset({"XLA Ops", "XLA Modules", "Steps", "Launch Stats", "TensorFlow Ops",
                          "Framework Ops", "Source code", "TensorFlow Name Scope",
                          "XLA TraceMe", "Async XLA Ops"})


@dataclass
class Event:
    name: str
    start_ns: float
    duration_ns: float

    @property
    def end_ns(self) -> float:
        return self.start_ns + self.duration_ns


@dataclass
class Line:
    name: str
    events: list[Event] = field(default_factory=list)


@dataclass
class Plane:
    name: str
    lines: list[Line] = field(default_factory=list)


# ---------------------------------------------------------------- XSpace
def _varint(data: memoryview, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, at
        shift += 7


def _fields(data: memoryview) -> Iterable[tuple[int, int, object]]:
    """(field number, wire type, value) of a protobuf message: ints for
    varints and fixed fields, memoryviews for length-delimited ones."""
    at, end = 0, len(data)
    while at < end:
        key, at = _varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at)
        elif wire == 1:
            value, at = int.from_bytes(data[at:at + 8], "little"), at + 8
        elif wire == 2:
            size, at = _varint(data, at)
            value, at = data[at:at + size], at + size
        elif wire == 5:
            value, at = int.from_bytes(data[at:at + 4], "little"), at + 4
        else:
            raise ValueError(f"protobuf wire type {wire} at byte {at}: not an XSpace")
        yield number, wire, value


def _signed(v: int) -> int:
    return v - (1 << 64) if v >= 1 << 63 else v


def _text(v) -> str:
    return bytes(v).decode("utf-8", "replace")


def _message(data: memoryview, repeated: tuple = ()) -> dict:
    """{field number: value} of a protobuf message (the last value of a
    field), a list of values for the numbers in `repeated`."""
    out = {n: [] for n in repeated}
    for number, _, value in _fields(data):
        if number in repeated:
            out[number].append(value)
        else:
            out[number] = value
    return out


def _plane(data: memoryview) -> Plane:
    # XPlane: name = 2, lines = 3, event_metadata = 4 (map<int64, XEventMetadata>)
    plane = _message(data, repeated=(3, 4))
    names = {}
    for entry in plane[4]:
        entry = _message(entry)
        if 2 in entry:                         # XEventMetadata: name = 2
            names[_signed(entry.get(1, 0))] = _text(_message(entry[2]).get(2, b""))
    out = Plane(_text(plane.get(2, b"")))
    for raw in plane[3]:
        # XLine: name = 2, timestamp_ns = 3, events = 4
        line = _message(raw, repeated=(4,))
        stamp = _signed(line.get(3, 0))
        events = Line(_text(line.get(2, b"")))
        for raw_event in line[4]:
            # XEvent: metadata_id = 1, offset_ps = 2, duration_ps = 3
            event = _message(raw_event)
            events.events.append(Event(names.get(_signed(event.get(1, 0)), ""),
                                       stamp + _signed(event.get(2, 0)) / 1000.0,
                                       _signed(event.get(3, 0)) / 1000.0))
        out.lines.append(events)
    return out


def read_xspace(data: bytes) -> list[Plane]:
    """The planes of a serialized XSpace (XSpace: planes = 1)."""
    return [_plane(value) for number, wire, value in _fields(memoryview(data))
            if number == 1 and wire == 2]


# ---------------------------------------------------------------- events
def annotations(planes: Sequence[Plane]) -> dict[str, tuple[float, float]]:
    """{key: (start, end)} of the host annotations named tpuperf:KEY."""
    out = {}
    for plane in planes:
        if not plane.name.startswith("/host:"):
            continue
        for line in plane.lines:
            for e in line.events:
                if e.name.startswith(ANNOTATION):
                    out[e.name[len(ANNOTATION):]] = (e.start_ns, e.end_ns)
    return out


def kernel_events(planes: Sequence[Plane], platform: str,
                  names: frozenset | set | None = None) -> list[Event]:
    """The events that are kernels' work on the device: on a GPU the
    events of its stream lines (CUPTI's kernels and copies), on a TPU its
    "XLA Ops" line; on CPU the thunks XLA:CPU traced on the host's threads,
    which are named after their HLO instructions (`names`, when given,
    keeps those only)."""
    out = []
    for plane in planes:
        # CUPTI's lines are named "Stream #N(...)"; a GPU plane without such
        # lines (another profiler's naming) keeps all but the derived ones
        streams = any(line.name.startswith("Stream") for line in plane.lines)
        for line in plane.lines:
            if platform == "gpu" and plane.name.startswith("/device:GPU"):
                keep = line.name.startswith("Stream") if streams else line.name not in _GPU_DERIVED
            elif platform == "tpu" and plane.name.startswith("/device:TPU"):
                keep = line.name == "XLA Ops"
            else:
                keep = platform == "cpu" and plane.name == "/host:CPU"
            if not keep:
                continue
            if platform != "cpu":
                out += line.events
            elif names is not None:
                out += [e for e in line.events if e.name in names]
            else:
                out += [e for e in line.events if not e.name.startswith(_CPU_RUNTIME)]
    return sorted(out, key=lambda e: e.start_ns)


def split_calls(events: Sequence[Event], calls: int) -> list[list[Event]]:
    """The events of `calls` calls, in order, split at the calls - 1 widest
    gaps between one event's end and the next one's start (a call's
    kernels run back to back; between calls the host waited for the last
    one and made the next call). [] when there are fewer events than calls."""
    events = sorted(events, key=lambda e: e.start_ns)
    if calls < 1 or len(events) < calls:
        return []
    gap, reach = {}, events[0].end_ns
    for i in range(1, len(events)):
        gap[i] = events[i].start_ns - reach      # past everything before it
        reach = max(reach, events[i].end_ns)
    gaps = sorted(gap, key=gap.get, reverse=True)
    cuts = sorted(gaps[:calls - 1])
    bounds = [0] + cuts + [len(events)]
    return [list(events[a:b]) for a, b in zip(bounds, bounds[1:])]


def call_samples(planes: Sequence[Plane], platform: str, keys: Sequence[str], calls: int,
                 names: dict | None = None) -> dict[str, list[float] | str]:
    """For each annotation key, the device time (ns) of each of its
    `calls` calls, or a reason why there is none. names: {key: the HLO
    instruction names of its executable} (CPU: which thunks are its work)."""
    spans = annotations(planes)
    out = {}
    every = kernel_events(planes, platform) if names is None else None
    for key in keys:
        if key not in spans:
            out[key] = "its annotation is missing from the profile"
            continue
        start, end = spans[key]
        events = every if every is not None else kernel_events(planes, platform, names.get(key))
        inside = [e for e in events if e.start_ns >= start and e.end_ns <= end]
        groups = split_calls(inside, calls)
        if not groups:
            out[key] = (f"{len(inside)} device event(s) for {calls} calls: the profile "
                        f"did not record the kernel's work ({_layout(planes)})")
            continue
        out[key] = [sum(e.duration_ns for e in g) for g in groups]
    return out


def _layout(planes: Sequence[Plane], limit: int = 6) -> str:
    """The profile's planes and lines, briefly: what an error about
    missing events can show."""
    parts = []
    for plane in planes[:limit]:
        lines = ", ".join(f"{line.name}: {len(line.events)}" for line in plane.lines[:limit])
        parts.append(f"{plane.name} [{lines}]")
    return "planes " + "; ".join(parts) if parts else "no planes"


class Session:
    """A profiler session that records the device's events (no Python
    tracer); `stop()` returns the planes."""

    def __init__(self):
        from jax._src.lib import _profiler

        options = _profiler.ProfileOptions()
        options.python_tracer_level = 0
        options.host_tracer_level = 2
        self._profiler = _profiler
        self._session = _profiler.ProfilerSession(options)

    def annotate(self, key: str):
        return self._profiler.TraceMe(ANNOTATION + key)

    def stop(self) -> list[Plane]:
        return read_xspace(self._session.stop())


_NAME_RE = None


def instruction_names(module_texts: Iterable[str]) -> frozenset:
    """The instruction names of compiled HLO modules (an executable's
    hlo_modules() printed): what XLA:CPU names its thunks' events."""
    import re

    global _NAME_RE
    if _NAME_RE is None:
        _NAME_RE = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=", re.M)
    return frozenset(n for text in module_texts for n in _NAME_RE.findall(text))
