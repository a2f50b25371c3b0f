"""Token counts with the embedding model's own tokenizer, and the model's token limit.

Counting characters or words is how popular chunkers silently overflow a 256-token model; the
tokenizer is the only honest count. Loaded once per worker process.
"""

from __future__ import annotations

from functools import lru_cache

from jobs.embed.models import resolve_model


class TokenCounter:
    def __init__(self, model_ref: str):
        from transformers import AutoTokenizer

        info = resolve_model(model_ref)
        self.tokenizer = AutoTokenizer.from_pretrained(info.location)
        # The model sees max_seq_length tokens including its special tokens ([CLS], [SEP]).
        seq = info.max_seq_length or getattr(self.tokenizer, "model_max_length", 512)
        self.special = self.tokenizer.num_special_tokens_to_add(pair=False)
        self.limit = min(int(seq), 8192) - self.special

    def count(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        enc = self.tokenizer(texts, add_special_tokens=False, truncation=False, verbose=False)
        return [len(ids) for ids in enc["input_ids"]]


@lru_cache(maxsize=4)
def token_counter(model_ref: str) -> TokenCounter:
    return TokenCounter(model_ref)
