import GRDB
import GRDBSQLite

/// A cached GRDB statement driven through the sqlite3 C API, for the statements run per message: the inbox's
/// commits (`SQLiteStore`) and the analytics store's inserts (`SQLiteAnalyticsStore`).
///
/// Binding through GRDB's `StatementArguments` (an array of existential values, each converted to a
/// `DatabaseValue`) costs more than SQLite's own execution of these small statements; here each value is bound
/// directly: a single value with `bind` (`SQLITE_TRANSIENT`: SQLite copies it into the statement's reused buffers), a
/// row's texts and BLOBs with `execute(_:clearing:)` where they are (`SQLITE_STATIC`). GRDB still prepares, caches
/// and finalizes the statement. Use it only inside a GRDB database access, on the connection's queue.
struct RawStatement {
    let handle: SQLiteStatement
    let connection: SQLiteConnection

    init(_ db: Database, sql: String) throws {
        guard let connection = db.sqliteConnection else {
            throw DatabaseError(resultCode: .SQLITE_MISUSE, message: "the database connection is closed", sql: sql)
        }
        self.connection = connection
        handle = try db.cachedStatement(sql: sql).sqliteStatement
    }

    /// The number of the statement's parameters (`?`).
    var parameterCount: Int32 { sqlite3_bind_parameter_count(handle) }

    /// Binds `value` as TEXT, up to its first NUL (as GRDB binds a `String`).
    func bind(_ index: Int32, _ value: String) throws {
        try check(sqlite3_bind_text(handle, index, value, -1, sqliteTransient))
    }

    func bind(_ index: Int32, _ value: String?) throws {
        guard let value else { return try check(sqlite3_bind_null(handle, index)) }
        try bind(index, value)
    }

    func bind(_ index: Int32, _ value: Int64) throws {
        try check(sqlite3_bind_int64(handle, index, value))
    }

    func bind(_ index: Int32, _ value: Int64?) throws {
        guard let value else { return try check(sqlite3_bind_null(handle, index)) }
        try bind(index, value)
    }

    /// Binds `bytes` as a BLOB; an empty array is an empty BLOB, never `NULL`.
    func bind(_ index: Int32, _ bytes: [UInt8]) throws {
        let code = bytes.withUnsafeBytes { buffer in
            if let base = buffer.baseAddress, buffer.count > 0 {
                sqlite3_bind_blob64(handle, index, base, sqlite3_uint64(buffer.count), sqliteTransient)
            } else {
                sqlite3_bind_zeroblob(handle, index, 0)
            }
        }
        try check(code)
    }

    /// Binds `values`' texts and BLOBs where they are (`SQLITE_STATIC`: SQLite neither allocates nor copies for
    /// them), runs the statement to completion, resets it and clears every binding, so that no pointer into `values`
    /// stays with the statement; returns the number of rows it changed. Integers and `NULL`s bound with `bind` before
    /// are used and cleared too.
    ///
    /// `clearing: false` leaves the bindings for a caller that runs the statement once per row, binds every parameter
    /// for each row (so no row reads another's pointer) and clears them itself after the last row (a binding's
    /// pointer is read only when the statement runs).
    @discardableResult
    func execute(_ values: borrowing StatementValues, clearing: Bool = true) throws -> Int {
        defer { if clearing { sqlite3_clear_bindings(handle) } }
        return try values.bytes.withUnsafeBufferPointer { buffer in
            for slot in values.slots {
                let code: Int32
                if slot.count < 0 {
                    code = sqlite3_bind_null(handle, slot.index)
                } else if slot.isText {
                    // NUL-terminated in `bytes`: bound up to the first NUL, as `bind(_:_:)` binds a `String`.
                    code = (buffer.baseAddress! + slot.offset).withMemoryRebound(to: CChar.self, capacity: slot.count + 1) {
                        sqlite3_bind_text(handle, slot.index, $0, -1, sqliteStatic)
                    }
                } else if slot.count == 0 {
                    code = sqlite3_bind_zeroblob(handle, slot.index, 0)
                } else {
                    let bytes = buffer.baseAddress! + slot.offset
                    code = sqlite3_bind_blob64(handle, slot.index, bytes, sqlite3_uint64(slot.count), sqliteStatic)
                }
                try check(code)
            }
            return try execute()
        }
    }

    /// Drops the bound values: SQLite keeps a copy of each bound with `bind` and a pointer to each bound by
    /// `execute(_:clearing:)` until it is rebound or cleared.
    func clearBindings() {
        sqlite3_clear_bindings(handle)
    }

    /// Runs the statement to completion and resets it (the bindings stay); returns the number of rows it changed.
    @discardableResult
    func execute() throws -> Int {
        defer { sqlite3_reset(handle) }
        while true {
            switch sqlite3_step(handle) {
            case SQLITE_DONE: return Int(sqlite3_changes(connection))
            case SQLITE_ROW: continue
            default: throw lastError()
            }
        }
    }

    /// The first column of the first row as an integer (`nil` for no row or `NULL`); resets the statement.
    func int64() throws -> Int64? {
        defer { sqlite3_reset(handle) }
        switch sqlite3_step(handle) {
        case SQLITE_ROW: return sqlite3_column_type(handle, 0) == SQLITE_NULL ? nil : sqlite3_column_int64(handle, 0)
        case SQLITE_DONE: return nil
        default: throw lastError()
        }
    }

    private func check(_ code: Int32) throws {
        if code != SQLITE_OK { throw lastError(code) }
    }

    /// The connection's last error, with its extended result code, as the `DatabaseError` GRDB would throw.
    private func lastError(_ code: Int32? = nil) -> DatabaseError {
        let extended = code ?? sqlite3_extended_errcode(connection)
        let message = sqlite3_errmsg(connection).map { String(cString: $0) }
        return DatabaseError(
            resultCode: ResultCode(rawValue: extended), message: message, sql: sqlite3_sql(handle).map { String(cString: $0) })
    }
}

/// The texts and BLOBs of one execution of a ``RawStatement``, copied one after the other into one buffer that is
/// reused from row to row: binding them with `SQLITE_TRANSIENT` had SQLite free its copy of the last row's value and
/// allocate a new one for each value of each row (under its allocator's lock), more than this copy costs.
struct StatementValues {
    struct Slot {
        var index: Int32
        var offset: Int
        /// -1 for `NULL`.
        var count: Int
        var isText: Bool
    }

    fileprivate private(set) var bytes: [UInt8] = []
    fileprivate private(set) var slots: [Slot] = []

    init() {
        bytes.reserveCapacity(1024)
        slots.reserveCapacity(8)
    }

    /// Forgets the values of the last row, keeping the buffer.
    mutating func removeAll() {
        bytes.removeAll(keepingCapacity: true)
        slots.removeAll(keepingCapacity: true)
    }

    /// `value` as TEXT for parameter `index` (up to its first NUL), or `NULL`.
    mutating func text(_ index: Int32, _ value: String?) {
        guard var value else { return null(index) }
        value.withUTF8 { utf8 in text(index) { $0.append(contentsOf: utf8) } }
    }

    /// The UTF-8 text `value` as TEXT for parameter `index` (up to its first NUL, as a `String` is), or `NULL`.
    mutating func text(_ index: Int32, _ value: UnsafeRawBufferPointer?) {
        guard let value else { return null(index) }
        text(index) { $0.append(contentsOf: value) }
    }

    /// `value` as TEXT for parameter `index`, taking the bytes `write` appends to the buffer (bound up to the first
    /// NUL among them).
    mutating func text(_ index: Int32, writing write: (inout [UInt8]) -> Void) {
        let offset = bytes.count
        write(&bytes)
        bytes.append(0)
        slots.append(Slot(index: index, offset: offset, count: bytes.count - offset - 1, isText: true))
    }

    /// `NULL` for parameter `index`.
    private mutating func null(_ index: Int32) {
        slots.append(Slot(index: index, offset: 0, count: -1, isText: true))
    }

    /// The eight bytes of `value`, most significant first, as a BLOB for parameter `index`.
    mutating func blob(_ index: Int32, bigEndian value: UInt64) {
        let offset = bytes.count
        withUnsafeBytes(of: value.bigEndian) { bytes.append(contentsOf: $0) }
        slots.append(Slot(index: index, offset: offset, count: 8, isText: false))
    }
}

/// `SQLITE_STATIC`: SQLite reads a bound value where it is, for as long as it stays bound.
private var sqliteStatic: sqlite3_destructor_type? { nil }

/// `SQLITE_TRANSIENT`: SQLite copies a bound value before the call returns.
private var sqliteTransient: sqlite3_destructor_type { unsafeBitCast(OpaquePointer(bitPattern: -1), to: sqlite3_destructor_type.self) }
