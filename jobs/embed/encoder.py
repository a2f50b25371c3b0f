"""The embedding stage: sentence-transformers in an actor that loads the model once.

Vectors are L2-normalised so cosine distance in pgvector equals the dot product the model was
trained for. Only `chunk` rows that are not omitted are embedded; everything else passes through.
If a batch fails, the documents in it are retried one by one, so a single bad document fails
alone instead of taking its batch neighbours with it.

Only texts never embedded before are computed (#20): with `known` (jobs/store/known_vectors.py) a
batch's texts are first looked up among the vectors the collection holds, and a text that appears
more than once in a batch is encoded once. A row that arrives with its vector (a re-embed reusing one)
keeps it. Each document's reused vectors are counted in its `doc_stats` (`vectors_reused`), which
the writers sum.

The model reference names its backend too (`MODEL#onnx-int8`): jobs/embed/backends.py loads torch,
ONNX Runtime or OpenVINO through sentence-transformers; everything here is the same for each.

On a CPU one actor runs several encoder workers (threads, each with its own copy of the model and
`torch_threads` torch threads): single-threaded encoders do not stall each other at torch's sync points
when another process takes a core, and as threads of one process they import torch and
sentence-transformers once instead of once per core.
"""

from __future__ import annotations

import json
import logging
import queue
import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from jobs.embed.backends import load_model
from jobs.embed.models import split_ref
from jobs.embed.tokens import token_counter
from jobs.errors import NotAvailableError, is_bug
from jobs.rows import error_fields
from jobs.store.known_vectors import KnownVectors

log = logging.getLogger(__name__)


def pick_device(device: str, num_gpus: float) -> str:
    import torch  # late: torch loads in the encoding actor, not in a driver that only names the stage

    has_cuda = torch.cuda.is_available()
    if device == "cuda" and not has_cuda:
        raise NotAvailableError(
            "embedding.device is 'cuda' but torch sees no GPU here; use a GPU node, install a CUDA build of "
            "torch, or set embedding.device: auto"
        )
    if device == "auto":
        device = "cuda" if has_cuda else "cpu"
        if num_gpus and not has_cuda:
            log.warning("embedding asked for %s GPU(s) but none is visible; running on CPU", num_gpus)
    return device


def token_budget_batches(lengths: list[int], max_tokens: int, max_rows: int) -> list[list[int]]:
    """Indices grouped by length, longest first: each batch holds at most `max_rows` texts and its padded
    size (rows × longest) stays within `max_tokens` (a single text longer than the budget goes alone)."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batches: list[list[int]] = []
    for i in order:
        if batches and len(batches[-1]) < max_rows and (len(batches[-1]) + 1) * lengths[batches[-1][0]] <= max_tokens:
            batches[-1].append(i)
        else:
            batches.append([i])
    return batches


class Embedder:
    def __init__(self, model: str, *, device: str = "auto", dtype: str = "float32", encode_batch_size: int = 64,
                 torch_threads: int | None = None, num_gpus: float = 0.0, max_batch_tokens: int | None = None,
                 workers: int = 1, known: KnownVectors | None = None):
        # Late: torch and sentence-transformers load in the encoding actor, not in a driver that only names the stage.
        import torch

        if torch_threads:
            torch.set_num_threads(torch_threads)
        self.model_ref, self.known = model, known
        # ONNX Runtime and OpenVINO run on the CPU (jobs/embed/backends.py); torch where the config says.
        self.device = pick_device(device, num_gpus) if split_ref(model)[1] == "torch" else "cpu"

        def load():
            return load_model(model, self.device, dtype, torch_threads)

        # One copy per worker: a Hugging Face fast tokenizer must not be called from two threads at once
        # (it resets its padding state per call: "Already borrowed"), and a copy of a CPU model is small.
        workers = max(1, workers) if self.device == "cpu" else 1  # on a GPU the device is the limit
        self.model = load()
        self._idle: queue.SimpleQueue = queue.SimpleQueue()
        for replica in [self.model] + [load() for _ in range(workers - 1)]:
            self._idle.put(replica)
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="encode") if workers > 1 else None
        self.workers = workers
        self._counter = token_counter(model)
        self._count_lock = threading.Lock()
        self.batch_size = encode_batch_size
        # Padded tokens per forward pass. On a CPU small batches cost no more per token, so a tight budget
        # all but removes padding; a GPU wants big batches (bench: ops/bench/gpu.py).
        self.max_batch_tokens = max_batch_tokens or (2048 if self.device == "cpu" else 65536)

    def token_lengths(self, texts: list[str]) -> list[int]:
        """Tokens per text as the model will see them (special tokens included, truncated at its limit)."""
        with self._count_lock:
            counts = self._counter.count(texts)
        return [min(n, self._counter.limit) + self._counter.special for n in counts]

    def encode(self, texts: list[str]):
        """Normalised float32 vectors, in the order of `texts`, computed in token-budget batches grouped
        by length (see token_budget_batches), so short texts are never padded to a long neighbour. With
        several workers the batches run on all of them, longest first, and calls share the workers."""
        out = np.zeros((len(texts), self.model.get_embedding_dimension()), dtype=np.float32)
        if not texts:
            return out
        batches = token_budget_batches(self.token_lengths(texts), self.max_batch_tokens, self.batch_size)
        if self._pool is None:
            for batch in batches:
                out[batch] = self._encode_batch([texts[i] for i in batch])
        else:
            futures = [(batch, self._pool.submit(self._encode_batch, [texts[i] for i in batch])) for batch in batches]
            for batch, future in futures:
                out[batch] = future.result()
        return out

    def _encode_batch(self, texts: list[str]):
        import torch  # late: see __init__

        model = self._idle.get()  # as many copies as workers, so one is always free here
        try:
            with torch.inference_mode():
                return model.encode(texts, batch_size=len(texts), normalize_embeddings=True, convert_to_numpy=True,
                                    show_progress_bar=False).astype(np.float32)
        finally:
            self._idle.put(model)

    def __call__(self, rows: list[dict]) -> list[dict]:
        todo = [i for i, r in enumerate(rows) if r.get("row_kind") == "chunk" and not r.get("omitted")
                and r.get("embedding") is None]  # a row with its vector (module docstring) keeps it
        try:
            self._fill(rows, todo)
        except Exception as exc:
            if is_bug(exc):
                raise
            log.exception("embedding batch failed; retrying document by document")
            for doc in {rows[i]["doc_id"] for i in todo}:
                mine = [i for i in todo if rows[i]["doc_id"] == doc]
                try:
                    self._fill(rows, mine)
                except Exception as exc:
                    if is_bug(exc):
                        raise
                    for i in mine:
                        rows[i] = dict(rows[i], row_kind="error", **error_fields("embed", exc))
        return rows

    def _fill(self, rows: list[dict], idx: list[int]) -> None:
        if not idx:
            return
        texts = [rows[i]["embed_text"] for i in idx]
        known = self.known.lookup(texts) if self.known is not None else {}
        todo = list(dict.fromkeys(t for t in texts if t not in known))  # each new text once
        computed = dict(zip(todo, self.encode(todo)))
        reused: Counter = Counter()
        for i, text in zip(idx, texts):
            if text in computed:
                vector = computed.pop(text).tolist()
                known[text] = vector  # a repeat of it in this batch reuses it
            else:
                vector = known[text]
                reused[rows[i]["doc_id"]] += 1
            rows[i] = dict(rows[i], embedding=vector, embedding_model=self.model_ref)
        _count_reused(rows, reused)


def _count_reused(rows: list[dict], reused: Counter) -> None:
    """Add each document's reused vectors to the `doc_stats` of its first row here (the writers sum every
    row's doc_stats, so any of a document's rows may carry it)."""
    for i, row in enumerate(rows):
        n = reused.pop(row["doc_id"], 0)
        if n:
            stats = json.loads(row.get("doc_stats") or "{}")
            stats["vectors_reused"] = stats.get("vectors_reused", 0) + n
            rows[i] = dict(row, doc_stats=json.dumps(stats))
        if not reused:
            return
