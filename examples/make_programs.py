#!/usr/bin/env python3
"""Build the example programs: real models written in JAX, optimized by XLA.

Each program is a small but real model (an MLP, a CNN, a ResNet block, a
Transformer encoder, an LSTM/GRU over a sequence, an embedding lookup with
attention, ...), usually a whole training step (loss, gradient, SGD update).
It is traced with jax.jit, lowered with abstract arguments (no data is
needed) and compiled by XLA for the CPU; the post-optimization HLO text
(``compiled.as_text()``, what XLA runs) is written to ``<out>/<name>.hlo``.

Program variants change the program (size, batch, dtype) or only XLA's
fusion decisions (flags passed per compile: passes disabled, fusion emitters
off, ...), so the same model yields differently fused kernels.

Usage::

    JAX_PLATFORMS=cpu .venv/bin/python examples/make_programs.py
    .venv/bin/python examples/make_programs.py --only mlp_s_train --out /tmp/hlo
    .venv/bin/python examples/make_programs.py --list

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
# to change the optimized HLO of the models below (see --check-variants).
VARIANTS: dict[str, dict[str, str]] = {
    # XLA's default CPU pipeline.
    "base": {},
    # No instruction fusion at all: every elementwise op is its own kernel.
    "nofuse": {"xla_disable_hlo_passes": "fusion"},
    # No algebraic simplification: redundant reshapes/transposes/broadcasts
    # survive and are fused differently.
    "noalgsimp": {"xla_disable_hlo_passes": "algsimp"},
    # No transpose folding into dots and no CSE: explicit transposes, and
    # duplicated subexpressions fused separately.
    "nofold": {"xla_disable_hlo_passes": "transpose-folding,cse"},
}


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

    return step


def xent(logits, labels):
    """Mean softmax cross-entropy with integer labels (computed in f32)."""
    jax, jnp = _jax()
    logits = logits.astype(jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=-1))


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


# ---------------------------------------------------------------------------
# Models.  Each builder returns (fn, args) with args abstract (ShapeDtypeStruct).


def mlp(widths, batch, dtype, mode):
    jax, jnp = _jax()
    d = dt(dtype)
    params = [{"w": sds((a, b), d), "b": sds((b,), d)} for a, b in zip(widths[:-1], widths[1:])]

    def forward(p, x):
        for i, layer in enumerate(p):
            x = x @ layer["w"] + layer["b"]
            if i < len(p) - 1:
                x = jax.nn.relu(x)
        return x

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


def resnet(hw, ch, blocks, batch, dtype, mode, classes=10):
    """Stem conv, residual blocks (conv-BN-relu-conv-BN + skip), a strided
    downsampling block, global average pool, dense."""
    jax, jnp = _jax()
    d = dt(dtype)

    def bn(c):
        return {"g": sds((c,), d), "b": sds((c,), d)}

    params = {"stem": sds((3, 3, 3, ch), d), "stem_bn": bn(ch), "blocks": []}
    for _ in range(blocks):
        params["blocks"].append({"w1": sds((3, 3, ch, ch), d), "bn1": bn(ch),
                                 "w2": sds((3, 3, ch, ch), d), "bn2": bn(ch)})
    params["down"] = {"w1": sds((3, 3, ch, 2 * ch), d), "bn1": bn(2 * ch),
                      "w2": sds((3, 3, 2 * ch, 2 * ch), d), "bn2": bn(2 * ch),
                      "proj": sds((1, 1, ch, 2 * ch), d)}
    params["dense"] = {"w": sds((2 * ch, classes), d), "b": sds((classes,), d)}
    axes = (0, 1, 2)

    def block(p, x, stride=1):
        h = jax.nn.relu(batchnorm(conv(x, p["w1"], stride), p["bn1"]["g"], p["bn1"]["b"], axes))
        h = batchnorm(conv(h, p["w2"]), p["bn2"]["g"], p["bn2"]["b"], axes)
        skip = conv(x, p["proj"], stride) if "proj" in p else x
        return jax.nn.relu(h + skip)

    def forward(p, x):
        x = jax.nn.relu(batchnorm(conv(x, p["stem"]), p["stem_bn"]["g"], p["stem_bn"]["b"], axes))
        for b in p["blocks"]:
            x = block(b, x)
        x = block(p["down"], x, stride=2)
        x = jnp.mean(x, axis=(1, 2))
        return x @ p["dense"]["w"] + p["dense"]["b"]

    x = sds((batch, hw, hw, 3), d)
    if mode == "fwd":
        return forward, (params, x)
    y = sds((batch,), jnp.int32)
    return train_step(lambda p, x, y: xent(forward(p, x), y)), (params, x, y)


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

    x = sds((batch, hw, hw, 3), d)
    if mode == "fwd":
        return forward, (params, x)
    y = sds((batch,), jnp.int32)
    return train_step(lambda p, x, y: xent(forward(p, x), y)), (params, x, y)


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
    jax, jnp = _jax()
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

    x = sds((batch, widths[0]), d)
    if mode == "fwd":
        return forward, (params, x)
    y = sds((batch,), jnp.int32)
    return train_step(lambda p, x, y: xent(forward(p, x), y)), (params, x, y)


# ---------------------------------------------------------------------------
# The program list.

# family -> size label -> (builder(batch, dtype, mode), default batch)
FAMILIES = {
    "mlp": {
        "s": (lambda b, t, m: mlp([256, 512, 512, 10], b, t, m), 64),
        "m": (lambda b, t, m: mlp([784, 1024, 1024, 512, 10], b, t, m), 128),
        "l": (lambda b, t, m: mlp([1024, 2048, 2048, 2048, 1000], b, t, m), 256),
    },
    "autoenc": {
        "s": (lambda b, t, m: autoencoder([784, 256, 64], b, t, m), 64),
        "m": (lambda b, t, m: autoencoder([1024, 512, 256, 32], b, t, m), 128),
    },
    "cnn": {
        "s": (lambda b, t, m: cnn(32, [16, 32], b, t, m), 16),
        "m": (lambda b, t, m: cnn(32, [32, 64, 128], b, t, m), 32),
    },
    "resnet": {
        "s": (lambda b, t, m: resnet(16, 16, 1, b, t, m), 16),
        "m": (lambda b, t, m: resnet(32, 32, 2, b, t, m), 16),
    },
    "sepconv": {
        "s": (lambda b, t, m: sepconv(32, [16, 32, 64], b, t, m), 16),
        "m": (lambda b, t, m: sepconv(64, [32, 64, 128, 128], b, t, m), 16),
    },
    "transformer": {
        "s": (lambda b, t, m: transformer(64, 128, 4, 1, b, t, m), 8),
        "m": (lambda b, t, m: transformer(128, 256, 8, 2, b, t, m), 8),
    },
    "gpt": {
        "s": (lambda b, t, m: transformer(64, 128, 4, 2, b, t, m, causal=True, vocab=2048), 8),
        "m": (lambda b, t, m: transformer(128, 192, 6, 2, b, t, m, causal=True, vocab=4096), 4),
    },
    "lstm": {
        "s": (lambda b, t, m: rnn("lstm", 32, 64, 128, b, t, m), 16),
        "m": (lambda b, t, m: rnn("lstm", 64, 128, 256, b, t, m), 32),
    },
    "gru": {
        "s": (lambda b, t, m: rnn("gru", 32, 64, 128, b, t, m), 16),
        "m": (lambda b, t, m: rnn("gru", 48, 96, 192, b, t, m), 32),
    },
    "embedattn": {
        "s": (lambda b, t, m: embedattn(5000, 64, 64, b, t, m), 32),
        "m": (lambda b, t, m: embedattn(20000, 128, 128, b, t, m), 32),
    },
    "moe": {
        "s": (lambda b, t, m: moe(b, 128, 4, 256, t, m), 256),
        "m": (lambda b, t, m: moe(b, 256, 8, 512, t, m), 512),
    },
    "normheavy": {
        "s": (lambda b, t, m: normheavy(64, 128, b, t, m), 8),
        "m": (lambda b, t, m: normheavy(128, 256, b, t, m), 8),
    },
    "bnmlp": {
        "s": (lambda b, t, m: bnmlp([256, 512, 512, 512, 10], b, t, m), 64),
        "m": (lambda b, t, m: bnmlp([784, 1024, 1024, 1024, 1024, 100], b, t, m), 128),
    },
}


def make_spec(family, size, mode="train", batch=None, dtype="f32", variant="base"):
    builder, default_batch = FAMILIES[family][size]
    b = default_batch if batch is None else batch
    parts = [family, size, mode]
    if batch is not None and batch != default_batch:
        parts.append(f"b{b}")
    if dtype != "f32":
        parts.append(dtype)
    if variant != "base":
        parts.append(variant)
    return Spec(name="_".join(parts), family=family, size=size, batch=b, dtype=dtype,
                variant=variant, mode=mode,
                build=lambda: builder(b, dtype, mode))


def all_specs():
    specs = []
    # Plain programs: every family and size, training step.
    for fam, sizes in FAMILIES.items():
        for size in sizes:
            specs.append(make_spec(fam, size))
    return specs


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


def compile_text(spec):
    import jax

    fn, args = spec.build()
    lowered = jax.jit(fn).lower(*args)
    opts = VARIANTS[spec.variant]
    compiled = lowered.compile(compiler_options=opts) if opts else lowered.compile()
    return compiled.as_text()


def setup_jax():
    import jax

    # Keep only the file name of source paths in metadata, so the text does
    # not depend on where the checkout lives.
    jax.config.update("jax_hlo_source_file_canonicalization_regex", r".*/")
    return jax


# The "manual" split holds out whole model families, chosen so that each held
# out family has a relative in training but is least like it: GRU (train has
# the LSTM), depthwise-separable convs (train has dense convs), a causal
# language model with embeddings (train has the encoder), and for validation
# the autoencoder and the mixture of experts (sort/scatter routing).
MANUAL_TEST_FAMILIES = ("gru", "sepconv", "gpt")
MANUAL_VALID_FAMILIES = ("autoenc", "moe")
SPLIT_SEED = 0


def make_splits(programs):
    """programs: manifest entries.  Returns {"random": {...}, "manual": {...}},
    each {"train": [...], "valid": [...], "test": [...]} of program names."""
    import random

    names = sorted(p["name"] for p in programs)
    shuffled = list(names)
    random.Random(SPLIT_SEED).shuffle(shuffled)
    n_eval = max(1, round(0.1 * len(names)))
    rnd = {"train": sorted(shuffled[2 * n_eval:]), "valid": sorted(shuffled[n_eval:2 * n_eval]),
           "test": sorted(shuffled[:n_eval])}
    man = {"train": [], "valid": [], "test": []}
    for p in sorted(programs, key=lambda p: p["name"]):
        part = ("test" if p["family"] in MANUAL_TEST_FAMILIES else
                "valid" if p["family"] in MANUAL_VALID_FAMILIES else "train")
        man[part].append(p["name"])
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
    if manifest_path.exists():
        manifest = {p["name"]: p for p in json.loads(manifest_path.read_text())["programs"]}

    setup_jax()
    all_bodies = set()
    t_all = time.time()
    for i, s in enumerate(specs):
        t0 = time.time()
        text = compile_text(s)
        (out / f"{s.name}.hlo").write_text(text)
        n, bodies = count_kernels(text)
        all_bodies |= bodies
        manifest[s.name] = {
            "name": s.name, "family": s.family, "size": s.size, "mode": s.mode,
            "batch": s.batch, "dtype": s.dtype, "variant": s.variant,
            "xla_options": VARIANTS[s.variant], "file": f"hlo/{s.name}.hlo",
            "kernels_hint": n, "distinct_hint": len(bodies),
            "while_loops": text.count(" while("), "bytes": len(text),
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
