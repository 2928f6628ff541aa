import Foundation
import Glibc

/// A real `nats-server` for tests (Debian's `nats-server` package) with JetStream, on a loopback port of its own and a store directory of its own, started
/// and stopped by the test (and restarted on the same port and store, for the reconnect test).
public final class NATSServerProcess: @unchecked Sendable {
    // @unchecked Sendable: `process` is touched by the test's task only, one call at a time.
    /// The client port (chosen again at the start when another process took the one chosen first).
    public private(set) var port: Int
    public let storeDirectory: String
    private var process: Process?
    private var log: PipeDrain?

    public var url: String { "nats://127.0.0.1:\(port)" }

    /// Whether the server runs JetStream.
    public let jetStream: Bool
    /// More arguments (a cluster node's name, cluster port and routes).
    public let extraArguments: [String]

    /// Starts a server on a free loopback port (or `port`) with a fresh store under /tmp, and waits until it accepts.
    public convenience init(jetStream: Bool = true, port: Int? = nil, extraArguments: [String] = [], start: Bool = true) throws {
        try self.init(jetStream: jetStream, port: port, extraArguments: extraArguments, start: start, choosingPort: freeLoopbackPort)
    }

    /// ``init(jetStream:port:extraArguments:start:)`` with the free ports chosen by `choosingPort` (for tests).
    ///
    /// A port found free is free only at that moment: a test run in another process (CI runs some beside each other)
    /// can take it before the server binds it. The server then fails at once with "address already in use" naming its
    /// client port; a port chosen here (not given) is chosen again, up to three times.
    package init(
        jetStream: Bool = true, port: Int? = nil, extraArguments: [String] = [], start: Bool = true, choosingPort: () throws -> Int
    ) throws {
        self.jetStream = jetStream
        self.extraArguments = extraArguments
        self.port = try port ?? choosingPort()
        storeDirectory = "/tmp/herald-nats-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
        try FileManager.default.createDirectory(atPath: storeDirectory, withIntermediateDirectories: true)
        guard start else { return }
        var chosenAgain = 0
        while true {
            do {
                try self.start()
                return
            } catch let NATSTestError.serverDidNotStart(taken, log)
                where port == nil && chosenAgain < 3 && log.contains("127.0.0.1:\(taken)") && log.contains("address already in use")
            {
                chosenAgain += 1
                self.port = try choosingPort()
            }
        }
    }

    deinit {
        kill()
        try? FileManager.default.removeItem(atPath: storeDirectory)
    }

    /// Starts the server (again) on the same port and store, and waits until it accepts connections.
    public func start() throws {
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
    public func stop() {
        guard let process else { return }
        process.terminate()
        waitUntilExitWithoutSpinning(process)
        self.process = nil
        _ = log?.bytes()
        log = nil
    }

    /// CPU time the server used so far (user and system, all its threads, ended ones included), to the nanosecond
    /// as the scheduler counts it (the process's CPU-time clock, not /proc's 10 ms ticks); zero when it is not running.
    public var cpuTime: Duration {
        guard let process else { return .zero }
        var clock = clockid_t()
        var time = timespec()
        guard clock_getcpuclockid(process.processIdentifier, &clock) == 0, clock_gettime(clock, &time) == 0 else { return .zero }
        return .seconds(time.tv_sec) + .nanoseconds(time.tv_nsec)
    }

    /// SIGKILL, and waits.
    public func kill() {
        guard let process else { return }
        Glibc.kill(process.processIdentifier, SIGKILL)
        Glibc.kill(process.processIdentifier, SIGCONT)  // a paused server dies at once
        waitUntilExitWithoutSpinning(process)
        self.process = nil
        _ = log?.bytes()
        log = nil
    }

    /// SIGSTOP: the server keeps its sockets open and answers nothing (as a hung host or a dropped network path).
    /// Returns once every thread of the server is stopped (state `T` in /proc; 10 s at most): the signal stops each
    /// thread only as it next leaves the kernel, and on a loaded machine a send made just after `kill` returned was
    /// stored and acknowledged (the frozen-server gateway test got one 200 among its 503s).
    public func pause() {
        guard let process else { return }
        let pid = process.processIdentifier
        Glibc.kill(pid, SIGSTOP)
        let deadline = ContinuousClock.now + .seconds(10)
        while ContinuousClock.now < deadline, !Self.allThreadsStopped(pid) { usleep(1_000) }
    }

    /// Whether every thread of `pid` is stopped (its state in /proc/PID/task/TID/stat is `T`).
    private static func allThreadsStopped(_ pid: Int32) -> Bool {
        let threads = (try? FileManager.default.contentsOfDirectory(atPath: "/proc/\(pid)/task")) ?? []
        return !threads.isEmpty
            && threads.allSatisfy { thread in
                let stat = (try? String(contentsOfFile: "/proc/\(pid)/task/\(thread)/stat", encoding: .utf8)) ?? ""
                guard let close = stat.lastIndex(of: ")") else { return false }
                return stat[stat.index(after: close)...].split(separator: " ").first == "T"
            }
    }

    /// SIGCONT after ``pause()``.
    public func resume() {
        guard let process else { return }
        Glibc.kill(process.processIdentifier, SIGCONT)
    }

    private func stopAndReadLog() -> String {
        process?.terminate()
        if let process { waitUntilExitWithoutSpinning(process) }
        process = nil
        let text = log.map { String(decoding: $0.bytes(), as: UTF8.self) } ?? ""
        log = nil
        return text
    }

    public static var executable: String {
        ["/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"].first {
            FileManager.default.isExecutableFile(atPath: $0)
        }
            ?? "/usr/sbin/nats-server"
    }
}

public enum NATSTestError: Error, CustomStringConvertible {
    case serverDidNotStart(port: Int, log: String)
    case client(String)

    public var description: String {
        switch self {
        case .serverDidNotStart(let port, let log): "nats-server did not start on port \(port): \(log)"
        case .client(let detail): "NATS test client: \(detail)"
        }
    }
}

/// The milliseconds left until `deadline`, at least 1 (a poll timeout).
public func millisecondsLeft(until deadline: ContinuousClock.Instant) -> Int32 {
    Int32(max(1, (deadline - .now) / .milliseconds(1)))
}
