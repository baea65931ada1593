-- The outbox and inbox tables (bus-outbox). `Outbox::migrate` runs this file in one
-- transaction under an advisory lock, so concurrent starts apply it once; every statement
-- is idempotent, so it may also be run by hand (psql -f) or copied into the
-- application's own migrations.

-- Messages written in the application's transactions, waiting for a relay. `id` is the
-- relay order; `payload` is the encoded envelope, exactly what the transport stores.
CREATE TABLE IF NOT EXISTS bus_outbox (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind            text   NOT NULL CHECK (kind IN ('queue', 'topic')),
    destination     text   NOT NULL,
    message_id      text   NOT NULL,
    -- SendOptions::key: the partition key; rows of one key are relayed in id order.
    partition_key   text,
    -- SendOptions::due, in ms since the Unix epoch (NULL: ready at once).
    due_ms          bigint,
    -- SendOptions::dedup_key and dedup_window (NULL: the relay's own key, the message id).
    dedup_key       text,
    dedup_window_ms bigint,
    payload         bytea  NOT NULL,
    written_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    -- Failed sends while the transport answered other rows, and the last error.
    attempts        integer NOT NULL DEFAULT 0,
    last_error      text
);

-- The keyed rows in id order: a relay looks for the keys of its next batch here first,
-- without reading past a backlog of unkeyed rows.
CREATE INDEX IF NOT EXISTS bus_outbox_keyed ON bus_outbox (id) WHERE partition_key IS NOT NULL;

-- Rows no transport will take (an invalid name, too big, undecodable, refused), moved
-- aside by the relay with the reason, so that the rows after them go on.
CREATE TABLE IF NOT EXISTS bus_outbox_dead (
    id              bigint PRIMARY KEY,
    kind            text   NOT NULL,
    destination     text   NOT NULL,
    message_id      text   NOT NULL,
    partition_key   text,
    due_ms          bigint,
    dedup_key       text,
    dedup_window_ms bigint,
    payload         bytea  NOT NULL,
    written_at      timestamptz NOT NULL,
    reason          text   NOT NULL,
    dead_at         timestamptz NOT NULL DEFAULT clock_timestamp()
);

-- Messages whose handlers committed (InboxLayer): one row per source (queue, or
-- topic/subscription) and message id, written in the handler's transaction.
CREATE TABLE IF NOT EXISTS bus_inbox (
    source      text NOT NULL,
    message_id  text NOT NULL,
    handled_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (source, message_id)
);
CREATE INDEX IF NOT EXISTS bus_inbox_handled_at ON bus_inbox (handled_at);

-- Wakes the relays (LISTEN bus_outbox) when a transaction that wrote rows commits: a
-- notification is delivered only on commit, and PostgreSQL folds a transaction's
-- identical ones into one.
CREATE OR REPLACE FUNCTION bus_outbox_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('bus_outbox', '');
    RETURN NULL;
END
$$;
CREATE OR REPLACE TRIGGER bus_outbox_notify
    AFTER INSERT ON bus_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION bus_outbox_notify();

-- The relay's lag, for operators and dashboards: rows waiting, the age in seconds of
-- the oldest (0 when none waits), and rows moved aside. `SELECT * FROM bus_outbox_lag()`.
CREATE OR REPLACE FUNCTION bus_outbox_lag()
RETURNS TABLE (waiting bigint, oldest_seconds double precision, dead bigint)
LANGUAGE sql STABLE AS $$
    SELECT (SELECT count(*) FROM bus_outbox),
           coalesce((SELECT extract(epoch FROM clock_timestamp() - min(written_at))::float8
                     FROM bus_outbox), 0),
           (SELECT count(*) FROM bus_outbox_dead)
$$;
