import GRDB

/// The store's schema, as GRDB migrations. Each release appends migrations, never edits a shipped one; the applied
/// identifiers live in GRDB's `grdb_migrations` table, which is how a file written by a newer Herald is recognised.
enum Schema {
    /// `PRAGMA application_id` of a Herald store ("HRLD"): a file that carries another application's ID is refused.
    static let applicationID: Int32 = 0x4852_4C44

    /// Every migration this release knows, oldest first.
    static let migrator: DatabaseMigrator = {
        var migrator = DatabaseMigrator()
        migrator.registerMigration("v1", migrate: v1)
        migrator.registerMigration("v2-quarantine", migrate: v2)
        migrator.registerMigration("v3-unifiedpush", migrate: v3)
        migrator.registerMigration("v4-service-account-keys", migrate: v4)
        migrator.registerMigration("v5-senders", migrate: v5)
        migrator.registerMigration("v6-unifiedpush-seen", migrate: v6)
        migrator.registerMigration("v7-token-retired-at", migrate: v7)
        migrator.registerMigration("v8-inbox-log", migrate: v8)
        return migrator
    }()

    /// The first schema.
    ///
    /// The tables are `STRICT` (SQLite 3.37 or later): a value of the wrong type is refused when written instead of
    /// being found when read.
    ///
    /// `inbox` holds the pending messages, one row each. It orders its rows by an `INTEGER PRIMARY KEY` (`seq`): a new
    /// row takes the largest key plus one, so the key order is the acceptance order, and unlike an implicit rowid it
    /// survives a `VACUUM`. The message ID is `UNIQUE`, so `INSERT OR REPLACE` replaces an entry with the same ID (the
    /// replacement is ordered last).
    ///
    /// `seen` holds the de-duplication window, one row per group commit rather than per ID, so that the window costs a
    /// commit one row whatever the batch size:
    /// - `message_ids`: the IDs the commit accepted, in acceptance order, each as its UTF-8 bytes up to its first NUL
    ///   (as SQLite keeps a bound `TEXT`) followed by a NUL byte.
    /// - `seen_at`: the commit's time (ms since 1970), shared by its IDs.
    /// - `position`, the `INTEGER PRIMARY KEY`: the number of IDs written to the window up to and including this row
    ///   (the previous row's `position` plus this row's ID count), so the rows are in commit order and the count limit
    ///   is a range on the key. Rows only ever leave from the oldest end (or `load` rewrites the table whole), so the
    ///   positions have no gaps.
    ///
    /// A pending message's `inbox` row is independent of the window: pruning the window never deletes it, however far
    /// beyond the window's count or age it is; it leaves only when it is finished.
    private static func v1(_ db: Database) throws {
        try db.execute(
            sql: """
                PRAGMA application_id = \(applicationID);
                CREATE TABLE identity (
                    id INTEGER PRIMARY KEY CHECK (id = 1),
                    installation_id TEXT NOT NULL,
                    token TEXT,
                    device_token TEXT
                ) STRICT;
                CREATE TABLE topic (
                    name TEXT NOT NULL PRIMARY KEY
                ) STRICT, WITHOUT ROWID;
                CREATE TABLE inbox (
                    seq INTEGER PRIMARY KEY,
                    message_id TEXT NOT NULL UNIQUE,
                    user_info BLOB NOT NULL,
                    target_kind TEXT NOT NULL,
                    target_value TEXT NOT NULL,
                    collapse_key TEXT,
                    priority INTEGER NOT NULL,
                    expiration INTEGER,
                    received_at INTEGER NOT NULL
                ) STRICT;
                CREATE TABLE seen (
                    position INTEGER PRIMARY KEY,
                    seen_at INTEGER NOT NULL,
                    message_ids BLOB NOT NULL
                ) STRICT;
                """)
    }

    /// Poison messages. `inbox.replays` counts the starts that found an entry pending (each `load` adds one); an entry
    /// past `Herald.Configuration.maxReplays` moves to `quarantine` (same columns, plus when) instead of being
    /// replayed again, so a message whose handling crashes the process cannot crash it at every start. Quarantined
    /// rows stay until someone deletes them (or `deleteAll`).
    private static func v2(_ db: Database) throws {
        try db.execute(
            sql: """
                ALTER TABLE inbox ADD COLUMN replays INTEGER NOT NULL DEFAULT 0;
                CREATE TABLE quarantine (
                    message_id TEXT NOT NULL PRIMARY KEY,
                    user_info BLOB NOT NULL,
                    target_kind TEXT NOT NULL,
                    target_value TEXT NOT NULL,
                    collapse_key TEXT,
                    priority INTEGER NOT NULL,
                    expiration INTEGER,
                    received_at INTEGER NOT NULL,
                    replays INTEGER NOT NULL,
                    quarantined_at INTEGER NOT NULL
                ) STRICT;
                """)
    }

    /// UnifiedPush: the apps registered with the distributor and the pushes waiting for them.
    ///
    /// `unifiedpush_registration` holds one row per registration, keyed by the endpoint token Herald minted (the last
    /// segment of the endpoint URL the app's server POSTs to). `service` and `token` are the app's D-Bus name and its
    /// own token for the registration (unique together: registering again returns the same endpoint); `version` is
    /// the Connector interface the app speaks (1 or 2); `vapid` the public key a Distributor2 registration carried.
    /// `dropped` marks a registration `herald up unregister` dropped while the daemon was stopped: its next start
    /// tells the app (`Unregistered`) and deletes the row.
    ///
    /// `unifiedpush_message` holds the pushes accepted and not yet handed to the app, in acceptance order (`seq`),
    /// each until the app took it or `expires_at` (ms since 1970) passed; deleting a registration deletes its pushes.
    private static func v3(_ db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE unifiedpush_registration (
                    endpoint_token TEXT NOT NULL PRIMARY KEY,
                    service TEXT NOT NULL,
                    token TEXT NOT NULL,
                    description TEXT NOT NULL,
                    version INTEGER NOT NULL,
                    vapid TEXT,
                    registered_at INTEGER NOT NULL,
                    dropped INTEGER NOT NULL DEFAULT 0,
                    UNIQUE (service, token)
                ) STRICT;
                CREATE TABLE unifiedpush_message (
                    seq INTEGER PRIMARY KEY,
                    message_id TEXT NOT NULL UNIQUE,
                    endpoint_token TEXT NOT NULL REFERENCES unifiedpush_registration (endpoint_token) ON DELETE CASCADE,
                    body BLOB NOT NULL,
                    topic TEXT,
                    urgency TEXT NOT NULL,
                    expires_at INTEGER NOT NULL,
                    received_at INTEGER NOT NULL
                ) STRICT;
                CREATE INDEX unifiedpush_message_endpoint ON unifiedpush_message (endpoint_token);
                """)
    }

    /// Service-account keys Herald issued (`herald credentials create`): only the public half (SubjectPublicKeyInfo
    /// PEM), the `private_key_id` that names it in a JWT's `kid`, the account's `client_email`, a name for people, and
    /// when it was issued and revoked (seconds since 1970; a revoked key's row stays, so that `list` shows it).
    private static func v4(_ db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE service_account_key (
                    key_id TEXT NOT NULL PRIMARY KEY,
                    name TEXT NOT NULL,
                    client_email TEXT NOT NULL,
                    public_key TEXT NOT NULL,
                    created_at INTEGER NOT NULL,
                    revoked_at INTEGER
                ) STRICT, WITHOUT ROWID;
                """)
    }

    /// Senders with credentials of their own (`herald senders add`): a name, the SHA-256 of the secret (hex; the
    /// secret itself is kept nowhere), the scopes (comma-separated names), the rate limit (requests/s and burst,
    /// `NULL` for none), and when it was made and revoked (seconds since 1970; a revoked sender's row stays, so that
    /// `list` shows it). Service-account keys get scopes too: `NULL` (the keys issued before) is every scope.
    private static func v5(_ db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE sender (
                    name TEXT NOT NULL PRIMARY KEY,
                    secret_hash TEXT NOT NULL UNIQUE,
                    scopes TEXT NOT NULL,
                    rate REAL,
                    burst INTEGER,
                    created_at INTEGER NOT NULL,
                    revoked_at INTEGER
                ) STRICT, WITHOUT ROWID;
                ALTER TABLE service_account_key ADD COLUMN scopes TEXT;
                """)
    }

    /// `unifiedpush_seen` holds the IDs of pushes that left `unifiedpush_message` (handed to the app, expired, or
    /// replaced by a newer one with their topic), in the order they left (`seq`), with when (`seen_at`, ms since
    /// 1970). A push offered again with one of these IDs (JetStream redelivering what the fleet's gateway published,
    /// after the instance took it but before its acknowledgement arrived) is answered as kept and not kept again.
    /// Like the inbox's window, it is bounded by count and age.
    private static func v6(_ db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE unifiedpush_seen (
                    seq INTEGER PRIMARY KEY,
                    message_id TEXT NOT NULL UNIQUE,
                    seen_at INTEGER NOT NULL
                ) STRICT;
                """)
    }

    /// When the instance's last registration token stopped being its token (deleted or replaced), in milliseconds
    /// since 1970: what APNs' 410 `Unregistered` answers for a token of the instance's that it no longer has. `NULL`
    /// while no token of the instance has been retired (and for one retired before this migration).
    private static func v7(_ db: Database) throws {
        try db.execute(sql: "ALTER TABLE identity ADD COLUMN token_retired_at INTEGER")
    }

    /// The inbox and the window move to the inbox's log (`InboxLog`, `inbox.log` beside the database): `inbox_log`
    /// gets its one row when the log has taken them (the tables `inbox` and `seen` are then empty, and stay for stores
    /// of earlier releases). From then on a missing log is a store damaged (the pending messages would be gone), not a
    /// new one.
    private static func v8(_ db: Database) throws {
        try db.execute(
            sql: """
                CREATE TABLE inbox_log (
                    id INTEGER PRIMARY KEY CHECK (id = 1),
                    created_at INTEGER NOT NULL
                ) STRICT;
                """)
    }
}
