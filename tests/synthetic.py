"""Synthetic graph records for the tests (and, without the corpus, the
predict benchmark): the exact record format, with a runtime that depends on
the features, so a model can learn it."""

import math

import numpy as np

from tpuperf_cli.records import CONFIG_FEATURES, KERNEL_FEATURES, NODE_FEATURES, new_record


def synthetic_records(n_programs=4, kernels=30, seed=0, configs=0, nodes=(3, 12),
                      kernel_features=len(KERNEL_FEATURES), target=None):
    """Random graph records in the exact record format, with a runtime that
    depends on their features (for tests and benchmarks, not for training a
    real model).

    Each kernel is a random DAG of node ops; node_feat column 0 plays the
    part of an output size. runtime = 2 us + sum over nodes of a per-opcode
    cost x size. With configs > 0 every kernel appears `configs` times with a
    different tile config_feat (column 0 = tile size) and a runtime that
    depends on it (best tile grows with the kernel's node count), for the
    tile task.
    """
    rng = np.random.default_rng(seed)
    cost = {2: 1.0, 34: 6.0, 41: 3.0, 63: 0.1, 70: 2.0, 13: 0.5}
    ops = np.array(sorted(cost))
    out = []
    for p in range(n_programs):
        program = f"synth{p}"
        for k in range(kernels):
            n = int(rng.integers(nodes[0], nodes[1] + 1))
            opcode = rng.choice(ops, n).astype(np.int32)
            feat = np.zeros((n, NODE_FEATURES), np.float32)
            size = rng.uniform(1, 64, n).round().astype(np.float32) ** 2
            feat[:, 0] = size
            feat[:, 1:8] = rng.uniform(0, 4, (n, 7)).round()
            edges = [(i, int(rng.integers(0, i))) for i in range(1, n)]
            edges += [(i, int(rng.integers(0, i))) for i in range(2, n) if rng.random() < 0.3]
            edge_index = np.asarray(edges, np.int32).reshape(-1, 2)
            work = float(sum(cost[int(o)] * s for o, s in zip(opcode, size)))
            # no dot or convolution: the matmul features are zeros
            kfeat = np.zeros(kernel_features, np.float32)
            base_feat = [work * 10, 0, size.sum() * 4, size[-1] * 4, size[-1] * 4]
            kfeat[:min(5, kernel_features)] = base_feat[:kernel_features]
            base = dict(program=program, kernel=f"fusion.{k}", index=k, count=int(rng.integers(1, 3)),
                        count_known=True, opcode="fusion", fusion_kind="kLoop",
                        fingerprint=f"{p:04x}{k:04x}", computation="main",
                        node_opcode=opcode, node_feat=feat, edge_index=edge_index,
                        kernel_feat=kfeat)
            if target is not None:
                base["target"] = target
            noise = float(np.exp(rng.normal(0, 0.02)))
            if configs:
                best = float(2 ** min(4, 1 + n // 3))    # larger kernels like larger tiles
                for c in range(configs):
                    tile = float(2 ** (c % 6))
                    cf = np.zeros(CONFIG_FEATURES, np.float32)
                    cf[0] = tile
                    cf[6] = tile
                    penalty = 1 + abs(math.log2(tile) - math.log2(best))
                    out.append(new_record("graph", **base, config={"kernel_bounds": [tile]},
                                          config_feat=cf, config_index=c,
                                          runtime_ns=(2000 + work) * penalty * noise))
            else:
                out.append(new_record("graph", **base, config_feat=np.zeros(CONFIG_FEATURES, np.float32),
                                      runtime_ns=(2000 + work) * noise))
    return out
