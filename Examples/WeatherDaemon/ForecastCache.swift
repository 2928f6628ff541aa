import Glibc
import Synchronization

/// The forecast cache: one file, replaced atomically (a temporary file in the same directory, fsynced, then renamed
/// over the old one, and the directory fsynced), so a reader sees the old forecast or the new one, never half of one,
/// even after a crash.
final class ForecastCache: Sendable {
    /// What ``update(_:)`` did.
    enum Outcome: Sendable, Equatable {
        case updated
        case unchanged
    }

    struct WriteError: Error, CustomStringConvertible {
        let path: String
        let detail: String
        var description: String { "cannot write the forecast cache \(path): \(detail)" }
    }

    let path: String
    /// One update at a time: background fetches run concurrently.
    private let updates = Mutex<Void>(())

    init(path: String) {
        self.path = path
    }

    /// The cached forecast, or `nil` when there is none yet.
    func contents() -> [UInt8]? {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        var contents: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 16384)
        while true {
            let count = read(fd, &buffer, buffer.count)
            if count < 0, errno == EINTR { continue }
            guard count > 0 else { return count == 0 ? contents : nil }
            contents += buffer[0..<count]
        }
    }

    /// Replaces the cached forecast with `forecast`, unless it holds exactly that already.
    func update(_ forecast: [UInt8]) throws(WriteError) -> Outcome {
        try updates.withLock { _ throws(WriteError) in
            if contents() == forecast { return .unchanged }
            try replace(with: forecast)
            return .updated
        }
    }

    private func replace(with bytes: [UInt8]) throws(WriteError) {
        let temporary = "\(path).tmp-\(getpid())"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw failure("cannot create \(temporary)") }
        var offset = 0
        while offset < bytes.count {
            let written = bytes[offset...].withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
            if written < 0, errno == EINTR { continue }
            guard written > 0 else {
                let error = failure("cannot write \(temporary)")
                close(fd)
                unlink(temporary)
                throw error
            }
            offset += written
        }
        guard fsync(fd) == 0 else {
            let error = failure("cannot fsync \(temporary)")
            close(fd)
            unlink(temporary)
            throw error
        }
        close(fd)
        guard rename(temporary, path) == 0 else {
            let error = failure("cannot rename \(temporary)")
            unlink(temporary)
            throw error
        }
        // The rename itself is durable once the directory is synced.
        let directory = path.lastIndex(of: "/").map { String(path[..<$0]) }.map { $0.isEmpty ? "/" : $0 } ?? "."
        let directoryFD = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        if directoryFD >= 0 {
            fsync(directoryFD)
            close(directoryFD)
        }
    }

    private func failure(_ what: String) -> WriteError {
        WriteError(path: path, detail: "\(what): \(String(cString: strerror(errno)))")
    }
}
