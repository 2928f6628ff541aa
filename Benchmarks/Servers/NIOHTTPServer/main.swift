// NIOHTTPServer: the SwiftNIO HTTP peer of Herald's HTTPReceiver in scripts/peers (scenario 4).
//
//     NIOHTTPServer --http PORT [--threads N] [--project ID] [--token TOKEN]
//
// SwiftNIO 2's NIOHTTP1 server pipeline (`configureHTTPServerPipeline`: request decoder, response encoder,
// pipelining and keep-alive handling) on 127.0.0.1:PORT, and one handler on the channel's event loop that does what
// HummingbirdServer's route does: for `POST /v1/projects/{project}/messages:send` it collects the body, decodes it
// with Herald's `FCMSendRequest.decode(_:context:)`, checks the target against `--token` (a message for another
// token is answered UNREGISTERED, as Herald's bus does; without `--token` every token is accepted), calls a no-op
// handler that counts the message, and answers `{"name": "projects/{project}/messages/{id}"}` written by Herald's
// JSON writer, or Google's error shape (a wrong project is SENDER_ID_MISMATCH, any other path 404). Answers are
// flushed once per read burst (channelReadComplete), the usual NIO way.
//
// The event loop group has N threads (default 1, as Herald has one loop). Prints `ready` once listening. SIGUSR1
// prints `handled=<n>`; SIGINT / SIGTERM print it and exit. The main thread waits with sigwait (no dispatch_main).

import Glibc
import Herald
import NIOCore
import NIOHTTP1
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

/// What one server answers: its settings and the handler, shared by every connection.
struct Service: Sendable {
    let project: String
    let token: String?
    let decoding: DecodingContext
    let handler: NoOpHandler

    /// Decode, target check, dispatch; the status and the JSON body.
    func answer(uri: String, body: [UInt8]) -> (status: Int, body: [UInt8]) {
        let prefix = "/v1/projects/", suffix = "/messages:send"
        guard uri.hasPrefix(prefix), uri.hasSuffix(suffix), uri.utf8.count > prefix.utf8.count + suffix.utf8.count else {
            return (404, #"{"error": {"code": 404, "message": "Not found.", "status": "NOT_FOUND"}}"#.utf8.map { $0 })
        }
        let project = String(uri.dropFirst(prefix.count).dropLast(suffix.count))
        guard project == self.project else {
            let error = MessageError(.senderMismatch(expected: self.project, got: project))
            return (error.status.httpStatus, error.fcmErrorBody.jsonBytes())
        }
        do {
            let request = try FCMSendRequest.decode(body, context: decoding)
            let message = request.message
            if let token, case .token(let target) = message.target, target != token {
                let error = MessageError(.unregistered(.token(target)))
                return (error.status.httpStatus, error.fcmErrorBody.jsonBytes())
            }
            if !request.validateOnly { handler.handle(message) }
            return (200, fcmSendResponse(project: project, messageID: message.messageID ?? "").jsonBytes())
        } catch {
            return (error.status.httpStatus, error.fcmErrorBody.jsonBytes())
        }
    }
}

/// One connection's requests: collects each body, answers it on the event loop.
final class SendHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let service: Service
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []

    init(service: Service) {
        self.service = service
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
            body.removeAll(keepingCapacity: true)
        case .body(let buffer):
            body.append(contentsOf: buffer.readableBytesView)
        case .end:
            guard let head else { return }
            self.head = nil
            let result: (status: Int, body: [UInt8])
            if head.method == .POST {
                result = service.answer(uri: head.uri, body: body)
            } else {
                result = (405, #"{"error": {"code": 405, "message": "Use POST.", "status": "INVALID_ARGUMENT"}}"#.utf8.map { $0 })
            }
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: "application/json; charset=UTF-8")
            headers.add(name: "Content-Length", value: String(result.body.count))
            let responseHead = HTTPResponseHead(
                version: head.version, status: HTTPResponseStatus(statusCode: result.status), headers: headers
            )
            context.write(wrapOutboundOut(.head(responseHead)), promise: nil)
            var buffer = context.channel.allocator.buffer(capacity: result.body.count)
            buffer.writeBytes(result.body)
            context.write(wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
            context.write(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        context.flush()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}

guard let port = option("--http").flatMap(Int.init) else {
    say("usage: NIOHTTPServer --http PORT [--threads N] [--project ID] [--token TOKEN]", to: 2)
    exit(2)
}
let threads = option("--threads").flatMap(Int.init) ?? 1
let ids = MessageIDs()
let service = Service(
    project: option("--project") ?? "herald",
    token: option("--token"),
    decoding: DecodingContext(senderID: "1234567890", makeMessageID: { ids.make() }),
    handler: NoOpHandler()
)

// Signals are taken with sigwait on the main thread: block them before any thread starts.
var signals = sigset_t()
sigemptyset(&signals)
for signal in [SIGINT, SIGTERM, SIGUSR1] { sigaddset(&signals, signal) }
pthread_sigmask(SIG_BLOCK, &signals, nil)

let group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
let server = try ServerBootstrap(group: group)
    .serverChannelOption(.backlog, value: 256)
    .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
    .childChannelInitializer { channel in
        channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
            try channel.pipeline.syncOperations.addHandler(SendHandler(service: service))
        }
    }
    .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
    .childChannelOption(.maxMessagesPerRead, value: 16)
    .bind(host: "127.0.0.1", port: port)
    .wait()
say("ready")

while true {
    var received: Int32 = 0
    sigwait(&signals, &received)
    say("handled=\(service.handler.handled.load(ordering: .relaxed))")
    if received != SIGUSR1 { break }
}
try server.close().wait()
try group.syncShutdownGracefully()
