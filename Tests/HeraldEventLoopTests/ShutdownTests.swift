import Foundation
import HeraldTesting
import Testing

@testable import HeraldEventLoop

@Suite("Shutdown leaves no handle and no file descriptor behind", .serialized)
struct ShutdownTests {
    /// libuv opens a process-wide pipe for signal handling with its first loop and keeps it for the life of
    /// the process; start one loop first so that the counts below see only what a loop opens and closes.
    static func warmUpLibuv() async throws {
        let loop = EventLoop()
        try loop.start()
        await loop.shutdownGracefully()
    }

    @Test("shutdown with open connections, pending timers and queued work", .ownProcess)
    func shutdownWithEverythingOpen() async throws {
        try await Self.warmUpLibuv()
        let before = openFileDescriptorCount()
        let loop = EventLoop()
        try loop.start()
        let serverClosed = ByteCollector()
        let tcp = try await startEchoServer(on: loop, at: .tcp(host: "127.0.0.1", port: 0))
        let unix = try await startEchoServer(on: loop, at: .unix(path: temporarySocketPath("shutdown")))
        try await loop.submit { tcp.onClose = { serverClosed.markClosed(nil) } }
        var clients: [ByteCollector] = []
        for address in [tcp.localAddress, unix.localAddress] {
            for _ in 0..<4 {
                let client = try await StreamConnection.connect(to: address, on: loop)
                let collector = ByteCollector()
                try await loop.submit {
                    collector.attach(to: client)
                    client.write(Array("ping".utf8))
                }
                await collector.waitForBytes(4)
                clients.append(collector)
            }
        }
        let timerFired = Locked(false)
        for seconds in 1...10 {
            loop.scheduleTask(in: .seconds(seconds * 60)) { timerFired.withLock { $0 = true } }
        }
        let queuedRan = Locked(0)
        try await loop.submit {
            // Queued behind the shutdown request: it runs before the loop closes.
            loop.shutdown()
            for _ in 0..<100 { loop.execute { queuedRan.withLock { $0 += 1 } } }
        }
        loop.waitUntilClosed()
        #expect(loop.lifecycle == .closed)
        #expect(loop.statistics.liveHandles == 0)
        #expect(queuedRan.withLock { $0 } == 100)
        #expect(!timerFired.withLock { $0 })
        #expect(serverClosed.closed)
        #expect(clients.allSatisfy { $0.closed })
        #expect(!FileManager.default.fileExists(atPath: unix.localAddress.description.replacingOccurrences(of: "unix:", with: "")))
        #expect(openFileDescriptorCount() == before)
    }

    @Test("many loops started and shut down leak no descriptors or threads' handles", .ownProcess)
    func repeatedLoops() async throws {
        try await Self.warmUpLibuv()
        let before = openFileDescriptorCount()
        for _ in 0..<20 {
            let loop = EventLoop()
            try loop.start()
            _ = try await loop.offload { 1 }
            let server = try await startEchoServer(on: loop, at: .tcp(host: "127.0.0.1", port: 0))
            let client = try await StreamConnection.connect(to: server.localAddress, on: loop)
            _ = client
            await loop.shutdownGracefully()
            #expect(loop.statistics.liveHandles == 0)
        }
        #expect(openFileDescriptorCount() == before)
    }

    @Test("new handles are refused once shutdown has begun")
    func refusedDuringShutdown() async throws {
        let loop = EventLoop()
        try loop.start()
        let outcome: String = try await loop.submit {
            loop.shutdown()
            do {
                _ = try StreamServer.listen(on: loop, at: .tcp(host: "127.0.0.1", port: 0)) { _ in }
                return "listened"
            } catch EventLoopError.shutDown {
                return "refused"
            } catch {
                return "\(error)"
            }
        }
        #expect(outcome == "refused")
        await loop.shutdownGracefully()
        #expect(loop.statistics.liveHandles == 0)
    }
}

@Suite("A loop whose thread could not be made")
struct ThreadNotMadeTests {
    /// A loop whose first `failures` spawns fail as `pthread_create` does (EAGAIN); with `shuttingDown`, a spawn that
    /// fails first asks the loop to shut down, as another thread's `shutdown()` could between the claim and the failure.
    static func loop(failures: Int, shuttingDown: Bool = false) -> EventLoop {
        let remaining = Locked(failures)
        let made = Locked<EventLoop?>(nil)
        let loop = EventLoop(name: "spawn-fails") { name, body throws(EventLoopError) in
            guard
                remaining.withLock({ count in
                    defer { count -= 1 }
                    return count > 0
                })
            else { return try SpawnedThread.spawn(name: name, body) }
            if shuttingDown { made.withLock { $0 }?.shutdown() }
            throw .threadCreationFailed(errno: EAGAIN)
        }
        made.withLock { $0 = loop }
        return loop
    }

    @Test("start() throws; the loop can be started again, then runs work and shuts down")
    func startedAgain() async throws {
        let loop = Self.loop(failures: 1)
        #expect(throws: EventLoopError.threadCreationFailed(errno: EAGAIN)) { try loop.start() }
        #expect(loop.lifecycle == .idle)
        try loop.start()
        #expect(try await loop.submit { 42 } == 42)
        await loop.shutdownGracefully()
        #expect(loop.lifecycle == .closed)
    }

    @Test("a shutdown after the failed start closes the loop and returns")
    func shutdownAfterwards() async throws {
        let loop = Self.loop(failures: 1)
        #expect(throws: EventLoopError.threadCreationFailed(errno: EAGAIN)) { try loop.start() }
        let stopping = Task { await loop.shutdownGracefully() }
        // Required: a loop that never closes would hold the wait below for good.
        try #require(await eventually(timeout: .seconds(10)) { loop.lifecycle == .closed })
        await stopping.value
    }

    @Test("a shutdown that came while the thread was being made: the failed start closes the loop")
    func shutdownMeanwhile() async throws {
        let loop = Self.loop(failures: 1, shuttingDown: true)
        #expect(throws: EventLoopError.threadCreationFailed(errno: EAGAIN)) { try loop.start() }
        try #require(loop.lifecycle == .closed)
        await loop.shutdownGracefully()
    }
}

@Suite("withEventLoop: a loop for one piece of work")
struct WithEventLoopTests {
    struct Refused: Error {}

    @Test("returns the work's result once the loop has closed, with every handle closed; a thrown error comes through after the close")
    func closesBeforeReturning() async throws {
        let (loop, answer) = try await withEventLoop(named: "with-event-loop") { loop in
            // A handle the work leaves open: the close must take it.
            _ = try await StreamServer.listen(on: loop, at: .tcp(host: "127.0.0.1", port: 0)) { _ in }
            return (loop, try await loop.submit { 6 * 7 })
        }
        #expect(answer == 42)
        #expect(loop.lifecycle == .closed)
        #expect(loop.statistics.liveHandles == 0)

        let thrownFrom = Locked<EventLoop?>(nil)
        await #expect(throws: Refused.self) {
            try await withEventLoop(named: "with-event-loop-throws") { loop in
                thrownFrom.withLock { $0 = loop }
                _ = try await StreamServer.listen(on: loop, at: .tcp(host: "127.0.0.1", port: 0)) { _ in }
                throw Refused()
            }
        }
        let failed = try #require(thrownFrom.withLock { $0 })
        #expect(failed.lifecycle == .closed)
        #expect(failed.statistics.liveHandles == 0)
    }
}
