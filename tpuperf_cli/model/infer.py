"""Inference in numpy: a trained model runs without torch or DGL.

Importing torch and DGL costs `predict` seconds before its first record. The
network itself is small (a few matrix products per layer), so here the
weights of a model file run in numpy float32: the same arithmetic as net.Net
in eval mode (dropout off), to float32 rounding; past start-up it costs a
little less CPU than the DGL network (benchmarks/bench_predict.py). DGL
stays the training library; this is the default engine of predict, eval
and select wherever it can run the model.

* `read_model_dict(path)` (model/weights.py) reads a model file without torch: torch.save's zip
  holds a pickle (data.pkl) and one raw little-endian file per tensor. A
  restricted unpickler accepts only the tensor rebuild function, storage
  types and OrderedDict, so a model file cannot run code here either.
* `NumpyNet(cfg, state)` is the forward pass of every architecture
  `tpuperf train` makes: gnn sage, gat or none (directed or not, mean or sum
  aggregation, residual, normalize); reductions per-node, column, lstm,
  transformer; with or without --kernel-head.

model/parts.py turns records into the batches NumpyNet reads.

Whatever this module does not recognise (another file layout, weights that
do not fit the config, a hyperparameter it does not know) raises
Unsupported, and load_model falls back to the torch/DGL path, which either
runs the model or says what is wrong with the file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tpuperf_cli.model.config import DEGREE_SCALE, MINOR_TOKENS, NODES_SCALE, NetConfig
from tpuperf_cli.model.weights import Unsupported
from tpuperf_cli.records import NODE_FEATURES

if TYPE_CHECKING:
    from tpuperf_cli.model.data import Batch


# ---------------------------------------------------------------- the network

_ZEROS = np.zeros(0, np.float32)


def _relu(x):
    """max(x, 0) in place. Against an array of zeros, not the scalar 0:
    numpy's maximum with a scalar takes a loop four times slower."""
    global _ZEROS
    if _ZEROS.size < x.size:
        _ZEROS = np.zeros(max(x.size, 2 * _ZEROS.size), np.float32)
    if not x.flags.c_contiguous:
        return np.maximum(x, 0, out=x)
    return np.maximum(x, _ZEROS[:x.size].reshape(x.shape), out=x)


def _sigmoid(x):
    # 1 / (1 + exp(-x)), in place
    np.negative(x, out=x)
    np.exp(x, out=x)
    x += 1
    return np.reciprocal(x, out=x)


class _Linear:
    __slots__ = ("wt", "b")

    def __init__(self, w, b):
        self.wt = np.ascontiguousarray(w.T)
        self.b = b

    def __call__(self, x):
        y = x @ self.wt
        if self.b is not None:
            y += self.b
        return y


class _Weights:
    """The state dict, each weight taken once with its shape checked."""

    def __init__(self, state):
        if not isinstance(state, dict):
            raise Unsupported("state_dict is not a map")
        self.state = state
        self.used = set()

    def get(self, key, shape):
        a = self.state.get(key)
        if not isinstance(a, np.ndarray) or a.dtype != np.float32 or a.shape != tuple(shape):
            raise Unsupported(f"weight {key}")
        self.used.add(key)
        return a

    def linear(self, prefix, n_in, n_out):
        return _Linear(self.get(prefix + ".weight", (n_out, n_in)), self.get(prefix + ".bias", (n_out,)))

    def mlp(self, prefix, n_in, n_hidden, n_out, dropout):
        second = 3 if dropout else 2        # a Dropout module sits between when dropout > 0
        return (self.linear(f"{prefix}.0", n_in, n_hidden),
                self.linear(f"{prefix}.{second}", n_hidden, n_out))

    def mark(self, prefix):
        """Weights of a module shared with another name (undirected layers)."""
        self.used.update(k for k in self.state if k.startswith(prefix + "."))

    def check_all_used(self):
        left = set(self.state) - self.used
        if left:
            raise Unsupported(f"weights not understood: {sorted(left)[:3]}")


class _Edges:
    """One direction of a batch's truncated edges, grouped by destination
    (CSR order, a node's edges in batch order), for sums over each node's
    incoming messages."""

    __slots__ = ("src", "dst", "n", "deg", "nodes", "starts", "first", "multi", "steps", "multi_deg")

    def __init__(self, src, dst, n):
        if dst.size > 1 and (dst[1:] < dst[:-1]).any():     # sorted already: no sort
            order = np.argsort(dst, kind="stable")
            src, dst = src[order], dst[order]
        self.src, self.dst, self.n = src, dst, n
        self.deg = deg = np.bincount(dst, minlength=n)
        indptr = np.zeros(n + 1, np.int64)
        np.cumsum(deg, out=indptr[1:])
        self.nodes = np.flatnonzero(deg)
        self.starts = indptr[self.nodes]
        # each node's first message, from row n (zeros) for a node without
        # edges; then for the nodes with more (most have one), the k-th
        # messages of those with at least k + 1, longest lists first so that
        # each step adds to a prefix
        self.first = np.full(n, n, np.int64)
        self.first[self.nodes] = src[self.starts]
        multi = np.flatnonzero(deg > 1)
        multi = multi[np.argsort(-deg[multi], kind="stable")]
        self.multi = multi
        self.multi_deg = deg[multi].astype(np.float32)[:, None]
        self.steps = []
        if multi.size:
            dm = deg[multi]
            at = indptr[multi]
            for k in range(1, int(dm[0])):
                active = int(np.count_nonzero(dm > k))
                self.steps.append((active, src[at[:active] + k]))

    def aggregate(self, msg, mean):
        """(N, H): per node, the mean (or sum) of msg's rows over its incoming
        edges, in edge order; 0 where none. msg has N + 1 rows, the last 0."""
        out = msg.take(self.first, axis=0)
        if self.multi.size:
            acc = out.take(self.multi, axis=0)
            for active, src in self.steps:
                acc[:active] += msg.take(src, axis=0)
            if mean:
                acc /= self.multi_deg
            out[self.multi] = acc
        return out


def _messages(h, lin):
    """relu(lin(h)) with a row of zeros below (what _Edges.aggregate reads)."""
    n = h.shape[0]
    m = np.empty((n + 1, lin.wt.shape[1]), np.float32)
    np.matmul(h, lin.wt, out=m[:n])
    m[:n] += lin.b
    _relu(m[:n])
    m[n] = 0
    return m


class NumpyNet:
    """net.Net's forward pass in numpy (eval mode)."""

    engine = "numpy"

    def __init__(self, cfg: NetConfig, state: dict):
        if not isinstance(cfg, NetConfig):
            raise Unsupported("config")
        self.cfg = cfg
        w = _Weights(state)
        h, e = cfg.hidden, cfg.opcode_dim
        embed = w.get("embed.weight", (cfg.num_opcodes, e))
        f1a, self.f1b = w.mlp("f1", e + cfg.in_features + cfg.node_counts + cfg.minor_dim, h, h,
                              cfg.dropout)
        # f1's first layer on [embed(op) ++ node ++ kernel/config features
        # (++ operand and user counts)] as products per opcode, node, graph
        wt = f1a.wt
        f = e + cfg.in_features
        self.f1_op = embed @ wt[:e]                                   # (opcodes, H)
        self.f1_node = np.ascontiguousarray(wt[e:e + NODE_FEATURES])  # (140, H)
        self.f1_graph = np.ascontiguousarray(wt[e + NODE_FEATURES:f])  # (K, H)
        self.f1_counts = np.ascontiguousarray(wt[f:f + 2]) if cfg.counts else None   # (2, H)
        # --minor-embedding: the token's embedding, and its product with f1 per token
        self.minor = w.get("minor.weight", (MINOR_TOKENS, cfg.minor_dim)) if cfg.minor_dim else None
        self.f1_minor = self.minor @ wt[f + cfg.node_counts:] if cfg.minor_dim else None  # (T, H)
        self.f1_bias = f1a.b
        self.layers = []
        if cfg.gnn != "none":
            for i in range(cfg.layers):
                p = f"layers.{i}"
                if cfg.gnn == "sage":
                    f2_in = w.linear(p + ".f2_in", h, h)
                    if cfg.directed:
                        f2_out = w.linear(p + ".f2_out", h, h)
                    else:
                        f2_out = f2_in
                        w.mark(p + ".f2_out")
                    layer = ("sage", f2_in, f2_out)
                else:
                    heads = cfg.heads
                    d = h // heads

                    def gat(q):
                        return (w.get(q + ".fc.weight", (h, h)).T.copy(),
                                w.get(q + ".attn_l", (1, heads, d))[0],
                                w.get(q + ".attn_r", (1, heads, d))[0],
                                w.get(q + ".bias", (h,)))

                    a_in = gat(p + ".att_in")
                    if cfg.directed:
                        a_out = gat(p + ".att_out")
                    else:
                        a_out = a_in
                        w.mark(p + ".att_out")
                    layer = ("gat", a_in, a_out)
                f3 = w.linear(p + ".f3", 3 * h, h)
                # f3 on [h ++ a_in ++ a_out] as three products, one per part
                parts = tuple(np.ascontiguousarray(f3.wt[k * h:(k + 1) * h]) for k in range(3))
                self.layers.append(layer + (f3, parts))
        kind = cfg.reduction
        if kind == "per-node":
            self.f4 = w.mlp("reduce.f4", h, h, h, cfg.dropout)
            width = h
        elif kind == "column":
            width = 2 * h
        elif kind == "lstm":
            self.lstm = []
            for k in range(cfg.seq_layers):
                self.lstm.append((_Linear(w.get(f"reduce.lstm.weight_ih_l{k}", (4 * h, h)), None),
                                  w.get(f"reduce.lstm.weight_hh_l{k}", (4 * h, h)).T.copy(),
                                  w.get(f"reduce.lstm.bias_ih_l{k}", (4 * h,))
                                  + w.get(f"reduce.lstm.bias_hh_l{k}", (4 * h,))))
            width = h
        elif kind == "transformer":
            self.encoder = []
            for k in range(cfg.seq_layers):
                p = f"reduce.encoder.layers.{k}"
                self.encoder.append({
                    "qkv": _Linear(w.get(p + ".self_attn.in_proj_weight", (3 * h, h)),
                                   w.get(p + ".self_attn.in_proj_bias", (3 * h,))),
                    "out": w.linear(p + ".self_attn.out_proj", h, h),
                    "lin1": w.linear(p + ".linear1", h, 2 * h),
                    "lin2": w.linear(p + ".linear2", 2 * h, h),
                    "norm1": (w.get(p + ".norm1.weight", (h,)), w.get(p + ".norm1.bias", (h,))),
                    "norm2": (w.get(p + ".norm2.weight", (h,)), w.get(p + ".norm2.bias", (h,))),
                })
            width = 2 * h
        else:
            raise Unsupported(f"reduction {kind}")
        k = cfg.in_features - NODE_FEATURES if cfg.kernel_head else 0
        self.head = w.mlp("head", width + cfg.graph_counts + k + cfg.minor_dim, h, 1, cfg.dropout)
        self.skip = w.linear("skip", k, 1) if k else None
        w.check_all_used()

    def eval(self) -> NumpyNet:
        return self

    # ------------------------------------------------------------ forward

    def __call__(self, b: Batch) -> np.ndarray:
        """The network's output per graph (B,) for a data.Batch."""
        cfg = self.cfg
        n = int(b.opcode.shape[0])
        kx = b.kernel_x                                                 # (B, K) scaled
        node_x = b.x[:, :NODE_FEATURES] if b.x.shape[1] != NODE_FEATURES else b.x
        h = node_x @ self.f1_node
        h += self.f1_op[b.opcode]
        h += np.repeat(kx @ self.f1_graph + self.f1_bias, b.n_nodes, axis=0)
        if self.layers or cfg.counts:
            g_in = _Edges(b.in_src, b.in_dst, n)
            g_out = _Edges(b.out_src, b.out_dst, n)
        if cfg.counts:
            degrees = np.stack([g_in.deg, g_out.deg], axis=1).astype(np.float32)
            h += (np.log1p(degrees) / np.float32(DEGREE_SCALE)) @ self.f1_counts
        if cfg.minor_dim:
            h += np.repeat(self.f1_minor[b.minor], b.n_nodes, axis=0)
        h = self.f1b(_relu(h))
        _relu(h)
        if self.layers:
            mean = cfg.aggregate == "mean"
            for kind, p_in, p_out, f3, (w_h, w_in, w_out) in self.layers:
                if kind == "sage":
                    m_in = _messages(h, p_in)
                    m_out = _messages(h, p_out) if p_out is not p_in else m_in
                    a_in = g_in.aggregate(m_in, mean)
                    a_out = g_out.aggregate(m_out, mean)
                else:
                    a_in = self._gat(g_in, h, p_in, n)
                    a_out = self._gat(g_out, h, p_out, n)
                new = h @ w_h
                part = a_in @ w_in
                new += part
                np.matmul(a_out, w_out, out=part)
                new += part
                new += f3.b
                _relu(new)                                                # (N, H)
                if cfg.residual:
                    new += h
                h = new
                if cfg.normalize:
                    norm = np.sqrt(np.einsum("ij,ij->i", h, h))
                    h /= np.maximum(norm, 1e-12)[:, None]
        r = self._reduce(h, b)
        if cfg.counts:
            nodes = np.log1p(b.n_nodes.astype(np.float32)) / np.float32(NODES_SCALE)
            r = np.concatenate([r, nodes[:, None]], axis=1)
        tail = [self.minor[b.minor]] if cfg.minor_dim else []
        if self.skip is None:
            return self._head(np.concatenate([r] + tail, axis=1) if tail else r)
        return self._head(np.concatenate([r, kx] + tail, axis=1)) + self.skip(kx)[:, 0]

    def _head(self, r):
        a, b = self.head
        return b(_relu(a(r)))[:, 0]

    def _gat(self, g, h, params, n):
        wt, attn_l, attn_r, bias = params
        heads = attn_l.shape[0]
        z = (h @ wt).reshape(n, heads, -1)                              # (N, heads, D)
        el = np.einsum("nhd,hd->nh", z, attn_l)
        er = np.einsum("nhd,hd->nh", z, attn_r)
        out = np.zeros((n, heads, z.shape[2]), np.float32)
        if g.starts.size:
            e = el[g.src] + er[g.dst]                                   # (E, heads)
            e = np.where(e > 0, e, np.float32(0.2) * e)                 # leaky ReLU, slope 0.2
            top = np.maximum.reduceat(e, g.starts, axis=0)              # edge softmax per node
            seg = np.repeat(np.arange(g.nodes.size), g.deg[g.nodes])    # edge -> its node's row
            a = np.exp(e - top[seg])
            a /= np.add.reduceat(a, g.starts, axis=0)[seg]
            src = z[g.src] * a[:, :, None]                              # (E, heads, D)
            out[g.nodes] = np.add.reduceat(src, g.starts, axis=0)
        out += bias.reshape(1, heads, -1)
        return out.reshape(n, -1)

    def _reduce(self, h, b):
        kind = self.cfg.reduction
        if kind in ("per-node", "column"):
            starts = np.r_[0, np.cumsum(b.n_nodes)[:-1]]
            if kind == "per-node":
                a, c = self.f4
                return np.add.reduceat(_relu(c(_relu(a(h)))), starts, axis=0)
            mean = np.add.reduceat(h, starts, axis=0) / b.n_nodes[:, None].astype(np.float32)
            return np.concatenate([mean, np.maximum.reduceat(h, starts, axis=0)], axis=1)
        x = np.zeros((len(b.n_nodes), b.seq_len, h.shape[1]), np.float32)
        x[b.seq_graph, b.seq_pos] = h[b.seq_keep]
        lengths = b.seq_lengths
        if kind == "lstm":
            return self._lstm(x, lengths)
        return self._transformer(x, lengths)

    def _lstm(self, x, lengths):
        """hn of the last layer: each sequence's state after its last step."""
        order = np.argsort(-lengths, kind="stable")          # longest first: active = a prefix
        x = x[order]
        ln = lengths[order]
        bsz, steps, hid = x.shape
        for w_ih, w_hh, bias in self.lstm:
            pre = w_ih(x.reshape(bsz * steps, -1)).reshape(bsz, steps, 4 * hid) + bias
            hs = np.zeros((bsz, hid), np.float32)
            cs = np.zeros((bsz, hid), np.float32)
            out = np.zeros((bsz, steps, hid), np.float32)
            active = bsz
            for t in range(steps):
                while active and ln[active - 1] <= t:
                    active -= 1
                if not active:
                    break
                g = pre[:active, t] + hs[:active] @ w_hh
                i = _sigmoid(g[:, :hid])
                f = _sigmoid(g[:, hid:2 * hid])
                c = np.tanh(g[:, 2 * hid:3 * hid])
                o = _sigmoid(g[:, 3 * hid:])
                cs[:active] = f * cs[:active] + i * c
                hs[:active] = o * np.tanh(cs[:active])
                out[:active, t] = hs[:active]
            x = out
        result = np.empty_like(hs)
        result[order] = hs
        return result

    def _transformer(self, x, lengths, budget=1 << 22):
        """Mean and max over each sequence of the encoder's output; sequences
        of similar length are run together so padding stays small."""
        bsz, _, hid = x.shape
        out = np.empty((bsz, 2 * hid), np.float32)
        order = np.argsort(lengths, kind="stable")
        k = 0
        while k < bsz:
            # grow a group of sequences while batch * L^2 stays under budget
            j = k + 1
            while j < bsz and (j + 1 - k) * int(lengths[order[j]]) ** 2 * self.cfg.heads <= budget:
                j += 1
            idx = order[k:j]
            ln = lengths[idx]
            y = self._encode(x[idx, :int(ln.max())], ln)
            out[idx] = y
            k = j
        return out

    def _encode(self, x, lengths):
        bsz, steps, hid = x.shape
        heads = self.cfg.heads
        d = hid // heads
        pad = np.arange(steps)[None, :] >= lengths[:, None]            # (B, L) True = padding
        for layer in self.encoder:
            qkv = layer["qkv"](x.reshape(bsz * steps, hid)).reshape(bsz, steps, 3, heads, d)
            q = qkv[:, :, 0].transpose(0, 2, 1, 3) * np.float32(1 / np.sqrt(d))
            k = qkv[:, :, 1].transpose(0, 2, 3, 1)
            v = qkv[:, :, 2].transpose(0, 2, 1, 3)
            s = q @ k                                                   # (B, heads, L, L)
            s[np.broadcast_to(pad[:, None, None, :], s.shape)] = -np.inf
            s -= s.max(-1, keepdims=True)
            np.exp(s, out=s)
            s /= s.sum(-1, keepdims=True)
            a = (s @ v).transpose(0, 2, 1, 3).reshape(bsz * steps, hid)
            x = _layer_norm(x.reshape(bsz * steps, hid) + layer["out"](a), *layer["norm1"])
            x = _layer_norm(x + layer["lin2"](_relu(layer["lin1"](x))), *layer["norm2"])
            x = x.reshape(bsz, steps, hid)
        keep = ~pad[:, :, None]
        mean = np.where(keep, x, 0).sum(1) / lengths[:, None].astype(np.float32)
        big = np.where(keep, x, -np.inf).max(1)
        return np.concatenate([mean, big], axis=1)


def _layer_norm(x, weight, bias, eps=1e-5):
    mu = x.mean(-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(-1, keepdims=True)
    return xc / np.sqrt(var + np.float32(eps)) * weight + bias


class NumpyEnsemble:
    """net.EnsembleNet in numpy: the members' outputs averaged."""

    engine = "numpy"

    def __init__(self, members: list[NumpyNet]):
        self.members = members
        self.cfg = members[0].cfg

    def eval(self) -> NumpyEnsemble:
        return self

    def __call__(self, b: Batch) -> np.ndarray:
        return self.outputs(b).mean(0)

    def outputs(self, b: Batch) -> np.ndarray:
        """Each member's outputs, (members, graphs)."""
        return np.stack([m(b) for m in self.members])


def numpy_net(d: dict) -> NumpyNet | NumpyEnsemble:
    """A NumpyNet (NumpyEnsemble for a file with members) from a model
    file's dict; Unsupported when it cannot run it."""
    try:
        cfg = NetConfig.from_dict(d["config"]).check()
    except (ValueError, TypeError, KeyError) as e:
        raise Unsupported(str(e)) from None
    members = [d["state_dict"]] + list(d.get("members") or [])
    if len(members) == 1:
        return NumpyNet(cfg, members[0])
    return NumpyEnsemble([NumpyNet(cfg, state) for state in members])
