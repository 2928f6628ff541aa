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
}
