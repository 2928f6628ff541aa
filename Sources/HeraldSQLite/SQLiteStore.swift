import Foundation
import GRDB
import Glibc
public import Herald

/// The embedded default `HeraldStore`: one SQLite file, `<directory>/herald.sqlite`, opened with GRDB.
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
/// Errors: every SQLite failure is reported as a `StoreError` naming the file and what to do; the store never falls
/// back to memory.
public final class SQLiteStore: HeraldStore, Sendable {
    /// The path of the database file, `<directory>/herald.sqlite`.
    public let path: String

    let database: DatabaseQueue

    /// Opens the store in `directory`, creating the directory (mode 0700) and the database file when missing, and
    /// brings the schema up to date.
    ///
    /// May be called from any thread; it blocks on disk I/O.
    ///
    /// - Throws: `StoreError/cannotOpen(path:detail:)` when the directory or the file cannot be created or opened
    ///   (for example, the directory path names a regular file); `StoreError/corrupt(path:detail:)` when the file is
    ///   not a database or not a Herald store; `StoreError/newerSchema(path:found:)` when a newer Herald wrote it;
    ///   `StoreError/writeFailed(path:detail:)` when the schema cannot be written (disk full).
    public init(directory: String = "herald-data") throws(StoreError) {
        try Self.makeDirectory(directory)
        let path = directory.hasSuffix("/") ? directory + "herald.sqlite" : directory + "/herald.sqlite"
        self.path = path
        try Self.checkNotOrphanedLog(path)
        try Self.checkLogHeader(path)
        // A new store's file is made 0600 before SQLite opens it (SQLite would use 0644 less the umask); its
        // write-ahead log and shared-memory file take the database file's mode. The registration token is in it.
        let created = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if created >= 0 { close(created) }

        var configuration = Configuration()
        configuration.label = "HeraldSQLite"
        configuration.foreignKeysEnabled = true
        configuration.busyMode = .timeout(5)
        // Not `configuration.journalMode = .wal`: GRDB follows that with `synchronous = NORMAL`, which may lose the
        // last commits on power loss. The pragmas are set here, in this order, on the one connection.
        configuration.prepareDatabase { db in
            let mode = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
            guard mode == "wal" else {
                throw StoreError.cannotOpen(
                    path: path, detail: "the file system does not support SQLite's WAL mode (journal mode stays '\(mode ?? "?")')")
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

    /// Refuses a write-ahead log whose header is not one: SQLite reads every committed page from the log first, and a
    /// log it cannot read it silently ignores — the store would open with whatever the database file held before the
    /// last checkpoint (often nothing: a new identity, the unhandled messages gone). A torn tail after a crash is
    /// normal and recovered by SQLite; only a damaged header is refused.
    private static func checkLogHeader(_ path: String) throws(StoreError) {
        let log = path + "-wal"
        let fd = open(log, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return }
        defer { close(fd) }
        var header = [UInt8](repeating: 0, count: 32)
        guard Glibc.read(fd, &header, 32) == 32 else { return }
        let words = (0..<8).map { index in header[index * 4..<index * 4 + 4].reduce(UInt32(0)) { $0 << 8 | UInt32($1) } }
        // The magic number says in which byte order the checksums were computed; the header's first 24 bytes are
        // checksummed as SQLite's WAL format describes (pairs of 32-bit words).
        guard words[0] & 0xFFFF_FFFE == 0x377F_0682 else {
            throw .corrupt(
                path: path,
                detail:
                    "its write-ahead log \(log) is damaged (not a SQLite WAL header); move both files aside and restore them from a backup")
        }
        let bigEndian = words[0] & 1 == 1
        let native = bigEndian ? Array(words[0..<6]) : words[0..<6].map { $0.byteSwapped }
        var first: UInt32 = 0
        var second: UInt32 = 0
        for pair in stride(from: 0, to: 6, by: 2) {
            first = first &+ native[pair] &+ second
            second = second &+ native[pair + 1] &+ first
        }
        let stored = (words[6], words[7])
        guard (first, second) == stored else {
            throw .corrupt(
                path: path,
                detail:
                    "its write-ahead log \(log) is damaged (its header checksum does not match); move both files aside and restore them from a backup"
            )
        }
    }

    /// Refuses a missing (or empty) database file beside a write-ahead log with content: the store was deleted while a
    /// process had it open (or moved without its `-wal` file). SQLite would silently discard that log and start an
    /// empty store — a new identity, and the messages accepted but not yet handled gone.
    private static func checkNotOrphanedLog(_ path: String) throws(StoreError) {
        var database = stat()
        var log = stat()
        let missing = stat(path, &database) != 0 ? errno == ENOENT : database.st_size == 0
        guard missing, stat(path + "-wal", &log) == 0, log.st_size > 0 else { return }
        throw .corrupt(
            path: path,
            detail:
                "the database file is missing (or empty) but its write-ahead log \(path)-wal (\(log.st_size) bytes) is there: the store was deleted or moved while in use. Put herald.sqlite back beside it, or move the -wal file aside to start a new store (a new registration token; messages not yet handled are lost)"
        )
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
                    try Self.pruneWindow(db, window: window, now: now, newestPosition: Self.newestPosition(db))
                    // This start counts for every pending entry (committed with the read, before any is replayed).
                    try db.execute(sql: "UPDATE inbox SET replays = replays + 1")
                    state = try Self.read(db, window: window, now: now)
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
            try db.cachedStatement(
                sql: "INSERT OR REPLACE INTO identity (id, installation_id, token, device_token, token_retired_at) VALUES (1, ?, ?, ?, ?)"
            )
            .execute(arguments: [identity.installationID, identity.token, identity.deviceToken, identity.tokenRetiredAt])
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
    /// Each accepted record is one `INSERT` into `inbox`, each finished ID one `DELETE`, and the batch's IDs one row of
    /// `seen`; the per-message values are bound through the sqlite3 C API on cached statements (see `RawStatement`).
    ///
    /// The window's count limit is applied to whole rows of `seen`, by position: exact for distinct IDs, and `load`
    /// trims the partly covered oldest row. An ID accepted again while still in the window counts twice until the next
    /// `load` rewrites the window without the repeat; until then the window may drop its oldest IDs that much early,
    /// never hold more than `maximumCount`. (Herald's bus never does that: it refuses an ID that is in its window.)
    ///
    /// - Throws: `StoreError/writeFailed(path:detail:)` when the disk is full, the file system is read-only or an
    ///   I/O error occurs; nothing of the batch is then stored.
    ///
    /// One function on purpose: one transaction, whose statements must run in the order written here.
    public func commit(_ batch: StoreBatch, window: DeduplicationWindow, now: Int64) throws(StoreError) {
        try write { db in
            // The order is chosen so that the pages the pruning and the finished entries free are reused by the
            // inserts that follow, in the same transaction: fewer distinct pages reach the WAL. The result is the same
            // as inserting first.
            // The IDs the window keeps: not those made on receipt (`InboxRecord.deduplicates`).
            let windowIDs = batch.accepted.lazy.filter(\.deduplicates).map(\.messageID)
            let recordsWindow = !windowIDs.isEmpty && window.maximumCount > 0
            let position = try Self.newestPosition(db) + (recordsWindow ? Int64(windowIDs.count) : 0)
            try Self.pruneWindow(db, window: window, now: now, newestPosition: position)

            // An ID both accepted and finished in this batch leaves after its new entry is written, as if the batch
            // were applied in order. (IDs are compared as SQLite stores them, up to the first NUL.)
            var finishedLater: [String] = []
            // The accepted IDs, taken out of their records once (a lazy map through the records copied each whole).
            let acceptedIDs = batch.accepted.map(\.messageID)
            if !batch.finished.isEmpty {
                let acceptedAsStored = acceptedIDs.isEmpty ? [] : Set(acceptedIDs.lazy.map(Self.storedID))
                let delete = try RawStatement(db, sql: "DELETE FROM inbox WHERE message_id = ?")
                var values = StatementValues()
                for messageID in batch.finished {
                    if !acceptedAsStored.isEmpty && acceptedAsStored.contains(Self.storedID(messageID)) {
                        finishedLater.append(messageID)
                        continue
                    }
                    values.removeAll()
                    values.text(1, messageID)
                    try delete.execute(values)
                }
            }
            if !batch.accepted.isEmpty {
                let insert = try RawStatement(
                    db,
                    sql: """
                        INSERT OR REPLACE INTO inbox
                            (message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at)
                        VALUES (?, ?, ?, ?, ?, ?, ?, ?)
                        """)
                var values = StatementValues()
                for record in batch.accepted {
                    values.removeAll()
                    values.text(1, record.messageID)
                    values.blob(2, record.userInfo)
                    values.text(3, record.targetKind)
                    values.text(4, record.targetValue)
                    values.text(5, record.collapseKey)
                    try insert.bind(6, Int64(record.priority))
                    try insert.bind(7, record.expiration)
                    try insert.bind(8, record.receivedAt)
                    try insert.execute(values)  // Its bindings cleared: no copy of the last message stays with it.
                }
                if recordsWindow {
                    let insertSeen = try RawStatement(db, sql: "INSERT INTO seen (position, seen_at, message_ids) VALUES (?, ?, ?)")
                    try insertSeen.bind(1, position)
                    try insertSeen.bind(2, now)
                    try insertSeen.bind(3, Self.encodeWindowIDs(windowIDs))
                    try insertSeen.execute()
                }
            }
            if !finishedLater.isEmpty {
                let delete = try RawStatement(db, sql: "DELETE FROM inbox WHERE message_id = ?")
                for messageID in finishedLater {
                    try delete.bind(1, messageID)
                    try delete.execute()
                }
            }
            if !batch.quarantined.isEmpty {
                let move = try RawStatement(
                    db,
                    sql: """
                        INSERT OR REPLACE INTO quarantine
                            (message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at, replays, quarantined_at)
                        SELECT message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at, replays, ?
                        FROM inbox WHERE message_id = ?
                        """)
                let delete = try RawStatement(db, sql: "DELETE FROM inbox WHERE message_id = ?")
                for messageID in batch.quarantined {
                    try move.bind(1, now)
                    try move.bind(2, messageID)
                    try move.execute()
                    try delete.bind(1, messageID)
                    try delete.execute()
                }
            }
        }
    }

    /// The quarantined messages (`Herald/Configuration/maxReplays`), oldest first. Any thread.
    public func quarantine() throws(StoreError) -> [QuarantinedMessage] {
        do {
            return try database.read { db in try Self.readQuarantine(db) }
        } catch {
            throw Self.storeError(error, path: path, during: .read)
        }
    }

    static func readQuarantine(_ db: Database) throws -> [QuarantinedMessage] {
        try Row.fetchAll(
            db,
            sql: """
                SELECT message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at, replays, quarantined_at
                FROM quarantine ORDER BY quarantined_at, message_id
                """
        ).map { row in
            QuarantinedMessage(record: try inboxRecord(row), replays: try row.decode(atIndex: 8), quarantinedAt: try row.decode(atIndex: 9))
        }
    }

    /// The record in the first eight columns of `row`, as `inbox` and `quarantine` order them (message_id, user_info,
    /// target_kind, target_value, collapse_key, priority, expiration, received_at).
    private static func inboxRecord(_ row: Row) throws -> InboxRecord {
        let userInfo: Data = try row.decode(atIndex: 1)
        return InboxRecord(
            messageID: try row.decode(atIndex: 0), userInfo: [UInt8](userInfo), targetKind: try row.decode(atIndex: 2),
            targetValue: try row.decode(atIndex: 3), collapseKey: try row.decode(atIndex: 4), priority: try row.decode(atIndex: 5),
            expiration: try row.decode(atIndex: 6), receivedAt: try row.decode(atIndex: 7))
    }

    /// Moves the quarantined messages `messageIDs` back into the inbox, their start count reset: the next start replays
    /// them (after the cause is fixed). All or none: when one of them is not in the quarantine nothing changes, and
    /// the IDs not found are returned. Call it while no daemon runs on the store (one running would replay them only
    /// at its next start anyway). Any thread, one call at a time.
    public func release(_ messageIDs: [String]) throws(StoreError) -> [String] {
        var missing: [String] = []
        try write { db in
            let find = try RawStatement(db, sql: "SELECT count(*) FROM quarantine WHERE message_id = ?")
            for messageID in messageIDs {
                try find.bind(1, messageID)
                if try find.int64() ?? 0 == 0 { missing.append(messageID) }
            }
            guard missing.isEmpty else { return }
            let move = try RawStatement(
                db,
                sql: """
                    INSERT OR REPLACE INTO inbox
                        (message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at, replays)
                    SELECT message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at, 0
                    FROM quarantine WHERE message_id = ?
                    """)
            let delete = try RawStatement(db, sql: "DELETE FROM quarantine WHERE message_id = ?")
            for messageID in messageIDs {
                try move.bind(1, messageID)
                try move.execute()
                try delete.bind(1, messageID)
                try delete.execute()
            }
        }
        return missing
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
                        try db.execute(
                            sql: "DELETE FROM identity; DELETE FROM topic; DELETE FROM inbox; DELETE FROM seen; DELETE FROM quarantine")
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

    /// Copies every page of the write-ahead log into the database file and empties the log
    /// (`PRAGMA wal_checkpoint(TRUNCATE)`), so that a stopped store is one self-contained file. `herald serve` calls it at
    /// a clean stop. Any thread; blocks on disk I/O.
    public func checkpoint() throws(StoreError) {
        do {
            try database.writeWithoutTransaction { db in try db.execute(sql: "PRAGMA wal_checkpoint(TRUNCATE)") }
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
    func write(_ body: (Database) throws -> Void) throws(StoreError) {
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

    /// The `position` of the newest window row, 0 when the window is empty.
    private static func newestPosition(_ db: Database) throws -> Int64 {
        try RawStatement(db, sql: "SELECT max(position) FROM seen").int64() ?? 0
    }

    /// Deletes the window rows that are older than the window's age, and those whose IDs all lie before the newest
    /// `maximumCount` positions up to `newestPosition` (the newest row's, or the one about to be written). Both delete
    /// from the oldest end only, so no gap opens in the positions; each costs a few B-tree seeks when nothing is due.
    ///
    /// The age limit deletes the rows before the oldest row still inside the age: with a clock that went back, an old
    /// row may wait behind a newer-stamped one; `read(_:window:now:)` leaves it out and removes it.
    private static func pruneWindow(_ db: Database, window: DeduplicationWindow, now: Int64, newestPosition: Int64) throws {
        let firstKept = try RawStatement(db, sql: "SELECT position FROM seen WHERE seen_at >= ? ORDER BY position LIMIT 1")
        try firstKept.bind(1, window.oldestKept(now: now))
        if let position = try firstKept.int64() {
            let deleteOlder = try RawStatement(db, sql: "DELETE FROM seen WHERE position < ?")
            try deleteOlder.bind(1, position)
            try deleteOlder.execute()
        } else {
            try RawStatement(db, sql: "DELETE FROM seen").execute()
        }
        let deleteBeyondCount = try RawStatement(db, sql: "DELETE FROM seen WHERE position <= ?")
        try deleteBeyondCount.bind(1, newestPosition - Int64(max(window.maximumCount, 0)))
        try deleteBeyondCount.execute()
    }

    private static func read(_ db: Database, window: DeduplicationWindow, now: Int64) throws -> StoredState {
        var state = StoredState()
        if let row = try Row.fetchOne(db, sql: "SELECT installation_id, token, device_token, token_retired_at FROM identity WHERE id = 1") {
            state.identity = StoredIdentity(
                installationID: try row.decode(atIndex: 0), token: try row.decode(atIndex: 1), deviceToken: try row.decode(atIndex: 2),
                tokenRetiredAt: try row.decode(atIndex: 3))
        }
        state.topics = try String.fetchSet(db, sql: "SELECT name FROM topic")
        state.seenMessageIDs = try readWindow(db, window: window, now: now)
        let rows = try Row.fetchCursor(
            db,
            sql: """
                SELECT message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at, replays
                FROM inbox ORDER BY seq
                """)
        while let row = try rows.next() {
            let record = try inboxRecord(row)
            state.pending.append(record)
            state.replays[record.messageID] = try row.decode(atIndex: 8)
        }
        return state
    }

    /// The window's IDs, oldest first, exactly as the limits define them: each ID once (at its newest acceptance),
    /// none accepted before the window's age, the newest `maximumCount`. The rows may hold more than that: the oldest
    /// row partly (it is left as it is), an ID committed twice, or a row older than the window behind a newer-stamped
    /// one. In the last two cases the rows are rewritten to hold exactly the window, so what is pruned stays pruned
    /// and the positions count distinct IDs again.
    private static func readWindow(_ db: Database, window: DeduplicationWindow, now: Int64) throws -> [String] {
        let oldest = window.oldestKept(now: now)
        let limit = max(window.maximumCount, 0)
        var rows: [(seenAt: Int64, ids: [String])] = []
        let cursor = try Row.fetchCursor(db, sql: "SELECT seen_at, message_ids FROM seen ORDER BY position")
        while let row = try cursor.next() {
            let bytes: Data = try row.decode(atIndex: 1)
            rows.append((try row.decode(atIndex: 0), decodeWindowIDs([UInt8](bytes))))
        }
        // Newest first: the newest acceptance of an ID is the one that counts.
        var kept = Set<String>()
        var keptRows: [(seenAt: Int64, ids: [String])] = []
        var irregular = false
        for row in rows.reversed() where kept.count < limit {
            guard row.seenAt >= oldest else {
                irregular = true
                continue
            }
            var ids: [String] = []
            for id in row.ids.reversed() where kept.count < limit {
                if kept.insert(id).inserted {
                    ids.append(id)
                } else {
                    irregular = true
                }
            }
            keptRows.append((row.seenAt, ids.reversed()))
        }
        keptRows.reverse()
        if irregular {
            try db.execute(sql: "DELETE FROM seen")
            let insert = try RawStatement(db, sql: "INSERT INTO seen (position, seen_at, message_ids) VALUES (?, ?, ?)")
            var position: Int64 = 0
            for row in keptRows where !row.ids.isEmpty {
                position += Int64(row.ids.count)
                try insert.bind(1, position)
                try insert.bind(2, row.seenAt)
                try insert.bind(3, encodeWindowIDs(row.ids))
                try insert.execute()
            }
        }
        return keptRows.flatMap(\.ids)
    }

    /// `id` as SQLite keeps it when bound as `TEXT`: up to its first NUL.
    private static func storedID(_ id: String) -> String {
        let length = storedLength(id)
        return length == id.utf8.count ? id : String(decoding: id.utf8.prefix(length), as: UTF8.self)
    }

    /// How many bytes of `id`'s UTF-8 SQLite keeps when it is bound as `TEXT`: those before its first NUL, all of them
    /// without one. Scanned with `memchr` (commits ask this of every ID they write).
    private static func storedLength(_ id: String) -> Int {
        if let length = id.utf8.withContiguousStorageIfAvailable({ storedLength($0) }) { return length }
        return id.utf8.firstIndex(of: 0).map { id.utf8.distance(from: id.utf8.startIndex, to: $0) } ?? id.utf8.count
    }

    private static func storedLength(_ utf8: UnsafeBufferPointer<UInt8>) -> Int {
        guard let base = utf8.baseAddress, let nul = memchr(base, 0, utf8.count) else { return utf8.count }
        return UnsafeRawPointer(nul) - UnsafeRawPointer(base)
    }

    /// `seen.message_ids` for `ids`: each ID's UTF-8 bytes up to its first NUL, then a NUL.
    private static func encodeWindowIDs(_ ids: some Collection<String>) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(ids.count * 24)
        for id in ids {
            let copied: Void? = id.utf8.withContiguousStorageIfAvailable { utf8 in
                bytes.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[..<storedLength(utf8)]))
            }
            if copied == nil { bytes.append(contentsOf: id.utf8.prefix(storedLength(id))) }
            bytes.append(0)
        }
        return bytes
    }

    /// The IDs in `seen.message_ids`; trailing bytes without their NUL are read as a last ID.
    private static func decodeWindowIDs(_ bytes: [UInt8]) -> [String] {
        guard !bytes.isEmpty else { return [] }
        return bytes.split(separator: 0, omittingEmptySubsequences: false).dropLast(bytes.last == 0 ? 1 : 0).map {
            String(decoding: $0, as: UTF8.self)
        }
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
            let tables = try String.fetchAll(
                db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            if !tables.isEmpty {
                throw StoreError.corrupt(
                    path: path,
                    detail:
                        "the database holds tables of another application (\(tables.prefix(5).joined(separator: ", "))) and no Herald schema"
                )
            }
        }
    }

    /// Creates `directory` and its missing parents with mode 0700; an existing directory is left as it is.
    package static func makeDirectory(_ directory: String) throws(StoreError) {
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
    package enum Operation { case open, read, write }

    /// Maps a GRDB or SQLite failure to the ``StoreError`` that tells a person what to do.
    package static func storeError(_ error: any Error, path: String, during operation: Operation) -> StoreError {
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
