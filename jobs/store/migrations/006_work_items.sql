-- A run's work items (the files its plan will process), written a listing page at a time while the
-- plan is made, so that the driver never holds the whole list: the run marks them pending from here
-- and the first stage's tasks read them back by ranges of `seq` (jobs/store/work_items.py). A run
-- deletes its own rows when it ends; rows a killed driver left behind go with the next run of the
-- same collection. Logged: a restarted server costs only the documents in flight.

CREATE TABLE IF NOT EXISTS work_items (
    run_id       text NOT NULL,
    collection   text NOT NULL,
    seq          bigint NOT NULL,
    source_type  text NOT NULL,
    source_path  text NOT NULL,
    source_size  bigint,
    source_etag  text,
    item         jsonb NOT NULL,
    PRIMARY KEY (run_id, seq)
);
CREATE INDEX IF NOT EXISTS work_items_collection_idx ON work_items (collection);
