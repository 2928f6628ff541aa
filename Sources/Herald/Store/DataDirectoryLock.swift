import Glibc

/// The lock a daemon holds on its data directory while it runs: `<directory>/herald.lock`, locked with `flock`
/// (`LOCK_EX`) from before the store is opened until the process ends, holding one JSON line that says how to reach
/// the daemon:
///
///     {"pid":4242,"http":"127.0.0.1:8080","projectID":"herald","socket":"herald-data/herald.sock"}
///
/// (`http` and `socket` are `null` when turned off). Tools that act on a data directory (`herald topics`) call
/// ``inspect(directory:)``: a held lock means a daemon runs there and keeps its state in memory, so they go through
/// the daemon (its HTTP receiver) instead of writing its store. A tool that writes a stopped daemon's store holds
/// ``shared(directory:)`` meanwhile, so a daemon cannot start in the middle of the write: ``acquire(directory:owner:wait:)``
/// waits for it.
///
/// The file is never removed (removing it would let a second daemon lock a new file while a tool still holds the old
/// one); the kernel drops the lock when the process ends, however it ends, so a killed daemon leaves no stale lock.
/// The descriptor is opened `O_CLOEXEC`, so child processes (`ExecFetchWorker`) never inherit the lock.
public final class DataDirectoryLock: Sendable {
    /// The file's name in the data directory.
    public static let fileName = "herald.lock"

    /// Who holds the lock, as its file says.
    public struct Owner: Sendable, Hashable {
        /// The process ID.
        public var pid: Int32
        /// The HTTP receiver's `HOST:PORT`, `nil` when the daemon has none.
        public var http: String?
        /// The project ID of its HTTP routes (`/v1/projects/{projectID}/...`).
        public var projectID: String?
        /// The socket receiver's address, `nil` when it has none.
        public var socket: String?

        /// `pid` defaults to this process's.
        public init(pid: Int32? = nil, http: String?, projectID: String?, socket: String?) {
            self.pid = pid ?? getpid()
            self.http = http
            self.projectID = projectID
            self.socket = socket
        }

        /// The file's contents: one JSON object and a newline.
        var line: [UInt8] {
            var object: JSONObject = ["pid": .int(Int64(pid))]
            object["http"] = http.map { .string($0) } ?? .null
            object["projectID"] = projectID.map { .string($0) } ?? .null
            object["socket"] = socket.map { .string($0) } ?? .null
            return JSONValue.object(object).jsonBytes() + [UInt8(ascii: "\n")]
        }

        /// The owner a file's contents describe, or `nil` when they are not (yet) a whole line.
        init?(line bytes: [UInt8]) {
            guard bytes.last == UInt8(ascii: "\n"), let object = (try? JSONParser.parse(Array(bytes.dropLast())))?.objectValue,
                case .int(let pid)? = object["pid"], let pid32 = Int32(exactly: pid)
            else { return nil }
            self.pid = pid32
            http = object["http"]?.stringValue
            projectID = object["projectID"]?.stringValue
            socket = object["socket"]?.stringValue
        }
    }

    /// What ``inspect(directory:)`` found.
    public enum State: Sendable, Hashable {
        /// No process holds the lock (or there is no lock file).
        case free
        /// A process holds it; `owner` is what its file says (`nil` if it cannot be read).
        case held(owner: Owner?)
    }

    /// The path of the lock file in `directory`.
    public static func path(inDirectory directory: String) -> String {
        directory.hasSuffix("/") ? directory + fileName : directory + "/" + fileName
    }

    /// The locked descriptor; closed by ``release()`` or when the lock is deinitialised.
    private let descriptor: Locked<Int32>

    private init(descriptor: Int32) {
        self.descriptor = Locked(descriptor)
    }

    deinit { release() }

    /// Releases the lock (the file stays). Harmless to call twice.
    public func release() {
        descriptor.withLock { fd in
            if fd >= 0 { close(fd) }
            fd = -1
        }
    }

    /// Takes the daemon's exclusive lock on `directory` (which must exist) and writes `owner` into the file. Waits up
    /// to `wait` while another process holds it (a tool's short shared hold); then throws
    /// ``DataDirectoryLockError/held(path:owner:)``, naming the holder. Blocks: call it at start-up, not on a loop.
    public static func acquire(directory: String, owner: Owner, wait: Duration = .seconds(2)) throws(DataDirectoryLockError)
        -> DataDirectoryLock
    {
        let path = path(inDirectory: directory)
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .cannotOpen(path: path, detail: String(cString: strerror(errno))) }
        let deadline = ContinuousClock.now + wait
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            guard code == EWOULDBLOCK || code == EINTR else {
                close(fd)
                throw .cannotOpen(path: path, detail: String(cString: strerror(code)))
            }
            guard ContinuousClock.now < deadline else {
                let holder = Owner(line: readAll(fd))
                close(fd)
                throw .held(path: path, owner: holder)
            }
            usleep(20_000)
        }
        let line = owner.line
        var written = 0
        if ftruncate(fd, 0) == 0 {
            while written < line.count {
                let count = line[written...].withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(written)) }
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { break }
                written += count
            }
        }
        guard written == line.count else {
            let detail = String(cString: strerror(errno))
            close(fd)
            throw .cannotOpen(path: path, detail: "cannot write it: \(detail)")
        }
        return DataDirectoryLock(descriptor: fd)
    }

    /// Whether a process holds the lock on `directory`, and what its file says. Never creates the file. A holder
    /// whose line is not whole yet (it is between locking and writing) is waited for up to a second.
    public static func inspect(directory: String) -> State {
        let fd = open(path(inDirectory: directory), O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return .free }
        defer { close(fd) }
        if flock(fd, LOCK_SH | LOCK_NB) == 0 {
            flock(fd, LOCK_UN)
            return .free
        }
        guard errno == EWOULDBLOCK else { return .free }
        let deadline = ContinuousClock.now + .seconds(1)
        while true {
            if let owner = Owner(line: readAll(fd)) { return .held(owner: owner) }
            guard ContinuousClock.now < deadline else { return .held(owner: nil) }
            usleep(20_000)
        }
    }

    /// A shared hold on `directory`'s lock (creating the file), for a tool that writes a stopped daemon's store: a
    /// daemon that starts meanwhile waits in ``acquire(directory:owner:wait:)`` until ``release()``. `nil` when a
    /// daemon holds the lock (it is running: use ``inspect(directory:)`` to find it).
    public static func shared(directory: String) throws(DataDirectoryLockError) -> DataDirectoryLock? {
        let path = path(inDirectory: directory)
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw .cannotOpen(path: path, detail: String(cString: strerror(errno))) }
        while flock(fd, LOCK_SH | LOCK_NB) != 0 {
            let code = errno
            if code == EINTR { continue }
            close(fd)
            guard code == EWOULDBLOCK else { throw .cannotOpen(path: path, detail: String(cString: strerror(code))) }
            return nil
        }
        return DataDirectoryLock(descriptor: fd)
    }

    /// The whole file, from its start.
    private static func readAll(_ fd: Int32) -> [UInt8] {
        var contents: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let count = pread(fd, &buffer, buffer.count, off_t(contents.count))
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return contents }
            contents += buffer[0..<count]
        }
    }
}

/// Why ``DataDirectoryLock`` could not be taken.
public enum DataDirectoryLockError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The lock file cannot be created, opened, locked or written.
    case cannotOpen(path: String, detail: String)
    /// Another process holds the lock: another daemon uses the data directory.
    case held(path: String, owner: DataDirectoryLock.Owner?)

    public var description: String {
        switch self {
        case .cannotOpen(let path, let detail):
            "cannot lock the data directory (\(path)): \(detail)"
        case .held(let path, let owner):
            "another process uses this data directory (\(path) is locked\(owner.map { " by pid \($0.pid)" } ?? "")); stop it, or give this one a data directory of its own"
        }
    }
}
