import Foundation
import HeraldNATSReceiver
import HeraldTesting

/// A real `nats-server` with JetStream, on a loopback port of its own and a store directory of its own, started
/// and stopped by the test (and restarted on the same port and store, for the reconnect test).
final class NATSServerProcess: @unchecked Sendable {
    // @unchecked Sendable: `process` is touched by the test's task only, one call at a time.
    let port: Int
    let storeDirectory: String
    private var process: Process?
    private var log: PipeDrain?

    var url: String { "nats://127.0.0.1:\(port)" }

    /// Whether the server runs JetStream.
    let jetStream: Bool
    /// More arguments (a cluster node's name, cluster port and routes).
    let extraArguments: [String]

    /// Starts a server on a free loopback port (or `port`) with a fresh store under /tmp, and waits until it accepts.
    init(jetStream: Bool = true, port: Int? = nil, extraArguments: [String] = [], start: Bool = true) throws {
        self.jetStream = jetStream
        self.extraArguments = extraArguments
        self.port = try port ?? freeLoopbackPort()
        storeDirectory = "/tmp/herald-nats-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: storeDirectory, withIntermediateDirectories: true)
        if start { try self.start() }
    }

    deinit {
        kill()
        try? FileManager.default.removeItem(atPath: storeDirectory)
    }

    /// Starts the server (again) on the same port and store, and waits until it accepts connections.
    func start() throws {
        precondition(process == nil, "the server is running")
        let process = Process()
        process.executableURL = URL(fileURLWithPath: Self.executable)
        process.arguments = (jetStream ? ["-js"] : []) + ["-a", "127.0.0.1", "-p", "\(port)", "-sd", storeDirectory] + extraArguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try runWithNoSignalsBlocked(process)
        self.process = process
        // nats-server says "Server is ready" once it listens (JetStream restored): wait for that line, with a bound.
        let reader = LineReader(output.fileHandleForReading.fileDescriptor)
        var seen: [String] = []
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline, let line = reader.line(timeout: millisecondsLeft(until: deadline)) {
            seen.append(line)
            if line.hasSuffix("Server is ready") { break }
        }
        log = PipeDrain(output.fileHandleForReading.fileDescriptor, initial: reader.takeBuffered())
        guard seen.last?.hasSuffix("Server is ready") == true else {
            throw NATSTestError.serverDidNotStart(port: port, log: seen.joined(separator: "\n") + "\n" + stopAndReadLog())
        }
    }

    /// SIGTERM, and waits for the server to exit (it syncs its store first).
    func stop() {
        guard let process else { return }
        process.terminate()
        process.waitUntilExit()
        self.process = nil
        _ = log?.bytes()
        log = nil
    }

    /// CPU time the server used so far (user and system), from /proc; zero when it is not running.
    var cpuTime: Duration {
        guard let process,
            let stat = try? String(contentsOfFile: "/proc/\(process.processIdentifier)/stat", encoding: .utf8),
            let close = stat.lastIndex(of: ")")
        else { return .zero }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        // After the command: state is field 3, utime and stime fields 14 and 15 (in clock ticks).
        let ticks = (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)
        return .milliseconds(ticks * 1000 / sysconf(Int32(_SC_CLK_TCK)))
    }

    /// SIGKILL, and waits.
    func kill() {
        guard let process else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        Glibc.kill(process.processIdentifier, SIGCONT)  // a paused server dies at once
        process.waitUntilExit()
        self.process = nil
        _ = log?.bytes()
        log = nil
    }

    /// SIGSTOP: the server keeps its sockets open and answers nothing (as a hung host or a dropped network path).
    func pause() {
        guard let process else { return }
        Glibc.kill(process.processIdentifier, SIGSTOP)
    }

    /// SIGCONT after ``pause()``.
    func resume() {
        guard let process else { return }
        Glibc.kill(process.processIdentifier, SIGCONT)
    }

    private func stopAndReadLog() -> String {
        process?.terminate()
        process?.waitUntilExit()
        process = nil
        let text = log.map { String(decoding: $0.bytes(), as: UTF8.self) } ?? ""
        log = nil
        return text
    }

    static var executable: String {
        ["/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
            ?? "/usr/sbin/nats-server"
    }
}

enum NATSTestError: Error, CustomStringConvertible {
    case serverDidNotStart(port: Int, log: String)
    case client(String)

    var description: String {
        switch self {
        case .serverDidNotStart(let port, let log): "nats-server did not start on port \(port): \(log)"
        case .client(let detail): "NATS test client: \(detail)"
        }
    }
}

/// The sender's side in the tests: NATSPublisher with string bodies.
extension NATSPublisher {
    convenience init(url: String) throws {
        try self.init(options: NATSReceiver.Options(servers: [url]))
    }

    @discardableResult
    func publishStored(_ subject: String, _ body: String, messageID: String? = nil) throws -> String {
        try publishStored(subject, body: Array(body.utf8), messageID: messageID)
    }

    func publish(_ subject: String, _ body: String, flush: Bool = true) throws {
        try publish(subject, body: Array(body.utf8), flush: flush)
    }

    func request(_ subject: String, _ body: String) throws -> String {
        guard let answer = try request(subject, body: Array(body.utf8)) else { throw NATSTestError.client("no responders on \(subject)") }
        return String(decoding: answer, as: UTF8.self)
    }
}
