"""An HF ranker checkpoint (the cached `gr-ranker`) as a `train_ranker.py --export` blob, so a
fine-tune can start from it (hp `init_from`) without retraining the recipe:

    venv-vllm/bin/python examples/testbed/ranker/hf_export.py \
      ~/.cache/recache-testbed/models/gr-ranker /tmp/base.pt
    venv-vllm/bin/python examples/testbed/train_ranker.py --out /tmp/ft --tokenizer \
      ~/.cache/recache-testbed/models/tiny-qwen2 --data-dir ../shared/data \
      --hp '{"init_from": "/tmp/base.pt", "steps": 1000, ...}'

Only the embedding rows the recipe uses are kept (its export does the same): token ids below
item_ids + items + 1 (20480 + 12,101 Beauty items + 1 by default).
"""
import sys

import torch
from transformers import Qwen2ForCausalLM

if len(sys.argv) not in (3, 4):
    sys.exit("usage: hf_export.py CKPT_DIR OUT.pt [USED_ROWS (default 32582)]")
ck, out = sys.argv[1], sys.argv[2]
used = int(sys.argv[3]) if len(sys.argv) == 4 else 32582
m = Qwen2ForCausalLM.from_pretrained(ck, torch_dtype=torch.float32)
state = {k: v.detach().float().clone() for k, v in m.state_dict().items()
         if k not in ("model.embed_tokens.weight", "lm_head.weight") and "rotary_emb" not in k}
state["embed_rows"] = m.model.embed_tokens.weight.detach()[:used].float().clone()
torch.save({"state": state, "report": {"hp": {}, "device": "cpu", "dev": {}}}, out)
print(f"{out}: {len(state)} tensors, {used} embedding rows", file=sys.stderr)
