import Glibc
import Herald
import HeraldEventLoop
import HeraldSQLite
import HeraldTesting
import Logging
import Testing

@testable import HeraldDaemon

/// The daemon's log output: the lines a loop gathers (the log presenter's, one per notification) leave together before
/// the loop next polls, whole and in the order they were logged, and before the durable inbox removes their messages.
@Suite("The daemon's log output")
struct LogOutputTests {
    /// A socket pair that keeps each `write(2)`'s bounds: every write to `write` is one packet read from `read`, so a
    /// test sees how the lines were written, not only what.
    final class Packets: @unchecked Sendable {
        // @unchecked Sendable: the descriptors are set once.
        let read: Int32
        let write: Int32

        init() {
            var ends: [Int32] = [0, 0]
            #expect(socketpair(AF_UNIX, Int32(SOCK_SEQPACKET.rawValue), 0, &ends) == 0)
            (read, write) = (ends[0], ends[1])
        }

        deinit {
            close(read)
            close(write)
        }

        /// The packets written so far and not read yet, without waiting.
        func available() -> [String] {
            var packets: [String] = []
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            while true {
                let count = recv(read, &buffer, buffer.count, Int32(MSG_DONTWAIT))
                if count <= 0 { break }
                packets.append(String(decoding: buffer[..<count], as: UTF8.self))
            }
            return packets
        }
    }

    /// The lines of `packets`, each without its timestamp.
    private static func lines(_ packets: [String]) -> [String] {
        packets.joined().split(separator: "\n").map { line in line.firstIndex(of: " ").map { String(line[$0...]) } ?? String(line) }
    }

    private static func notification(_ handler: LiveLevelLogHandler, _ number: Int, on loop: EventLoop, body: String = "hello") {
        handler.log(.info, "notification", source: "Herald", gatheringOn: loop) { field in
            field("body", body)
            field("n", "\(number)")
        }
    }

    /// Runs `body` with a running loop and a daemon handler writing to packets.
    private func withHandler(_ body: (EventLoop, Packets, LiveLevelLogHandler) async throws -> Void) async throws {
        try await withRunningLoop { loop in
            let packets = Packets()
            try await body(loop, packets, LiveLevelLogHandler(label: "herald", level: LiveLogLevel(.info), descriptor: packets.write))
        }
    }

    @Test("the lines of a turn leave in one write, before the loop polls again")
    func oneWritePerTurn() async throws {
        try await withHandler { loop, packets, handler in
            let duringTheTurn = try await loop.submit {
                for number in 1...3 { Self.notification(handler, number, on: loop) }
                return packets.available()
            }
            #expect(duringTheTurn.isEmpty)
            // Submitted work runs when the loop has polled, so after the write before polling.
            let written = try await loop.submit { packets.available() }
            #expect(written.count == 1)
            #expect(
                Self.lines(written) == (1...3).map { " info herald: body=hello n=\($0) [Herald] notification" })
        }
    }

    @Test("a line written meanwhile, from the loop or another thread, writes the gathered ones first")
    func orderKept() async throws {
        try await withHandler { loop, packets, handler in
            let written = try await loop.submit {
                Self.notification(handler, 1, on: loop)
                Self.notification(handler, 2, on: loop)
                let logger = Logger(label: "herald", factory: { _ in handler })
                logger.error("a handler failed")
                Self.notification(handler, 3, on: loop)
                try SpawnedThread.spawn(name: "other") { logger.warning("from another thread") }.join()
                return packets.available()
            }
            #expect(written.count == 4)
            #expect(
                Self.lines(written) == [
                    " info herald: body=hello n=1 [Herald] notification", " info herald: body=hello n=2 [Herald] notification",
                    " error herald: [HeraldDaemonTests] a handler failed", " info herald: body=hello n=3 [Herald] notification",
                    " warning herald: [HeraldDaemonTests] from another thread",
                ])
            #expect(try await loop.submit { packets.available() }.isEmpty)
        }
    }

    @Test("many lines: writes of at most PIPE_BUF bytes, each of whole lines, in order")
    func writesOfWholeLines() async throws {
        try await withHandler { loop, packets, handler in
            let body = String(repeating: "é", count: 100)
            try await loop.submit {
                for number in 1...60 { Self.notification(handler, number, on: loop, body: body) }
            }
            let written = try await loop.submit { packets.available() }
            #expect(written.count >= 4)
            #expect(written.allSatisfy { $0.utf8.count <= LogOutput.gatheredWriteLimit && $0.hasSuffix("\n") })
            #expect(Self.lines(written) == (1...60).map { " info herald: body=\(body) n=\($0) [Herald] notification" })
        }
    }

    @Test("the loop writes what was gathered at once when asked (before a commit)")
    func writtenWhenAsked() async throws {
        try await withHandler { loop, packets, handler in
            let written = try await loop.submit {
                Self.notification(handler, 1, on: loop)
                loop.writeGatheredOutput()
                return packets.available()
            }
            #expect(Self.lines(written) == [" info herald: body=hello n=1 [Herald] notification"])
        }
    }

    /// The SQLite store, checking at each commit that the messages it removes have their lines written.
    final class LineCheckingStore: HeraldStore, Sendable {
        let inner: SQLiteStore
        let packets: Packets
        private let state = Locked((written: "", removed: 0, removedBeforeTheirLines: [String]()))

        init(directory: String, packets: Packets) throws {
            inner = try SQLiteStore(directory: directory)
            self.packets = packets
        }

        var removed: Int { state.withLock { $0.removed } }
        var removedBeforeTheirLines: [String] { state.withLock { $0.removedBeforeTheirLines } }

        var isDurable: Bool { inner.isDurable }
        func close() { inner.close() }
        func load(window: DeduplicationWindow, now: Int64) throws(StoreError) -> StoredState { try inner.load(window: window, now: now) }
        func save(identity: StoredIdentity) throws(StoreError) { try inner.save(identity: identity) }
        func setTopic(_ name: String, subscribed: Bool) throws(StoreError) { try inner.setTopic(name, subscribed: subscribed) }
        func deleteAll() throws(StoreError) { try inner.deleteAll() }

        func commit(_ batch: StoreBatch, window: DeduplicationWindow, now: Int64) throws(StoreError) {
            state.withLock { state in
                state.written += packets.available().joined()
                state.removed += batch.finished.count
                for id in batch.finished where !state.written.contains("message_id=\(id) ") {
                    state.removedBeforeTheirLines.append(id)
                }
            }
            try inner.commit(batch, window: window, now: now)
        }
    }

    /// A notification handler that answers from a task, so that the bus presents in a task on the loop too: a line is
    /// then gathered (and its message finished) by a task's job, in the same drain of the loop's queue as a commit
    /// that was asked for before it.
    final class AnsweringLater: NotificationHandler {
        var descriptor: PluginDescriptor { PluginDescriptor(name: "later", summary: "answers after a yield") }

        func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
            await Task.yield()
            return [.list]
        }
    }

    @Test(
        "the durable inbox removes a presented message only once its line is written",
        arguments: [false, true])
    func linesBeforeRemoval(asynchronousHandler: Bool) async throws {
        try await withTemporaryDirectory(prefix: "herald-log-output") { directory in
            let packets = Packets()
            let store = try LineCheckingStore(directory: directory, packets: packets)
            let logger = Logger(
                label: "herald",
                factory: { label in LiveLevelLogHandler(label: label, level: LiveLogLevel(.info), descriptor: packets.write) })
            let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")), store: store, logger: logger)
            let receiver = InMemoryReceiver()
            let plugins: [any HeraldPlugin] =
                [receiver, LogLinePresenter(logger: logger, loop: herald.loop)] + (asynchronousHandler ? [AnsweringLater()] : [])
            try await withStarted(herald, plugins: plugins) { herald in
                let token = try await herald.token()
                // Senders at once, so that groups of several messages are committed, presented and removed together.
                try await withThrowingTaskGroup(of: Void.self) { group in
                    for sender in 0..<8 {
                        group.addTask {
                            for number in 0..<25 {
                                _ = try await receiver.sendFCM(
                                    fcmBody(token: token, notification: ("sender \(sender)", "number \(number)")), to: herald
                                ).get()
                            }
                        }
                    }
                    try await group.waitForAll()
                }
                try await herald.waitUntilIdle()
            }
            #expect(store.removed == 200)
            #expect(store.removedBeforeTheirLines.isEmpty)
        }
    }
}
