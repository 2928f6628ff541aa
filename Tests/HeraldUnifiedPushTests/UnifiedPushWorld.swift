import Foundation
import Glibc
import Herald
import HeraldHTTPReceiver
import HeraldJSONLExport
import HeraldPrometheusMetrics
import HeraldSQLite
import HeraldTesting
import HeraldUnifiedPush
import Logging
import Testing

/// One test's world: a private session bus, a data directory, and Herald serving the distributor on that bus with
/// the HTTP receiver's Web Push route on a port of its own.
final class UnifiedPushWorld: @unchecked Sendable {
    // @unchecked Sendable: set up and torn down by the test's task, one step at a time.
    let directory: String
    let bus: PrivateSessionBus
    let dataDirectory: String
    /// The delivery-metrics export of `withHerald(analytics: true)`.
    var deliveryMetrics: String { directory + "/delivery-metrics.jsonl" }
    /// The Prometheus page of the running `withHerald(analytics: true)`.
    private(set) var metricsURL: String?

    init() throws {
        directory = try makeTemporaryDirectory(prefix: "herald-up")
        bus = PrivateSessionBus(directory: directory)
        dataDirectory = directory + "/data"
    }

    deinit {
        bus.stop()
        removeTemporaryDirectory(directory)
    }

    /// Starts Herald on the data directory with the distributor and the receiver; runs `body` with the receiver's
    /// base URL (`http://127.0.0.1:PORT`) and the distributor; stops Herald. `maximumWaiting`: the distributor's bound; `secret`: the receiver's.
    /// `callTimeout`: how long a call to an app may wait for its reply (the distributor's default, 5 s, unless
    /// given). `analytics`: with the analytics store in the data directory, the delivery-metrics export in ``deliveryMetrics``
    /// and the Prometheus page at ``metricsURL``.
    func withHerald(
        maximumWaiting: Int = 1000, secret: String? = nil, analytics: Bool = false, retryInterval: Duration = .seconds(30),
        callTimeout: Duration = .seconds(5), _ body: (String, UnifiedPushDistributor) async throws -> Void
    ) async throws {
        let store = try SQLiteStore(directory: dataDirectory)
        var distributorOptions = UnifiedPushDistributor.Options(busAddress: bus.address)
        distributorOptions.reconnectDelay = .milliseconds(50)
        distributorOptions.maximumWaitingPerEndpoint = maximumWaiting
        distributorOptions.retryInterval = retryInterval
        distributorOptions.callTimeout = callTimeout
        let distributor = UnifiedPushDistributor(options: distributorOptions, store: store)
        var receiverOptions = HTTPReceiver.Options(address: .tcp(host: "127.0.0.1", port: 0), secret: secret)
        receiverOptions.webPush = distributor
        let receiver = HTTPReceiver(options: receiverOptions)
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")), store: store)
        var plugins: [any HeraldPlugin] = [receiver, distributor]
        let metrics = PrometheusExporter(options: .init(address: .tcp(host: "127.0.0.1", port: 0)))
        if analytics {
            plugins += [
                try SQLiteAnalyticsStore(directory: dataDirectory) as any HeraldPlugin,
                JSONLExport(options: .init(path: deliveryMetrics)), metrics,
            ]
        }
        try await withStarted(herald, plugins: plugins) { herald in
            let address = try #require(try await receiver.listeningAddress())
            let port = try #require(address.port)
            let owned = try await eventually { try await herald.loop.submit { distributor.ownsName } }
            try #require(owned, "the distributor did not get its name on the bus")
            if analytics, let port = try await metrics.listeningAddress()?.port { metricsURL = "http://127.0.0.1:\(port)/metrics" }
            try await body("http://127.0.0.1:\(port)", distributor)
        }
    }

    /// The lines of the delivery-metrics export so far, each as its string and number columns.
    func deliveryMetricLines() -> [[String: String]] {
        guard let text = try? String(contentsOfFile: deliveryMetrics, encoding: .utf8) else { return [] }
        return text.split(separator: "\n").compactMap { line in
            guard case .object(let object)? = try? JSONParser.parse(String(line)) else { return nil }
            var columns: [String: String] = [:]
            for (key, value) in object {
                switch value {
                case .string(let text): columns[key] = text
                case .int(let number): columns[key] = String(number)
                default: continue
                }
            }
            return columns
        }
    }

    /// Starts the private bus (waiting for it on a thread of its own); see `PrivateSessionBus.start`.
    func startBus(serviceDirectory: String? = nil, environment: [String: String] = [:]) async throws {
        try await onOwnThread { try self.bus.start(serviceDirectory: serviceDirectory, environment: environment) }
    }

    /// Stops the private bus (waiting for it on a thread of its own).
    func stopBus() async throws {
        try await onOwnThread { self.bus.stop() }
    }

    /// Makes the running bus refuse `name` to every connection (a `deny own` rule after the configuration's
    /// `allow own="*"`), or with `nil` allow every name again, and has it read its configuration again
    /// (`ReloadConfig`, answered once the new rules are in force).
    func refuseOwnership(of name: String?) async throws {
        let config = "\(directory)/bus.conf"
        var text = try String(contentsOfFile: config, encoding: .utf8)
        text = text.replacingOccurrences(of: #"<deny own="[^"]*"/>\n"#, with: "", options: .regularExpression)
        if let name {
            text = text.replacingOccurrences(of: #"<allow own="*"/>"#, with: #"<allow own="*"/>"# + "\n<deny own=\"\(name)\"/>\n")
        }
        try text.write(toFile: config, atomically: true, encoding: .utf8)
        let environment = ["DBUS_SESSION_BUS_ADDRESS": bus.address]
        let reply = try await onOwnThread {
            try runExecutable(
                URL(fileURLWithPath: "/usr/bin/dbus-send"),
                [
                    "--session", "--print-reply", "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.ReloadConfig",
                ],
                environment: environment)
        }
        try #require(reply.status == 0, "ReloadConfig: \(reply.output) \(reply.error)")
    }

    /// Whether someone owns the distributor's name on the bus now (asked with dbus-send).
    func distributorOwnsName() async throws -> Bool {
        let environment = ["DBUS_SESSION_BUS_ADDRESS": bus.address]
        let reply = try await onOwnThread {
            try runExecutable(
                URL(fileURLWithPath: "/usr/bin/dbus-send"),
                [
                    "--session", "--print-reply=literal", "--dest=org.freedesktop.DBus", "/org/freedesktop/DBus",
                    "org.freedesktop.DBus.NameHasOwner", "string:org.unifiedpush.Distributor.herald",
                ], environment: environment)
        }
        return reply.output.contains("true")
    }

    /// Starts the UnifiedPush app (Resources/up_app.py) as `service`, speaking `version`; registers `token` when given.
    func app(_ service: String, version: Int, register token: String? = nil, options: [String] = []) throws -> PushApp {
        try PushApp(service: service, version: version, register: token, options: options, bus: bus)
    }
}

/// The Python UnifiedPush app as a child process: what it prints, event by event; commands to its standard input.
final class PushApp: @unchecked Sendable {
    // @unchecked Sendable: the process and the input pipe used by one task at a time; the events behind locks.
    static let script = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("Resources/up_app.py")

    private let process: Process
    private let input: Pipe
    private let events = PrintedEvents()
    /// Every event the app printed so far, in order.
    let seen = Locked<[[String: String]]>([])

    init(service: String, version: Int, register token: String?, options: [String], bus: PrivateSessionBus) throws {
        let python = try pythonEnvironment(with: "dbus-next")
        process = Process()
        process.executableURL = python
        process.arguments = [Self.script.path, service, String(version)] + (token.map { ["--register", $0] } ?? []) + options
        var environment = ProcessInfo.processInfo.environment
        environment["DBUS_SESSION_BUS_ADDRESS"] = bus.address
        process.environment = environment
        input = Pipe()
        let output = Pipe()
        process.standardInput = input
        process.standardOutput = output
        process.standardError = FileHandle(forWritingAtPath: "/dev/null")
        try runWithNoSignalsBlocked(process)
        // Read as the app prints, on a thread of its own, not as the test asks: a test that reads slower than the app
        // writes (a loaded machine can hold its task for a minute) would otherwise fill the pipe, block the app in
        // its print and so hold its answers to the distributor past the call timeout: calls offered again, pushes
        // handed over twice because of the test itself.
        let reader = Sendably(LineReader(output.fileHandleForReading.fileDescriptor))
        let (events, seen) = (events, seen)
        Thread {
            while let line = reader.value.line(timeout: -1) {
                guard let event = Self.event(line) else { continue }
                seen.withLock { $0.append(event) }
                events.append(event)
            }
            events.end()
        }.start()
    }

    deinit { stop() }

    /// The next event named `name` (earlier events of other names are kept for later); fails after 30 seconds.
    func next(_ name: String, sourceLocation: SourceLocation = #_sourceLocation) async throws -> [String: String] {
        let events = events
        let event = try await onOwnThread { events.take(name, within: 30) }
        return try #require(event, "the app printed no '\(name)' event", sourceLocation: sourceLocation)
    }

    /// A line the app printed as an event: its string and number fields.
    private static func event(_ line: String) -> [String: String]? {
        guard case .object(let object)? = try? JSONParser.parse(line) else { return nil }
        var event: [String: String] = [:]
        for (key, value) in object {
            switch value {
            case .string(let text): event[key] = text
            case .int(let number): event[key] = String(number)
            default: continue
            }
        }
        return event
    }

    /// Sends `command` (a line) to the app.
    func send(_ command: String) {
        input.fileHandleForWriting.write(Data((command + "\n").utf8))
    }

    /// The message events the app printed so far.
    var messages: [[String: String]] { seen.withLock { $0.filter { $0["event"] == "message" } } }

    /// Ends the app (its name leaves the bus).
    func stop() {
        guard process.isRunning else { return }
        process.terminate()
        waitForExit(process)
    }

    /// Waits for the app to be gone.
    func stopped() async throws {
        try await onOwnThread { self.stop() }
    }
}

/// The events an app printed and no test took yet, filled by the thread that reads the app's output.
final class PrintedEvents: @unchecked Sendable {
    // @unchecked Sendable: everything behind the condition's lock.
    private let condition = NSCondition()
    private var events: [[String: String]] = []
    private var ended = false

    func append(_ event: [String: String]) {
        condition.lock()
        events.append(event)
        condition.broadcast()
        condition.unlock()
    }

    /// The app's output ended.
    func end() {
        condition.lock()
        ended = true
        condition.broadcast()
        condition.unlock()
    }

    /// Takes the first event named `name`, waiting up to `seconds` for one; `nil` when none came.
    func take(_ name: String, within seconds: Double) -> [String: String]? {
        let deadline = Date(timeIntervalSinceNow: seconds)
        condition.lock()
        defer { condition.unlock() }
        while true {
            if let index = events.firstIndex(where: { $0["event"] == name }) { return events.remove(at: index) }
            if ended || !condition.wait(until: deadline) {
                return events.firstIndex(where: { $0["event"] == name }).map { events.remove(at: $0) }
            }
        }
    }
}

/// What an endpoint answered a POST.
struct PushAnswer {
    var status: Int
    var headers: [String: String]
}

/// POSTs `body` to `url` with `headers` (curl, on a thread of its own).
func post(_ url: String, _ body: [UInt8], headers: [String] = ["TTL: 60"], in directory: String) async throws -> PushAnswer {
    let file = directory + "/body-\(UInt64.random(in: 0...UInt64.max))"
    try Data(body).write(to: URL(fileURLWithPath: file))
    let arguments =
        ["-s", "-o", "/dev/null", "-D", "-", "-X", "POST", "--data-binary", "@\(file)"] + headers.flatMap { ["-H", $0] } + [url]
    let result = try await runExecutable(URL(fileURLWithPath: "/usr/bin/curl"), arguments)
    unlink(file)
    var answer = PushAnswer(status: 0, headers: [:])
    for line in result.output.split(separator: "\r\n") {
        if line.hasPrefix("HTTP/") {
            answer.status = Int(line.split(separator: " ")[1]) ?? 0
        } else if let colon = line.firstIndex(of: ":") {
            answer.headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
    }
    return answer
}

/// The endpoint token of an endpoint URL: its last segment.
func endpointToken(_ endpoint: String?) throws -> String {
    try #require(endpoint?.split(separator: "/").last.map(String.init))
}

extension [UInt8] {
    var hex: String { map { String(format: "%02x", $0) }.joined() }
}
