// HummingbirdServer: the HTTP peer of Herald's HTTPReceiver in scripts/http-vs-hummingbird.
//
//     HummingbirdServer --http PORT [--threads N] [--nio-executor] [--project ID]
//
// Hummingbird 2 on 127.0.0.1:PORT with one route, POST /v1/projects/{project}/messages:send. It collects the
// body, decodes it with Herald's own `FCMSendRequest.decode(_:context:)` (so the comparison is the HTTP stack and
// dispatch, not the decoder), and answers `{"name": "projects/{project}/messages/{id}"}` written by Herald's
// JSON writer, or Google's error shape on a decoding error or a wrong project, as Herald's receiver does. It
// accepts whatever the decoder accepts: it has no registration token to check the target against.
//
// The event loop group has N threads (default 1, as Herald has one loop); handlers run where Hummingbird runs
// them: on Swift concurrency's global executor, a thread pool of its own (Hummingbird's default), or with
// `--nio-executor` on the event loops themselves (NIO's singleton group installed as the global executor), which
// saves a thread switch each way per request. Prints `ready` once listening. SIGINT / SIGTERM end the process (no ServiceLifecycle
// group: the main thread waits for the signal with sigwait, so that valgrind can run the server).

import Glibc
import Herald
import Hummingbird
import Logging
import NIOCore
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

/// Decodes a send body; kept out of the route closure so the closure stays untyped-throwing.
func answer(body: [UInt8], project: String, context: DecodingContext) -> (status: Int, body: [UInt8]) {
    do {
        let request = try FCMSendRequest.decode(body, context: context)
        return (200, fcmSendResponse(project: project, messageID: request.message.messageID ?? "").jsonBytes())
    } catch {
        return (error.status.httpStatus, error.fcmErrorBody.jsonBytes())
    }
}

guard let port = option("--http").flatMap(Int.init) else {
    say("usage: HummingbirdServer --http PORT [--threads N] [--nio-executor] [--project ID]", to: 2)
    exit(2)
}
let threads = option("--threads").flatMap(Int.init) ?? 1
let projectID = option("--project") ?? "herald"
let ids = MessageIDs()
let decoding = DecodingContext(senderID: "1234567890", makeMessageID: { ids.make() })
let jsonType: HTTPFields = [.contentType: "application/json; charset=UTF-8"]

let router = Router()
router.post("/v1/projects/{project}/messages:send") { request, context -> Response in
    let project = try context.parameters.require("project")
    let result: (status: Int, body: [UInt8])
    if project == projectID {
        let buffer = try await request.body.collect(upTo: 64 * 1024)
        result = answer(body: Array(buffer.readableBytesView), project: project, context: decoding)
    } else {
        let error = MessageError(.senderMismatch(expected: projectID, got: project))
        result = (error.status.httpStatus, error.fcmErrorBody.jsonBytes())
    }
    return Response(
        status: .init(code: result.status),
        headers: jsonType,
        body: .init(byteBuffer: ByteBuffer(bytes: result.body))
    )
}

// The main thread takes signals with sigwait: it never enters Swift concurrency's dispatch_main, in which
// valgrind 3.19 crashes (scripts/profile-callgrind). Block the signals before any thread starts.
var signals = sigset_t()
sigemptyset(&signals)
for signal in [SIGINT, SIGTERM] { sigaddset(&signals, signal) }
pthread_sigmask(SIG_BLOCK, &signals, nil)

var logger = Logger(label: "hummingbird")
logger.logLevel = .notice
let group: MultiThreadedEventLoopGroup
if CommandLine.arguments.contains("--nio-executor") {
    NIOSingletons.groupLoopCountSuggestion = threads
    guard NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor() else {
        say("could not install NIO's event loops as the global executor", to: 2)
        exit(1)
    }
    group = MultiThreadedEventLoopGroup.singleton
} else {
    group = MultiThreadedEventLoopGroup(numberOfThreads: threads)
}
let app = Application(
    router: router,
    configuration: .init(address: .hostname("127.0.0.1", port: port), serverName: nil),
    onServerRunning: { _ in say("ready") },
    eventLoopGroupProvider: .shared(group),
    logger: logger
)
Task.detached {
    do {
        try await app.run()
    } catch {
        say("error: \(error)", to: 2)
        exit(1)
    }
}
var received: Int32 = 0
sigwait(&signals, &received)
exit(0)
