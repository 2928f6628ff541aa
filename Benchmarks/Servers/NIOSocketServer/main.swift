// NIOSocketServer: the SwiftNIO peer of Herald's SocketReceiver in scripts/socket-vs-nio.
//
//     NIOSocketServer --socket PATH [--threads N] [--project ID] [--token TOKEN]
//
// SwiftNIO 2 on a Unix socket: NIOExtras' LineBasedFrameDecoder splits lines, each line is decoded with Herald's
// own `FCMSendRequest.decode(_:context:)`, handed to a no-op handler that counts it (synchronously, on the channel's
// event loop), and answered with one line, `{"name": "projects/{project}/messages/{id}"}` or Google's error shape,
// written by Herald's JSON writer. Answers are flushed once per read burst (channelReadComplete), the usual NIO way.
//
// With `--token`, a message addressed to another token is answered UNREGISTERED, as Herald's bus does; the
// default token is `bench-token`. This peer does less than Herald's bus: no de-duplication window, no in-flight
// limit, no task per message, no analytics.
//
// The event loop group has N threads (default 1, as Herald has one loop). Prints `token=<token>` and `ready` once
// listening. SIGUSR1 prints `handled=<n>`; SIGINT / SIGTERM print it and exit.

import Glibc
import Herald
import NIOCore
import NIOExtras
import NIOPosix
import Synchronization

/// Writes one line to standard output or error, unbuffered (the scripts read the output while the process runs).
func say(_ text: String, to fd: Int32 = 1) {
    var line = Array((text + "\n").utf8)
    var offset = 0
    while offset < line.count {
        let written = line.withUnsafeMutableBytes { write(fd, $0.baseAddress! + offset, $0.count - offset) }
        if written <= 0 { return }
        offset += written
    }
}

func option(_ name: String) -> String? {
    let arguments = CommandLine.arguments
    guard let index = arguments.firstIndex(of: name), arguments.indices.contains(index + 1) else { return nil }
    return arguments[index + 1]
}

/// Message IDs as Herald makes them: a random 19-digit start, one atomic increment per message.
final class MessageIDs: Sendable {
    private let next = Atomic<UInt64>(UInt64.random(in: 1_000_000_000_000_000 ... 9_000_000_000_000_000))
    func make() -> String { String(next.add(1, ordering: .relaxed).newValue) }
}

/// The no-op handler: counts messages.
final class NoOpHandler: Sendable {
    let handled = Atomic<Int>(0)
    func handle(_ message: RemoteMessage) { handled.add(1, ordering: .relaxed) }
}

/// Decode, target check, dispatch; the answer line without its newline.
func process(_ line: [UInt8], project: String, token: String, context: DecodingContext, handler: NoOpHandler) -> [UInt8] {
    do {
        let request = try FCMSendRequest.decode(line, context: context)
        let message = request.message
        if case .token(let target) = message.target, target != token {
            return MessageError(.unregistered(.token(target))).fcmErrorBody.jsonBytes()
        }
        if !request.validateOnly { handler.handle(message) }
        return fcmSendResponse(project: project, messageID: message.messageID ?? "").jsonBytes()
    } catch {
        return error.fcmErrorBody.jsonBytes()
    }
}

final class LineHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let project: String
    let token: String
    let decoding: DecodingContext
    let handler: NoOpHandler

    init(project: String, token: String, decoding: DecodingContext, handler: NoOpHandler) {
        self.project = project
        self.token = token
        self.decoding = decoding
        self.handler = handler
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        var line = Array(frame.readableBytesView)
        if line.last == UInt8(ascii: "\r") { line.removeLast() }
        guard !line.isEmpty else { return }
        let answer = process(line, project: project, token: token, context: decoding, handler: handler)
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
let project = option("--project") ?? "herald"
let token = option("--token") ?? "bench-token"
let ids = MessageIDs()
let decoding = DecodingContext(senderID: "1234567890", makeMessageID: { ids.make() })
let handler = NoOpHandler()

// Signals are taken with sigwait on the main thread: block them before any thread starts.
var signals = sigset_t()
sigemptyset(&signals)
for signal in [SIGINT, SIGTERM, SIGUSR1] { sigaddset(&signals, signal) }
pthread_sigmask(SIG_BLOCK, &signals, nil)

let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
let server = try ServerBootstrap(group: group)
    .serverChannelOption(.backlog, value: 256)
    .childChannelInitializer { channel in
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(ByteToMessageHandler(LineBasedFrameDecoder()))
            try channel.pipeline.syncOperations.addHandler(
                LineHandler(project: project, token: token, decoding: decoding, handler: handler)
            )
        }
    }
    .childChannelOption(.maxMessagesPerRead, value: 16)
    .bind(unixDomainSocketPath: path, cleanupExistingSocketFile: true)
    .wait()
say("token=\(token)")
say("ready")

while true {
    var received: Int32 = 0
    sigwait(&signals, &received)
    say("handled=\(handler.handled.load(ordering: .relaxed))")
    if received != SIGUSR1 { break }
}
try server.close().wait()
try group.syncShutdownGracefully()
unlink(path)
