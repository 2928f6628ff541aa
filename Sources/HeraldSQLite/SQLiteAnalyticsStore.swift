import Foundation
package import GRDB
public import Herald

/// The embedded default `AnalyticsSink`: every analytics event in one SQLite file of its own,
/// `<directory>/analytics.sqlite`, which `herald report` reads (see `AnalyticsReport`).
///
/// The file is separate from the inbox store's `herald.sqlite`, so analytics writes never wait for an inbox commit nor
/// hold one up. It runs in WAL mode with `synchronous = NORMAL`: a batch that was written survives a crash of the
/// process; a power loss may take the last batches (analytics do not need an fsync per batch, the inbox does).
///
/// Each batch is one transaction, and recording is idempotent per batch: each event is keyed by its
/// `AnalyticsEvent/id`, which the bus assigns when it records the event (`event_key`, see `AnalyticsSchema`), and
/// written with `INSERT OR IGNORE`, so a batch the bus retries after a failure is stored once. The table is one B-tree
/// ordered by `(cohort_at, event_key)`: an event is one write near its end, with no index beside it.
///
/// Retention: events of messages received more than ``Options/retentionDays`` days ago are deleted when the store
/// opens and then at most every ``Options/pruneInterval``, in the transaction of the next batch.
///
/// Threads: ``record(_:)`` suspends while the write runs on the connection's own serial queue, never on the caller's
/// thread; calls may overlap (they are serialised). The other methods block on disk I/O, from any thread.
public final class SQLiteAnalyticsStore: AnalyticsRecordSink, Sendable {
    /// How long events are kept and how often old ones are deleted.
    public struct Options: Sendable, Hashable {
        /// Events of messages received more than this many days ago are deleted; `nil` keeps everything.
        public var retentionDays: Int?
        /// How often (at most) ``record(_:)`` deletes the events past retention.
        public var pruneInterval: Duration

        public init(retentionDays: Int? = 90, pruneInterval: Duration = .seconds(3600)) {
            self.retentionDays = retentionDays
            self.pruneInterval = pruneInterval
        }
    }

    /// The file name in the data directory.
    public static let fileName = "analytics.sqlite"

    /// The path of the database file, `<directory>/analytics.sqlite`.
    public let path: String
    public let options: Options

    package let database: DatabaseQueue
    private let clock: @Sendable () -> Int64
    /// When the next prune is due, in milliseconds since 1970.
    private let nextPrune: Locked<Int64>

    /// Opens the store in `directory` (creating the directory, mode 0700, and the file when missing), brings the
    /// schema up to date and deletes the events past retention.
    ///
    /// - Throws: `StoreError/cannotOpen(path:detail:)` when the directory or file cannot be created or opened;
    ///   `StoreError/corrupt(path:detail:)` when the file is not a database or not a Herald analytics store;
    ///   `StoreError/newerSchema(path:found:)` when a newer Herald wrote it; `StoreError/writeFailed(path:detail:)`
    ///   when the schema or the pruning cannot be written.
    public convenience init(directory: String = "herald-data", options: Options = Options()) throws(StoreError) {
        try self.init(directory: directory, options: options, clock: { WallClock.nowMilliseconds() })
    }

    /// As the public initialiser, with the wall clock given (tests move it).
    init(directory: String, options: Options, clock: @escaping @Sendable () -> Int64) throws(StoreError) {
        try SQLiteStore.makeDirectory(directory)
        let path = Self.path(inDirectory: directory)
        self.path = path
        self.options = options
        self.clock = clock

        var configuration = Configuration()
        configuration.label = "HeraldSQLite.analytics"
        configuration.busyMode = .timeout(5)
        configuration.prepareDatabase { db in
            let mode = try String.fetchOne(db, sql: "PRAGMA journal_mode = WAL")
            guard mode == "wal" else {
                throw StoreError.cannotOpen(
                    path: path, detail: "the file system does not support SQLite's WAL mode (journal mode stays '\(mode ?? "?")')")
            }
            try db.execute(sql: "PRAGMA synchronous = NORMAL; PRAGMA journal_size_limit = 67108864")
        }
        do {
            database = try DatabaseQueue(path: path, configuration: configuration)
        } catch {
            throw SQLiteStore.storeError(error, path: path, during: .open)
        }
        do {
            try database.read { db in try Self.checkIsAnalyticsStore(db, path: path, allowEmpty: true) }
            try AnalyticsSchema.migrator.migrate(database)
        } catch {
            throw SQLiteStore.storeError(error, path: path, during: .open)
        }
        let now = clock()
        nextPrune = Locked(now)
        try prune(now: now)
    }

    /// `<directory>/analytics.sqlite`.
    public static func path(inDirectory directory: String) -> String {
        directory.hasSuffix("/") ? directory + fileName : directory + "/" + fileName
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(
            name: "sqlite-analytics",
            summary: "keeps analytics events in \(path) for herald report"
        )
    }

    /// Writes `events` in one transaction (with the pruning, when it is due). A batch given again is not stored
    /// twice.
    ///
    /// - Throws: ``AnalyticsWriteError`` (naming the file) when the batch cannot be written; nothing of it is then
    ///   stored, and the bus retries it.
    public func record(_ events: [AnalyticsEvent]) async throws {
        try await record(AnalyticsRecords(events))
    }

    /// Writes a batch as the bus recorded it, binding each event's values from the recorded bytes (no
    /// `AnalyticsEvent` is built): what the bus calls. As ``record(_:)-([AnalyticsEvent])`` otherwise.
    package func record(_ records: AnalyticsRecords) async throws {
        guard records.count > 0 else { return }
        let now = clock()
        let pruneBefore = nextPrune.withLock { $0 <= now } ? cutoff(now: now) : nil
        do {
            try await database.writeWithoutTransaction { db in
                try db.inTransaction(.immediate) {
                    try Self.insert(records, db)
                    if let pruneBefore { try Self.delete(before: pruneBefore, db) }
                    return .commit
                }
            }
        } catch {
            throw AnalyticsWriteError(SQLiteStore.storeError(error, path: path, during: .write))
        }
        if pruneBefore != nil { scheduleNextPrune(after: now) }
    }

    /// Deletes the events of messages received more than ``Options/retentionDays`` days before `now` (milliseconds
    /// since 1970) and returns how many; nothing when retention is off. Any thread; blocks on disk I/O.
    @discardableResult
    public func prune(now: Int64) throws(StoreError) -> Int {
        guard let cutoff = cutoff(now: now) else { return 0 }
        let deleted: Int
        do {
            deleted = try database.writeWithoutTransaction { db in
                var deleted = 0
                try db.inTransaction(.immediate) {
                    deleted = try Self.delete(before: cutoff, db)
                    return .commit
                }
                return deleted
            }
        } catch {
            throw SQLiteStore.storeError(error, path: path, during: .write)
        }
        scheduleNextPrune(after: now)
        return deleted
    }

    // MARK: - Test hooks

    /// Runs `sql` (one or more statements) on the store's connection.
    func execute(sql: String) throws {
        try database.writeWithoutTransaction { db in try db.execute(sql: sql) }
    }

    /// The first column of the first row of `sql`, as text.
    func fetchString(_ sql: String) throws -> String? {
        try database.read { db in try String.fetchOne(db, sql: sql) }
    }

    /// Creates `<directory>/analytics.sqlite` with the schema's migrations up to `migration` only, as an older
    /// release left it, and runs `sql` on it.
    static func createOlderSchema(directory: String, upTo migration: String, then sql: String) throws {
        try SQLiteStore.makeDirectory(directory)
        let database = try DatabaseQueue(path: path(inDirectory: directory))
        try AnalyticsSchema.migrator.migrate(database, upTo: migration)
        try database.write { db in try db.execute(sql: sql) }
    }

    // MARK: - Implementation

    private func cutoff(now: Int64) -> Int64? {
        guard let days = options.retentionDays, days > 0 else { return nil }
        return now - Int64(days) * 24 * 60 * 60 * 1000
    }

    private func scheduleNextPrune(after now: Int64) {
        let interval = options.pruneInterval.components
        let milliseconds = interval.seconds * 1000 + interval.attoseconds / 1_000_000_000_000_000
        nextPrune.withLock { $0 = max($0, now + max(milliseconds, 0)) }
    }

    /// The key of an event whose ID is `id`: its eight bytes, most significant first. An event without an ID (0,
    /// recorded by hand) gets a random key of its own, so it is never mistaken for another.
    static func key(forEventID id: UInt64) -> UInt64 {
        id != 0 ? id : UInt64.random(in: 1...UInt64.max)
    }

    /// The events inserted up to `rowsPerInsert` at a time (`INSERT OR IGNORE ... VALUES (...), (...)`), their values
    /// bound through the sqlite3 C API (`RawStatement`) from the recorded bytes: GRDB's `StatementArguments`, and
    /// building each event's strings first, made this cost more per message than the inbox's commit. Several rows
    /// to a statement share its start, its cursor and its end; and as events come in key order (`cohort_at`, then
    /// the event's ID), each row after the first lands where the last one went, which SQLite finds without a search
    /// of the B-tree while the statement's cursor is there.
    private static func insert(_ records: AnalyticsRecords, _ db: Database) throws {
        var left = records.count
        guard left > 0 else { return }
        // Each group binds every parameter of its statement anew (`clearing: false`); the statements of full groups
        // and of the last, shorter one are cleared once, at the end, also when a row fails.
        let full = left >= rowsPerInsert ? try RawStatement(db, sql: insertSQL[rowsPerInsert - 1]) : nil
        var short = left < rowsPerInsert ? try RawStatement(db, sql: insertSQL[left - 1]) : nil
        defer {
            full?.clearBindings()
            short?.clearBindings()
        }
        guard var statement = full ?? short else { return }
        var rows = min(left, rowsPerInsert)
        assert(statement.parameterCount == Int32(columnsPerEvent * rows), "every parameter is bound for each event")
        var row = 0
        var values = StatementValues()
        var parameters: [(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)] = []
        try records.forEach { record in
            // The event's parameters are `base + 1` to `base + 16`, in the order of the statement's columns.
            let base = Int32(row * columnsPerEvent)
            values.blob(base + 1, bigEndian: key(forEventID: record.id))
            values.text(base + 2, record.name.rawValue)
            try statement.bind(base + 3, record.timestamp)
            try statement.bind(base + 4, record.receivedAt ?? record.timestamp)
            values.text(base + 5, record.messageID)
            values.text(base + 6, record.analyticsLabel)
            values.text(base + 7, record.topic)
            values.text(base + 8, record.collapseKey)
            try statement.bind(base + 9, record.priority.map { Int64($0.rawValue) })
            values.text(base + 10, record.messageType)
            try statement.bind(base + 11, record.ttl)
            try statement.bind(base + 12, record.receivedAt)
            values.text(base + 13, record.name == .messageDropped ? record.parameter("reason") : nil)
            let isFetch = record.name == .backgroundFetch
            values.text(base + 14, isFetch ? record.parameter("result") : nil)
            try statement.bind(
                base + 15, isFetch ? record.parameter("duration_ms").flatMap { Int64(String(decoding: $0, as: UTF8.self)) } : nil)
            parameters.removeAll(keepingCapacity: true)
            record.forEachParameter { parameters.append((key: $0, value: $1)) }
            parameters.sort { $0.key.lexicographicallyPrecedes($1.key) }
            values.text(base + 16) { output in appendObject(of: parameters, to: &output) }
            row += 1
            left -= 1
            guard row == rows else { return }
            try statement.execute(values, clearing: false)
            values.removeAll()
            row = 0
            if left > 0, left < rowsPerInsert {
                rows = left
                let last = try RawStatement(db, sql: insertSQL[left - 1])
                assert(last.parameterCount == Int32(columnsPerEvent * rows), "every parameter is bound for each event")
                short = last
                statement = last
            }
        }
    }

    /// The number of events one `INSERT` takes at most.
    static let rowsPerInsert = 16
    private static let columnsPerEvent = 16

    /// The `INSERT` of 1 to `rowsPerInsert` events.
    private static let insertSQL: [String] = (1...rowsPerInsert).map { rows in
        let row = "(" + Array(repeating: "?", count: columnsPerEvent).joined(separator: ", ") + ")"
        return """
            INSERT OR IGNORE INTO event
                (event_key, name, timestamp, cohort_at, message_id, analytics_label, topic, collapse_key, priority,
                 message_type, ttl, received_at, reason, result, duration_ms, parameters)
            VALUES \(Array(repeating: row, count: rows).joined(separator: ", "))
            """
    }

    /// The parameters as a JSON object of strings, in the given order: `{"key":"value",...}`.
    private static func appendObject(
        of parameters: [(key: UnsafeRawBufferPointer, value: UnsafeRawBufferPointer)], to output: inout [UInt8]
    ) {
        output.append(UInt8(ascii: "{"))
        for (position, parameter) in parameters.enumerated() {
            if position > 0 { output.append(UInt8(ascii: ",")) }
            output.append(UInt8(ascii: "\""))
            JSONWriter.appendEscapedContents(parameter.key, to: &output)
            output.append(contentsOf: "\":\"".utf8)
            JSONWriter.appendEscapedContents(parameter.value, to: &output)
            output.append(UInt8(ascii: "\""))
        }
        output.append(UInt8(ascii: "}"))
    }

    @discardableResult
    private static func delete(before cutoff: Int64, _ db: Database) throws -> Int {
        try db.cachedStatement(sql: "DELETE FROM event WHERE cohort_at < ?").execute(arguments: [cutoff])
        return db.changesCount
    }

    /// Refuses a file a newer Herald wrote, another application's database, and (unless `allowEmpty`) a database
    /// without the analytics schema.
    package static func checkIsAnalyticsStore(_ db: Database, path: String, allowEmpty: Bool) throws {
        // The application ID first: the inbox store's file has migrations too, which are not a newer analytics schema.
        let applicationID = try Int32.fetchOne(db, sql: "PRAGMA application_id") ?? 0
        if applicationID == Schema.applicationID {
            throw StoreError.corrupt(path: path, detail: "this is a Herald inbox store (herald.sqlite), not an analytics store")
        }
        if applicationID != 0 && applicationID != AnalyticsSchema.applicationID {
            throw StoreError.corrupt(path: path, detail: "the database is not a Herald analytics store (application_id \(applicationID))")
        }
        let applied = try AnalyticsSchema.migrator.appliedIdentifiers(db)
        let unknown = applied.subtracting(AnalyticsSchema.migrator.migrations)
        if !unknown.isEmpty {
            throw StoreError.newerSchema(path: path, found: unknown.sorted().joined(separator: ", "))
        }
        if applied.isEmpty {
            let tables = try String.fetchAll(
                db, sql: "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
            if !tables.isEmpty {
                throw StoreError.corrupt(
                    path: path,
                    detail:
                        "the database holds tables of another application (\(tables.prefix(5).joined(separator: ", "))) and no Herald analytics schema"
                )
            }
            if !allowEmpty {
                throw StoreError.corrupt(path: path, detail: "the file holds no Herald analytics schema")
            }
        }
    }
}

/// A batch of events the ``SQLiteAnalyticsStore`` could not write. Nothing of the batch was stored; the bus retries it.
public struct AnalyticsWriteError: Error, Sendable, Equatable, CustomStringConvertible {
    /// What failed, naming the file.
    public let storeError: StoreError

    public init(_ storeError: StoreError) {
        self.storeError = storeError
    }

    public var description: String {
        switch storeError {
        case .writeFailed(let path, let detail):
            "cannot write analytics events to \(path): \(detail). Free disk space or make the file system writable; the batch is retried, messages are not affected."
        default:
            "cannot write analytics events: \(storeError)"
        }
    }
}
