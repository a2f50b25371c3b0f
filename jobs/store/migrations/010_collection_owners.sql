-- The fence between runs of one collection (jobs/store/locks.py). The run that takes a collection's write
-- lock writes a token of its own here; every commit of its writers reads the row (FOR SHARE) inside its
-- transaction and goes on only while the token is still its run's. A run that lost the lock (its driver's
-- session was cut) therefore commits nothing once another run has taken the collection, and a new owner's
-- update of the row waits for any commit of the old one that is in flight.
CREATE TABLE IF NOT EXISTS collection_owners (
    collection  text PRIMARY KEY,
    token       text NOT NULL,
    holder      text NOT NULL,
    taken_at    timestamptz NOT NULL DEFAULT now()
);
