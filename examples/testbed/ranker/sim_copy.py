#!/usr/bin/env python3
"""Issue 21, what a single copying readout head can pass on (no model, a simulation): the
final token attends with softmax(s * z) over 100 item ends (z: the readout's standardized
score, the target's z raised by `--boost`), each end holding its label's code (a random unit
vector in `--dims` dims), and the label logits are each label code's dot product with the
attention-weighted sum of codes. Prints, per spread s: the readout's Recall@10, the label
logits' Recall@10, and the share of the readout's top 10 in the label logits' top 10.

Run with the testbed venv's Python: ranker/sim_copy.py [--dims 63] [--boost 1.0]
"""
import argparse

import numpy as np


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", type=int, default=63)
    ap.add_argument("--boost", type=float, default=1.0)
    ap.add_argument("--trials", type=int, default=1500)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    for s in (0.3, 0.7, 1.0, 1.5, 2.0, 3.0, 6.0):
        hit_ro = hit_lab = overlap = 0
        for _ in range(a.trials):
            z = rng.normal(0, 1, 100)
            z[0] += a.boost  # candidate 0 is the target
            att = np.exp(s * z - s * z.max())
            att /= att.sum()
            codes = rng.normal(0, 1, (100, a.dims))
            codes /= np.linalg.norm(codes, axis=1, keepdims=True)
            lab = codes @ (att @ codes)
            hit_ro += (z > z[0]).sum() < 10
            hit_lab += (lab > lab[0]).sum() < 10
            overlap += len(set(np.argsort(-z)[:10]) & set(np.argsort(-lab)[:10])) / 10
        n = a.trials
        print(f"s {s}: readout R@10 {hit_ro / n:.3f}  label R@10 {hit_lab / n:.3f}  "
              f"top10 overlap {overlap / n:.2f}")


if __name__ == "__main__":
    main()
