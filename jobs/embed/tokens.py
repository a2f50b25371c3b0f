"""Token counts with the embedding model's own tokenizer, and the model's token limit.

Counting characters or words is how popular chunkers silently overflow a 256-token model; the
tokenizer is the only honest count. Loaded once per worker process: from the model's
`tokenizer.json` with the `tokenizers` library when there is one (milliseconds; importing
`transformers` costs seconds in every new Ray worker), else through `transformers.AutoTokenizer`.
Both run the same Rust tokenizer, so the counts are the same.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from jobs.embed.models import resolve_model


class TokenCounter:
    def __init__(self, model_ref: str):
        info = resolve_model(model_ref)
        location = Path(info.location)
        self._fast = None
        if (location / "tokenizer.json").is_file():
            from tokenizers import Tokenizer  # late: see the module docstring (milliseconds, not seconds)

            self._fast = Tokenizer.from_file(str(location / "tokenizer.json"))
            self._fast.no_truncation()
            self._fast.no_padding()
            self.special = self._fast.num_special_tokens_to_add(False)
            config = location / "tokenizer_config.json"
            model_max = json.loads(config.read_text()).get("model_max_length", 512) if config.is_file() else 512
        else:
            from transformers import AutoTokenizer  # late: seconds to import, for models without tokenizer.json only

            self.tokenizer = AutoTokenizer.from_pretrained(info.location)
            self.special = self.tokenizer.num_special_tokens_to_add(pair=False)
            model_max = getattr(self.tokenizer, "model_max_length", 512)
        # The model sees max_seq_length tokens including its special tokens ([CLS], [SEP]).
        seq = info.max_seq_length or model_max
        self.limit = min(int(seq), 8192) - self.special

    def count(self, texts: list[str]) -> list[int]:
        if not texts:
            return []
        if self._fast is not None:
            return [len(e.ids) for e in self._fast.encode_batch(texts, add_special_tokens=False)]
        enc = self.tokenizer(texts, add_special_tokens=False, truncation=False, verbose=False)
        return [len(ids) for ids in enc["input_ids"]]

    def offsets(self, text: str) -> list[tuple[int, int]]:
        """Character [start, end) of each token of `text`, no special tokens."""
        if self._fast is not None:
            return list(self._fast.encode(text, add_special_tokens=False).offsets)
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        return [tuple(o) for o in enc["offset_mapping"]]


@lru_cache(maxsize=4)
def token_counter(model_ref: str) -> TokenCounter:
    return TokenCounter(model_ref)
