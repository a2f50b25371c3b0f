"""The ingest's stages as plain specs: what runs on each batch, with which arguments and resources.

One definition serves both ways a run executes them: on Ray Data (jobs/on_ray.build_dataset maps them
onto operators through jobs/adapter.py) and, for a small run, in this process (jobs/in_process.py),
so the two cannot drift apart in what they compute.
"""

from __future__ import annotations

from jobs.adapter import Stage
from jobs.config import JobConfig, ResourcesConfig
from jobs.embed.encoder import Embedder
from jobs.embed.layout import embedder_args
from jobs.excel.stage import excel_to_chunks
from jobs.excel.templates import read_template_texts
from jobs.markdown.parse import parse_documents
from jobs.markdown.sentences import SentenceSplitter
from jobs.markdown.windows import chunk_documents
from jobs.rows import CHUNK_SCHEMA, DOC_SCHEMA
from jobs.sources.storage import StorageOptions
from jobs.store.known_vectors import KnownVectors


def markdown_stages(cfg: JobConfig, storage: StorageOptions | None) -> list[Stage]:
    """Parse, sentences, chunk: a Markdown file's work item to its chunk rows."""
    return [
        Stage("parse_markdown", parse_documents, DOC_SCHEMA, cfg.ray.parse, {
            "title_from_front_matter": cfg.markdown.title_from_front_matter,
            "onenote_headings": cfg.markdown.onenote_headings,
            "storage": storage,
        }),
        Stage("sentences", SentenceSplitter, DOC_SCHEMA, cfg.sentences.resources, {
            "model": cfg.sentences.model,
            "require_gpu": cfg.sentences.require_gpu,
            "nlp_batch_size": cfg.sentences.nlp_batch_size,
            "download_missing": cfg.sentences.download_missing,
        }),
        Stage("chunk", chunk_documents, CHUNK_SCHEMA, cfg.ray.chunk, {
            "chunking": cfg.chunking, "quality": cfg.quality, "embedding_model": cfg.embedding.model,
            "description_keys": tuple(cfg.markdown.description_keys),
        }),
    ]


def excel_stage(cfg: JobConfig, storage: StorageOptions | None) -> Stage:
    """A workbook's work item to its row chunks."""
    return Stage("excel", excel_to_chunks, CHUNK_SCHEMA, cfg.ray.excel, {
        "excel": cfg.excel, "quality": cfg.quality, "embedding_model": cfg.embedding.model,
        "storage": storage,
        # The driver's templates travel with the stage: the ones the fingerprint hashed, on any node.
        "templates": read_template_texts(cfg.excel.templates_dir),
    })


def embed_stage(cfg: JobConfig, resources: ResourcesConfig, workers: int, known: KnownVectors | None) -> Stage:
    """Chunk rows to chunk rows with vectors (jobs/embed/encoder.py). Two calls at once keep an actor's
    workers fed: one call's batches finish while the next one's start."""
    return Stage("embed", Embedder, CHUNK_SCHEMA, resources, embedder_args(cfg, workers, known=known),
                 calls_per_actor=min(workers, 2))
