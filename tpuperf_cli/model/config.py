"""The network's hyperparameters (NetConfig), importable without torch or DGL:
the model file stores them, and both the DGL network (net) and the numpy
inference (infer) are built from them."""

import math
from dataclasses import dataclass, field, fields

import numpy as np

from tpuperf_cli.records import CONFIG_FEATURES, KERNEL_FEATURES, NODE_FEATURES

GNNS = ("sage", "gat", "none")
REDUCTIONS = ("per-node", "column", "lstm", "transformer")


# --counts: log(1 + count) divided by these, so that the counts the corpus
# holds (at most 17 operands or users, a few thousand nodes) sit near [0, 1]
DEGREE_SCALE = math.log(1 + 20)
NODES_SCALE = math.log(1 + 1024)

# --minor-embedding: the kernel's output_minor_dim (a kernel feature) as a
# token with an embedding of its own, 0 to MINOR_MAX each their own, larger
# ones one more. Log-scaled, 32 and 36 sit 0.009 apart in the network's
# input, yet XLA:CPU's elementwise loops run 7 to 15 times slower an element
# at a minor dim of 9 to 34 than at 8 or 35 and above (on the two machines
# the corpus was measured on, README "Records"); a scaled scalar cannot
# carry such a step.
MINOR_FEATURE = KERNEL_FEATURES.index("output_minor_dim")
MINOR_MAX = 128
MINOR_TOKENS = MINOR_MAX + 2


def minor_tokens(kernel_feat: np.ndarray, column: int | None = MINOR_FEATURE) -> np.ndarray:
    """The --minor-embedding token of each row of raw (unscaled) kernel
    features (B, K): output_minor_dim (at `column`: Scaler.minor_column)
    clipped to [0, MINOR_MAX + 1], 0 where the rows do not hold it."""
    if column is None or kernel_feat.shape[1] <= column:
        return np.zeros(kernel_feat.shape[0], np.int64)
    v = np.nan_to_num(kernel_feat[:, column].astype(np.float64), nan=0.0)
    return np.clip(np.rint(v), 0, MINOR_MAX + 1).astype(np.int64)


def _num_opcodes():
    # the features package (the HLO parser) loads only when a new network is
    # configured, not for one read from a model file (predict's start-up)
    from tpuperf_cli.features.opcodes import NUM_OPCODES

    return NUM_OPCODES


@dataclass
class NetConfig:
    """Hyperparameters of the network (saved in the model file)."""

    num_opcodes: int = field(default_factory=_num_opcodes)  # size of the opcode embedding
                                # table (ids >= this are "unknown", 0)
    in_features: int = NODE_FEATURES + len(KERNEL_FEATURES) + CONFIG_FEATURES  # scaled features per
                                # node: 140 node + 5 kernel + 24 config
    opcode_dim: int = 32        # opcode embedding width (the paper: 256)
    hidden: int = 64            # width of node embeddings and of every MLP
    gnn: str = "sage"           # "sage" (GraphSAGE, the paper's best), "gat", or "none"
    layers: int = 3             # k: message-passing layers (the paper: 3)
    neighbors: int = 20         # neighbour lists truncated to this many (the paper: 20)
    aggregate: str = "mean"     # GraphSAGE neighbour aggregation: "mean" or "sum"
    directed: bool = True       # separate weights for incoming and outgoing edges
    normalize: bool = True      # L2-normalise node embeddings after each layer
    residual: bool = True       # add each layer's input to its output (before normalising)
    kernel_head: bool = True    # kernel + config features also feed the head directly (and
                                # linearly), so runtimes extrapolate past the bounded,
                                # normalised node embeddings (False: the paper's model)
    heads: int = 4              # attention heads (GAT, Transformer)
    reduction: str = "column"   # "per-node", "column", "lstm" or "transformer"
    seq_layers: int = 1         # LSTM / Transformer encoder layers in the reduction
    max_nodes: int = 512        # LSTM / Transformer see at most this many nodes (the last ones)
    dropout: float = 0.0        # dropout in MLPs and the reduction
    counts: bool = False        # each node's operand and user counts join f1's input and the
                                # kernel's node count the head's: what a mean (GraphSAGE's,
                                # the column-wise reduction's) cannot count
    minor_dim: int = 0          # width of the output_minor_dim token's embedding (MINOR_TOKENS),
                                # joining f1's input and the head's; 0: none

    @property
    def node_counts(self) -> int:
        """Columns --counts adds to f1's input (a node's operands, its users)."""
        return 2 if self.counts else 0

    @property
    def graph_counts(self) -> int:
        """Columns --counts adds to the head's input (the kernel's nodes)."""
        return 1 if self.counts else 0

    @classmethod
    def from_dict(cls, d: dict) -> "NetConfig":
        known = {f.name for f in fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"unknown hyperparameter(s): {', '.join(sorted(unknown))}")
        return cls(**d)

    def check(self) -> "NetConfig":
        if self.gnn not in GNNS:
            raise ValueError(f"gnn must be one of {', '.join(GNNS)}, not {self.gnn!r}")
        if self.reduction not in REDUCTIONS:
            raise ValueError(f"reduction must be one of {', '.join(REDUCTIONS)}, not {self.reduction!r}")
        if self.aggregate not in ("mean", "sum"):
            raise ValueError(f"aggregate must be mean or sum, not {self.aggregate!r}")
        if self.in_features <= NODE_FEATURES:
            raise ValueError(f"in_features must exceed the {NODE_FEATURES} node features")
        if self.minor_dim < 0:
            raise ValueError("minor_dim must be >= 0")
        if self.hidden < 1 or self.layers < 0 or self.neighbors < 1 or self.opcode_dim < 1:
            raise ValueError("hidden, opcode_dim and neighbors must be positive, layers >= 0")
        if self.reduction == "transformer" and self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        if self.gnn == "gat" and self.hidden % self.heads:
            raise ValueError(f"hidden ({self.hidden}) must be a multiple of heads ({self.heads})")
        return self
