#!/usr/bin/env python3
"""Owns the testbed's random-weight checkpoints: Qwen2 models plus the testbed tokenizer.

Run with the testbed venv's Python (needs torch, transformers, tokenizers).
No model hub is reachable, so everything is made here, deterministically:
- a byte-level BPE tokenizer trained on text generated from a seeded RNG (4096 learnt
  tokens; not on files of this machine, whose contents vary between Python builds), padded
  to 65536 ids with filler tokens no text encodes to, so recache's item pool can give each
  item of a whole catalog (Amazon Beauty: 12,101) its own label token and every id the
  model may emit still decodes;
- ChatML special tokens and chat template, so /v1/chat/completions works;
- Qwen2ForCausalLM with seeded random weights, bf16, 16384 positions so 8k+ token prompts
  fit, of one of two shapes (`--kind`, KINDS):
  tiny: 4 layers, hidden 256, FFN 1024, 4 heads, 2 KV heads (head dim 64);
  qwen2-1.5b-shape: Qwen2-1.5B's layer (hidden 1536, FFN 8960, 12 heads, 2 KV heads, head
  dim 128, its rope theta, RMS eps and tied embeddings) but only 2 layers and the testbed
  tokenizer, so its cost per token and per query-key pair has a real GR model's proportions
  (docs/cost-shape.md) while a 6.5k-token prefill still fits on this machine's CPU.
Written to a temp dir and renamed into place with a stamp, so a crash never leaves a
half-made checkpoint that later runs would trust.
"""
import argparse, json, os, random, shutil, sys

VOCAB = 65536
# Qwen2Config arguments per kind (besides the tokenizer's ids); flops.py and the tests read
# them, so this is the one place a shape is written down. The recipe stamps a cached copy:
# change a shape, change its recipe.
KINDS = {
    "tiny": {
        "recipe": "tiny-qwen2 recipe=4 vocab=4096+filler=65536 layers=4 hidden=256 heads=4/2 "
                  "pos=16384 seed=0",
        "config": dict(hidden_size=256, intermediate_size=1024, num_hidden_layers=4,
                       num_attention_heads=4, num_key_value_heads=2, rope_theta=10000.0,
                       tie_word_embeddings=False),
    },
    # Qwen2-1.5B's published config.json: hidden 1536, intermediate 8960, 12 heads, 2 KV
    # heads, rope_theta 1e6, rms_norm_eps 1e-6, tied embeddings (its 28 layers cut to 2).
    "qwen2-1.5b-shape": {
        "recipe": "qwen2-1.5b-shape recipe=1 vocab=4096+filler=65536 layers=2 hidden=1536 "
                  "ffn=8960 heads=12/2 pos=16384 seed=0",
        "config": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=2,
                       num_attention_heads=12, num_key_value_heads=2, rope_theta=1000000.0,
                       rms_norm_eps=1e-6, tie_word_embeddings=True),
    },
}
QWEN2_SPLIT = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"""
               r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


def corpus(seed=0, lines=20000):
    """Deterministic mixed text: pseudo-words, sentences, numbers, code and JSON shapes,
    so common prompt shapes (prose, code, digits) tokenize into multi-byte tokens."""
    rng = random.Random(seed)
    syll = [a + b for a in "bcdfghklmnprstvwz" for b in "aeiou"] + ["th", "sh", "ch", "qu", "ng"]
    words = sorted({"".join(rng.choice(syll) for _ in range(rng.randint(1, 4)))
                    for _ in range(3000)})
    words += ("the of and to in is that for it as with was on be by this are from or "
              "you your user assistant system cache prefix token request model answer "
              "question hello world please def return import class self None True False").split()
    for _ in range(lines):
        kind = rng.random()
        if kind < 0.6:
            s = " ".join(rng.choice(words) for _ in range(rng.randint(4, 20)))
            yield s.capitalize() + rng.choice([".", "?", "!", ",", ":"])
        elif kind < 0.75:
            yield " ".join(str(rng.randint(0, 10 ** rng.randint(1, 6))) for _ in range(8))
        elif kind < 0.9:
            a, b = rng.choice(words), rng.choice(words)
            yield f"def {a}_{b}(x, y=None):\n    return {{'{a}': x, \"{b}\": [y, {rng.randint(0, 99)}]}}"
        else:
            yield json.dumps({rng.choice(words): rng.choice(words), "n": rng.randint(0, 999)})


def make_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    # Exactly the pipeline transformers' Qwen2Tokenizer rebuilds on load (it ignores the
    # file's pre-tokenizer), so tokenizer.json read by any other client (the Rust
    # `tokenizers` crate, another engine) yields the same ids as vLLM.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=4096, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    return pad_vocab(tok, VOCAB)


def pad_vocab(tok, size):
    """Adds filler tokens to the BPE vocabulary up to `size` ids. No merge produces them, so
    no text encodes to them; each decodes to a distinct ASCII string (byte-level characters
    map ASCII letters to themselves)."""
    from tokenizers import Tokenizer
    spec = json.loads(tok.to_str())
    vocab = spec["model"]["vocab"]
    n = len(vocab)
    while n < size:
        vocab[f"<f{n}>"] = n
        n += 1
    return Tokenizer.from_str(json.dumps(spec))


def make(out_dir, kind):
    os.environ["RAYON_NUM_THREADS"] = "1"  # single-threaded BPE training: same merges every run
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    tmp = out_dir + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    fast = PreTrainedTokenizerFast(tokenizer_object=make_tokenizer(), eos_token="<|im_end|>",
                                   pad_token="<|endoftext|>", chat_template=CHAT_TEMPLATE)
    fast.save_pretrained(tmp)
    # transformers 5 writes tokenizer_class "TokenizersBackend" and the template in a side
    # file; older loaders (another engine's venv) know neither, so spell both out.
    tc_path = os.path.join(tmp, "tokenizer_config.json")
    with open(tc_path) as f:
        tc = json.load(f)
    tc.update(tokenizer_class="PreTrainedTokenizerFast", chat_template=CHAT_TEMPLATE)
    with open(tc_path, "w") as f:
        json.dump(tc, f, indent=2)
    eos, pad = fast.convert_tokens_to_ids("<|im_end|>"), fast.convert_tokens_to_ids("<|endoftext|>")
    cfg = Qwen2Config(vocab_size=VOCAB, max_position_embeddings=16384, bos_token_id=pad,
                      eos_token_id=eos, pad_token_id=pad, **KINDS[kind]["config"])
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(tmp)
    with open(os.path.join(tmp, "recache-testbed-stamp"), "w") as f:
        f.write(KINDS[kind]["recipe"] + "\n")
    shutil.rmtree(out_dir, ignore_errors=True)
    os.rename(tmp, out_dir)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="checkpoint directory")
    ap.add_argument("--kind", choices=sorted(KINDS), default="tiny", help="the model's shape")
    a = ap.parse_args()
    out = a.out
    stamp = os.path.join(out, "recache-testbed-stamp")
    if os.path.exists(stamp) and open(stamp).read().strip() == KINDS[a.kind]["recipe"]:
        print(f"[testbed] model ready (cached): {out}", file=sys.stderr)
    else:
        print(f"[testbed] making {a.kind} Qwen2 checkpoint + tokenizer in {out}", file=sys.stderr)
        make(out, a.kind)
    print(out)
