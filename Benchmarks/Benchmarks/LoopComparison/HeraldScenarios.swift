// The four scenarios on Herald's EventLoop. NIOScenarios.swift holds the same four on SwiftNIO.

import Herald

#if canImport(Glibc)
    import Glibc
#endif

/// One started Herald loop.
final class HeraldLoopFixture: BenchmarkFixture {
    let loop: EventLoop
    let loopCPUClock: clockid_t
    let countdown = Countdown()

    private init(loop: EventLoop, loopCPUClock: clockid_t) {
        self.loop = loop
        self.loopCPUClock = loopCPUClock
    }

    static func make() async throws -> HeraldLoopFixture {
        let loop = EventLoop(name: "herald-bench")
        try loop.start()
        do {
            return HeraldLoopFixture(loop: loop, loopCPUClock: try await heraldLoopCPUClock(loop))
        } catch {
            await loop.shutdownGracefully()
            throw error
        }
    }

    func tearDown() async throws {
        await loop.shutdownGracefully()
    }

    /// 1. `count` closures submitted from the benchmark thread (not the loop's); returns once all ran.
    func executeFromOtherThread(count: Int) {
        let countdown = countdown
        countdown.arm(count)
        for _ in 0..<count {
            loop.execute { countdown.tick() }
        }
        countdown.wait()
    }

    /// 2. `count` closures submitted by a closure already running on the loop; returns once all ran.
    func executeOnLoop(count: Int) {
        let loop = loop
        let countdown = countdown
        countdown.arm(count)
        loop.execute {
            for _ in 0..<count {
                loop.execute { countdown.tick() }
            }
        }
        countdown.wait()
    }

    /// 3. `count` timers with a zero delay scheduled on the loop; returns once all fired.
    func scheduleOnLoop(count: Int) {
        let loop = loop
        let countdown = countdown
        countdown.arm(count)
        loop.execute {
            for _ in 0..<count {
                loop.scheduleTask(in: .zero) { countdown.tick() }
            }
        }
        countdown.wait()
    }
}

/// A Herald loop with a Unix socket echo server on it and the blocking client connected.
final class HeraldEchoFixture: BenchmarkFixture {
    let loop: EventLoop
    let loopCPUClock: clockid_t
    let server: StreamServer
    let client: BlockingEchoClient

    private init(loop: EventLoop, loopCPUClock: clockid_t, server: StreamServer, client: BlockingEchoClient) {
        self.loop = loop
        self.loopCPUClock = loopCPUClock
        self.server = server
        self.client = client
    }

    static func make() async throws -> HeraldEchoFixture {
        let loop = EventLoop(name: "herald-echo")
        try loop.start()
        do {
            let path = freshSocketPath("herald")
            let server = try await StreamServer.listen(on: loop, at: .unix(path: path)) { connection in
                // The connection keeps itself alive while open; `unowned` avoids a reference cycle through onRead.
                connection.onRead = { [unowned connection] bytes in connection.write(bytes) }
                connection.onEnd = { [unowned connection] in connection.close() }
                connection.startReading()
            }
            let client = try BlockingEchoClient(path: path)
            try client.checkedRoundTrip()
            return HeraldEchoFixture(loop: loop, loopCPUClock: try await heraldLoopCPUClock(loop), server: server, client: client)
        } catch {
            await loop.shutdownGracefully()
            throw error
        }
    }

    func tearDown() async throws {
        client.close()
        let server = server
        try await loop.submit { server.close() }
        await loop.shutdownGracefully()
    }

    /// 4. `count` round trips of the blocking client.
    func echo(count: Int) {
        for _ in 0..<count { client.roundTrip() }
    }
}

/// The CPU-time clock of the thread running `loop`.
private func heraldLoopCPUClock(_ loop: EventLoop) async throws -> clockid_t {
    try cpuClock(of: try await loop.submit { pthread_self() })
}
