"""Make the tiny models the real-engine tests serve, with no hub: `python make_models.py DIR`.

Run by scripts/setup-vllm with the engine's own venv (tokenizers, transformers, torch). Every
model shares one byte-level BPE tokenizer and chat template, so any of them drafts for another:

- ``tiny``: a random Llama (hidden 128, 2 heads of 64) that vLLM's CPU attention serves;
- ``zombie``: the same shape with heads of 16, which answers ``/health`` 200 and dies on its
  first chat (``Unsupported CPU attention configuration``): a real zombie boot;
- ``draft``: ``tiny``'s own weights, a drafter that agrees with the target on every token;
- ``draft-noisy``: that copy with noise in its weights, a worse drafter of the same shape.

Seeds are fixed: the same files on every machine.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIALS = ["<|end|>", "<|user|>", "<|assistant|>", "<|system|>", "<pad>"]
CORPUS = (
    "The engine answers every request it is sent. Ready. A restart at night keeps the drafter "
    "sharp. def add(a, b): return a + b. 12 + 30 = 42. The quick brown fox jumps over the lazy "
    "dog. Speech to text and text to speech share the memory with the model. "
) * 40


def tokenizer(out: Path) -> PreTrainedTokenizerFast:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([CORPUS], trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|end|>", pad_token="<pad>", bos_token=None
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out)
    return fast


def llama(out: Path, fast: PreTrainedTokenizerFast, *, head_dim: int, seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    heads = 2
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=heads * head_dim,
        intermediate_size=4 * heads * head_dim,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=head_dim,
        max_position_embeddings=2048,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        bos_token_id=None,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    save(model, fast, out)
    return model


def save(model: LlamaForCausalLM, fast: PreTrainedTokenizerFast, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    fast.save_pretrained(out)
    (out / "generation_config.json").write_text(json.dumps({"eos_token_id": fast.eos_token_id}))


def main(root: Path) -> None:
    fast = tokenizer(root / "tokenizer")
    tiny = llama(root / "tiny", fast, head_dim=64, seed=1)
    llama(root / "zombie", fast, head_dim=16, seed=2)
    save(tiny, fast, root / "draft")
    torch.manual_seed(3)
    with torch.no_grad():
        for p in tiny.parameters():
            p.add_(torch.randn_like(p) * p.float().std().to(p.dtype) * 0.5)
    save(tiny, fast, root / "draft-noisy")
    for name in ("tiny", "zombie", "draft", "draft-noisy"):
        size = sum(f.stat().st_size for f in (root / name).iterdir())
        print(f"make_models: {name} {size // 1024} KiB")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
