import Glibc
import HeraldEventLoop

/// Where the daemon's log handlers write: standard error (or a test's descriptor), each line whole, in the order the
/// lines were logged.
///
/// A line logged on the loop per notification (the log presenter's) is gathered rather than written at once: the
/// lines of one turn of the loop leave together before the loop next polls for I/O, several lines to a write only
/// within `PIPE_BUF` bytes (what a pipe never splits among another writer's bytes; a longer line goes out alone, whole,
/// as every line did before). That spares a system call per notification, and
/// under systemd a wake-up of the journal per line. A line is never held past its turn, and never overtaken: a line
/// written from any thread writes what is gathered first; the durable inbox has it written before the commit that
/// could remove the message it is about, so a crash that loses a gathered line leaves its message in the inbox, to be
/// presented (and logged) again at the next start.
final class LogOutput: GatheredOutput, Sendable {
    /// At most this many bytes of gathered lines go out in one write (`PIPE_BUF`, what a pipe writes whole), unless one
    /// line alone is longer.
    static let gatheredWriteLimit = 4096

    private struct Gathered {
        var bytes: [UInt8] = []
        /// A write before the loop polls has been asked for and not made yet.
        var asked = false
    }

    let descriptor: Int32
    private let gathered = Locked(Gathered())

    init(descriptor: Int32) { self.descriptor = descriptor }

    /// Writes `line` now, after the lines gathered before it. Any thread.
    func write(_ line: UnsafeBufferPointer<UInt8>) {
        gathered.withLock { gathered in
            writeOut(&gathered.bytes)
            Self.write(line, to: descriptor)
        }
    }

    /// Gathers `line` to be written before `loop` next polls for I/O. `loop`'s thread only.
    func gather(on loop: EventLoop, _ line: UnsafeBufferPointer<UInt8>) {
        let ask = gathered.withLock { gathered in
            if gathered.bytes.count + line.count > Self.gatheredWriteLimit { writeOut(&gathered.bytes) }
            gathered.bytes.append(contentsOf: line)
            defer { gathered.asked = true }
            return !gathered.asked
        }
        // While the loop is closing no write before polling comes: write at once.
        if ask, !loop.writeBeforePolling(self) { writeGathered() }
    }

    func writeGathered() {
        gathered.withLock { gathered in
            gathered.asked = false
            writeOut(&gathered.bytes)
        }
    }

    /// Writes the gathered `bytes` and empties them (keeping their room). Under the lock.
    private func writeOut(_ bytes: inout [UInt8]) {
        guard !bytes.isEmpty else { return }
        bytes.withUnsafeBufferPointer { Self.write($0, to: descriptor) }
        bytes.removeAll(keepingCapacity: true)
    }

    /// One `write(2)` for the whole of `bytes` where the kernel takes it (standard error is unbuffered in C too).
    private static func write(_ bytes: UnsafeBufferPointer<UInt8>, to descriptor: Int32) {
        guard let base = bytes.baseAddress else { return }
        var offset = 0
        while offset < bytes.count {
            let written = Glibc.write(descriptor, base + offset, bytes.count - offset)
            if written > 0 {
                offset += written
            } else if written < 0 && errno == EINTR {
                continue
            } else {
                return
            }
        }
    }
}
