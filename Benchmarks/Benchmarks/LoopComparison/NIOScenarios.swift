// The four scenarios on SwiftNIO's MultiThreadedEventLoopGroup(numberOfThreads: 1), written like
// HeraldScenarios.swift so that only the loop differs.

import NIOCore
import NIOPosix

#if canImport(Glibc)
    import Glibc
#endif

/// One NIO event loop (a group of one thread).
final class NIOLoopFixture: BenchmarkFixture {
    let group: MultiThreadedEventLoopGroup
    let loop: any EventLoop
    let loopCPUClock: clockid_t
    let countdown = Countdown()

    private init(group: MultiThreadedEventLoopGroup, loopCPUClock: clockid_t) {
        self.group = group
        self.loop = group.next()
        self.loopCPUClock = loopCPUClock
    }

    static func make() async throws -> NIOLoopFixture {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            return NIOLoopFixture(group: group, loopCPUClock: try await nioLoopCPUClock(group.next()))
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
    }

    func tearDown() async throws {
        try await group.shutdownGracefully()
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

/// NIO's canonical echo handler (as in its NIOEchoServer example): write back what was read, flush once per read burst.
private final class EchoHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.write(data, promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

/// A NIO loop with a Unix socket echo server on it and the blocking client connected.
final class NIOEchoFixture: BenchmarkFixture {
    let group: MultiThreadedEventLoopGroup
    let loopCPUClock: clockid_t
    let server: any Channel
    let client: BlockingEchoClient
    let path: String

    private init(group: MultiThreadedEventLoopGroup, loopCPUClock: clockid_t, server: any Channel, client: BlockingEchoClient, path: String)
    {
        self.group = group
        self.loopCPUClock = loopCPUClock
        self.server = server
        self.client = client
        self.path = path
    }

    static func make() async throws -> NIOEchoFixture {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            let path = freshSocketPath("nio")
            let server = try await ServerBootstrap(group: group)
                .childChannelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(EchoHandler())
                    }
                }
                .bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true)
                .get()
            do {
                let client = try BlockingEchoClient(path: path)
                try client.checkedRoundTrip()
                return NIOEchoFixture(
                    group: group, loopCPUClock: try await nioLoopCPUClock(group.next()), server: server,
                    client: client, path: path)
            } catch {
                try? await server.close()
                throw error
            }
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
    }

    func tearDown() async throws {
        client.close()
        try await server.close()
        try await group.shutdownGracefully()
        unlink(path)  // NIO leaves the socket file behind.
    }

    /// 4. `count` round trips of the blocking client.
    func echo(count: Int) {
        for _ in 0..<count { client.roundTrip() }
    }
}

/// The CPU-time clock of the thread running `loop`.
private func nioLoopCPUClock(_ loop: any EventLoop) async throws -> clockid_t {
    try cpuClock(of: try await loop.submit { pthread_self() }.get())
}
