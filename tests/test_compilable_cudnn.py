"""cuDNN convolution custom calls (XLA:GPU's optimized HLO) become the plain
convolutions they stand for before measure compiles them: checked here on
XLA:CPU against jax's own convolution and its gradients, for the forms the
GPU corpus holds (strides, padding, dilation, 1-D and 2-D, both filter
layouts), and on the corpus's real cuDNN kernels."""

import glob
import re
from pathlib import Path

import numpy as np
import pytest

from tpuperf_cli.hlo.compilable import compilable_module
from tpuperf_cli.stream import read_records

CORPUS = Path(__file__).resolve().parent.parent / "examples" / "corpus-gpu" / "kernels"


def run_hlo(text, arrays):
    import jax

    from tpuperf_cli.measure.device import compile_program, program_of

    dev = jax.devices("cpu")[0]
    comp, _ = program_of(text)
    exe = compile_program(dev.client, dev, comp)
    outs = exe.execute_sharded([jax.device_put(a, dev) for a in arrays])
    return [np.asarray(o[0]) for o in outs.disassemble_into_single_device_arrays()]


def jax_spec(labels, kind):
    names = {"lhs": {"b": "N", "f": "C"}, "rhs": {"o": "O", "i": "I"}}[kind]
    return "".join(names.get(c, "HWD"[int(c)] if c.isdigit() else c) for c in labels)


def shape_text(a):
    dims = ",".join(map(str, a.shape))
    return f"f32[{dims}]{{{','.join(map(str, reversed(range(a.ndim))))}}}"


def custom_call(target, operands, result, window, labels, config=""):
    params = ", ".join(f"arg.{k}: f32[{','.join(map(str, a.shape))}]" for k, a in enumerate(operands))
    lines = [f"HloModule {target[8:]}", "",
             f"ENTRY %main ({params}) -> (f32[{','.join(map(str, result.shape))}], u8[0]) {{"]
    lines += [f"  %arg.{k} = {shape_text(a)} parameter({k})" for k, a in enumerate(operands)]
    args = ", ".join(f"%arg.{k}" for k in range(len(operands)))
    lines.append(f"  ROOT %cc = ({shape_text(result)}, u8[0]{{0}}) custom-call({args}), "
                 f"window={window}, dim_labels={labels}, custom_call_target=\"{target}\", "
                 f"backend_config={{\"cudnn_conv_backend_config\":{{{config}\"conv_result_scale\":1,"
                 f"\"side_input_scale\":0}}}}")
    return "\n".join(lines + ["}", ""])


# (lhs labels, rhs labels, input shape, filter shape, strides, padding, rhs dilation)
CASES = [
    ("b01f", "o01i", (2, 9, 9, 3), (4, 3, 3, 3), (2, 2), [(0, 0), (0, 0)], (1, 1)),
    ("b01f", "01io", (2, 6, 5, 3), (3, 3, 3, 4), (1, 1), [(1, 1), (1, 1)], (1, 1)),
    ("b01f", "o01i", (1, 8, 8, 2), (3, 2, 2, 2), (2, 2), [(1, 0), (0, 1)], (1, 1)),
    ("b01f", "o01i", (2, 8, 8, 3), (5, 1, 1, 3), (2, 2), [(0, 0), (0, 0)], (1, 1)),
    ("b0f", "0io", (2, 16, 3), (2, 3, 4), (1,), [(4, 0)], (4,)),
]


@pytest.mark.parametrize("lhs,rhs,xs,ws,strides,pads,dil", CASES)
def test_cudnn_calls_compute_what_jax_computes(lhs, rhs, xs, ws, strides, pads, dil):
    import jax

    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs).astype(np.float32)
    w = rng.standard_normal(ws).astype(np.float32)
    dn = (jax_spec(lhs, "lhs"), jax_spec(rhs, "rhs"), jax_spec(lhs, "lhs"))

    def conv(x, w):
        return jax.lax.conv_general_dilated(x, w, strides, pads, rhs_dilation=dil,
                                            dimension_numbers=dn)

    y, vjp = jax.vjp(conv, x, w)
    y = np.asarray(y)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx, dw = (np.asarray(g) for g in vjp(dy))
    bias = rng.standard_normal(y.shape[lhs.index("f")]).astype(np.float32)
    size = "x".join(str(ws[rhs.index(str(k))]) for k in range(len(strides)))
    window = "{size=" + size + " stride=" + "x".join(map(str, strides)) + " pad=" + \
        "x".join(f"{lo}_{hi}" for lo, hi in pads) + " rhs_dilate=" + "x".join(map(str, dil)) + "}"
    labels = f"{lhs}_{rhs}->{lhs}"
    relu = '"activation_mode":"kRelu",'
    for target, operands, want, config in [
            ("__cudnn$convForward", [x, w], y, ""),
            ("__cudnn$convBiasActivationForward", [x, w, bias],
             np.maximum(y + bias.reshape([-1 if c == "f" else 1 for c in lhs]), 0), relu),
            ("__cudnn$convBackwardInput", [dy, w], dx, ""),
            ("__cudnn$convBackwardFilter", [x, dy], dw, "")]:
        text = compilable_module(custom_call(target, operands, want, window, labels, config))
        assert "custom-call" not in text
        (got,) = run_hlo(text, operands)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4, err_msg=target)


def test_the_gpu_corpus_cudnn_kernels_become_convolutions():
    targets = {}
    for shard in sorted(glob.glob(str(CORPUS / "*.zst"))):
        for r in read_records(shard):
            if r["opcode"] == "custom-call" and "__cudnn$conv" in r["hlo"]:
                text = compilable_module(r["hlo"])
                target = re.search(r'custom_call_target="([^"]+)"', r["hlo"]).group(1)
                grouped = "feature_group_count" in r["hlo"] and "Backward" in target
                kept = "custom-call" in text
                targets[target, grouped, kept] = targets.get((target, grouped, kept), 0) + 1
    # all but grouped backward convolutions (depthwise gradients) become plain ones
    assert all(not kept or grouped for _, grouped, kept in targets), targets
    assert sum(n for (_, _, kept), n in targets.items() if not kept) > 1000


def test_copies_become_reshapes_of_the_same_values():
    from tpuperf_cli.hlo.compilable import copies_as_reshapes

    text = """HloModule k

ENTRY %main (p: f32[4,3]) -> (f32[4,3], f32[3,4]) {
  %p = f32[4,3]{1,0} parameter(0)
  %c = f32[4,3]{0,1} copy(%p), metadata={op_name="x"}
  %t = f32[3,4]{1,0} transpose(%c), dimensions={1,0}
  ROOT %r = (f32[4,3]{1,0}, f32[3,4]{1,0}) tuple(%c, %t)
}
"""
    plain = copies_as_reshapes(compilable_module(text))
    assert " copy(" not in plain and plain.count(" reshape(") == 1
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    a, b = run_hlo(plain, [x])
    np.testing.assert_array_equal(a, x)
    np.testing.assert_array_equal(b, x.T)


def test_measure_retries_a_copy_jaxlib_cannot_convert(monkeypatch):
    from tpuperf_cli.measure import device

    seen = []
    real = device.compile_program

    def fussy(client, dev, comp):
        text = comp.as_hlo_text()
        seen.append(" copy(" in text)
        if " copy(" in text:   # as jaxlib 0.11 answers a copy
            raise device.MeasureError("compile", "failed to legalize operation 'mhlo.copy'")
        return real(client, dev, comp)

    monkeypatch.setattr(device, "compile_program", fussy)
    kernel = """HloModule copy.1

ENTRY %main (p: f32[64,32]) -> f32[64,32] {
  %p = f32[64,32]{1,0} parameter(0)
  ROOT %copy.1 = f32[64,32]{0,1} copy(%p)
}
"""
    m = device.Measurer("cpu", samples=3, clock="wall")
    result = m.measure(kernel)
    assert seen == [True, False] and result.runtime_ns > 0


def test_a_call_whose_scratch_buffer_is_read_stays_a_custom_call():
    text = """HloModule k

ENTRY %main (x: f32[2,8,8,3], w: f32[4,3,3,3]) -> (f32[2,8,8,4], u8[16]) {
  %x = f32[2,8,8,3]{3,2,1,0} parameter(0)
  %w = f32[4,3,3,3]{3,2,1,0} parameter(1)
  %cc = (f32[2,8,8,4]{3,2,1,0}, u8[16]{0}) custom-call(%x, %w), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_o01i->b01f, custom_call_target="__cudnn$convForward"
  %v = f32[2,8,8,4]{3,2,1,0} get-tuple-element(%cc), index=0
  %s = u8[16]{0} get-tuple-element(%cc), index=1
  ROOT %t = (f32[2,8,8,4]{3,2,1,0}, u8[16]{0}) tuple(%v, %s)
}
"""
    assert "custom-call" in compilable_module(text)
    used = text.replace("  %s = u8[16]{0} get-tuple-element(%cc), index=1\n", "").replace(
        "ROOT %t = (f32[2,8,8,4]{3,2,1,0}, u8[16]{0}) tuple(%v, %s)", "ROOT %t = (f32[2,8,8,4]{3,2,1,0}) tuple(%v)")
    plain = compilable_module(used)
    assert "custom-call" not in plain and " convolution(" in plain
    rng = np.random.default_rng(1)
    (got,) = run_hlo(plain, [rng.standard_normal((2, 8, 8, 3)).astype(np.float32),
                             rng.standard_normal((4, 3, 3, 3)).astype(np.float32)])
    assert got.shape == (2, 8, 8, 4)
