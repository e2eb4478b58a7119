"""Make the tiny random-weight Llama model that the real-vLLM tests serve.

Run with the vLLM venv's python (it needs torch, transformers and tokenizers):

    ~/.cache/vllm-diag/vllm-venv/bin/python tests/realvllm/make_model.py OUT_DIR [PADDED_VOCAB]
    ~/.cache/vllm-diag/vllm-venv/bin/python tests/realvllm/make_model.py OUT_DIR --wide
    ~/.cache/vllm-diag/vllm-venv/bin/python tests/realvllm/make_model.py OUT_DIR --nan-word WORD

Everything is generated locally and deterministically: a byte-level BPE tokenizer trained on
generated text, and a 2-layer Llama with seeded random weights. The Hub is never contacted.

``--wide`` makes the compute-heavier variant: the same layers with a wide MLP (``WIDE_INTERMEDIATE``),
so a step is matrix work rather than Python overhead, as on a GPU serving a real model: a decode step
costs milliseconds of matrix products (reading the MLP's weights once per step) and a prefill chunk
scales with its tokens (each token passes through the whole MLP).

``--nan-word WORD`` makes a broken variant for the corrupted-requests check: the LM head untied from the
embedding, and WORD's embedding row NaN, so a prompt holding WORD computes NaN hidden states and NaN logits
(vLLM counts it in ``vllm:corrupted_requests_total`` under ``VLLM_COMPUTE_NANS_IN_LOGITS=1``) while every
other prompt is served as by the tiny model.

The tokenizer learns the words of `tests.realvllm.engine.corpus_words()` (stdlib-only), the words
the harness and the advisor benchmark build prompts from (project venv, no torch).
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

# Set before transformers is imported: it reads these at import time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")

# Run as a script by install.sh (vLLM venv): the repository root is not on sys.path by itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.realvllm.engine import corpus_words  # noqa: E402 - after the path and the offline variables

SEED = 1234
VOCAB_SIZE = 2048
INTERMEDIATE = 256
# The wide MLP: 2 layers x 3 matrices of 128 x 16384 float32 = 50 MB of weights read by every decode step, and
# 2 x 3 x 2 x 128 x 16384 = 25 MFLOP per token: on one core a decode step of a few sequences costs ~5-10 ms,
# a prefill chunk of 512 tokens ~100-200 ms (measured in docs/accuracy.md's witness section).
WIDE_INTERMEDIATE = 16384
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>"]  # ids 0..3, matching the Llama config below
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}</s>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _training_text(words: list[str], lines: int = 4000) -> list[str]:
    rng = random.Random(SEED + 1)
    text = []
    for _ in range(lines):
        sentence = " ".join(rng.choice(words) for _ in range(rng.randint(8, 24)))
        text.append(sentence.capitalize() + ".")
    return text


def make_tokenizer(out_dir: Path) -> int:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        # Every byte is in the vocab, so any text (UTF-8, punctuation) encodes without <unk>.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_training_text(corpus_words()), trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        model_max_length=2048,
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    return len(fast)


def make_model(out_dir: Path, vocab_size: int, padded_vocab: int | None = None,
               intermediate_size: int = INTERMEDIATE) -> None:
    """The 2-layer Llama; with ``padded_vocab``, its vocabulary (embedding and tied LM head) padded with zero
    rows to that size: every decode step then reads the whole LM head (memory-bound, as a larger model's
    decode step reads its weights), while a prefill still costs what it did (logits are computed for one
    position per request). A zero row's logit is 0 and the trained rows' maximum is above it, so greedy
    decoding never picks a padded id the tokenizer lacks."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(SEED)
    config = LlamaConfig(
        vocab_size=max(vocab_size, padded_vocab or 0),
        hidden_size=128,
        intermediate_size=intermediate_size,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=2048,
        rms_norm_eps=1e-5,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=3,
        tie_word_embeddings=True,
    )
    config.dtype = torch.float32  # written to config.json ("dtype") so vLLM sees float32
    model = LlamaForCausalLM(config).to(torch.float32).eval()
    if config.vocab_size > vocab_size:
        with torch.no_grad():
            model.get_input_embeddings().weight[vocab_size:].zero_()
    model.save_pretrained(out_dir, safe_serialization=True)


def poison(out_dir: Path, word: str) -> None:
    """Untie the LM head (a clean copy of the embedding) and make ``word``'s embedding row NaN."""
    import json

    import torch
    from safetensors.torch import load_file, save_file
    from transformers import AutoTokenizer

    ids = AutoTokenizer.from_pretrained(out_dir)(" " + word, add_special_tokens=False)["input_ids"]
    if len(ids) != 1:
        raise SystemExit(f"--nan-word {word!r} is {len(ids)} tokens, not one of the corpus words")
    weights = load_file(out_dir / "model.safetensors")
    embedding = weights["model.embed_tokens.weight"].clone()
    weights["lm_head.weight"] = embedding.clone()
    embedding[ids[0]] = torch.nan
    weights["model.embed_tokens.weight"] = embedding
    save_file(weights, out_dir / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((out_dir / "config.json").read_text())
    config["tie_word_embeddings"] = False
    (out_dir / "config.json").write_text(json.dumps(config, indent=2) + "\n")


def main(argv: list[str]) -> int:
    wide = "--wide" in argv[1:]
    rest = [a for a in argv[1:] if a != "--wide"]
    nan_word = None
    if "--nan-word" in rest and rest.index("--nan-word") + 1 < len(rest):
        at = rest.index("--nan-word")
        nan_word, rest = rest[at + 1], rest[:at] + rest[at + 2:]
    args = rest
    if len(args) not in (1, 2) or (wide and len(args) != 1) or "--nan-word" in args:
        print(f"usage: {argv[0]} OUT_DIR [PADDED_VOCAB | --wide] [--nan-word WORD]", file=sys.stderr)
        return 2
    out_dir = Path(args[0])
    out_dir.mkdir(parents=True, exist_ok=True)
    vocab_size = make_tokenizer(out_dir)
    make_model(out_dir, vocab_size, int(args[1]) if len(args) == 2 else None,
               WIDE_INTERMEDIATE if wide else INTERMEDIATE)
    if nan_word is not None:
        poison(out_dir, nan_word)
    # Sanity check: the words the harness uses are single tokens, so prompt length ~= word count.
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(out_dir)
    sample = " " + " ".join(corpus_words()[:100])
    n = len(tok(sample, add_special_tokens=False)["input_ids"])
    print(f"tiny model in {out_dir}: vocab={vocab_size}, 100 words -> {n} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
