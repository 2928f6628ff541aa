import GRDB
import Glibc
public import Herald

/// The identity and topics of a store, read without changing it: the daemon that owns the store may be running
/// (`herald topics list` reads it this way).
public struct StoreSnapshot: Sendable, Hashable {
    /// The saved identity; `nil` before the instance first started.
    public var identity: StoredIdentity?
    /// The subscribed topics, sorted.
    public var topics: [String]
}

/// A message the store quarantined (``SQLiteStore/quarantine()``): still pending after too many starts.
public struct QuarantinedMessage: Sendable, Hashable {
    /// The message as the inbox kept it.
    public var record: InboxRecord
    /// How many starts found it pending.
    public var replays: Int
    /// When it was quarantined, ms since 1970.
    public var quarantinedAt: Int64
}

extension SQLiteStore {
    /// The path of the database file in `directory`: `<directory>/herald.sqlite`.
    public static func path(inDirectory directory: String) -> String {
        directory.hasSuffix("/") ? directory + "herald.sqlite" : directory + "/herald.sqlite"
    }

    /// Reads the identity and topics of the store in `directory` through a read-only connection, changing nothing
    /// (unlike `load`, which prunes the de-duplication window). A running daemon writes a topic change to the
    /// store before it applies it, so what this reads is what the daemon has.
    ///
    /// - Throws: `StoreError/cannotOpen(path:detail:)` when there is no store in `directory` or it cannot be read;
    ///   `StoreError/corrupt(path:detail:)` when the file is not a Herald store; `StoreError/newerSchema(path:found:)`
    ///   when a newer Herald wrote it.
    public static func snapshot(directory: String) throws(StoreError) -> StoreSnapshot {
        try readOnly(directory: directory) { db in
            var snapshot = StoreSnapshot(identity: nil, topics: try String.fetchAll(db, sql: "SELECT name FROM topic ORDER BY name"))
            if let row = try Row.fetchOne(db, sql: "SELECT installation_id, token, device_token FROM identity WHERE id = 1") {
                snapshot.identity = StoredIdentity(
                    installationID: try row.decode(atIndex: 0), token: try row.decode(atIndex: 1), deviceToken: try row.decode(atIndex: 2))
            }
            return snapshot
        }
    }

    /// The quarantined messages of the store in `directory` (as ``quarantine()``), read through a read-only connection:
    /// the daemon may be running. A store from before the quarantine has none. Throws as ``snapshot(directory:)``.
    public static func quarantineSnapshot(directory: String) throws(StoreError) -> [QuarantinedMessage] {
        try readOnly(directory: directory) { db in
            guard try db.tableExists("quarantine") else { return [] }
            return try readQuarantine(db)
        }
    }

    /// Runs `body` on a read-only connection to the Herald store in `directory`, after checking that it is one this
    /// Herald can read.
    static func readOnly<T>(directory: String, _ body: (Database) throws -> T) throws(StoreError) -> T {
        let path = path(inDirectory: directory)
        var info = stat()
        if stat(path, &info) != 0 {
            let code = errno
            throw .cannotOpen(
                path: path,
                detail: code == ENOENT
                    ? "there is no Herald store here (herald serve creates one in its data directory)" : String(cString: strerror(code)))
        }
        var configuration = Configuration()
        configuration.label = "HeraldSQLite.snapshot"
        configuration.readonly = true
        configuration.busyMode = .timeout(5)
        do {
            let database = try DatabaseQueue(path: path, configuration: configuration)
            return try database.read { db in
                let applied = try Schema.migrator.appliedIdentifiers(db)
                let unknown = applied.subtracting(Schema.migrator.migrations)
                if !unknown.isEmpty { throw StoreError.newerSchema(path: path, found: unknown.sorted().joined(separator: ", ")) }
                let applicationID = try Int32.fetchOne(db, sql: "PRAGMA application_id") ?? 0
                guard applicationID == Schema.applicationID, applied.contains("v1") else {
                    throw StoreError.corrupt(path: path, detail: "the file is not a Herald store")
                }
                return try body(db)
            }
        } catch {
            throw storeError(error, path: path, during: .read)
        }
    }

    /// Whether a process other than this one has the store in `directory` open, so that what is written to the
    /// file now would not reach that process's memory (a running daemon keeps its topics there).
    ///
    /// It asks the kernel about SQLite's own lock, which every connection to a WAL database holds while it is open:
    /// a shared `fcntl` lock on the "DMS" byte (offset 128) of the `-shm` file (the WAL-index locking described in
    /// SQLite's "WAL-mode File Format" document). Nothing is locked or changed. Without a `-shm` file no connection is
    /// open; a `-shm` file left by a killed process holds no lock.
    ///
    /// `fcntl` locks belong to the process and are all dropped when it closes any descriptor of the file: when this
    /// process itself has the store open, the probe's descriptor is left open rather than closed, so as not to drop
    /// this process's own SQLite locks.
    public static func isOpenInAnotherProcess(directory: String) -> Bool {
        let fd = open(path(inDirectory: directory) + "-shm", O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return false }
        var lock = flock()
        lock.l_type = Int16(F_WRLCK)
        lock.l_whence = Int16(SEEK_SET)
        lock.l_start = 128
        lock.l_len = 1
        let inUse = fcntl(fd, F_GETLK, &lock) == 0 && lock.l_type != Int16(F_UNLCK)
        if !processHasAnotherDescriptor(sameFileAs: fd) { Glibc.close(fd) }
        return inUse
    }

    /// Whether this process has a descriptor other than `fd` open on the file `fd` is open on.
    private static func processHasAnotherDescriptor(sameFileAs fd: Int32) -> Bool {
        var target = stat()
        guard fstat(fd, &target) == 0, let directory = opendir("/proc/self/fd") else { return true }
        defer { closedir(directory) }
        let own = dirfd(directory)
        while let entry = readdir(directory) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
            guard let number = Int32(name), number != fd, number != own else { continue }
            var info = stat()
            if fstat(number, &info) == 0, info.st_dev == target.st_dev, info.st_ino == target.st_ino { return true }
        }
        return false
    }
}
