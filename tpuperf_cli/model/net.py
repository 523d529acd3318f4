"""The network: a kernel's graph in, one number out (Kaufman et al. 2021, sec. 4).

    node input   x_i = [ embed(opcode_i) ++ scaled node features ++ kernel
                         features ++ tile-config features
                         (++ log counts of operands and users: --counts)
                         (++ embed(the kernel's output minor dim):
                         --minor-embedding) ]                            (n, E + F)
    f1           h_i = MLP(x_i)                                     (n, H)
    k GNN layers GraphSAGE with separate weights for the two edge directions
                 (operands -> user and user -> operands), mean of the first
                 `neighbors` neighbours, L2-normalised output; or GAT; or none
    reduction    per-node sum, column-wise mean & max, LSTM over the nodes in
                 topological order, or a Transformer encoder      (B, R)
    head         (with --counts, the log node count appended; with
                 --minor-embedding, the minor dim's embedding)
                 MLP -> one number per kernel: the standardised log runtime
                 (fusion task) or a ranking score (tile task)      (B,)

Batches are built in numpy by tpuperf_cli.model.data (graphs concatenated,
neighbour lists truncated, features scaled); `Net.forward` takes that batch
already turned into tensors and DGL graphs by `to_device`.
"""

import os
from typing import TYPE_CHECKING

os.environ.setdefault("DGLBACKEND", "pytorch")

import dgl  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn import functional  # noqa: E402

# NetConfig lives in config (no torch); imported here too, where it always was
from tpuperf_cli.model.config import (  # noqa: E402,F401
    DEGREE_SCALE,
    GNNS,
    MINOR_TOKENS,
    NODES_SCALE,
    REDUCTIONS,
    NetConfig,
)
from tpuperf_cli.records import NODE_FEATURES  # noqa: E402

if TYPE_CHECKING:
    from tpuperf_cli.model.data import Batch


def mlp(n_in: int, n_hidden: int, n_out: int, dropout: float = 0.0, final_act: bool = True) -> nn.Sequential:
    layers = [nn.Linear(n_in, n_hidden), nn.ReLU()]
    if dropout:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(n_hidden, n_out))
    if final_act:
        layers.append(nn.ReLU())
    return nn.Sequential(*layers)


# ---------------------------------------------------------------- GNN layers

class SageLayer(nn.Module):
    """GraphSAGE with direction: h' = f3([h ++ agg_in(f2_in h) ++ agg_out(f2_out h)]).

    g_in carries edges operand -> user (messages flow with the data), g_out
    the reverse; both already truncated to `neighbors` edges per node.
    """

    def __init__(self, cfg):
        super().__init__()
        h = cfg.hidden
        self.directed = cfg.directed
        # dgl.ops' fused copy-and-reduce: what update_all(copy_u, mean) calls,
        # without its per-call frame handling (a quarter of a layer's time)
        self.reducer = dgl.ops.copy_u_mean if cfg.aggregate == "mean" else dgl.ops.copy_u_sum
        self.f2_in = nn.Linear(h, h)
        self.f2_out = nn.Linear(h, h) if cfg.directed else self.f2_in
        self.f3 = nn.Linear(3 * h, h)
        self.normalize = cfg.normalize
        self.residual = cfg.residual

    def _aggregate(self, g, h, f2):
        return self.reducer(g, functional.relu(f2(h)))

    def forward(self, g_in, g_out, h):
        a_in = self._aggregate(g_in, h, self.f2_in)      # (N, H) from operands
        a_out = self._aggregate(g_out, h, self.f2_out)   # (N, H) from users
        new = functional.relu(self.f3(torch.cat([h, a_in, a_out], dim=1)))
        h = h + new if self.residual else new
        return functional.normalize(h, dim=1) if self.normalize else h


class GatLayer(nn.Module):
    """GAT (the paper's ablation): attention over operands and over users,
    separate weights per direction, concatenated with the node's own state."""

    def __init__(self, cfg):
        super().__init__()
        from dgl.nn import GATConv

        h, heads = cfg.hidden, cfg.heads
        self.att_in = GATConv(h, h // heads, heads, allow_zero_in_degree=True)
        self.att_out = GATConv(h, h // heads, heads, allow_zero_in_degree=True) if cfg.directed else self.att_in
        self.f3 = nn.Linear(3 * h, h)
        self.normalize = cfg.normalize
        self.residual = cfg.residual

    def forward(self, g_in, g_out, h):
        n = h.shape[0]
        a_in = self.att_in(g_in, h).reshape(n, -1)     # (N, heads, H/heads) -> (N, H)
        a_out = self.att_out(g_out, h).reshape(n, -1)
        new = functional.relu(self.f3(torch.cat([h, a_in, a_out], dim=1)))
        h = h + new if self.residual else new
        return functional.normalize(h, dim=1) if self.normalize else h


# ---------------------------------------------------------------- reductions

def _padded(h, graph_of, position, n_graphs, length):
    """Node rows scattered into a (B, L, H) tensor, plus a (B, L) padding mask."""
    out = h.new_zeros((n_graphs, length, h.shape[1]))
    out[graph_of, position] = h
    mask = torch.ones((n_graphs, length), dtype=torch.bool, device=h.device)
    mask[graph_of, position] = False
    return out, mask


class Reduction(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.kind = cfg.reduction
        h = cfg.hidden
        if self.kind == "per-node":
            self.f4 = mlp(h, h, h, cfg.dropout)
            self.width = h
        elif self.kind == "column":
            self.width = 2 * h
        elif self.kind == "lstm":
            self.lstm = nn.LSTM(h, h, num_layers=cfg.seq_layers, batch_first=True)
            self.width = h
        else:
            layer = nn.TransformerEncoderLayer(h, cfg.heads, dim_feedforward=2 * h,
                                               dropout=cfg.dropout, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, cfg.seq_layers, enable_nested_tensor=False)
            self.width = 2 * h

    def forward(self, h, batch):
        seglen = batch["n_nodes"]
        if self.kind == "per-node":
            return dgl.ops.segment_reduce(seglen, self.f4(h), "sum")
        if self.kind == "column":
            return torch.cat([dgl.ops.segment_reduce(seglen, h, "mean"),
                              dgl.ops.segment_reduce(seglen, h, "max")], dim=1)
        # sequence reductions: the last max_nodes nodes of each graph in topological order
        keep = batch["seq_keep"]
        x, pad = _padded(h[keep], batch["seq_graph"], batch["seq_pos"], len(seglen), batch["seq_len"])
        if self.kind == "lstm":
            lengths = batch["seq_lengths"]
            packed = nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True,
                                                       enforce_sorted=False)
            _, (hn, _) = self.lstm(packed)
            return hn[-1]                                       # (B, H)
        y = self.encoder(x, src_key_padding_mask=pad)           # (B, L, H)
        y = y.masked_fill(pad.unsqueeze(-1), 0.0)
        mean = y.sum(1) / batch["seq_lengths"].unsqueeze(1).to(y.dtype)
        big = y.masked_fill(pad.unsqueeze(-1), float("-inf")).amax(1)
        return torch.cat([mean, big], dim=1)                    # (B, 2H)


# ---------------------------------------------------------------- the network

class Net(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg.check()
        self.embed = nn.Embedding(cfg.num_opcodes, cfg.opcode_dim)
        with torch.no_grad():
            self.embed.weight[0].zero_()          # "unknown" opcodes start neutral
        self.minor = nn.Embedding(MINOR_TOKENS, cfg.minor_dim) if cfg.minor_dim else None
        self.f1 = mlp(cfg.opcode_dim + cfg.in_features + cfg.node_counts + cfg.minor_dim, cfg.hidden,
                      cfg.hidden, cfg.dropout)
        layer = {"sage": SageLayer, "gat": GatLayer}.get(cfg.gnn)
        n_layers = cfg.layers if layer else 0
        self.layers = nn.ModuleList([layer(cfg) for _ in range(n_layers)])
        self.reduce = Reduction(cfg)
        k = cfg.in_features - NODE_FEATURES if cfg.kernel_head else 0   # kernel + config features
        self.head = mlp(self.reduce.width + cfg.graph_counts + k + cfg.minor_dim, cfg.hidden, 1,
                        cfg.dropout, final_act=False)
        self.skip = nn.Linear(k, 1) if k else None

    def forward(self, batch):
        """batch: the dict of `to_device`. Returns one number per graph (B,)."""
        parts = [self.embed(batch["opcode"]), batch["x"]]
        if self.cfg.counts:
            degrees = torch.stack([batch["g_in"].in_degrees(), batch["g_out"].in_degrees()], dim=1)
            parts.append(torch.log1p(degrees.to(batch["x"].dtype)) / DEGREE_SCALE)
        minor = self.minor(batch["minor"]) if self.minor is not None else None      # (B, M)
        if minor is not None:
            parts.append(torch.repeat_interleave(minor, batch["n_nodes"], dim=0))
        h = self.f1(torch.cat(parts, dim=1))                                         # (N, H)
        for layer in self.layers:
            h = layer(batch["g_in"], batch["g_out"], h)
        r = self.reduce(h, batch)                                                    # (B, R)
        if self.cfg.counts:
            nodes = torch.log1p(batch["n_nodes"].to(r.dtype)) / NODES_SCALE
            r = torch.cat([r, nodes.unsqueeze(1)], dim=1)
        tail = [minor] if minor is not None else []
        if self.skip is None:
            return self.head(torch.cat([r] + tail, dim=1)).squeeze(1)                # (B,)
        k = batch["kernel_x"]                                                        # (B, K)
        return (self.head(torch.cat([r, k] + tail, dim=1)) + self.skip(k)).squeeze(1)  # (B,)


class EnsembleNet(nn.Module):
    """Networks of one config and scaling (say, seeds), their outputs (the
    standardised log runtime) averaged: the geometric mean of their runtime
    predictions."""

    def __init__(self, members):
        super().__init__()
        self.members = nn.ModuleList(members)
        self.cfg = members[0].cfg

    def forward(self, batch):
        return self.outputs(batch).mean(0)

    def outputs(self, batch):
        """Each member's outputs, (members, B)."""
        return torch.stack([m(batch) for m in self.members])


def to_device(b: "Batch", device: str = "cpu") -> dict:
    """A numpy batch (data.Batch) as tensors and DGL graphs on a device."""
    t = torch.from_numpy
    n = int(b.x.shape[0])
    out = {
        "opcode": t(b.opcode).long(),
        "x": t(b.x),
        "n_nodes": t(b.n_nodes).long(),
        "kernel_x": t(b.kernel_x),
        "minor": t(b.minor).long(),
        "g_in": dgl.graph((t(b.in_src).long(), t(b.in_dst).long()), num_nodes=n),
        "g_out": dgl.graph((t(b.out_src).long(), t(b.out_dst).long()), num_nodes=n),
    }
    if b.seq_keep is not None:
        out.update(seq_keep=t(b.seq_keep).long(), seq_graph=t(b.seq_graph).long(),
                   seq_pos=t(b.seq_pos).long(), seq_len=int(b.seq_len),
                   seq_lengths=t(b.seq_lengths).long())
    if device != "cpu":
        out = {k: (v.to(device) if hasattr(v, "to") else v) for k, v in out.items()}
    return out
