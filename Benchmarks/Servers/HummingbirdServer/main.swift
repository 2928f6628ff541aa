// HummingbirdServer: the HTTP peer of Herald's HTTPReceiver in scripts/peers and scripts/http-vs-hummingbird.
//
//     HummingbirdServer --http PORT [--threads N] [--nio-executor] [--project ID] [--token TOKEN]
//
// Hummingbird 2 on 127.0.0.1:PORT with one route, POST /v1/projects/{project}/messages:send. It collects the
// body and does what every peer does (PeerSupport's PeerService): decodes it with Herald's own
// `FCMSendRequest.decode(_:context:)` (so the comparison is the HTTP stack and dispatch, not the decoder), checks
// the target against `--token` (without it every token is accepted), calls a no-op handler that counts, and
// answers `{"name": "projects/{project}/messages/{id}"}` written by Herald's JSON writer, or Google's error shape on
// a decoding error or a wrong project, as Herald's receiver does.
//
// The event loop group has N threads (default 1, as Herald has one loop); handlers run where Hummingbird runs
// them: on Swift concurrency's global executor, a thread pool of its own (Hummingbird's default), or with
// `--nio-executor` on the event loops themselves (NIO's singleton group installed as the global executor), which
// saves a thread switch each way per request. Prints `ready` once listening. SIGUSR1 prints `handled=<n>`; SIGINT /
// SIGTERM end the process (no ServiceLifecycle group: the main thread waits for the signal with sigwait, so that
// valgrind can run the server).

import Glibc
import Hummingbird
import Logging
import NIOCore
import NIOPosix
import PeerSupport
import ServerSupport

guard let port = option("--http").flatMap(Int.init) else {
    say("usage: HummingbirdServer --http PORT [--threads N] [--nio-executor] [--project ID]", to: 2)
    exit(2)
}
let threads = option("--threads").flatMap(Int.init) ?? 1
let service = PeerService(project: option("--project") ?? "herald", token: option("--token"))
let jsonType: HTTPFields = [.contentType: "application/json; charset=UTF-8"]

let router = Router()
router.post("/v1/projects/{project}/messages:send") { request, context -> Response in
    let project = try context.parameters.require("project")
    let buffer = try await request.body.collect(upTo: 64 * 1024)
    let result = service.answer(project: project, body: Array(buffer.readableBytesView))
    return Response(
        status: .init(code: result.status),
        headers: jsonType,
        body: .init(byteBuffer: ByteBuffer(bytes: result.body))
    )
}

// The main thread takes signals with sigwait: it never enters Swift concurrency's dispatch_main, in which
// valgrind 3.19 crashes (scripts/profile-callgrind). Block the signals before any thread starts.
let signals = blockServerSignals()

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
reportSignals(signals) {
    say("handled=\(service.handler.handled.load(ordering: .relaxed))")
}
exit(0)
