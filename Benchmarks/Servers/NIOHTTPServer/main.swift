// NIOHTTPServer: the SwiftNIO HTTP peer of Herald's HTTPReceiver in scripts/peers (scenario 4).
//
//     NIOHTTPServer --http PORT [--threads N] [--project ID] [--token TOKEN]
//
// SwiftNIO 2's NIOHTTP1 server pipeline (`configureHTTPServerPipeline`: request decoder, response encoder,
// pipelining and keep-alive handling) on 127.0.0.1:PORT, and one handler on the channel's event loop that does what
// HummingbirdServer's route does (PeerSupport's PeerService): for `POST /v1/projects/{project}/messages:send` it
// collects the body, decodes it with Herald's `FCMSendRequest.decode(_:context:)`, checks the target against
// `--token` (a message for another token is answered UNREGISTERED, as Herald's bus does; without `--token` every
// token is accepted), calls a no-op handler that counts the message, and answers `{"name": "projects/{project}/messages/{id}"}` written by Herald's
// JSON writer, or Google's error shape (a wrong project is SENDER_ID_MISMATCH, any other path 404). Answers are
// flushed once per read burst (channelReadComplete), the usual NIO way.
//
// The event loop group has N threads (default 1, as Herald has one loop). Prints `ready` once listening. SIGUSR1
// prints `handled=<n>`; SIGINT / SIGTERM print it and exit. The main thread waits with sigwait (no dispatch_main).

import Glibc
import NIOCore
import NIOHTTP1
import NIOPosix
import PeerSupport
import ServerSupport

/// The route: `/v1/projects/{project}/messages:send`; any other path is 404.
func route(_ service: PeerService, uri: String, body: [UInt8]) -> (status: Int, body: [UInt8]) {
    let prefix = "/v1/projects/"
    let suffix = "/messages:send"
    guard uri.hasPrefix(prefix), uri.hasSuffix(suffix), uri.utf8.count > prefix.utf8.count + suffix.utf8.count else {
        return (404, Array(#"{"error": {"code": 404, "message": "Not found.", "status": "NOT_FOUND"}}"#.utf8))
    }
    return service.answer(project: String(uri.dropFirst(prefix.count).dropLast(suffix.count)), body: body)
}

/// One connection's requests: collects each body, answers it on the event loop.
final class SendHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    let service: PeerService
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []

    init(service: PeerService) {
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
                result = route(service, uri: head.uri, body: body)
            } else {
                result = (405, Array(#"{"error": {"code": 405, "message": "Use POST.", "status": "INVALID_ARGUMENT"}}"#.utf8))
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
let service = PeerService(project: option("--project") ?? "herald", token: option("--token"))

// Signals are taken with sigwait on the main thread: block them before any thread starts.
let signals = blockServerSignals()

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

reportSignals(signals) {
    say("handled=\(service.handler.handled.load(ordering: .relaxed))")
}
try server.close().wait()
try group.syncShutdownGracefully()
