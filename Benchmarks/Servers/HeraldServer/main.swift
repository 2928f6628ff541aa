// HeraldServer: a Herald instance with a no-op handler and the in-memory store, behind the HTTPReceiver and/or
// the SocketReceiver plugins, for the network benchmarks (scripts/http-vs-hummingbird, scripts/socket-vs-nio).
//
//     HeraldServer [--http PORT] [--socket PATH] [--project ID]
//
// The HTTP receiver listens on 127.0.0.1:PORT with no secret (loopback only). On start it prints
// `token=<registration token>` and then `ready` on standard output. SIGUSR1 prints `handled=<n>` (handler
// invocations so far); SIGINT / SIGTERM print it too and shut the instance down.
// The main thread never enters Swift concurrency's dispatch_main, so valgrind can run it (see below).
//
// The handler is a NotificationHandler (answers `[]`), a Presenter (does nothing; without one the bus writes a log
// line per notification) and a MessageHandler (data-only messages), and counts every invocation.

import Dispatch
import Glibc
import HTTPReceiver
import Herald
import Logging
import SocketReceiver
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

final class NoOpHandler: NotificationHandler, Presenter, MessageHandler, Sendable {
    let handled = Atomic<Int>(0)

    var descriptor: PluginDescriptor { PluginDescriptor(name: "bench-no-op", summary: "counts messages, does nothing else") }

    func willPresent(_ message: RemoteMessage) async -> PresentationOptions {
        handled.add(1, ordering: .relaxed)
        return []
    }

    func present(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) async {}

    func didReceive(_ message: RemoteMessage) async throws {
        handled.add(1, ordering: .relaxed)
    }
}

func option(_ name: String) -> String? {
    let arguments = CommandLine.arguments
    guard let index = arguments.firstIndex(of: name), arguments.indices.contains(index + 1) else { return nil }
    return arguments[index + 1]
}

let httpPort = option("--http").flatMap(Int.init)
let socketPath = option("--socket")
guard httpPort != nil || socketPath != nil else {
    say("usage: HeraldServer [--http PORT] [--socket PATH] [--project ID]", to: 2)
    exit(2)
}

// The main thread takes signals with sigwait and waits for async work on a semaphore: it never enters Swift
// concurrency's dispatch_main, in which valgrind 3.19 crashes (scripts/profile-callgrind). Block the signals before
// any thread starts, so that every thread inherits the mask.
var signals = sigset_t()
sigemptyset(&signals)
for signal in [SIGINT, SIGTERM, SIGUSR1] { sigaddset(&signals, signal) }
pthread_sigmask(SIG_BLOCK, &signals, nil)

/// A result handed from a task to the blocked main thread (the semaphore orders the accesses).
final class ResultBox<T>: @unchecked Sendable {
    var result: Result<T, any Error>?
}

/// Runs `body` in a detached task and blocks this thread until it returns.
func block<T: Sendable>(_ body: @escaping @Sendable () async throws -> T) -> T {
    let box = ResultBox<T>()
    let done = DispatchSemaphore(value: 0)
    Task.detached {
        do { box.result = .success(try await body()) } catch { box.result = .failure(error) }
        done.signal()
    }
    done.wait()
    switch box.result! {
    case .success(let value): return value
    case .failure(let error):
        say("error: \(error)", to: 2)
        exit(1)
    }
}

var configuration = Herald.Configuration(senderID: "1234567890")
configuration.projectID = option("--project") ?? "herald"
var logger = Logger(label: "herald")
logger.logLevel = .notice
let herald = Herald(configuration: configuration, store: InMemoryStore(), logger: logger)
let handler = NoOpHandler()
try herald.register(handler)
if let httpPort {
    try herald.register(HTTPReceiver(options: .init(address: .tcp(host: "127.0.0.1", port: httpPort))))
}
if let socketPath {
    unlink(socketPath)
    try herald.register(SocketReceiver(options: .init(addresses: [.unix(path: socketPath)])))
}
let token = block { [herald] in
    try await herald.start()
    return try await herald.token()
}
say("token=\(token)")
say("ready")

while true {
    var received: Int32 = 0
    sigwait(&signals, &received)
    say("handled=\(handler.handled.load(ordering: .relaxed))")
    if received != SIGUSR1 { break }
}
block { [herald] in await herald.shutdown() }
