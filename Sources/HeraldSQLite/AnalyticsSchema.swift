import GRDB

/// The analytics store's schema (`analytics.sqlite`), as GRDB migrations of its own, separate from the inbox store's
/// ``Schema``. Each release appends migrations, never edits a shipped one; a file with a migration this release does
/// not know was written by a newer Herald and is refused.
enum AnalyticsSchema {
    /// `PRAGMA application_id` of a Herald analytics store ("HRLA"), distinct from the inbox store's "HRLD".
    static let applicationID: Int32 = 0x4852_4C41

    /// Every migration this release knows, oldest first.
    static let migrator: DatabaseMigrator = {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("analytics-v1", migrate: v1)
        migrator.registerMigration("analytics-v2-by-cohort", migrate: v2)
        return migrator
    }()

    /// The first schema: one `STRICT` table, `event`, one row per analytics event.
    ///
    /// - `event_key`: 8 bytes, the event's ``AnalyticsEvent/id`` (big-endian), which the bus assigns when it records
    ///   the event. `UNIQUE`, and rows are written with `INSERT OR IGNORE`, so a batch the bus retries after a failure
    ///   (or after a write that committed but whose answer was lost) is stored once.
    /// - `cohort_at`: when the message was received (`receivedAt`), or the event's own time for events about no
    ///   message. The report groups by its UTC day, so a message's impression and open count on the day it arrived
    ///   (open rates stay within one day's messages), and retention prunes by it. Indexed.
    /// - `reason` (`message_dropped`), `result` and `duration_ms` (`background_fetch`): the parameters the report
    ///   groups by, as columns; `parameters` keeps every parameter as a JSON object of strings.
    static func v1(_ db: Database) throws {
        try db.execute(
            sql: """
                PRAGMA application_id = \(applicationID);
                CREATE TABLE event (
                    id INTEGER PRIMARY KEY,
                    event_key BLOB NOT NULL UNIQUE,
                    name TEXT NOT NULL,
                    timestamp INTEGER NOT NULL,
                    cohort_at INTEGER NOT NULL,
                    message_id TEXT,
                    analytics_label TEXT,
                    topic TEXT,
                    collapse_key TEXT,
                    priority INTEGER,
                    message_type TEXT,
                    ttl INTEGER,
                    received_at INTEGER,
                    reason TEXT,
                    result TEXT,
                    duration_ms INTEGER,
                    parameters TEXT NOT NULL
                ) STRICT;
                CREATE INDEX event_by_cohort ON event (cohort_at);
                """)
    }

    /// The event table kept in the order of its `cohort_at`: one B-tree, `PRIMARY KEY (cohort_at, event_key)`,
    /// `WITHOUT ROWID`, instead of v1's table, its `UNIQUE` index on `event_key` and its index on `cohort_at` — three
    /// B-trees written per event. Events arrive in about the order of their cohort (a message's events follow it
    /// within minutes), so each is written near the end of the one tree; pruning and the report read a range of it.
    ///
    /// - The key: an event is still stored once (`INSERT OR IGNORE`), as its `cohort_at` and `event_key` never change
    ///   when the bus gives a batch again; distinct events have distinct keys.
    /// - v1's `id` column (a row number nobody read) is gone; everything else is copied as it is.
    static func v2(_ db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE event_by_cohort_v2 (
                    cohort_at INTEGER NOT NULL,
                    event_key BLOB NOT NULL,
                    name TEXT NOT NULL,
                    timestamp INTEGER NOT NULL,
                    message_id TEXT,
                    analytics_label TEXT,
                    topic TEXT,
                    collapse_key TEXT,
                    priority INTEGER,
                    message_type TEXT,
                    ttl INTEGER,
                    received_at INTEGER,
                    reason TEXT,
                    result TEXT,
                    duration_ms INTEGER,
                    parameters TEXT NOT NULL,
                    PRIMARY KEY (cohort_at, event_key)
                ) STRICT, WITHOUT ROWID;
                INSERT INTO event_by_cohort_v2
                    (cohort_at, event_key, name, timestamp, message_id, analytics_label, topic, collapse_key, priority,
                     message_type, ttl, received_at, reason, result, duration_ms, parameters)
                SELECT cohort_at, event_key, name, timestamp, message_id, analytics_label, topic, collapse_key, priority,
                       message_type, ttl, received_at, reason, result, duration_ms, parameters
                FROM event;
                DROP TABLE event;
                ALTER TABLE event_by_cohort_v2 RENAME TO event;
                """)
    }
}
