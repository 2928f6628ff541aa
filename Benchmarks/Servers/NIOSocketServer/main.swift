// NIOSocketServer: the SwiftNIO peer of Herald's SocketReceiver in scripts/peers and scripts/socket-vs-nio.
//
//     NIOSocketServer --socket PATH [--threads N] [--project ID] [--token TOKEN]
//
// SwiftNIO 2 on a Unix socket: NIOExtras' LineBasedFrameDecoder splits lines, and each line gets what every peer
// does (PeerSupport's PeerService): decoded with Herald's own `FCMSendRequest.decode(_:context:)`, handed to a no-op
// handler that counts it (synchronously, on the channel's event loop), and answered with one line,
// `{"name": "projects/{project}/messages/{id}"}` or Google's error shape, written by Herald's JSON writer. Answers are flushed once per read burst (channelReadComplete), the usual NIO way.
//
// With `--token`, a message addressed to another token is answered UNREGISTERED, as Herald's bus does; the
// default token is `bench-token`. This peer does less than Herald's bus: no de-duplication window, no in-flight
// limit, no task per message, no analytics.
//
// The event loop group has N threads (default 1, as Herald has one loop). Prints `token=<token>` and `ready` once
// listening. SIGUSR1 prints `handled=<n>`; SIGINT / SIGTERM print it and exit.

import Glibc
import NIOCore
import NIOExtras
import NIOPosix
import PeerSupport
import ServerSupport

final class LineHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let service: PeerService

    init(service: PeerService) {
        self.service = service
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        var line = Array(frame.readableBytesView)
        if line.last == UInt8(ascii: "\r") { line.removeLast() }
        guard !line.isEmpty else { return }
        let answer = service.answer(body: line).body
        var buffer = context.channel.allocator.buffer(capacity: answer.count + 1)
        buffer.writeBytes(answer)
        buffer.writeInteger(UInt8(ascii: "\n"))
        context.write(wrapOutboundOut(buffer), promise: nil)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

guard let path = option("--socket") else {
    say("usage: NIOSocketServer --socket PATH [--threads N] [--project ID] [--token TOKEN]", to: 2)
    exit(2)
}
let threads = option("--threads").flatMap(Int.init) ?? 1
let token = option("--token") ?? "bench-token"
let service = PeerService(project: option("--project") ?? "herald", token: token)

// Signals are taken with sigwait on the main thread: block them before any thread starts.
let signals = blockServerSignals()

let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
let server = try ServerBootstrap(group: group)
    .serverChannelOption(.backlog, value: 256)
    .childChannelInitializer { channel in
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(LineBasedFrameDecoder()))
            try channel.pipeline.syncOperations.addHandler(
                LineHandler(service: service)
            )
        }
    }
    .childChannelOption(.maxMessagesPerRead, value: 16)
    .bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true)
    .wait()
say("token=\(token)")
say("ready")

reportSignals(signals) {
    say("handled=\(service.handler.handled.load(ordering: .relaxed))")
}
try server.close().wait()
try group.syncShutdownGracefully()
unlink(path)
