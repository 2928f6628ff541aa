import Foundation
import GRDB
import Glibc
public import Herald
import HeraldEventLoop

/// The embedded default `HeraldStore`: the identity, topics, quarantine and senders in a SQLite file,
/// `<directory>/herald.sqlite`, opened with GRDB; the durable inbox and its de-duplication window in an append-only
/// log beside it, `<directory>/inbox.log`.
///
/// Durability: a ``commit(_:window:now:)`` appends one checksummed frame to the log and calls `fdatasync` before it
/// returns, so what it committed survives a power loss; only then does Herald acknowledge the sender. Herald
/// group-commits (one call carries every message accepted since the previous commit), so the cost of that flush is
/// shared by the whole batch instead of being paid per message. The database runs in WAL mode with
/// `synchronous = FULL`.
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
    /// The path of the inbox's log, `<directory>/inbox.log` (`InboxLog`): the pending messages and the
    /// de-duplication window.
    package let inboxLogPath: String

    let database: DatabaseQueue
    /// The inbox's log, opened by the first call that needs it (`load`, `commit`, `release`, `deleteAll`): the
    /// commands that change the store beside a running daemon (senders, credentials, a topic) never open it.
    private let inboxLog = Locked<InboxLog?>(nil)

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
        inboxLogPath = directory.hasSuffix("/") ? directory + "inbox.log" : directory + "/inbox.log"
        try Self.checkNotOrphanedLog(path)
        try Self.checkLogHeader(path)
        // A new store's file is made 0600 before SQLite opens it (SQLite would use 0644 less the umask); its
        // write-ahead log and shared-memory file take the database file's mode. The registration token is in it.
        let created = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
        if created >= 0 { Glibc.close(created) }

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
        defer { Glibc.close(fd) }
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

    /// Refuses a missing (or empty) database file beside a write-ahead log with content, or beside the inbox's log with
    /// commits in it: the store was deleted while a process had it open (or moved without its `-wal` file or its log).
    /// SQLite would silently discard the write-ahead log and start an empty store — a new identity, and the messages
    /// accepted but not yet handled gone (or replayed under the new identity, from the inbox's log).
    private static func checkNotOrphanedLog(_ path: String) throws(StoreError) {
        var database = stat()
        var log = stat()
        let missing = stat(path, &database) != 0 ? errno == ENOENT : database.st_size == 0
        guard missing else { return }
        if stat(path + "-wal", &log) == 0, log.st_size > 0 {
            throw .corrupt(
                path: path,
                detail:
                    "the database file is missing (or empty) but its write-ahead log \(path)-wal (\(log.st_size) bytes) is there: the store was deleted or moved while in use. Put herald.sqlite back beside it, or move the -wal file aside to start a new store (a new registration token; messages not yet handled are lost)"
            )
        }
        // The inbox's log is made only beside a database that exists: without it, the log's messages would be replayed
        // under a new identity, and the quarantine and the identity that go with them are gone.
        let inboxLog = (path as NSString).deletingLastPathComponent + "/inbox.log"
        var inbox = stat()
        guard stat(inboxLog, &inbox) == 0, inbox.st_size > InboxLog.headerSize else { return }
        throw .corrupt(
            path: path,
            detail:
                "the database file is missing (or empty) but the inbox's log \(inboxLog) (\(inbox.st_size) bytes) is there: the store was deleted or moved without it. Put herald.sqlite back beside it, or move inbox.log aside to start a new store (a new registration token; messages not yet handled are lost)"
        )
    }

    /// Always `true`: what ``commit(_:window:now:)`` writes is on disk when it returns.
    public var isDurable: Bool { true }

    /// Reads the identity and the topics, and from the inbox's log the pending entries (in acceptance order, this start
    /// counted for each, durably) and the window's message IDs (oldest first, pruned to `window` at `now`). Any thread,
    /// one call at a time.
    public func load(window: DeduplicationWindow, now: Int64) throws(StoreError) -> StoredState {
        try load(window: window, now: now, counting: true)
    }

    /// ``load(window:now:)`` with the start not counted: ``countStart(of:)`` counts it. Any thread, one call at a time.
    public func loadLeavingTheStartUncounted(window: DeduplicationWindow, now: Int64) throws(StoreError) -> StoredState? {
        try load(window: window, now: now, counting: false)
    }

    /// Counts a start for each of the pending entries `messageIDs` (those still pending), durably. Any thread, one
    /// call at a time.
    public func countStart(of messageIDs: [String]) throws(StoreError) {
        try withInboxLog { log throws(StoreError) in try log.countStart(of: messageIDs) }
    }

    private func load(window: DeduplicationWindow, now: Int64, counting: Bool) throws(StoreError) -> StoredState {
        try withInboxLog { log throws(StoreError) in
            try settleQuarantineMoves(log, window: window, now: now)
            let inbox = try log.load(window: window, now: now, counting: counting)
            var state = StoredState()
            do {
                try database.read { db in
                    if let row = try Row.fetchOne(
                        db, sql: "SELECT installation_id, token, device_token, token_retired_at FROM identity WHERE id = 1")
                    {
                        state.identity = StoredIdentity(
                            installationID: try row.decode(atIndex: 0), token: try row.decode(atIndex: 1),
                            deviceToken: try row.decode(atIndex: 2), tokenRetiredAt: try row.decode(atIndex: 3))
                    }
                    state.topics = try String.fetchSet(db, sql: "SELECT name FROM topic")
                }
            } catch {
                throw Self.storeError(error, path: path, during: .read)
            }
            state.pending = inbox.pending
            state.replays = inbox.replays
            state.seenMessageIDs = inbox.seen
            return state
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

    /// Applies one group commit, durable before it returns: the accepted records enter the inbox (replacing an entry
    /// with the same message ID) and the window (at `now`), the finished IDs leave the inbox, and the window is pruned
    /// to its age and count limits — one frame appended to the inbox's log and one `fdatasync` (`InboxLog`). The
    /// quarantined IDs are first copied into the quarantine (a SQLite transaction), then leave the inbox with the
    /// rest; a crash between the two leaves them in both, which the next `load` settles. Any thread, one call at a time.
    ///
    /// - Throws: `StoreError/writeFailed(path:detail:)` when the disk is full, the file system is read-only or an
    ///   I/O error occurs; nothing of the batch is then stored.
    public func commit(_ batch: StoreBatch, window: DeduplicationWindow, now: Int64) throws(StoreError) {
        try withInboxLog { log throws(StoreError) in
            let moving = batch.quarantined.compactMap { log.pendingRecord($0) }
            if !moving.isEmpty {
                try write { db in
                    let insert = try RawStatement(
                        db,
                        sql: """
                            INSERT OR REPLACE INTO quarantine
                                (message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at, replays, quarantined_at)
                            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
                            """)
                    for (record, replays) in moving {
                        try Self.bind(record, to: insert)
                        try insert.bind(9, Int64(replays))
                        try insert.bind(10, now)
                        try insert.execute()
                    }
                }
            }
            try log.commit(
                accepted: batch.accepted, finished: batch.quarantined.isEmpty ? batch.finished : batch.finished + batch.quarantined,
                window: window, now: now)
        }
    }

    /// Binds `record`'s eight columns, in `inbox`'s and `quarantine`'s order, to `statement`'s first eight parameters.
    private static func bind(_ record: InboxRecord, to statement: RawStatement) throws {
        try statement.bind(1, record.messageID)
        try statement.bind(2, record.userInfo)
        try statement.bind(3, record.targetKind)
        try statement.bind(4, record.targetValue)
        try statement.bind(5, record.collapseKey)
        try statement.bind(6, Int64(record.priority))
        try statement.bind(7, record.expiration)
        try statement.bind(8, record.receivedAt)
    }

    /// Messages found both in the inbox and in the quarantine, the same record in both: a crash came between the two
    /// steps of a move. Released ones (back in the inbox by ``release(_:)``) leave the quarantine; the others leave the
    /// inbox. A message accepted anew under a quarantined one's ID (a sender's retry once the de-duplication window
    /// forgot the ID) was received later: it is another message, and stays in the inbox.
    private func settleQuarantineMoves(_ log: InboxLog, window: DeduplicationWindow, now: Int64) throws(StoreError) {
        var quarantined: [(id: String, receivedAt: Int64)] = []
        do {
            try database.read { db in
                let rows = try Row.fetchCursor(db, sql: "SELECT message_id, received_at FROM quarantine")
                while let row = try rows.next() { quarantined.append((try row.decode(atIndex: 0), try row.decode(atIndex: 1))) }
            }
        } catch {
            throw Self.storeError(error, path: path, during: .read)
        }
        let both = quarantined.filter { log.pendingRecord($0.id)?.record.receivedAt == $0.receivedAt }.map(\.id)
        guard !both.isEmpty else { return }
        let released = both.filter { log.isReleased($0) }
        if !released.isEmpty {
            try write { db in
                let delete = try RawStatement(db, sql: "DELETE FROM quarantine WHERE message_id = ?")
                for messageID in released {
                    try delete.bind(1, messageID)
                    try delete.execute()
                }
            }
        }
        let moved = both.filter { !log.isReleased($0) }
        if !moved.isEmpty { try log.commit(accepted: [], finished: moved, window: window, now: now) }
    }

    /// Closes the inbox's log, which one store at a time has open (the next use opens it again, reading it back):
    /// another store may then open it, as a process started later would.
    public func close() {
        inboxLog.withLock { $0 = nil }
    }

    /// Runs `body` with the inbox's log, opened (and given the inbox rows and window of a store from before the log) by
    /// the first call.
    private func withInboxLog<T>(_ body: (InboxLog) throws(StoreError) -> T) throws(StoreError) -> T {
        try inboxLog.withLock { (opened: inout InboxLog?) throws(StoreError) -> T in
            if let opened { return try body(opened) }
            let hasLog: Bool
            do {
                hasLog = try database.read { db in try Bool.fetchOne(db, sql: "SELECT count(*) > 0 FROM inbox_log") ?? false }
            } catch {
                throw Self.storeError(error, path: path, during: .read)
            }
            var status = stat()
            if hasLog, stat(inboxLogPath, &status) != 0, errno == ENOENT {
                throw .corrupt(
                    path: inboxLogPath,
                    detail:
                        "the inbox's log is missing beside \(path), which has used one: it was deleted or moved. Put inbox.log back, or move both files aside to start a new store (a new registration token; messages not yet handled are lost)"
                )
            }
            let log = try InboxLog(path: inboxLogPath)
            try adoptRows(into: log, firstOpen: !hasLog)
            opened = log
            return try body(log)
        }
    }

    /// Moves the inbox rows and the window of a store written before the inbox's log into the log (once, durably),
    /// then deletes them from the database. A crash between the two moves them again at the next open: the same
    /// records, with the same start counts.
    private func adoptRows(into log: InboxLog, firstOpen: Bool) throws(StoreError) {
        guard firstOpen else { return }
        var records: [(InboxRecord, Int)] = []
        var seen: [(id: String, seenAt: Int64)] = []
        do {
            try database.read { db in
                let rows = try Row.fetchCursor(
                    db,
                    sql: """
                        SELECT message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at, replays
                        FROM inbox ORDER BY seq
                        """)
                while let row = try rows.next() { records.append((try Self.inboxRecord(row), try row.decode(atIndex: 8))) }
                let window = try Row.fetchCursor(db, sql: "SELECT seen_at, message_ids FROM seen ORDER BY position")
                while let row = try window.next() {
                    let bytes: Data = try row.decode(atIndex: 1)
                    let seenAt: Int64 = try row.decode(atIndex: 0)
                    seen += Self.decodeWindowIDs([UInt8](bytes)).map { ($0, seenAt) }
                }
            }
        } catch {
            throw Self.storeError(error, path: path, during: .read)
        }
        if !records.isEmpty || !seen.isEmpty { try log.adopt(records, seen: seen) }
        try write { db in
            try db.execute(sql: "DELETE FROM inbox; DELETE FROM seen")
            try db.execute(sql: "INSERT OR IGNORE INTO inbox_log (id, created_at) VALUES (1, ?)", arguments: [Int64(time(nil))])
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
    static func inboxRecord(_ row: Row) throws -> InboxRecord {
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
        var records: [InboxRecord] = []
        do {
            try database.read { db in
                for messageID in messageIDs {
                    let row = try Row.fetchOne(
                        db,
                        sql: """
                            SELECT message_id, user_info, target_kind, target_value, collapse_key, priority, expiration, received_at
                            FROM quarantine WHERE message_id = ?
                            """, arguments: [messageID])
                    if let row { records.append(try Self.inboxRecord(row)) } else { missing.append(messageID) }
                }
            }
        } catch {
            throw Self.storeError(error, path: path, during: .read)
        }
        guard missing.isEmpty else { return missing }
        // Into the inbox first (marked released), then out of the quarantine: a crash between leaves them in both, and
        // the next `load` finishes the release.
        try withInboxLog { log throws(StoreError) in try log.release(records) }
        try write { db in
            let delete = try RawStatement(db, sql: "DELETE FROM quarantine WHERE message_id = ?")
            for messageID in messageIDs {
                try delete.bind(1, messageID)
                try delete.execute()
            }
        }
        return missing
    }

    /// Deletes every identity, topic, inbox entry and window entry: the inbox's log is erased (replaced by an empty
    /// one, the old file's bytes overwritten with zeros), then the database's rows are deleted in one transaction, its
    /// freed pages overwritten (`secure_delete`) and its WAL checkpointed and truncated, so the erased data does not
    /// linger in the files. Both under the log's lock: a group commit cannot come between them. The log goes first, so
    /// that a failure leaves the identity with an empty inbox (a retry finishes), never an inbox without its identity.
    /// The store stays usable. Any thread, one call at a time.
    public func deleteAll() throws(StoreError) {
        try withInboxLog { log throws(StoreError) in
            try log.erase()
            try deleteRows()
        }
    }

    private func deleteRows() throws(StoreError) {
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
    /// (`PRAGMA wal_checkpoint(TRUNCATE)`), so that the database file of a stopped store is self-contained (beside it,
    /// the inbox's log is). `herald serve` calls it at a clean stop. Any thread; blocks on disk I/O.
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
    /// The inbox's log follows: it may not grow from here when the limit asked for is below the pages in use, and is
    /// unlimited again otherwise.
    func limitPages(_ maximum: Int) throws -> Int {
        let limit = try database.writeWithoutTransaction { db in
            try Int.fetchOne(db, sql: "PRAGMA max_page_count = \(maximum)") ?? 0
        }
        try withInboxLog { log throws(StoreError) in log.sizeLimit = maximum < limit ? log.size : .max }
        return limit
    }

    /// Whether the inbox holds a pending message `id` now (as this store, which may be a running instance's, sees it).
    package func isPending(_ id: String) throws(StoreError) -> Bool {
        try withInboxLog { log in log.pendingRecord(id) != nil }
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
