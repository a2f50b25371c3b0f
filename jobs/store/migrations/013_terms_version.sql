-- Which version of the analyser (jobs/terms.py TERMS_VERSION) made a chunk table's terms, and how far a
-- table being analysed again has got. A table of another version is analysed again on its next ingest,
-- load or reembed (jobs/store/lexical_upgrade.py), in batches of chunk ids: `analysed_to` is the last
-- chunk id done (NULL when no analysis is under way), so a crash resumes after it. Tables written
-- before this migration hold version 1's terms.
ALTER TABLE lexical_pivots ADD COLUMN IF NOT EXISTS terms integer NOT NULL DEFAULT 1;
ALTER TABLE lexical_pivots ADD COLUMN IF NOT EXISTS analysed_to text;
