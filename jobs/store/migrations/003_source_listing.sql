-- What the input listing said about each document's source when its content was loaded: the size and
-- a listing tag (`etag:<ETag>` from an object store, `mtime:<…>` where there is no ETag). While a new
-- listing says the same, the plan trusts content_sha256 without downloading the file; content_sha256
-- still decides whether chunks are replaced. NULL (rows from before this migration): read once more.

ALTER TABLE documents ADD COLUMN IF NOT EXISTS source_size bigint;
ALTER TABLE documents ADD COLUMN IF NOT EXISTS source_etag text;
