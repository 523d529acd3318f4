#!/usr/bin/env python3
"""Build the example programs: real models written in JAX, optimized by XLA.

Each program is a small but real model (an MLP, a CNN, a ResNet block, a
Transformer encoder, an LSTM/GRU over a sequence, an embedding lookup with
attention, ...), usually a whole training step (loss, gradient, SGD update).
It is traced with jax.jit, lowered with abstract arguments (no data is
needed) and compiled by XLA for the CPU; the post-optimization HLO text
(``compiled.as_text()``, what XLA runs) is written to ``<out>/<name>.hlo.zst``
(zstd, which hlo-split and the other tools read as it is).

Program variants change the program (size, batch, dtype) or only XLA's
fusion decisions (flags passed per compile: passes disabled, fusion emitters
off, ...), so the same model yields differently fused kernels.

Usage::

    JAX_PLATFORMS=cpu .venv/bin/python examples/make_programs.py
    .venv/bin/python examples/make_programs.py --only mlp_s_train --out /tmp/hlo
    .venv/bin/python examples/make_programs.py --list

``sweep_spec`` builds a program at another batch, size (image side,
sequence length or widths, scaled by FAMILIES' k) and dtype: `tpuperf
generate --source sweeps` imports this file for it.

The manifest examples/programs.json is rewritten with every program built
(it keeps entries of programs not rebuilt with --only). Progress goes to
stderr. Output is deterministic as far as XLA is: no random numbers are
drawn (arguments are abstract shapes) and source paths in metadata are cut
to the file name.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

HERE = Path(__file__).resolve().parent

# ---------------------------------------------------------------------------
# Fusion variants: XLA debug options passed per compile.  Each one was checked
# to change the optimized HLO of the models below (kernel counts and bodies
# differ from the base program; figures in the commit history and report).
VARIANTS: dict[str, dict[str, object]] = {
    # XLA's default CPU pipeline.
    "base": {},
    # No instruction fusion at all: every elementwise op is its own kernel.
    "nofuse": {"xla_disable_hlo_passes": "fusion"},
    # No algebraic simplification: redundant reshapes/transposes/broadcasts
    # survive and are fused differently.
    "noalgsimp": {"xla_disable_hlo_passes": "algsimp"},
    # No tree reduction rewriting: long reductions stay single reduce ops
    # instead of a reduce-window followed by a short reduce.
    "notree": {"xla_disable_hlo_passes": "tree_reduction_rewriter"},
}
# Tried and left out: xla_cpu_use_thunk_runtime=False (the legacy runtime)
# mostly turns dots into __onednn$matmul custom calls that the default
# runtime cannot compile standalone, so its kernels cannot be measured;
# without those it changes almost nothing.  Disabling "fusion-wrapper",
# "parallel-task-assigner" (wrong name; the real one,
# "cpu-parallel-task-assigner", only drops the parallel call wrappers, which
# measuring a kernel alone re-creates anyway), xla_cpu_enable_fast_math and
# xla_cpu_use_fusion_emitters left the HLO unchanged or nearly so.


@dataclass
class Spec:
    """One program to build."""

    name: str
    family: str
    size: str
    batch: int
    dtype: str
    variant: str  # key of VARIANTS
    mode: str  # "train" (loss + grad + SGD update) or "fwd" (inference)
    build: object = field(repr=False)  # () -> (fn, args)
    note: str = ""


# ---------------------------------------------------------------------------
# Small helpers shared by the models (plain jax, no flax).


def _jax():
    import jax
    import jax.numpy as jnp

    return jax, jnp


def sds(shape, dtype):
    jax, _ = _jax()
    return jax.ShapeDtypeStruct(tuple(shape), dtype)


def dt(name):
    _, jnp = _jax()
    return {"f32": jnp.float32, "bf16": jnp.bfloat16}[name]


def train_step(loss_fn, lr=0.01):
    """loss_fn(params, *batch) -> scalar; returns a jitted SGD step."""
    jax, jnp = _jax()

    def step(params, *batch):
        loss, grads = jax.value_and_grad(loss_fn)(params, *batch)
        new = jax.tree_util.tree_map(lambda p, g: p - jnp.asarray(lr, p.dtype) * g, params, grads)
        return new, loss

    step.loss_fn = loss_fn  # kept so that adam_step can reuse the loss
    return step


def adam_step(loss_fn, lr=1e-3, b1=0.9, b2=0.999, eps=1e-8):
    """An Adam training step: (params, (m, v, count), *batch) -> updated."""
    jax, jnp = _jax()
    tm = jax.tree_util.tree_map

    def step(params, opt, *batch):
        m, v, count = opt
        loss, g = jax.value_and_grad(loss_fn)(params, *batch)
        count = count + 1
        m = tm(lambda m, g: b1 * m + (1 - b1) * g.astype(jnp.float32), m, g)
        v = tm(lambda v, g: b2 * v + (1 - b2) * jnp.square(g.astype(jnp.float32)), v, g)
        c1 = 1 - b1 ** count.astype(jnp.float32)
        c2 = 1 - b2 ** count.astype(jnp.float32)
        new = tm(lambda p, m, v: (p - lr * (m / c1) / (jnp.sqrt(v / c2) + eps)).astype(p.dtype),
                 params, m, v)
        return new, (m, v, count), loss

    return step


def with_adam(fn, args):
    """Turn a builder's SGD step and its args into an Adam step and args
    (optimizer moments kept in f32)."""
    jax, jnp = _jax()
    params, batch = args[0], args[1:]
    mom = jax.tree_util.tree_map(lambda p: sds(p.shape, jnp.float32), params)
    return adam_step(fn.loss_fn), (params, (mom, mom, sds((), jnp.int32))) + tuple(batch)


def xent(logits, labels):
    """Mean softmax cross-entropy with integer labels (computed in f32)."""
    jax, jnp = _jax()
    logits = logits.astype(jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


def classifier(forward, params, x, mode):
    """A classifier's program: its forward pass ("fwd"), or an SGD step on
    the cross-entropy of integer labels, one a row of x."""
    _, jnp = _jax()
    if mode == "fwd":
        return forward, (params, x)
    y = sds((x.shape[0],), jnp.int32)
    return train_step(lambda p, x, y: xent(forward(p, x), y)), (params, x, y)


def layernorm(x, g, b, eps=1e-5):
    _, jnp = _jax()
    m = jnp.mean(x, axis=-1, keepdims=True)
    v = jnp.mean(jnp.square(x - m), axis=-1, keepdims=True)
    return (x - m) * (1.0 / jnp.sqrt(v + eps)).astype(x.dtype) * g + b


def batchnorm(x, g, b, axes, eps=1e-5):
    """Training-mode batch norm over `axes` (batch statistics)."""
    _, jnp = _jax()
    m = jnp.mean(x, axis=axes, keepdims=True)
    v = jnp.mean(jnp.square(x - m), axis=axes, keepdims=True)
    return (x - m) / jnp.sqrt(v + eps).astype(x.dtype) * g + b


def conv(x, w, stride=1, groups=1, padding="SAME"):
    """NHWC x HWIO convolution."""
    jax, _ = _jax()
    return jax.lax.conv_general_dilated(
        x, w, (stride, stride), padding,
        dimension_numbers=("NHWC", "HWIO", "NHWC"),
        feature_group_count=groups)


def maxpool(x, k=2):
    jax, jnp = _jax()
    return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max,
                                 (1, k, k, 1), (1, k, k, 1), "VALID")


def avgpool(x, k=2):
    jax, jnp = _jax()
    s = jax.lax.reduce_window(x, 0.0, jax.lax.add,
                              (1, k, k, 1), (1, k, k, 1), "VALID")
    return s / jnp.asarray(k * k, x.dtype)


def relu_mlp(layers, x):
    """Dense layers ({"w", "b"} each) with a relu between them, none after the last."""
    jax, _ = _jax()
    for i, layer in enumerate(layers):
        x = x @ layer["w"] + layer["b"]
        if i < len(layers) - 1:
            x = jax.nn.relu(x)
    return x


# ---------------------------------------------------------------------------
# Models.  Each builder returns (fn, args) with args abstract (ShapeDtypeStruct).


def mlp(widths, batch, dtype, mode):
    jax, jnp = _jax()
    d = dt(dtype)
    params = [{"w": sds((a, b), d), "b": sds((b,), d)} for a, b in zip(widths[:-1], widths[1:])]
    forward = relu_mlp
    x = sds((batch, widths[0]), d)
    if mode == "fwd":
        return (lambda p, x: jax.nn.softmax(forward(p, x).astype(jnp.float32))), (params, x)
    y = sds((batch,), jnp.int32)
    return train_step(lambda p, x, y: xent(forward(p, x), y)), (params, x, y)


def autoencoder(widths, batch, dtype, mode):
    jax, jnp = _jax()
    d = dt(dtype)
    dims = list(widths) + list(reversed(widths[:-1]))
    params = [{"w": sds((a, b), d), "b": sds((b,), d)} for a, b in zip(dims[:-1], dims[1:])]

    def forward(p, x):
        for i, layer in enumerate(p):
            x = x @ layer["w"] + layer["b"]
            x = jax.nn.sigmoid(x) if i == len(p) - 1 else jax.nn.gelu(x)
        return x

    x = sds((batch, widths[0]), d)
    if mode == "fwd":
        return forward, (params, x)

    def loss(p, x):
        r = forward(p, x)
        return jnp.mean(jnp.square((r - x).astype(jnp.float32)))

    return train_step(loss), (params, x)


def cnn(hw, chans, batch, dtype, mode, classes=10):
    """conv3x3-relu-maxpool blocks, then a dense classifier."""
    jax, jnp = _jax()
    d = dt(dtype)
    cs = [3] + list(chans)
    params = {"convs": [{"w": sds((3, 3, a, b), d), "b": sds((b,), d)} for a, b in zip(cs[:-1], cs[1:])]}
    side = hw // (2 ** len(chans))
    params["dense"] = {"w": sds((side * side * cs[-1], classes), d), "b": sds((classes,), d)}

    def forward(p, x):
        for c in p["convs"]:
            x = maxpool(jax.nn.relu(conv(x, c["w"]) + c["b"]))
        x = x.reshape(x.shape[0], -1)
        return x @ p["dense"]["w"] + p["dense"]["b"]

    x = sds((batch, hw, hw, 3), d)
    if mode == "fwd":
        return (lambda p, x: jnp.argmax(forward(p, x), -1)), (params, x)
    y = sds((batch,), jnp.int32)
    return train_step(lambda p, x, y: xent(forward(p, x), y)), (params, x, y)


def resnet(hw, ch, blocks, batch, dtype, mode, classes=10, stages=3):
    """ResNet for small images: stem conv, `stages` stages of `blocks`
    residual blocks (conv-BN-relu-conv-BN + skip; the first block of each
    later stage is strided with a 1x1 projection, channels double), global
    average pool, dense.  Batch norm uses batch statistics (training)."""
    jax, jnp = _jax()
    d = dt(dtype)

    def bn(c):
        return {"g": sds((c,), d), "b": sds((c,), d)}

    params = {"stem": sds((3, 3, 3, ch), d), "stem_bn": bn(ch), "stages": []}
    c_in = ch
    for st in range(stages):
        c = ch * 2 ** st
        stage = []
        for i in range(blocks):
            blk = {"w1": sds((3, 3, c_in, c), d), "bn1": bn(c),
                   "w2": sds((3, 3, c, c), d), "bn2": bn(c)}
            if c_in != c:
                blk["proj"] = sds((1, 1, c_in, c), d)
            stage.append(blk)
            c_in = c
        params["stages"].append(stage)
    params["dense"] = {"w": sds((c_in, classes), d), "b": sds((classes,), d)}
    axes = (0, 1, 2)

    def block(p, x, stride):
        h = jax.nn.relu(batchnorm(conv(x, p["w1"], stride), p["bn1"]["g"], p["bn1"]["b"], axes))
        h = batchnorm(conv(h, p["w2"]), p["bn2"]["g"], p["bn2"]["b"], axes)
        skip = conv(x, p["proj"], stride) if "proj" in p else x
        return jax.nn.relu(h + skip)

    def forward(p, x):
        x = jax.nn.relu(batchnorm(conv(x, p["stem"]), p["stem_bn"]["g"], p["stem_bn"]["b"], axes))
        for st, stage in enumerate(p["stages"]):
            for i, b in enumerate(stage):
                x = block(b, x, 2 if (st > 0 and i == 0) else 1)
        x = jnp.mean(x, axis=(1, 2))
        return x @ p["dense"]["w"] + p["dense"]["b"]

    return classifier(forward, params, sds((batch, hw, hw, 3), d), mode)


def sepconv(hw, chans, batch, dtype, mode, classes=10):
    """MobileNet-style: depthwise 3x3 (feature_group_count=C) + pointwise 1x1,
    batch norm, relu6, strided, global pool."""
    jax, jnp = _jax()
    d = dt(dtype)
    params = {"stem": sds((3, 3, 3, chans[0]), d), "layers": []}
    for a, b in zip(chans[:-1], chans[1:]):
        params["layers"].append({"dw": sds((3, 3, 1, a), d), "pw": sds((1, 1, a, b), d),
                                 "g": sds((b,), d), "b": sds((b,), d)})
    params["dense"] = {"w": sds((chans[-1], classes), d), "b": sds((classes,), d)}

    def forward(p, x):
        x = jax.nn.relu6(conv(x, p["stem"], 2))
        for i, l in enumerate(p["layers"]):
            c = x.shape[-1]
            x = conv(x, l["dw"], 2 if i % 2 else 1, groups=c)
            x = conv(jax.nn.relu6(x), l["pw"])
            x = jax.nn.relu6(batchnorm(x, l["g"], l["b"], (0, 1, 2)))
        x = jnp.mean(x, axis=(1, 2))
        return x @ p["dense"]["w"] + p["dense"]["b"]

    return classifier(forward, params, sds((batch, hw, hw, 3), d), mode)


def _mha(p, x, heads, causal=False):
    jax, jnp = _jax()
    b, t, dm = x.shape
    hd = dm // heads
    qkv = x @ p["wqkv"]  # [b, t, 3*dm]
    q, k, v = jnp.split(qkv, 3, axis=-1)
    q, k, v = (a.reshape(b, t, heads, hd) for a in (q, k, v))
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k) / jnp.sqrt(jnp.asarray(hd, x.dtype))
    if causal:
        mask = jnp.tril(jnp.ones((t, t), bool))
        s = jnp.where(mask, s, jnp.asarray(-1e9, s.dtype))
    a = jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(x.dtype)
    o = jnp.einsum("bhqk,bkhd->bqhd", a, v).reshape(b, t, dm)
    return o @ p["wo"]


def transformer(seq, dm, heads, layers, batch, dtype, mode, causal=False, ff=4, vocab=None):
    """Pre-LN Transformer encoder blocks on [batch, seq, dm] inputs; the
    training loss is a regression onto targets (or next-token cross-entropy
    when `vocab` is given: embedding lookup + tied output projection)."""
    jax, jnp = _jax()
    d = dt(dtype)
    blocks = [{"ln1g": sds((dm,), d), "ln1b": sds((dm,), d), "wqkv": sds((dm, 3 * dm), d),
               "wo": sds((dm, dm), d), "ln2g": sds((dm,), d), "ln2b": sds((dm,), d),
               "w1": sds((dm, ff * dm), d), "b1": sds((ff * dm,), d),
               "w2": sds((ff * dm, dm), d), "b2": sds((dm,), d)} for _ in range(layers)]
    params = {"blocks": blocks, "lng": sds((dm,), d), "lnb": sds((dm,), d)}
    if vocab:
        params["emb"] = sds((vocab, dm), d)
        params["pos"] = sds((seq, dm), d)

    def encode(p, x):
        for blk in p["blocks"]:
            x = x + _mha(blk, layernorm(x, blk["ln1g"], blk["ln1b"]), heads, causal)
            h = layernorm(x, blk["ln2g"], blk["ln2b"])
            x = x + jax.nn.gelu(h @ blk["w1"] + blk["b1"]) @ blk["w2"] + blk["b2"]
        return layernorm(x, p["lng"], p["lnb"])

    if vocab:
        tok = sds((batch, seq), jnp.int32)

        def logits(p, tok):
            x = jnp.take(p["emb"], tok, axis=0) + p["pos"]
            return encode(p, x) @ p["emb"].T

        if mode == "fwd":
            return (lambda p, t: jnp.argmax(logits(p, t), -1)), (params, tok)

        def loss(p, tok, tgt):
            lg = logits(p, tok).reshape(batch * seq, vocab)
            return xent(lg, tgt.reshape(-1))

        return train_step(loss), (params, tok, sds((batch, seq), jnp.int32))

    x = sds((batch, seq, dm), d)
    if mode == "fwd":
        return encode, (params, x)

    def loss(p, x, y):
        return jnp.mean(jnp.square((encode(p, x) - y).astype(jnp.float32)))

    return train_step(loss), (params, x, sds((batch, seq, dm), d))


def rnn(cell, seq, din, hid, batch, dtype, mode, classes=10):
    """LSTM or GRU over a sequence with lax.scan (a while loop with a known
    trip count), classifier on the last state."""
    jax, jnp = _jax()
    d = dt(dtype)
    gates = 4 if cell == "lstm" else 3
    params = {"wx": sds((din, gates * hid), d), "wh": sds((hid, gates * hid), d),
              "b": sds((gates * hid,), d), "wo": sds((hid, classes), d), "bo": sds((classes,), d)}

    def lstm_step(p, carry, x):
        h, c = carry
        z = x @ p["wx"] + h @ p["wh"] + p["b"]
        i, f, g, o = jnp.split(z, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h

    def gru_step(p, carry, x):
        (h,) = carry
        zx = x @ p["wx"] + p["b"]
        zh = h @ p["wh"]
        rx, ux, nx = jnp.split(zx, 3, axis=-1)
        rh, uh, nh = jnp.split(zh, 3, axis=-1)
        r = jax.nn.sigmoid(rx + rh)
        u = jax.nn.sigmoid(ux + uh)
        n = jnp.tanh(nx + r * nh)
        h = (1 - u) * n + u * h
        return (h,), h

    stepf = lstm_step if cell == "lstm" else gru_step

    def forward(p, xs):  # xs: [seq, batch, din]
        h0 = jnp.zeros((xs.shape[1], hid), d)
        carry = (h0, h0) if cell == "lstm" else (h0,)
        carry, hs = jax.lax.scan(lambda c, x: stepf(p, c, x), carry, xs)
        return carry[0] @ p["wo"] + p["bo"], hs

    xs = sds((seq, batch, din), d)
    if mode == "fwd":
        return forward, (params, xs)
    y = sds((batch,), jnp.int32)
    return train_step(lambda p, xs, y: xent(forward(p, xs)[0], y)), (params, xs, y)


def embedattn(vocab, dm, seq, batch, dtype, mode, classes=16):
    """Bag of tokens: embedding lookup (gather), single-query attention
    pooling, dense classifier.  Its gradient scatter-adds into the table."""
    jax, jnp = _jax()
    d = dt(dtype)
    params = {"emb": sds((vocab, dm), d), "wk": sds((dm, dm), d), "wv": sds((dm, dm), d),
              "q": sds((dm,), d), "wo": sds((dm, classes), d), "bo": sds((classes,), d)}

    def forward(p, tok):
        e = jnp.take(p["emb"], tok, axis=0)  # [b, t, dm]
        k = e @ p["wk"]
        v = e @ p["wv"]
        s = jnp.einsum("btd,d->bt", k, p["q"]) / jnp.sqrt(jnp.asarray(dm, d))
        s = jnp.where(tok > 0, s, jnp.asarray(-1e9, d))  # padding id 0
        a = jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(d)
        pooled = jnp.einsum("bt,btd->bd", a, v)
        return jnp.tanh(pooled) @ p["wo"] + p["bo"]

    tok = sds((batch, seq), jnp.int32)
    if mode == "fwd":
        return forward, (params, tok)
    y = sds((batch,), jnp.int32)
    return train_step(lambda p, t, y: xent(forward(p, t), y)), (params, tok, y)


def moe(tokens, dm, experts, hid, dtype, mode):
    """Mixture of experts with top-1 routing: tokens are sorted by expert
    (argsort + gather), run through their expert's MLP in fixed-capacity
    slots (scatter), and combined back with a segment-sum (scatter-add)."""
    jax, jnp = _jax()
    d = dt(dtype)
    cap = tokens // experts
    params = {"router": sds((dm, experts), d), "w1": sds((experts, dm, hid), d),
              "w2": sds((experts, hid, dm), d)}

    def forward(p, x):
        logits = (x @ p["router"]).astype(jnp.float32)
        gate = jax.nn.softmax(logits, -1)
        e = jnp.argmax(logits, -1)  # [tokens]
        g = jnp.take_along_axis(gate, e[:, None], -1)[:, 0].astype(d)
        order = jnp.argsort(e)
        es = e[order]
        # slot of each sorted token inside its expert's buffer
        first = jnp.searchsorted(es, jnp.arange(experts))
        slot = jnp.arange(tokens) - first[es]
        keep = slot < cap
        slot = jnp.where(keep, slot, cap)  # overflow -> dropped slot
        buf = jnp.zeros((experts, cap + 1, dm), d).at[es, slot].set(x[order])
        h = jax.nn.gelu(jnp.einsum("ecd,edh->ech", buf[:, :cap], p["w1"]))
        out = jnp.einsum("ech,ehd->ecd", h, p["w2"])
        out = jnp.concatenate([out, jnp.zeros((experts, 1, dm), d)], axis=1)
        ys = out[es, slot] * keep[:, None].astype(d)
        y = jax.ops.segment_sum(ys, order, num_segments=tokens)
        return x + y * g[:, None]

    x = sds((tokens, dm), d)
    if mode == "fwd":
        return forward, (params, x)

    def loss(p, x, t):
        return jnp.mean(jnp.square((forward(p, x) - t).astype(jnp.float32)))

    return train_step(loss), (params, x, sds((tokens, dm), d))


def normheavy(seq, dm, batch, dtype, mode, reps=3):
    """LayerNorm + softmax + RMSNorm chains with gated units: reduction-heavy
    kernels, little matmul."""
    jax, jnp = _jax()
    d = dt(dtype)
    params = [{"g": sds((dm,), d), "b": sds((dm,), d), "r": sds((dm,), d), "w": sds((dm, dm), d)}
              for _ in range(reps)]

    def forward(p, x):
        for l in p:
            h = layernorm(x, l["g"], l["b"])
            s = jax.nn.softmax(h.astype(jnp.float32), axis=-1).astype(d)
            ms = jnp.mean(jnp.square(x), -1, keepdims=True)
            r = x * jax.lax.rsqrt(ms + 1e-6).astype(d) * l["r"]
            x = x + jax.nn.silu(r @ l["w"]) * s * dm
            x = x - jax.nn.logsumexp(x.astype(jnp.float32), axis=1, keepdims=True).astype(d)
        return x

    x = sds((batch, seq, dm), d)
    if mode == "fwd":
        return forward, (params, x)
    return train_step(lambda p, x: jnp.mean(forward(p, x).astype(jnp.float32) ** 2)), (params, x)


def bnmlp(widths, batch, dtype, mode):
    """Dense net with batch norm (training statistics) and dropout-free
    residual connections: a batch-norm training step."""
    jax, _ = _jax()
    d = dt(dtype)
    w = widths[1]
    params = {"inp": sds((widths[0], w), d),
              "layers": [{"w": sds((w, w), d), "g": sds((w,), d), "b": sds((w,), d)}
                         for _ in range(len(widths) - 2)],
              "out": sds((w, widths[-1]), d)}

    def forward(p, x):
        x = x @ p["inp"]
        for l in p["layers"]:
            x = x + jax.nn.relu(batchnorm(x @ l["w"], l["g"], l["b"], (0,)))
        return x @ p["out"]

    return classifier(forward, params, sds((batch, widths[0]), d), mode)


def densenet(hw, growth, layers, blocks, batch, dtype, mode, classes=10):
    """DenseNet: in each dense block every layer (BN-relu-conv3x3) sees the
    concatenation of all earlier feature maps, so channel counts grow layer
    by layer; transitions are BN-relu-conv1x1 (halving) + average pool."""
    jax, jnp = _jax()
    d = dt(dtype)
    c = 2 * growth
    params = {"stem": sds((3, 3, 3, c), d), "blocks": []}
    for bi in range(blocks):
        blk = {"layers": [], "trans": None}
        for _ in range(layers):
            blk["layers"].append({"g": sds((c,), d), "b": sds((c,), d),
                                  "w": sds((3, 3, c, growth), d)})
            c += growth
        if bi < blocks - 1:
            blk["trans"] = {"g": sds((c,), d), "b": sds((c,), d), "w": sds((1, 1, c, c // 2), d)}
            c //= 2
        params["blocks"].append(blk)
    params["g"], params["b"] = sds((c,), d), sds((c,), d)
    params["dense"] = {"w": sds((c, classes), d), "b": sds((classes,), d)}
    axes = (0, 1, 2)

    def forward(p, x):
        x = conv(x, p["stem"])
        for blk in p["blocks"]:
            for l in blk["layers"]:
                h = conv(jax.nn.relu(batchnorm(x, l["g"], l["b"], axes)), l["w"])
                x = jnp.concatenate([x, h], axis=-1)
            t = blk["trans"]
            if t is not None:
                x = avgpool(conv(jax.nn.relu(batchnorm(x, t["g"], t["b"], axes)), t["w"]))
        x = jnp.mean(jax.nn.relu(batchnorm(x, p["g"], p["b"], axes)), axis=(1, 2))
        return x @ p["dense"]["w"] + p["dense"]["b"]

    return classifier(forward, params, sds((batch, hw, hw, 3), d), mode)


def unet(hw, ch, depth, batch, dtype, mode, classes=4):
    """U-Net segmentation: conv-relu pairs at each level of an encoder
    (max-pooled) and a decoder (transposed-conv upsampling, skip
    concatenation), per-pixel softmax cross-entropy."""
    jax, jnp = _jax()
    d = dt(dtype)

    def pair(a, b):
        return {"w1": sds((3, 3, a, b), d), "b1": sds((b,), d),
                "w2": sds((3, 3, b, b), d), "b2": sds((b,), d)}

    params = {"down": [], "up": []}
    c_in = 3
    for l in range(depth):
        params["down"].append(pair(c_in, ch * 2 ** l))
        c_in = ch * 2 ** l
    params["mid"] = pair(c_in, 2 * c_in)
    c_in *= 2
    for l in reversed(range(depth)):
        c = ch * 2 ** l
        params["up"].append({"t": sds((2, 2, c_in, c), d), "pair": pair(2 * c, c)})
        c_in = c
    params["head"] = sds((1, 1, c_in, classes), d)

    def run_pair(p, x):
        x = jax.nn.relu(conv(x, p["w1"]) + p["b1"])
        return jax.nn.relu(conv(x, p["w2"]) + p["b2"])

    def forward(p, x):
        skips = []
        for q in p["down"]:
            x = run_pair(q, x)
            skips.append(x)
            x = maxpool(x)
        x = run_pair(p["mid"], x)
        for q, skip in zip(p["up"], reversed(skips)):
            x = jax.lax.conv_transpose(x, q["t"], (2, 2), "SAME",
                                       dimension_numbers=("NHWC", "HWIO", "NHWC"))
            x = run_pair(q["pair"], jnp.concatenate([x, skip], axis=-1))
        return conv(x, p["head"])

    x = sds((batch, hw, hw, 3), d)
    if mode == "fwd":
        return (lambda p, x: jnp.argmax(forward(p, x), -1)), (params, x)

    def loss(p, x, y):
        lg = forward(p, x).reshape(-1, classes)
        return xent(lg, y.reshape(-1))

    return train_step(loss), (params, x, sds((batch, hw, hw), jnp.int32))


def inception(hw, ch, modules, batch, dtype, mode, classes=10):
    """GoogLeNet-style: modules with four parallel branches (1x1; 1x1-3x3;
    1x1-5x5; 3x3 max pool-1x1) concatenated, strided reductions between
    modules, global average pool."""
    jax, jnp = _jax()
    d = dt(dtype)
    params = {"stem": sds((3, 3, 3, ch), d), "mods": []}
    c = ch
    for i in range(modules):
        o = ch * (i + 2) // 2  # branch width grows
        params["mods"].append({
            "b1": sds((1, 1, c, o), d),
            "b3r": sds((1, 1, c, o // 2), d), "b3": sds((3, 3, o // 2, o), d),
            "b5r": sds((1, 1, c, o // 4), d), "b5": sds((5, 5, o // 4, o // 2), d),
            "bp": sds((1, 1, c, o // 2), d),
            "g": sds((3 * o,), d), "b": sds((3 * o,), d)})
        c = o + o + o // 2 + o // 2
    params["dense"] = {"w": sds((c, classes), d), "b": sds((classes,), d)}

    def pool3(x):
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 3, 3, 1), (1, 1, 1, 1), "SAME")

    def forward(p, x):
        x = jax.nn.relu(conv(x, p["stem"]))
        for i, m in enumerate(p["mods"]):
            r = jax.nn.relu
            y = jnp.concatenate([
                r(conv(x, m["b1"])),
                r(conv(r(conv(x, m["b3r"])), m["b3"])),
                r(conv(r(conv(x, m["b5r"])), m["b5"])),
                r(conv(pool3(x), m["bp"]))], axis=-1)
            x = maxpool(y) if i % 2 == 1 else y
        x = jnp.mean(x, axis=(1, 2))
        return x @ p["dense"]["w"] + p["dense"]["b"]

    return classifier(forward, params, sds((batch, hw, hw, 3), d), mode)


def gnn(nodes, edges, widths, dtype, mode, classes=8):
    """GraphSAGE-style message passing on an edge list: gather neighbour
    states (gather), mean-aggregate them per receiving node (segment sum =
    scatter-add), combine with the node's own state; node classification."""
    jax, jnp = _jax()
    d = dt(dtype)
    params = [{"self": sds((a, b), d), "nbr": sds((a, b), d), "b": sds((b,), d)}
              for a, b in zip(widths[:-1], widths[1:])]
    params.append({"out": sds((widths[-1], classes), d)})

    def forward(p, h, senders, receivers):
        deg = jax.ops.segment_sum(jnp.ones((edges,), d), receivers, num_segments=nodes)
        inv = (1.0 / jnp.maximum(deg, 1.0))[:, None]
        for l in p[:-1]:
            msg = jax.ops.segment_sum(h[senders], receivers, num_segments=nodes) * inv
            h = jax.nn.relu(h @ l["self"] + msg @ l["nbr"] + l["b"])
            h = h / (jnp.linalg.norm(h, axis=-1, keepdims=True) + 1e-6)
        return h @ p[-1]["out"]

    args = (params, sds((nodes, widths[0]), d), sds((edges,), jnp.int32), sds((edges,), jnp.int32))
    if mode == "fwd":
        return forward, args
    y = sds((nodes,), jnp.int32)
    return train_step(lambda p, h, s, r, y: xent(forward(p, h, s, r), y)), args + (y,)


def seq2seq(src, tgt, vocab, emb, hid, batch, dtype, mode):
    """GRU encoder and attention GRU decoder (teacher forcing), both with
    lax.scan; the decoder attends over all encoder states at each step."""
    jax, jnp = _jax()
    d = dt(dtype)

    def gru(din):
        return {"wx": sds((din, 3 * hid), d), "wh": sds((hid, 3 * hid), d), "b": sds((3 * hid,), d)}

    params = {"emb_s": sds((vocab, emb), d), "emb_t": sds((vocab, emb), d),
              "enc": gru(emb), "dec": gru(emb + hid), "wa": sds((hid, hid), d),
              "out": sds((2 * hid, vocab), d)}

    def cell(p, h, x):
        rx, ux, nx = jnp.split(x @ p["wx"] + p["b"], 3, axis=-1)
        rh, uh, nh = jnp.split(h @ p["wh"], 3, axis=-1)
        r, u = jax.nn.sigmoid(rx + rh), jax.nn.sigmoid(ux + uh)
        return (1 - u) * jnp.tanh(nx + r * nh) + u * h

    def forward(p, s_tok, t_tok):
        es = jnp.take(p["emb_s"], s_tok, axis=0).transpose(1, 0, 2)  # [src, b, emb]
        h0 = jnp.zeros((batch, hid), d)

        def enc_step(h, x):
            h = cell(p["enc"], h, x)
            return h, h

        h, enc = jax.lax.scan(enc_step, h0, es)  # enc: [src, b, hid]
        keys = enc @ p["wa"]
        et = jnp.take(p["emb_t"], t_tok, axis=0).transpose(1, 0, 2)
        ctx0 = jnp.zeros((batch, hid), d)

        def dec_step(carry, x):
            h, ctx = carry
            h = cell(p["dec"], h, jnp.concatenate([x, ctx], -1))
            s = jnp.einsum("sbh,bh->bs", keys, h)
            a = jax.nn.softmax(s.astype(jnp.float32), -1).astype(d)
            ctx = jnp.einsum("bs,sbh->bh", a, enc)
            return (h, ctx), jnp.concatenate([h, ctx], -1)

        _, outs = jax.lax.scan(dec_step, (h, ctx0), et)  # [tgt, b, 2*hid]
        return outs @ p["out"]

    args = (params, sds((batch, src), jnp.int32), sds((batch, tgt), jnp.int32))
    if mode == "fwd":
        return forward, args

    def loss(p, s, t, y):
        lg = forward(p, s, t).reshape(-1, vocab)
        return xent(lg, y.T.reshape(-1))

    return train_step(loss), args + (sds((batch, tgt), jnp.int32),)


def vit(hw, patch, dm, heads, layers, batch, dtype, mode, classes=10):
    """Vision Transformer: patch embedding (strided conv), class token and
    position embeddings, pre-LN encoder blocks, classifier on the class
    token."""
    jax, jnp = _jax()
    d = dt(dtype)
    n = (hw // patch) ** 2 + 1
    _, (tparams, _x) = transformer(n, dm, heads, layers, batch, dtype, "fwd")
    params = {"enc": tparams, "patch": sds((patch, patch, 3, dm), d), "cls": sds((dm,), d),
              "pos": sds((n, dm), d), "head": sds((dm, classes), d)}
    enc_fn, _ = transformer(n, dm, heads, layers, batch, dtype, "fwd")

    def forward(p, img):
        x = conv(img, p["patch"], patch, padding="VALID").reshape(batch, n - 1, dm)
        x = jnp.concatenate([jnp.broadcast_to(p["cls"], (batch, 1, dm)), x], axis=1) + p["pos"]
        return enc_fn(p["enc"], x)[:, 0] @ p["head"]

    return classifier(forward, params, sds((batch, hw, hw, 3), d), mode)


def wavenet(seq, ch, dilations, batch, dtype, mode, classes=64):
    """WaveNet: a stack of dilated causal 1-D convolutions (one dilation per
    layer) with gated tanh*sigmoid units, residual and skip connections,
    per-step softmax over quantised sample values."""
    jax, jnp = _jax()
    d = dt(dtype)
    params = {"inp": sds((1, classes, ch), d), "layers": [],
              "o1": sds((1, ch, ch), d), "o2": sds((1, ch, classes), d)}
    for _ in dilations:
        params["layers"].append({"f": sds((2, ch, ch), d), "g": sds((2, ch, ch), d),
                                 "res": sds((1, ch, ch), d), "skip": sds((1, ch, ch), d)})

    def conv1d(x, w, dil=1):
        k = w.shape[0]
        x = jnp.pad(x, ((0, 0), ((k - 1) * dil, 0), (0, 0)))  # causal
        return jax.lax.conv_general_dilated(x, w, (1,), "VALID", rhs_dilation=(dil,),
                                            dimension_numbers=("NWC", "WIO", "NWC"))

    def forward(p, x):
        x = conv1d(jax.nn.one_hot(x, classes, dtype=d), p["inp"])
        skip = 0
        for l, dil in zip(p["layers"], dilations):
            h = jnp.tanh(conv1d(x, l["f"], dil)) * jax.nn.sigmoid(conv1d(x, l["g"], dil))
            x = x + conv1d(h, l["res"])
            skip = skip + conv1d(h, l["skip"])
        return conv1d(jax.nn.relu(conv1d(jax.nn.relu(skip), p["o1"])), p["o2"])

    x = sds((batch, seq), jnp.int32)
    if mode == "fwd":
        return forward, (params, x)

    def loss(p, x, y):
        return xent(forward(p, x).reshape(-1, classes), y.reshape(-1))

    return train_step(loss), (params, x, sds((batch, seq), jnp.int32))


def mbconv(hw, stages, batch, dtype, mode, classes=10):
    """EfficientNet-style: MBConv blocks (1x1 expansion, depthwise kxk,
    squeeze-and-excitation, 1x1 projection, swish, batch norm) whose kernel
    size, expansion and width change from stage to stage."""
    jax, jnp = _jax()
    d = dt(dtype)
    c0 = stages[0][2]
    params = {"stem": sds((3, 3, 3, c0), d), "blocks": []}
    c = c0
    for k, e, out, stride in stages:
        m = c * e
        params["blocks"].append({
            "exp": sds((1, 1, c, m), d), "g1": sds((m,), d), "b1": sds((m,), d),
            "dw": sds((k, k, 1, m), d), "g2": sds((m,), d), "b2": sds((m,), d),
            "se1": sds((m, max(4, c // 4)), d), "se2": sds((max(4, c // 4), m), d),
            "proj": sds((1, 1, m, out), d), "g3": sds((out,), d), "b3": sds((out,), d)})
        c = out
    params["dense"] = {"w": sds((c, classes), d), "b": sds((classes,), d)}
    axes = (0, 1, 2)
    sw = jax.nn.swish

    def forward(p, x):
        x = sw(conv(x, p["stem"], 2))
        for blk, (k, e, out, stride) in zip(p["blocks"], stages):
            h = sw(batchnorm(conv(x, blk["exp"]), blk["g1"], blk["b1"], axes))
            h = sw(batchnorm(conv(h, blk["dw"], stride, groups=h.shape[-1]),
                             blk["g2"], blk["b2"], axes))
            se = jax.nn.sigmoid(sw(jnp.mean(h, axis=(1, 2)) @ blk["se1"]) @ blk["se2"])
            h = h * se[:, None, None, :]
            h = batchnorm(conv(h, blk["proj"]), blk["g3"], blk["b3"], axes)
            x = x + h if (stride == 1 and h.shape == x.shape) else h
        x = jnp.mean(x, axis=(1, 2))
        return x @ p["dense"]["w"] + p["dense"]["b"]

    return classifier(forward, params, sds((batch, hw, hw, 3), d), mode)


def convnext(hw, dims, batch, dtype, mode, classes=10):
    """ConvNeXt-style: patchify stem, per stage a block of depthwise 7x7 conv,
    layer norm, inverted-bottleneck MLP (gelu) and residual, downsampling by
    layer norm + strided 2x2 conv between stages."""
    jax, jnp = _jax()
    d = dt(dtype)
    params = {"stem": sds((4, 4, 3, dims[0]), d), "stages": []}
    prev = dims[0]
    for c in dims:
        params["stages"].append({
            "down": None if c == prev and not params["stages"] == [] else
            {"g": sds((prev,), d), "b": sds((prev,), d), "w": sds((2, 2, prev, c), d)},
            "dw": sds((7, 7, 1, c), d), "g": sds((c,), d), "b": sds((c,), d),
            "w1": sds((c, 4 * c), d), "w2": sds((4 * c, c), d), "scale": sds((c,), d)})
        prev = c
    params["stages"][0]["down"] = None
    params["g"], params["b"] = sds((prev,), d), sds((prev,), d)
    params["head"] = sds((prev, classes), d)

    def forward(p, x):
        x = conv(x, p["stem"], 4, padding="VALID")
        for st in p["stages"]:
            if st["down"] is not None:
                x = conv(layernorm(x, st["down"]["g"], st["down"]["b"]), st["down"]["w"], 2,
                         padding="VALID")
            h = conv(x, st["dw"], groups=x.shape[-1])
            h = layernorm(h, st["g"], st["b"])
            h = jax.nn.gelu(h @ st["w1"]) @ st["w2"]
            x = x + h * st["scale"]
        x = layernorm(jnp.mean(x, axis=(1, 2)), p["g"], p["b"])
        return x @ p["head"]

    return classifier(forward, params, sds((batch, hw, hw, 3), d), mode)


# Families added on 2026-11-27, after the splits were drawn: they train in
# both splits (LATE_FAMILIES below), so that the splits' validation and test
# programs stay what every figure before was measured on.


def mixer(hw, patch, dm, tok_hid, ch_hid, layers, batch, dtype, mode, classes=10):
    """MLP-Mixer: patches embedded by a dense layer; each block mixes
    across tokens (an MLP over the transposed token axis), then across
    channels, each after a layer norm and with a skip; mean over tokens."""
    jax, jnp = _jax()
    d = dt(dtype)
    side = hw // patch
    n, pd = side * side, patch * patch * 3
    params = {"embed": sds((pd, dm), d), "g": sds((dm,), d), "b": sds((dm,), d),
              "head": sds((dm, classes), d),
              "blocks": [{"g1": sds((dm,), d), "b1": sds((dm,), d),
                          "t1": sds((n, tok_hid), d), "t2": sds((tok_hid, n), d),
                          "g2": sds((dm,), d), "b2": sds((dm,), d),
                          "c1": sds((dm, ch_hid), d), "c2": sds((ch_hid, dm), d)}
                         for _ in range(layers)]}

    def forward(p, x):
        b = x.shape[0]
        x = x.reshape(b, side, patch, side, patch, 3).transpose(0, 1, 3, 2, 4, 5)
        x = x.reshape(b, n, pd) @ p["embed"]
        for blk in p["blocks"]:
            y = layernorm(x, blk["g1"], blk["b1"]).transpose(0, 2, 1)  # [b, dm, n]
            x = x + (jax.nn.gelu(y @ blk["t1"]) @ blk["t2"]).transpose(0, 2, 1)
            y = layernorm(x, blk["g2"], blk["b2"])
            x = x + jax.nn.gelu(y @ blk["c1"]) @ blk["c2"]
        return layernorm(jnp.mean(x, axis=1), p["g"], p["b"]) @ p["head"]

    return classifier(forward, params, sds((batch, hw, hw, 3), d), mode)


def pointnet(points, widths, batch, dtype, mode, classes=16):
    """PointNet classifier: a small T-net predicts a 3x3 transform of each
    cloud (a batched matmul); a shared per-point MLP with batch norm (dense
    layers over [batch, points, channels]), max-pooled over the points (a
    reduce-max), then a dense head."""
    jax, jnp = _jax()
    d = dt(dtype)
    cs = [3] + list(widths)

    def shared(a, b):
        return {"w": sds((a, b), d), "g": sds((b,), d), "b": sds((b,), d)}

    params = {"tnet": [shared(3, 32), shared(32, 64)], "tout": sds((64, 9), d),
              "mlp": [shared(a, b) for a, b in zip(cs[:-1], cs[1:])],
              "head1": sds((cs[-1], 128), d), "head2": sds((128, classes), d)}

    def point_mlp(layers, x):
        for l in layers:
            x = jax.nn.relu(batchnorm(x @ l["w"], l["g"], l["b"], (0, 1)))
        return x

    def forward(p, x):
        t = jnp.max(point_mlp(p["tnet"], x), axis=1) @ p["tout"]
        t = t.reshape(-1, 3, 3) + jnp.eye(3, dtype=x.dtype)
        x = jnp.einsum("bnc,bcd->bnd", x, t)
        x = jnp.max(point_mlp(p["mlp"], x), axis=1)
        return jax.nn.relu(x @ p["head1"]) @ p["head2"]

    return classifier(forward, params, sds((batch, points, 3), d), mode)


def recsys(tables, vocab, dim, dense_in, bottom, top, batch, dtype, mode):
    """DLRM-style click model: dense features through a bottom MLP, one
    embedding lookup per sparse feature (gathers, whose gradients are
    scatter-adds into the tables), dot products between every pair of
    feature vectors (a batched matmul, its upper triangle gathered), a top
    MLP and a sigmoid cross-entropy."""
    jax, jnp = _jax()
    import numpy as np

    d = dt(dtype)
    bw = [dense_in] + list(bottom) + [dim]
    f = tables + 1
    iu, ju = np.triu_indices(f, 1)
    tw = [dim + len(iu)] + list(top) + [1]
    params = {"emb": [sds((vocab, dim), d) for _ in range(tables)],
              "bottom": [{"w": sds((a, b), d), "b": sds((b,), d)} for a, b in zip(bw[:-1], bw[1:])],
              "top": [{"w": sds((a, b), d), "b": sds((b,), d)} for a, b in zip(tw[:-1], tw[1:])]}

    def forward(p, x, ids):
        z = jax.nn.relu(relu_mlp(p["bottom"], x))
        feats = jnp.stack([z] + [e[ids[:, t]] for t, e in enumerate(p["emb"])], axis=1)
        inter = jnp.einsum("bfd,bgd->bfg", feats, feats)[:, iu, ju]
        return relu_mlp(p["top"], jnp.concatenate([z, inter], axis=1))[:, 0]

    args = (params, sds((batch, dense_in), d), sds((batch, tables), jnp.int32))
    if mode == "fwd":
        return (lambda p, x, ids: jax.nn.sigmoid(forward(p, x, ids))), args

    def loss(p, x, ids, y):
        logit = forward(p, x, ids).astype(jnp.float32)
        return jnp.mean(jnp.maximum(logit, 0) - logit * y + jnp.log1p(jnp.exp(-jnp.abs(logit))))

    return train_step(loss), args + (sds((batch,), jnp.float32),)


def ssm(seq, dm, state, layers, batch, dtype, mode, classes=10):
    """A stack of diagonal linear state-space layers (LRU/S5 style): the
    recurrence h_t = a * h_(t-1) + B x_t runs as jax.lax.associative_scan
    (log-depth strided slices, pads and products, no loop); y = C h + D x,
    a GLU, a skip and a layer norm; mean over time, dense."""
    jax, jnp = _jax()
    d = dt(dtype)
    params = {"layers": [{"loga": sds((state,), d), "B": sds((dm, state), d),
                          "C": sds((state, dm), d), "D": sds((dm,), d),
                          "glu": sds((dm, 2 * dm), d), "g": sds((dm,), d), "b": sds((dm,), d)}
                         for _ in range(layers)],
              "head": sds((dm, classes), d)}

    def combine(e1, e2):
        a1, b1 = e1
        a2, b2 = e2
        return a1 * a2, a2 * b1 + b2

    def forward(p, x):
        for l in p["layers"]:
            u = x @ l["B"]                                   # [b, t, state]
            a = jnp.broadcast_to(jnp.exp(-jnp.exp(l["loga"])), u.shape)
            _, h = jax.lax.associative_scan(combine, (a, u), axis=1)
            y = h @ l["C"] + x * l["D"]
            g, v = jnp.split(y @ l["glu"], 2, axis=-1)
            x = layernorm(x + v * jax.nn.sigmoid(g), l["g"], l["b"])
        return jnp.mean(x, axis=1) @ p["head"]

    return classifier(forward, params, sds((batch, seq, dm), d), mode)


def conv3d(side, frames, chans, batch, dtype, mode, classes=10):
    """C3D-style video classifier: 3x3x3 convolutions over (frames, height,
    width) with relu, 2x2x2 max pooling after each, global average, dense."""
    jax, jnp = _jax()
    d = dt(dtype)
    cs = [3] + list(chans)
    params = {"convs": [{"w": sds((3, 3, 3, a, b), d), "b": sds((b,), d)}
                        for a, b in zip(cs[:-1], cs[1:])],
              "head": sds((cs[-1], classes), d)}

    def forward(p, x):
        for c in p["convs"]:
            x = jax.lax.conv_general_dilated(x, c["w"], (1, 1, 1), "SAME",
                                             dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))
            x = jax.nn.relu(x + c["b"])
            x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 2, 1),
                                      (1, 2, 2, 2, 1), "VALID")
        return jnp.mean(x, axis=(1, 2, 3)) @ p["head"]

    return classifier(forward, params, sds((batch, frames, side, side, 3), d), mode)


def dcgan(side, zdim, ch, batch, dtype, mode):
    """A DCGAN training step: the generator upsamples a latent vector with
    strided transposed convolutions (batch norm, relu, tanh out); the
    discriminator downsamples with strided convolutions (leaky relu). One
    step takes the discriminator's loss on real and generated images and
    the generator's non-saturating loss, each network's gradient from its
    own loss (stop_gradient on the other's weights)."""
    jax, jnp = _jax()
    d = dt(dtype)
    s0 = side // 8
    gch = [4 * ch, 2 * ch, ch, 3]
    dch = [3, ch, 2 * ch, 4 * ch]
    params = {"g": {"proj": sds((zdim, s0 * s0 * gch[0]), d),
                    "up": [{"w": sds((4, 4, a, b), d), "g": sds((b,), d), "b": sds((b,), d)}
                           for a, b in zip(gch[:-1], gch[1:])]},
              "d": {"down": [sds((4, 4, a, b), d) for a, b in zip(dch[:-1], dch[1:])],
                    "out": sds((s0 * s0 * dch[-1], 1), d)}}

    def generate(g, z):
        x = jax.nn.relu(z @ g["proj"]).reshape(z.shape[0], s0, s0, gch[0])
        for i, l in enumerate(g["up"]):
            x = jax.lax.conv_transpose(x, l["w"], (2, 2), "SAME",
                                       dimension_numbers=("NHWC", "HWIO", "NHWC"))
            if i < len(g["up"]) - 1:
                x = jax.nn.relu(batchnorm(x, l["g"], l["b"], (0, 1, 2)))
        return jnp.tanh(x)

    def discriminate(dp, x):
        for w in dp["down"]:
            x = jax.nn.leaky_relu(conv(x, w, 2), 0.2)
        return (x.reshape(x.shape[0], -1) @ dp["out"])[:, 0].astype(jnp.float32)

    def softplus(v):
        return jnp.maximum(v, 0) + jnp.log1p(jnp.exp(-jnp.abs(v)))

    args = (params, sds((batch, side, side, 3), d), sds((batch, zdim), d))
    if mode == "fwd":
        return (lambda p, real, z: generate(p["g"], z)), args

    def loss(p, real, z):
        sg = jax.lax.stop_gradient
        fake = generate(p["g"], z)
        d_loss = (jnp.mean(softplus(-discriminate(p["d"], real)))
                  + jnp.mean(softplus(discriminate(p["d"], sg(fake)))))
        g_loss = jnp.mean(softplus(-discriminate(jax.tree_util.tree_map(sg, p["d"]), fake)))
        return d_loss + g_loss

    return train_step(loss), args


# ---------------------------------------------------------------------------
# The program list.

def sc(x, k, q=1):
    """x scaled by k, rounded to a multiple of q (at least q): a model's size
    at a sweep's scale (x itself at k = 1)."""
    return max(q, int(round(x * k / q)) * q)


def scw(widths, k, q=8):
    """Layer widths scaled by k but the last (the classes)."""
    return [sc(w, k, q) for w in widths[:-1]] + [widths[-1]]


# family -> size label -> (builder(batch, dtype, mode, k=1), default batch).
# k scales the family's size axis (image side, sequence length or layer
# widths; see sweep_spec), rounded so that the model stays well formed:
# the example programs are k = 1.
FAMILIES = {
    "mlp": {
        "s": (lambda b, t, m, k=1: mlp(scw([256, 512, 384, 10], k), b, t, m), 64),
        "m": (lambda b, t, m, k=1: mlp(scw([784, 1024, 768, 512, 256, 10], k), b, t, m), 128),
        "l": (lambda b, t, m, k=1: mlp(scw([1024, 1536, 1280, 1024, 768, 512, 1000], k),
                                       b, t, m), 128),
    },
    "autoenc": {
        "s": (lambda b, t, m, k=1: autoencoder([sc(w, k, 8) for w in [784, 256, 64]], b, t, m),
              64),
        "m": (lambda b, t, m, k=1: autoencoder([sc(w, k, 8) for w in [1024, 512, 256, 32]],
                                               b, t, m), 128),
    },
    "cnn": {
        "s": (lambda b, t, m, k=1: cnn(sc(32, k, 4), [16, 32], b, t, m), 16),
        "m": (lambda b, t, m, k=1: cnn(sc(32, k, 8), [32, 64, 128], b, t, m), 32),
        "l": (lambda b, t, m, k=1: cnn(sc(64, k, 16), [16, 32, 64, 128], b, t, m), 16),
    },
    "resnet": {
        "s": (lambda b, t, m, k=1: resnet(sc(16, k, 4), 16, 1, b, t, m), 16),
        "m": (lambda b, t, m, k=1: resnet(sc(32, k, 4), 16, 2, b, t, m), 16),
        "l": (lambda b, t, m, k=1: resnet(sc(32, k, 4), 32, 2, b, t, m), 16),
    },
    "sepconv": {
        "s": (lambda b, t, m, k=1: sepconv(sc(32, k, 4), [16, 32, 64], b, t, m), 16),
        "m": (lambda b, t, m, k=1: sepconv(sc(64, k, 4), [32, 64, 96, 96], b, t, m), 16),
    },
    "transformer": {
        "s": (lambda b, t, m, k=1: transformer(sc(64, k, 8), 128, 4, 1, b, t, m), 8),
        "m": (lambda b, t, m, k=1: transformer(sc(128, k, 8), 256, 8, 2, b, t, m), 8),
    },
    "gpt": {
        "s": (lambda b, t, m, k=1: transformer(sc(64, k, 8), 128, 4, 2, b, t, m, causal=True,
                                               vocab=2048), 8),
        "m": (lambda b, t, m, k=1: transformer(sc(128, k, 8), 192, 6, 2, b, t, m, causal=True,
                                               vocab=2048), 4),
    },
    "lstm": {
        "s": (lambda b, t, m, k=1: rnn("lstm", sc(32, k, 4), 64, 128, b, t, m), 16),
        "m": (lambda b, t, m, k=1: rnn("lstm", sc(64, k, 4), 128, 256, b, t, m), 32),
    },
    "gru": {
        "s": (lambda b, t, m, k=1: rnn("gru", sc(32, k, 4), 64, 128, b, t, m), 16),
        "m": (lambda b, t, m, k=1: rnn("gru", sc(48, k, 4), 96, 192, b, t, m), 32),
    },
    "embedattn": {
        "s": (lambda b, t, m, k=1: embedattn(5000, 64, sc(64, k, 8), b, t, m), 32),
        "m": (lambda b, t, m, k=1: embedattn(20000, 128, sc(128, k, 8), b, t, m), 32),
    },
    "moe": {
        "s": (lambda b, t, m, k=1: moe(b, sc(128, k, 8), 4, sc(256, k, 8), t, m), 256),
        "m": (lambda b, t, m, k=1: moe(b, sc(256, k, 8), 8, sc(512, k, 8), t, m), 512),
    },
    "normheavy": {
        "s": (lambda b, t, m, k=1: normheavy(sc(64, k, 8), 128, b, t, m), 8),
        "m": (lambda b, t, m, k=1: normheavy(sc(128, k, 8), 256, b, t, m), 8),
    },
    "bnmlp": {
        "s": (lambda b, t, m, k=1: bnmlp(scw([256, 512, 512, 512, 10], k), b, t, m), 64),
        "m": (lambda b, t, m, k=1: bnmlp(scw([784, 1024, 1024, 1024, 1024, 100], k), b, t, m),
              128),
    },
    "densenet": {
        "s": (lambda b, t, m, k=1: densenet(sc(16, k, 4), 8, 4, 2, b, t, m), 16),
        "m": (lambda b, t, m, k=1: densenet(sc(32, k, 4), 12, 4, 3, b, t, m), 16),
    },
    "unet": {
        "s": (lambda b, t, m, k=1: unet(sc(32, k, 4), 8, 2, b, t, m), 8),
        "m": (lambda b, t, m, k=1: unet(sc(64, k, 8), 8, 3, b, t, m), 4),
    },
    "inception": {
        "s": (lambda b, t, m, k=1: inception(sc(16, k, 4), 16, 2, b, t, m), 16),
        "m": (lambda b, t, m, k=1: inception(sc(32, k, 4), 16, 4, b, t, m), 16),
    },
    "gnn": {
        "s": (lambda b, t, m, k=1: gnn(b, 8 * b, [sc(w, k, 8) for w in [32, 64, 64]], t, m), 1024),
        "m": (lambda b, t, m, k=1: gnn(b, 8 * b, [sc(w, k, 8) for w in [64, 128, 96, 64]], t, m),
              4096),
    },
    "seq2seq": {
        "s": (lambda b, t, m, k=1: seq2seq(sc(16, k, 4), sc(12, k, 4), 1000, 64, 128, b, t, m),
              16),
        "m": (lambda b, t, m, k=1: seq2seq(sc(32, k, 4), sc(24, k, 4), 2000, 96, 192, b, t, m),
              16),
    },
    "vit": {
        "s": (lambda b, t, m, k=1: vit(sc(32, k, 8), 8, 128, 4, 2, b, t, m), 16),
        "m": (lambda b, t, m, k=1: vit(sc(32, k, 4), 4, 192, 6, 2, b, t, m), 8),
    },
    "wavenet": {
        "s": (lambda b, t, m, k=1: wavenet(sc(256, k, 16), 32, [1, 2, 4, 8, 16], b, t, m), 8),
        "m": (lambda b, t, m, k=1: wavenet(sc(512, k, 16), 48, [1, 2, 4, 8, 16, 32, 64, 128],
                                           b, t, m), 8),
    },
    "mbconv": {
        "s": (lambda b, t, m, k=1: mbconv(sc(32, k, 8), [(3, 1, 16, 1), (3, 4, 24, 2),
                                                        (5, 4, 40, 2), (3, 4, 80, 1)], b, t, m),
              16),
        "m": (lambda b, t, m, k=1: mbconv(sc(64, k, 32), [(3, 1, 16, 1), (3, 6, 24, 2),
                                                         (5, 6, 40, 2), (3, 4, 64, 2),
                                                         (5, 4, 80, 1), (5, 3, 112, 2)],
                                          b, t, m), 8),
    },
    "convnext": {
        "s": (lambda b, t, m, k=1: convnext(sc(32, k, 16), [32, 64, 128], b, t, m), 16),
        "m": (lambda b, t, m, k=1: convnext(sc(64, k, 32), [32, 64, 128, 256], b, t, m), 8),
    },
    # added after the splits were drawn (LATE_FAMILIES)
    "mixer": {
        "s": (lambda b, t, m, k=1: mixer(sc(32, k, 8), 4, 128, 64, 256, 2, b, t, m), 16),
        "m": (lambda b, t, m, k=1: mixer(sc(64, k, 8), 8, 192, 96, 512, 3, b, t, m), 16),
    },
    "pointnet": {
        "s": (lambda b, t, m, k=1: pointnet(sc(512, k, 64), [64, 128, 256], b, t, m), 16),
        "m": (lambda b, t, m, k=1: pointnet(sc(1024, k, 64), [64, 64, 128, 256], b, t, m), 16),
    },
    "recsys": {
        "s": (lambda b, t, m, k=1: recsys(8, 10000, sc(32, k, 8), 13, [128], [128, 64], b, t, m),
              256),
        "m": (lambda b, t, m, k=1: recsys(16, 50000, sc(64, k, 8), 13, [256, 128], [256, 128],
                                          b, t, m), 512),
    },
    "ssm": {
        "s": (lambda b, t, m, k=1: ssm(sc(128, k, 16), 64, 64, 2, b, t, m), 16),
        "m": (lambda b, t, m, k=1: ssm(sc(256, k, 16), 128, 128, 3, b, t, m), 16),
    },
    "conv3d": {
        "s": (lambda b, t, m, k=1: conv3d(sc(32, k, 8), 8, [16, 32], b, t, m), 8),
        "m": (lambda b, t, m, k=1: conv3d(sc(64, k, 16), 16, [16, 32, 64], b, t, m), 4),
    },
    "dcgan": {
        "s": (lambda b, t, m, k=1: dcgan(sc(32, k, 8), 64, 32, b, t, m), 32),
        "m": (lambda b, t, m, k=1: dcgan(sc(64, k, 8), 100, 32, b, t, m), 16),
    },
}


def make_spec(family, size, mode="train", batch=None, dtype="f32", variant="base"):
    builder, default_batch = FAMILIES[family][size]
    b = default_batch if batch is None else batch
    parts = [family, size, mode]
    if batch is not None:
        assert batch != default_batch, (family, size, batch)
        parts.append(f"b{b}")
    if dtype != "f32":
        parts.append(dtype)
    if variant != "base":
        parts.append(variant)
    return Spec(name="_".join(parts), family=family, size=size, batch=b, dtype=dtype,
                variant=variant, mode=mode,
                build=(lambda: with_adam(*builder(b, dtype, "train"))) if mode == "adam"
                else (lambda: builder(b, dtype, mode)))


# Extra programs beyond the plain ones: (family, size, mode, batch, dtype, variant).
EXTRA = [
    # other fusion decisions of the same programs (see VARIANTS)
    ("mlp", "m", "train", None, "f32", "nofuse"),
    ("resnet", "s", "train", None, "f32", "nofuse"),
    ("transformer", "s", "train", None, "f32", "nofuse"),
    ("embedattn", "s", "train", None, "f32", "nofuse"),
    ("densenet", "s", "train", None, "f32", "nofuse"),
    ("inception", "s", "train", None, "f32", "nofuse"),
    ("unet", "s", "train", None, "f32", "nofuse"),
    ("transformer", "m", "train", None, "f32", "noalgsimp"),
    ("densenet", "s", "train", None, "f32", "noalgsimp"),
    ("vit", "s", "train", None, "f32", "noalgsimp"),
    ("transformer", "s", "train", None, "f32", "notree"),
    ("normheavy", "m", "train", None, "f32", "notree"),
    ("cnn", "m", "train", None, "f32", "nofuse"),
    ("gpt", "s", "train", None, "f32", "notree"),
    # bf16 training steps
    ("resnet", "s", "train", None, "bf16", "base"),
    ("gpt", "s", "train", None, "bf16", "base"),
    ("densenet", "s", "train", None, "bf16", "base"),
    ("inception", "s", "train", None, "bf16", "base"),
    ("unet", "s", "train", None, "bf16", "base"),
    ("vit", "s", "train", None, "bf16", "base"),
    ("mbconv", "s", "train", None, "bf16", "base"),
    # inference programs
    ("densenet", "m", "fwd", None, "f32", "base"),
    ("convnext", "m", "fwd", None, "f32", "base"),
    ("seq2seq", "s", "fwd", None, "f32", "base"),
    # Adam instead of SGD (optimizer state in f32)
    ("inception", "s", "adam", None, "f32", "base"),
    ("mbconv", "s", "adam", None, "f32", "base"),
    # other batch sizes
    ("transformer", "s", "train", 16, "f32", "base"),
    ("densenet", "s", "train", 32, "f32", "base"),
    ("inception", "s", "train", 32, "f32", "base"),
    ("mbconv", "s", "train", 32, "f32", "base"),
]


def all_specs():
    # Plain programs: every family and size, one training step each.
    specs = [make_spec(fam, size) for fam, sizes in FAMILIES.items() for size in sizes]
    specs += [make_spec(f, s, mode=m, batch=b, dtype=t, variant=v) for f, s, m, b, t, v in EXTRA]
    names = [s.name for s in specs]
    assert len(names) == len(set(names)), "duplicate program names"
    return specs


def sweep_spec(name, batch=None, dtype=None, k=1):
    """The example program `name` (one of all_specs()) at another point:
    batch size, dtype ("f32", "bf16") and k, the scale of its family's size
    axis (image side, sequence length or widths, see FAMILIES); its mode and
    fusion variant stay. The name says the point the way make_spec names
    programs (plus _k<scale>), so a point that is an example program has
    that program's name."""
    base = {s.name: s for s in all_specs()}[name]
    builder, default_batch = FAMILIES[base.family][base.size]
    b = base.batch if batch is None else batch
    t = base.dtype if dtype is None else dtype
    parts = [base.family, base.size, base.mode]
    if b != default_batch:
        parts.append(f"b{b}")
    if k != 1:
        parts.append(f"k{k:g}")
    if t != "f32":
        parts.append(t)
    if base.variant != "base":
        parts.append(base.variant)
    mode = base.mode
    return Spec(name="_".join(parts), family=base.family, size=base.size, batch=b, dtype=t,
                variant=base.variant, mode=mode,
                build=(lambda: with_adam(*builder(b, t, "train", k))) if mode == "adam"
                else (lambda: builder(b, t, mode, k)))


# ---------------------------------------------------------------------------
# Compiling and counting.

TRIVIAL = {"parameter", "constant", "tuple", "get-tuple-element", "bitcast", "while",
           "call", "conditional", "after-all", "partition-id", "replica-id"}

_COMP_RE = re.compile(r"^(ENTRY )?%?([\w.\-]+) .*\{\s*$")
_INSTR_RE = re.compile(r"^\s*(ROOT )?%?([\w.\-]+) = (.+?) ([\w\-]+)\((.*)$")


def split_computations(text):
    comps, cur, name, entry = {}, None, None, None
    for line in text.splitlines():
        if cur is None:
            m = _COMP_RE.match(line)
            if m and not line.startswith("HloModule"):
                name, cur = m.group(2), []
                if m.group(1):
                    entry = name
        elif line.strip() == "}":
            comps[name] = cur
            cur = None
        else:
            cur.append(line)
    return comps, entry


def _norm(line):
    line = re.sub(r", metadata=\{[^}]*\}", "", line)
    line = re.sub(r"%[\w.\-]+", "%x", line)
    line = re.sub(r"\b(calls|body|condition|to_apply)=%?[\w.\-]+", r"\1=c", line)
    return line.strip()


def count_kernels(text):
    """Rough kernel count before hlo-split exists: instructions of ENTRY and of
    while bodies/conditions that are not trivial plumbing.  Returns
    (kernels, set of normalised kernel bodies)."""
    comps, entry = split_computations(text)
    todo, seen, kernels, bodies = [entry], set(), 0, set()
    while todo:
        c = todo.pop()
        if c in seen or c not in comps:
            continue
        seen.add(c)
        for line in comps[c]:
            m = _INSTR_RE.match(line)
            if not m:
                continue
            op = m.group(4)
            if op == "while":
                todo += re.findall(r"(?:body|condition)=%?([\w.\-]+)", line)
            if op == "conditional":
                bc = re.search(r"branch_computations=\{([^}]*)\}", line)
                if bc:
                    todo += [s.strip().lstrip("%") for s in bc.group(1).split(",")]
            if op == "call":
                # ParallelTaskAssigner outlines a kernel into a call of a
                # "parallel_*" computation that holds it: count what it holds.
                todo += re.findall(r"to_apply=%?([\w.\-]+)", line)
            if op in TRIVIAL:
                continue
            kernels += 1
            body = _norm(line.split(" = ", 1)[1])
            called = re.search(r"calls=%?([\w.\-]+)", line)
            if called and called.group(1) in comps:
                body += "|" + "|".join(_norm(l) for l in comps[called.group(1)])
            bodies.add(hashlib.sha1(body.encode()).hexdigest())
    return kernels, bodies


def max_elements(text):
    """Elements of the largest array shape anywhere in the module."""
    best = 0
    for dims in re.findall(r"\b[a-z]+[0-9]*\[([0-9,]+)\]", text):
        n = 1
        for x in dims.split(","):
            n *= int(x)
        best = max(best, n)
    return best


def compile_text(spec, options=None):
    """The optimized HLO text of a Spec, compiled with its variant's XLA
    options (and `options`, more of them) for jax's default device."""
    import jax

    fn, args = spec.build()
    lowered = jax.jit(fn).lower(*args)
    opts = {**VARIANTS[spec.variant], **(options or {})}
    compiled = lowered.compile(compiler_options=opts) if opts else lowered.compile()
    return compiled.as_text()


def setup_jax():
    import jax

    # Keep only the file name of source paths in metadata, so the text does
    # not depend on where the checkout lives.
    jax.config.update("jax_hlo_source_file_canonicalization_regex", r".*/")
    return jax


# The "manual" split holds out whole model families, chosen to be least like
# what training sees: test gets a causal language model with embeddings and a
# tied output projection (training has encoders only), the GRU (training has
# the LSTM), WaveNet's dilated causal 1-D convolutions (nothing like them in
# training) and MobileNet-style separable convs; validation gets the
# autoencoder, the mixture of experts (sort/scatter routing) and the graph
# network (gather + segment sums).
MANUAL_TEST_FAMILIES = ("gpt", "gru", "wavenet", "sepconv")
MANUAL_VALID_FAMILIES = ("autoenc", "moe", "gnn")
SPLIT_SEED = 0
GENERATED_PROGRAMS = ("fusions:*", "heavy:*", "indexed:*", "layers:*", "ops:*", "pools:*", "skinny:*",
                      "stems:*", "sweeps:*", "variants:*")
# Families added after the splits were drawn train in both: the random
# split's draw and the manual split's held-out families stay as they were,
# so the validation and test programs of every figure before are the same.
LATE_FAMILIES = ("mixer", "pointnet", "recsys", "ssm", "conv3d", "dcgan")


def make_splits(programs):
    """programs: manifest entries.  Returns {"random": {...}, "manual": {...}},
    each {"train": [...], "valid": [...], "test": [...]} of program names."""
    import random

    late = sorted(p["name"] for p in programs if p["family"] in LATE_FAMILIES)
    names = sorted(p["name"] for p in programs if p["family"] not in LATE_FAMILIES)
    shuffled = list(names)
    random.Random(SPLIT_SEED).shuffle(shuffled)
    n_eval = max(1, round(0.1 * len(names)))
    rnd = {"train": sorted(shuffled[2 * n_eval:] + late),
           "valid": sorted(shuffled[n_eval:2 * n_eval]),
           "test": sorted(shuffled[:n_eval])}
    man = {"train": [], "valid": [], "test": []}
    for p in sorted(programs, key=lambda p: p["name"]):
        part = ("test" if p["family"] in MANUAL_TEST_FAMILIES else
                "valid" if p["family"] in MANUAL_VALID_FAMILIES else "train")
        man[part].append(p["name"])
    # the pseudo-programs of generated kernels (tpuperf generate: records
    # named "ops:OPCODE", "fusions:ORIGIN", "variants:ORIGIN", "sweeps:SWEPT") train only; they
    # are drawn from train programs of both splits (examples/build_corpus.py)
    for split in (rnd, man):
        split["train"] += list(GENERATED_PROGRAMS)
    return {"random": rnd, "manual": man}


def write_splits(programs, folder):
    folder.mkdir(parents=True, exist_ok=True)
    for kind, split in make_splits(programs).items():
        (folder / f"{kind}.json").write_text(json.dumps(split, indent=1) + "\n")
        print(f"{folder / kind}.json: " + ", ".join(f"{k} {len(v)}" for k, v in split.items()),
              file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", action="append", default=[],
                    help="build only this program (repeatable); also accepts a family name")
    ap.add_argument("--out", default=str(HERE / "hlo"), help="output folder (default examples/hlo)")
    ap.add_argument("--manifest", default=None,
                    help="manifest to write (default: <out>/../programs.json when --out is "
                         "examples/hlo, else <out>/programs.json)")
    ap.add_argument("--list", action="store_true", help="list program names and exit")
    a = ap.parse_args(argv)

    specs = all_specs()
    if a.list:
        for s in specs:
            print(s.name)
        return 0
    if a.only:
        want = set(a.only)
        specs = [s for s in specs if s.name in want or s.family in want]
        missing = want - {s.name for s in specs} - {s.family for s in specs}
        if missing:
            print(f"make_programs: error: unknown program(s): {', '.join(sorted(missing))}",
                  file=sys.stderr)
            return 2

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.manifest:
        manifest_path = Path(a.manifest)
    elif out.resolve() == (HERE / "hlo").resolve():
        manifest_path = HERE / "programs.json"
    else:
        manifest_path = out / "programs.json"
    manifest = {}
    known = {s.name for s in all_specs()}
    if a.only and manifest_path.exists():
        manifest = {p["name"]: p for p in json.loads(manifest_path.read_text())["programs"]
                    if p["name"] in known}

    # drop programs no longer in the list
    for f in sorted(out.glob("*.hlo.zst")):
        if f.name.removesuffix(".hlo.zst") not in known:
            print(f"removing stale {f}", file=sys.stderr)
            f.unlink()
    setup_jax()
    import zstandard

    # level 19, one frame a file: the programs are committed, and the checkout must stay small
    zstd = zstandard.ZstdCompressor(level=19)
    all_bodies = set()
    t_all = time.time()
    for i, s in enumerate(specs):
        t0 = time.time()
        text = compile_text(s)
        (out / f"{s.name}.hlo.zst").write_bytes(zstd.compress(text.encode()))
        n, bodies = count_kernels(text)
        all_bodies |= bodies
        manifest[s.name] = {
            "name": s.name, "family": s.family, "size": s.size, "mode": s.mode,
            "batch": s.batch, "dtype": s.dtype, "variant": s.variant,
            "xla_options": VARIANTS[s.variant], "file": f"hlo/{s.name}.hlo.zst",
            "kernels_hint": n, "distinct_hint": len(bodies),
            "while_loops": text.count(" while("), "bytes": len(text),
            "max_elements": max_elements(text),
        }
        print(f"[{i + 1}/{len(specs)}] {s.name}: {n} kernels ({len(bodies)} distinct), "
              f"{len(text) // 1024} KiB, {time.time() - t0:.1f}s", file=sys.stderr)
    print(f"built {len(specs)} programs in {time.time() - t_all:.0f}s; "
          f"{len(all_bodies)} distinct kernel bodies among them", file=sys.stderr)
    doc = {"generator": "examples/make_programs.py",
           "programs": [manifest[k] for k in sorted(manifest)]}
    manifest_path.write_text(json.dumps(doc, indent=1) + "\n")
    if manifest_path.resolve() == (HERE / "programs.json").resolve():
        write_splits(doc["programs"], HERE / "splits")
    return 0


if __name__ == "__main__":
    sys.exit(main())
