"""A title-level co-occurrence teacher fitted on the training users' interactions only, in
seconds: what the transformer is taught to compute from tokens, because from the ranking loss
alone it would not find it in the time this machine has (measured: a bag-of-tokens two-tower
model stays at random on dev after 48k examples; so did the transformer after 400 steps).

- `assoc[a, b]`: how often titles a and b followed each other within 5 steps (weight 0.7 per
  step apart, both directions); its positive PMI factorized (rank R, randomized SVD with a
  fixed seed): E, one vector per title for both roles (history and candidate);
- `prior[c]`: log((times c was a user's last item + 1) / (interactions of c + 5)): the drift
  towards what is new at the end of the log, which popularity alone gets backwards;
- a user's query: sum_k 0.7^k E[h_k] over its last items (most recent first); the teacher's
  score of candidate c: E[c] . query + prior[c]. Dev Recall@10 ~0.29 (popularity ~0.07,
  random 0.10).
The ranker is distilled towards the teacher's scores of each prompt's candidates (hp `kd`,
and the pointer's KL in `aux_point`), and its item id rows start from [E, prior] of the
item's title (hp `item_init`; train.py, plain.py).
"""
import torch

WINDOW, DECAY = 5, 0.7


class Teacher:
    def __init__(self, data, rank=32, history_items=20):
        n = len(data.titles)
        title = data.title_of
        assoc = torch.zeros(n, n, dtype=torch.float64)
        draws = torch.zeros(n, dtype=torch.float64)
        last = torch.zeros(n, dtype=torch.float64)
        for (_, h), split in zip(data.users, data.split):
            if split != "train":
                continue
            for i in h:
                draws[title(i)] += 1
            last[title(h[-1])] += 1
            for j in range(1, len(h)):
                for k, a in enumerate(reversed(h[max(0, j - WINDOW):j])):
                    assoc[title(a), title(h[j])] += DECAY ** k
                    assoc[title(h[j]), title(a)] += DECAY ** k
        rows, cols, total = assoc.sum(1, keepdim=True), assoc.sum(0, keepdim=True), assoc.sum()
        pmi = torch.log((assoc * total).clamp(min=1e-12) / (rows * cols).clamp(min=1e-12))
        pmi = torch.where(assoc > 0, pmi.clamp(min=0), torch.zeros_like(pmi))
        with torch.random.fork_rng():  # a seeded randomized SVD: same factors every run
            torch.manual_seed(0)
            u, s, v = torch.svd_lowrank(pmi, q=2 * rank, niter=8)
        # An SVD's signs are arbitrary per component; fix them so the targets are reproducible.
        sign = torch.sign(u[:, :rank].sum(0) + 1e-30)
        self.e = (u[:, :rank] * s[:rank].sqrt() * sign).float()
        self.prior = torch.log((last + 1) / (draws + 5)).float()
        self.history_items = history_items
        self.title = title

    def user_vector(self, history):
        """The teacher's query for a user: recency-weighted sum of its history's P rows."""
        recent = history[-self.history_items:]
        w = torch.tensor([DECAY ** (len(recent) - 1 - k) for k in range(len(recent))])
        return (w[:, None] * self.e[[self.title(i) for i in recent]]).sum(0)

    def scores(self, history, candidates):
        """Teacher scores of candidate items for a user with this history (items)."""
        ts = [self.title(c) for c in candidates]
        return self.e[ts] @ self.user_vector(history) + self.prior[ts]
