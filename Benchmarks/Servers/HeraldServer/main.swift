// HeraldServer: a Herald instance with a no-op handler, behind the HTTPReceiver and/or the SocketReceiver plugins,
// for the network benchmarks (scripts/peers, scripts/http-vs-hummingbird, scripts/socket-vs-nio).
//
//     HeraldServer [--http PORT] [--socket PATH] [--project ID] [--durable DIR] [--synchronous] [--fetch-delay-ms MS] [--max-fetches N]
//     HeraldServer --decode N --body FILE [--token TOKEN]
//
// The HTTP receiver listens on 127.0.0.1:PORT with no secret (loopback only). On start it prints
// `token=<registration token>` and then `ready` on standard output. SIGUSR1 prints `handled=<n>` (handler
// invocations so far); SIGINT / SIGTERM print it too and shut the instance down.
// The main thread never enters Swift concurrency's dispatch_main, so valgrind can run it (see below).
//
// The store is in memory, or with `--durable DIR` the SQLite store in DIR with the durable inbox on (each message
// committed before its sender is answered). The handler is a NotificationHandler (answers `[]`), a Presenter (does
// nothing; without one the bus writes a log line per notification) and a MessageHandler (data-only messages), and
// counts every invocation. With `--synchronous` it is the synchronous variant of each of those roles
// (SynchronousNotificationHandler, SynchronousPresenter, SynchronousMessageHandler), which the bus calls without a
// task per message. With `--fetch-delay-ms MS` a background-fetch worker is registered too: it waits MS
// milliseconds per silent message (`Task.sleep`) and answers `.noData`; `--max-fetches N` sets the bus's
// `maxConcurrentFetches` (default 16). SIGUSR1 then first prints `fetched=<n> concurrent_max=<k>
// first_start_ns=<t> last_end_ns=<t>` (CLOCK_REALTIME of the first fetch's start and the last fetch's end).
//
// `--decode N` (scenario 2 of scripts/peers) starts no instance: it decodes and validates the first line of FILE N
// times with FCMSendRequest.decode, checks the target against TOKEN and writes the `{"name": ...}` answer into a reused
// buffer, as the servers do per message, and prints `RESULT ops=<N> ns_per_op=<wall> cpu_ns_per_op=<thread CPU>`.

import Dispatch
import Glibc
import Herald
import HeraldHTTPReceiver
import HeraldSQLite
import HeraldSocketReceiver
import Logging
import ServerSupport
import Synchronization

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

/// `NoOpHandler` in the synchronous roles (`--synchronous`).
final class SynchronousNoOpHandler: SynchronousNotificationHandler, SynchronousPresenter, SynchronousMessageHandler, Sendable {
    let handled = Atomic<Int>(0)

    var descriptor: PluginDescriptor { PluginDescriptor(name: "bench-no-op", summary: "counts messages, does nothing else") }

    func presentationOptions(for message: RemoteMessage) -> PresentationOptions {
        handled.add(1, ordering: .relaxed)
        return []
    }

    func show(_ message: RemoteMessage, options: PresentationOptions, actions: [NotificationAction]) {}

    func handle(_ message: RemoteMessage) throws {
        handled.add(1, ordering: .relaxed)
    }
}

/// The background-fetch worker of scenario 6: waits `delay` per message, counts, and keeps the largest number of
/// fetches that ran at once and the first start and last end (CLOCK_REALTIME, ns).
final class WaitingFetchWorker: BackgroundFetchWorker, Sendable {
    let delay: Duration
    let fetched = Atomic<Int>(0)
    let running = Atomic<Int>(0)
    let maximumRunning = Atomic<Int>(0)
    let firstStart = Atomic<Int>(0)
    let lastEnd = Atomic<Int>(0)

    init(delay: Duration) {
        self.delay = delay
    }

    var descriptor: PluginDescriptor { PluginDescriptor(name: "bench-waiting-fetch", summary: "waits, then answers noData") }

    func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult {
        _ = firstStart.compareExchange(expected: 0, desired: realtimeNanoseconds(), ordering: .relaxed)
        let now = running.add(1, ordering: .relaxed).newValue
        _ = maximumRunning.max(now, ordering: .relaxed)
        try? await Task.sleep(for: delay)
        running.subtract(1, ordering: .relaxed)
        fetched.add(1, ordering: .relaxed)
        _ = lastEnd.max(realtimeNanoseconds(), ordering: .relaxed)
        return .noData
    }

    var summary: String {
        "fetched=\(fetched.load(ordering: .relaxed)) concurrent_max=\(maximumRunning.load(ordering: .relaxed)) "
            + "first_start_ns=\(firstStart.load(ordering: .relaxed)) last_end_ns=\(lastEnd.load(ordering: .relaxed))"
    }
}

func realtimeNanoseconds() -> Int {
    var time = timespec()
    clock_gettime(CLOCK_REALTIME, &time)
    return time.tv_sec * 1_000_000_000 + time.tv_nsec
}

func nanoseconds(_ clock: clockid_t) -> Double {
    var time = timespec()
    clock_gettime(clock, &time)
    return Double(time.tv_sec) * 1e9 + Double(time.tv_nsec)
}

/// Scenario 2: decode, validate, check the target and write the answer, N times; no instance, no loop.
func decodeLoop(count: Int, bodyPath: String, token: String) -> Never {
    guard let bytes = readFile(bodyPath) else {
        say("cannot open \(bodyPath)", to: 2)
        exit(2)
    }
    let body = Array(bytes.prefix { $0 != UInt8(ascii: "\n") })
    var next: UInt64 = 1_000_000_000_000_000
    let context = DecodingContext(senderID: "1234567890", makeMessageID: { "0" })
    // The answer is written into one buffer that is reused, as the receivers write theirs into their output.
    var answer: [UInt8] = []
    answer.reserveCapacity(256)
    func once() -> Bool {
        do {
            let message = try FCMSendRequest.decode(body, context: context).message
            guard case .token(let target) = message.target, target == token else { return false }
            next += 1
            answer.removeAll(keepingCapacity: true)
            appendFCMSendResponse(project: "herald", messageID: String(next), to: &answer)
            return answer.count > 0
        } catch {
            return false
        }
    }
    for _ in 0..<1_000 where !once() {
        say("the body is refused (or is not for token \(token))", to: 2)
        exit(1)
    }
    let wall = nanoseconds(CLOCK_MONOTONIC)
    let cpu = nanoseconds(CLOCK_THREAD_CPUTIME_ID)
    for _ in 0..<count { _ = once() }
    let wallEnd = nanoseconds(CLOCK_MONOTONIC)
    let cpuEnd = nanoseconds(CLOCK_THREAD_CPUTIME_ID)
    let divisor = Double(max(count, 1))
    say(
        "RESULT ops=\(count) ns_per_op=\(((wallEnd - wall) / divisor * 10).rounded() / 10) cpu_ns_per_op=\(((cpuEnd - cpu) / divisor * 10).rounded() / 10)"
    )
    exit(0)
}

if let count = option("--decode").flatMap(Int.init) {
    guard let body = option("--body") else {
        say("usage: HeraldServer --decode N --body FILE [--token TOKEN]", to: 2)
        exit(2)
    }
    decodeLoop(count: count, bodyPath: body, token: option("--token") ?? "bench-token")
}

let httpPort = option("--http").flatMap(Int.init)
let socketPath = option("--socket")
guard httpPort != nil || socketPath != nil else {
    say(
        "usage: HeraldServer [--http PORT] [--socket PATH] [--project ID] [--durable DIR] [--synchronous] [--fetch-delay-ms MS] [--max-fetches N]",
        to: 2)
    exit(2)
}

// The main thread takes signals with sigwait and waits for async work on a semaphore: it never enters Swift
// concurrency's dispatch_main, in which valgrind 3.19 crashes (scripts/profile-callgrind). Block the signals before
// any thread starts, so that every thread inherits the mask.
let signals = blockServerSignals()

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
if let fetches = option("--max-fetches").flatMap(Int.init) { configuration.maxConcurrentFetches = fetches }
var logger = Logger(label: "herald")
logger.logLevel = .notice
let store: any HeraldStore
if let directory = option("--durable") {
    configuration.durableInbox = true
    store = try SQLiteStore(directory: directory)
} else {
    store = InMemoryStore()
}
let herald = Herald(configuration: configuration, store: store, logger: logger)
let handledCount: @Sendable () -> Int
if CommandLine.arguments.contains("--synchronous") {
    let handler = SynchronousNoOpHandler()
    try herald.register(handler)
    handledCount = { handler.handled.load(ordering: .relaxed) }
} else {
    let handler = NoOpHandler()
    try herald.register(handler)
    handledCount = { handler.handled.load(ordering: .relaxed) }
}
let fetchWorker = option("--fetch-delay-ms").flatMap(Int.init).map { WaitingFetchWorker(delay: .milliseconds($0)) }
if let fetchWorker { try herald.register(fetchWorker) }
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

reportSignals(signals) {
    if let fetchWorker { say(fetchWorker.summary) }
    say("handled=\(handledCount())")
}
block { [herald] in await herald.shutdown() }
