import Foundation
import GRDB
import Glibc
public import Herald

/// The embedded default ``HeraldStore``: one SQLite file, `<directory>/herald.sqlite`, opened with GRDB.
///
/// Durability: the database runs in WAL mode with `synchronous = FULL`, so a ``commit(_:window:now:)`` that returns
/// has been fsynced and survives a power loss; only then does Herald acknowledge the sender. Herald group-commits
/// (one call carries every message accepted since the previous commit), so the cost of that fsync is shared by the
/// whole batch instead of being paid per message.
///
/// Threads: every method may be called from any thread, one call at a time (Herald calls it from its blocking pool,
/// never from the loop thread). Calls that do overlap are serialised by the connection's queue. Each call blocks on
/// disk I/O.
///
/// Errors: every SQLite failure is reported as a ``StoreError`` naming the file and what to do; the store never falls
/// back to memory.
public final class SQLiteStore: HeraldStore, Sendable {
    /// The path of the database file, `<directory>/herald.sqlite`.
    public let path: String

    private let database: DatabaseQueue

    /// Opens the store in `directory`, creating the directory (mode 0700) and the database file when missing, and
    /// brings the schema up to date.
    ///
    /// May be called from any thread; it blocks on disk I/O.
    ///
    /// - Throws: ``StoreError/cannotOpen(path:detail:)`` when the directory or the file cannot be created or opened
    ///   (for example, the directory path names a regular file); ``StoreError/corrupt(path:detail:)`` when the file is
    ///   not a database or not a Herald store; ``StoreError/newerSchema(path:found:)`` when a newer Herald wrote it;
    ///   ``StoreError/writeFailed(path:detail:)`` when the schema cannot be written (disk full).
    public init(directory: String = "herald-data") throws(StoreError) {
        try Self.makeDirectory(directory)
        let path = directory.hasSuffix("/") ? directory + "herald.sqlite" : directory + "/herald.sqlite"
        self.path = path

        var configuration = Configuration()
        configuration.label = "HeraldSQLite"
        configuration.foreignKeysEnabled = true
        configuration.busyMode = .timeout(5)
        // Not `configuration.journalMode = .wal`: GRDB follows that with `synchronous = NORMAL`, which may lose the
        // last commits on power loss. The pragmas are set here, in this order, on the one connection.
        configuration.prepareDatabase { db in
            let mode = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
            guard mode == "wal" else {
                throw StoreError.cannotOpen(path: path, detail: "the file system does not support SQLite's WAL mode (journal mode stays '\(mode ?? "?")')")
            }
            try db.execute(sql: "PRAGMA synchronous = FULL; PRAGMA journal_size_limit = 67108864")
        }

        do {
            database = try DatabaseQueue(path: path, configuration: configuration)
        } catch {
            throw Self.storeError(error, path: path, during: .open)
        }
        do {
            try database.read { db in try Self.checkIsHeraldStore(db, path: path) }
            try Schema.migrator.migrate(database)
        } catch {
            throw Self.storeError(error, path: path, during: .open)
        }
    }

    /// Always `true`: what ``commit(_:window:now:)`` writes is on disk when it returns.
    public var isDurable: Bool { true }

    /// Prunes the de-duplication window to `window` at `now`, then reads the identity, the topics, the window's
    /// message IDs (oldest first) and the pending inbox entries (in acceptance order). Any thread, one call at a time.
    public func load(window: DeduplicationWindow, now: Int64) throws(StoreError) -> StoredState {
        do {
            return try database.writeWithoutTransaction { db in
                var state = StoredState()
                try db.inTransaction(.immediate) {
                    try Self.prune(db, window: window, now: now)
                    state = try Self.read(db)
                    return .commit
                }
                return state
            }
        } catch {
            throw Self.storeError(error, path: path, during: .read)
        }
    }

    /// Saves the identity, replacing the previous one. Any thread, one call at a time.
    public func save(identity: StoredIdentity) throws(StoreError) {
        try write { db in
            try db.cachedStatement(sql: "INSERT OR REPLACE INTO identity (id, installation_id, token, device_token) VALUES (1, ?, ?, ?)")
                .execute(arguments: [identity.installationID, identity.token, identity.deviceToken])
        }
    }

    /// Subscribes or unsubscribes `name`; doing either twice is harmless. Any thread, one call at a time.
    public func setTopic(_ name: String, subscribed: Bool) throws(StoreError) {
        try write { db in
            let sql = subscribed ? "INSERT OR IGNORE INTO topic (name) VALUES (?)" : "DELETE FROM topic WHERE name = ?"
            try db.cachedStatement(sql: sql).execute(arguments: [name])
        }
    }

    /// Applies one group commit in one write transaction, fsynced before it returns: the accepted records enter the
    /// inbox (replacing an entry with the same message ID) and the window (at `now`), the finished IDs leave the
    /// inbox, and the window is pruned to its age and count limits. Any thread, one call at a time.
    ///
    /// - Throws: ``StoreError/writeFailed(path:detail:)`` when the disk is full, the file system is read-only or an
    ///   I/O error occurs; nothing of the batch is then stored.
    public func commit(_ batch: StoreBatch, window: DeduplicationWindow, now: Int64) throws(StoreError) {
        try write { db in
            if !batch.accepted.isEmpty {
                let insertEntry = try db.cachedStatement(
                    sql: """
                        INSERT OR REPLACE INTO inbox
                            (message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                        """)
                let insertSeen = try db.cachedStatement(sql: "INSERT OR REPLACE INTO seen (message_id, seen_at) VALUES (?, ?)")
                for record in batch.accepted {
                    try insertEntry.execute(arguments: [
                        record.messageID, Data(record.userInfo), record.targetKind, record.targetValue, record.collapseKey,
                        record.priority, record.expiration, record.receivedAt,
                    ])
                    try insertSeen.execute(arguments: [record.messageID, now])
                }
            }
            if !batch.finished.isEmpty {
                let deleteEntry = try db.cachedStatement(sql: "DELETE FROM inbox WHERE message_id = ?")
                for messageID in batch.finished {
                    try deleteEntry.execute(arguments: [messageID])
                }
            }
            try Self.prune(db, window: window, now: now)
        }
    }

    /// Deletes every identity, topic, inbox entry and window entry in one transaction. The freed pages are
    /// overwritten (`secure_delete`) and the WAL is checkpointed and truncated, so the erased data does not linger
    /// in the files. The store stays usable. Any thread, one call at a time.
    public func deleteAll() throws(StoreError) {
        do {
            try database.writeWithoutTransaction { db in
                try db.execute(sql: "PRAGMA secure_delete = ON")
                do {
                    try db.inTransaction(.immediate) {
                        try db.execute(sql: "DELETE FROM identity; DELETE FROM topic; DELETE FROM inbox; DELETE FROM seen")
                        return .commit
                    }
                } catch {
                    try? db.execute(sql: "PRAGMA secure_delete = OFF")
                    throw error
                }
                try db.execute(sql: "PRAGMA secure_delete = OFF")
                // Returns a status row instead of failing when a reader blocks it; the data is deleted either way.
                _ = try Row.fetchOne(db, sql: "PRAGMA wal_checkpoint(TRUNCATE)")
            }
        } catch {
            throw Self.storeError(error, path: path, during: .write)
        }
    }

    // MARK: - Test hooks

    /// Sets `PRAGMA max_page_count` on the connection (a stand-in for a full disk) and returns the limit in effect,
    /// which SQLite never sets below the current page count.
    func limitPages(_ maximum: Int) throws -> Int {
        try database.writeWithoutTransaction { db in
            try Int.fetchOne(db, sql: "PRAGMA max_page_count = \(maximum)") ?? 0
        }
    }

    /// Runs `sql` (one or more statements) on the store's connection.
    func execute(sql: String) throws {
        try database.writeWithoutTransaction { db in try db.execute(sql: sql) }
    }

    /// The value of `PRAGMA <name>` on the store's connection.
    func pragma(_ name: String) throws -> String? {
        try database.writeWithoutTransaction { db in try String.fetchOne(db, sql: "PRAGMA \(name)") }
    }

    // MARK: - Implementation

    /// Runs `body` in one immediate write transaction, mapping failures to ``StoreError``.
    private func write(_ body: (Database) throws -> Void) throws(StoreError) {
        do {
            try database.writeWithoutTransaction { db in
                try db.inTransaction(.immediate) {
                    try body(db)
                    return .commit
                }
            }
        } catch {
            throw Self.storeError(error, path: path, during: .write)
        }
    }

    /// Drops window entries older than the window's age, then all but the newest `maximumCount`.
    private static func prune(_ db: Database, window: DeduplicationWindow, now: Int64) throws {
        try db.cachedStatement(sql: "DELETE FROM seen WHERE seen_at < ?").execute(arguments: [window.oldestKept(now: now)])
        // `count(*)` walks the pages of the smallest index, which is cheap next to walking `maximumCount` rows.
        let count = try Int.fetchOne(db.cachedStatement(sql: "SELECT count(*) FROM seen")) ?? 0
        let excess = count - max(window.maximumCount, 0)
        if excess > 0 {
            try db.cachedStatement(sql: "DELETE FROM seen WHERE seq IN (SELECT seq FROM seen ORDER BY seq LIMIT ?)")
                .execute(arguments: [excess])
        }
    }

    private static func read(_ db: Database) throws -> StoredState {
        var state = StoredState()
        if let row = try Row.fetchOne(db, sql: "SELECT installation_id, token, device_token FROM identity WHERE id = 1") {
            state.identity = StoredIdentity(
                installationID: try row.decode(atIndex: 0), token: try row.decode(atIndex: 1), deviceToken: try row.decode(atIndex: 2))
        }
        state.topics = try String.fetchSet(db, sql: "SELECT name FROM topic")
        state.seenMessageIDs = try String.fetchAll(db, sql: "SELECT message_id FROM seen ORDER BY seq")
        let rows = try Row.fetchCursor(
            db,
            sql: """
                SELECT message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at
                FROM inbox ORDER BY seq
                """)
        while let row = try rows.next() {
            let userInfo: Data = try row.decode(atIndex: 1)
            state.pending.append(
                InboxRecord(
                    messageID: try row.decode(atIndex: 0), userInfo: [UInt8](userInfo), targetKind: try row.decode(atIndex: 2),
                    targetValue: try row.decode(atIndex: 3), collapseKey: try row.decode(atIndex: 4), priority: try row.decode(atIndex: 5),
                    expiration: try row.decode(atIndex: 6), receivedAt: try row.decode(atIndex: 7)
                ))
        }
        return state
    }

    /// Refuses a file a newer Herald wrote, and a database that belongs to another application.
    private static func checkIsHeraldStore(_ db: Database, path: String) throws {
        let applied = try Schema.migrator.appliedIdentifiers(db)
        let unknown = applied.subtracting(Schema.migrator.migrations)
        if !unknown.isEmpty {
            throw StoreError.newerSchema(path: path, found: unknown.sorted().joined(separator: ", "))
        }
        let applicationID = try Int32.fetchOne(db, sql: "PRAGMA application_id") ?? 0
        if applicationID != 0 && applicationID != Schema.applicationID {
            throw StoreError.corrupt(path: path, detail: "the database belongs to another application (application_id \(applicationID))")
        }
        if applied.isEmpty {
            let tables = try String.fetchAll(db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            if !tables.isEmpty {
                throw StoreError.corrupt(
                    path: path, detail: "the database holds tables of another application (\(tables.prefix(5).joined(separator: ", "))) and no Herald schema")
            }
        }
    }

    /// Creates `directory` and its missing parents with mode 0700; an existing directory is left as it is.
    private static func makeDirectory(_ directory: String) throws(StoreError) {
        guard !directory.isEmpty else {
            throw .cannotOpen(path: directory, detail: "the data directory path is empty")
        }
        var missing: [String] = []
        var current = directory
        while true {
            var info = stat()
            if stat(current, &info) == 0 {
                guard info.st_mode & S_IFMT == S_IFDIR else {
                    let what = current == directory ? "the data directory path" : "'\(current)'"
                    throw .cannotOpen(path: directory, detail: "\(what) exists and is not a directory")
                }
                break
            }
            let code = errno
            guard code == ENOENT else {
                throw .cannotOpen(path: directory, detail: "cannot use the data directory: \(String(cString: strerror(code)))")
            }
            missing.append(current)
            guard let parent = parentPath(current) else { break }
            current = parent
        }
        for path in missing.reversed() where mkdir(path, 0o700) != 0 && errno != EEXIST {
            let code = errno
            throw .cannotOpen(path: directory, detail: "cannot create the directory '\(path)': \(String(cString: strerror(code)))")
        }
    }

    /// `path` without its last component, or `nil` for a single relative component.
    private static func parentPath(_ path: String) -> String? {
        var trimmed = Substring(path)
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        guard let slash = trimmed.lastIndex(of: "/") else { return nil }
        if slash == trimmed.startIndex { return trimmed.count > 1 ? "/" : nil }
        return String(trimmed[..<slash])
    }

    /// What a failing call was doing, which decides how an ambiguous SQLite failure is reported.
    private enum Operation { case open, read, write }

    /// Maps a GRDB or SQLite failure to the ``StoreError`` that tells a person what to do.
    private static func storeError(_ error: any Error, path: String, during operation: Operation) -> StoreError {
        if let error = error as? StoreError { return error }
        if error is RowDecodingError {
            return .corrupt(path: path, detail: "a stored value has an unexpected type: \(error)")
        }
        guard let error = error as? DatabaseError else {
            let detail = String(describing: error)
            return operation == .write ? .writeFailed(path: path, detail: detail) : .cannotOpen(path: path, detail: detail)
        }
        var detail = "\(error.message ?? "SQLite error") (SQLite error \(error.extendedResultCode.rawValue))"
        switch error.resultCode {
        case .SQLITE_CORRUPT, .SQLITE_NOTADB, .SQLITE_FORMAT:
            return .corrupt(path: path, detail: detail)
        case .SQLITE_CANTOPEN, .SQLITE_PERM, .SQLITE_AUTH, .SQLITE_NOLFS:
            return .cannotOpen(path: path, detail: detail)
        case .SQLITE_FULL:
            return .writeFailed(path: path, detail: detail)
        case .SQLITE_READONLY, .SQLITE_IOERR:
            return operation == .open ? .cannotOpen(path: path, detail: detail) : .writeFailed(path: path, detail: detail)
        case .SQLITE_BUSY, .SQLITE_LOCKED:
            detail += "; another process holds the store: is another Herald using this data directory?"
            return operation == .write ? .writeFailed(path: path, detail: detail) : .cannotOpen(path: path, detail: detail)
        case .SQLITE_ERROR where operation == .read:
            return .corrupt(path: path, detail: "the schema is not the expected one: \(detail)")
        default:
            return operation == .write ? .writeFailed(path: path, detail: detail) : .cannotOpen(path: path, detail: detail)
        }
    }
}
