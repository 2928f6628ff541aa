import GRDB
import Glibc
import HeraldEventLoop

/// What a reader takes from the Herald store in a directory, read again only when the store has changed: for readers
/// that look again on a timer while the daemon runs (`herald serve` reads the service-account keys and the senders
/// every two seconds, so that a key or sender revoked from the command line stops working within that).
///
/// Reading means opening the store, checking its schema and running the reader's queries: about 300,000 instructions
/// a time, most of them SQLite parsing the schema of a connection just opened. Whether anything changed is asked
/// instead on a read-only connection kept open, with `PRAGMA data_version`, which differs between two calls on one
/// connection whenever another connection committed in between (any process: the command line's, the daemon's own
/// store), and sometimes more often (another connection's checkpoint): a few thousand instructions. The file is
/// looked at with `stat` first, so that a store replaced (moved aside, restored from a backup) is opened anew.
///
/// When it cannot tell (no store yet, an error), it reads, as before. A read that throws is not kept: the next call
/// reads again. Thread-safe; reads are not serialised (two callers may both read).
package final class CachedStoreRead<Value: Sendable>: Sendable {
    /// A version of the store as one watching connection saw it: `data_version`s of different connections are not
    /// comparable, so each connection opened has a number of its own.
    private struct Version: Equatable {
        var connection: Int
        var dataVersion: Int64
    }

    private struct State {
        /// The connection asking for `PRAGMA data_version`, its number, and the file (device and inode) it opened.
        var watch: DatabaseQueue?
        var connection = 0
        var file: (device: UInt, inode: UInt)?
        /// The last value read, and the store's version when that read began.
        var value: Value?
        var version: Version?
        /// When a watching connection last failed to open: not tried again for ``reopenDelay`` (reading then costs
        /// what it did without one, not that and a failed open besides).
        var openFailed: ContinuousClock.Instant?

        /// No connection and nothing kept; the connections' numbering goes on.
        mutating func reset() {
            watch = nil
            file = nil
            value = nil
            version = nil
        }
    }

    /// How long after a watching connection failed to open it is not tried again.
    static var reopenDelay: Duration { .seconds(60) }

    private let path: String
    private let read: @Sendable () throws -> Value
    private let state = Locked(State())

    /// Reads with `read`, again only when the store in `directory` has changed.
    package init(directory: String, read: @escaping @Sendable () throws -> Value) {
        path = SQLiteStore.path(inDirectory: directory)
        self.read = read
    }

    /// The value: the one last read when the store has not changed since that read began, otherwise read now.
    package func value() throws -> Value {
        let version = currentVersion()
        if let version, let kept = state.withLock({ $0.version == version ? $0.value : nil }) {
            return kept
        }
        // The version is taken before the read: a commit during the read makes the next call read again.
        let value = try read()
        state.withLock { state in
            state.value = value
            state.version = version
        }
        return value
    }

    /// The store's `data_version` on the watching connection (opened when missing or when the file is another one),
    /// or `nil` when there is no store or it cannot be asked.
    private func currentVersion() -> Version? {
        var info = stat()
        guard stat(path, &info) == 0 else {
            state.withLock { $0.reset() }
            return nil
        }
        let file = (device: UInt(info.st_dev), inode: UInt(info.st_ino))
        let watching: (queue: DatabaseQueue, connection: Int)? = state.withLock { state in
            guard let watch = state.watch, let current = state.file, current == file else { return nil }
            return (watch, state.connection)
        }
        let queue: DatabaseQueue
        let connection: Int
        if let watching {
            (queue, connection) = watching
        } else {
            let tooSoon = state.withLock { state in state.openFailed.map { .now - $0 < Self.reopenDelay } ?? false }
            if tooSoon { return nil }
            do {
                (queue, connection) = try open(file)
            } catch {
                state.withLock { state in
                    state.reset()
                    state.openFailed = .now
                }
                return nil
            }
        }
        do {
            // Outside a transaction (SQLite's own read for the one statement), its statement kept: GRDB's `read` would
            // wrap it in BEGIN, COMMIT and query-only pragmas, ten times its own cost.
            let dataVersion = try queue.inDatabase { db in try Int64.fetchOne(db.cachedStatement(sql: "PRAGMA data_version")) }
            guard let dataVersion else { return nil }
            return Version(connection: connection, dataVersion: dataVersion)
        } catch {
            state.withLock { $0.reset() }
            return nil
        }
    }

    /// Opens a watching connection to `file`, in place of the one before.
    private func open(_ file: (device: UInt, inode: UInt)) throws -> (queue: DatabaseQueue, connection: Int) {
        var configuration = Configuration()
        configuration.label = "HeraldSQLite.watch"
        configuration.readonly = true
        configuration.busyMode = .timeout(5)
        let queue = try DatabaseQueue(path: path, configuration: configuration)
        return state.withLock { state in
            state.reset()
            state.openFailed = nil
            state.connection += 1
            state.watch = queue
            state.file = file
            return (queue, state.connection)
        }
    }
}
