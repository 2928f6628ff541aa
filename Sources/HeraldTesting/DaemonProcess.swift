public import Foundation
public import Herald

/// The `herald` executable the tests run: the one built beside the test bundle, or the one `TEST_HERALD_BINARY`
/// names (scripts/test runs the command tests again against the release build of scripts/build-release).
public let heraldExecutable: URL = {
    if let path = ProcessInfo.processInfo.environment["TEST_HERALD_BINARY"], !path.isEmpty {
        return URL(fileURLWithPath: path)
    }
    return buildProductsDirectory.appendingPathComponent("herald")
}()

/// `herald serve` as a child process: standard output read line by line (with a 10 s limit per line),
/// standard error kept in a file of the data directory for failure messages.
public final class DaemonProcess {
    public let process = Process()
    public let directory: String
    public let httpPort: Int
    public var socketPath: String { "\(directory)/herald.sock" }
    private let output = Pipe()
    private lazy var lines = LineReader(output.fileHandleForReading.fileDescriptor)

    /// Starts `herald serve --echo` on a free loopback port with its data directory at `directory`.
    ///
    /// `launcher` is a command line that runs `herald` (found on `PATH`), such as `["prlimit", "--nofile=64", "--"]`
    /// for a daemon with few file descriptors, or `["nsenter", "-t", PID, "-m", "--"]` for one in another mount
    /// namespace; empty, `herald` runs directly.
    public convenience init(
        directory: String, arguments: [String] = [], environment: [String: String] = [:], echo: Bool = true, launcher: [String] = []
    ) throws {
        let port = try freeLoopbackPort()
        try self.init(
            directory: directory, httpPort: port,
            arguments: ["serve", "--http", "127.0.0.1:\(port)", "--data-dir", directory, "--project-id", "demo"] + (echo ? ["--echo"] : [])
                + arguments,
            environment: environment, launcher: launcher)
    }

    /// Starts `herald` with exactly `arguments` (for a daemon whose settings come from elsewhere, such as a config
    /// file), expecting HTTP on `httpPort`; `directory` holds the standard error log. `launcher`: as above.
    public init(directory: String, httpPort: Int, arguments: [String], environment: [String: String] = [:], launcher: [String] = []) throws
    {
        self.directory = directory
        self.httpPort = httpPort
        if launcher.isEmpty {
            process.executableURL = heraldExecutable
            process.arguments = arguments
        } else {
            process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            process.arguments = launcher + [heraldExecutable.path] + arguments
        }
        var env = ProcessInfo.processInfo.environment
        for name in env.keys where name.hasPrefix("HERALD_") { env[name] = nil }
        for (key, value) in environment { env[key] = value }
        process.environment = env
        process.standardOutput = output
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: "\(directory)/stderr.log", contents: nil)
        process.standardError = FileHandle(forWritingAtPath: "\(directory)/stderr.log")
        // As systemd would start it, so the daemon gets the signals it watches (SIGHUP reloads its TLS certificate).
        try runWithNoSignalsBlocked(process)
    }

    /// As the convenience `init`, for an async test: the daemon is spawned from a thread of its own
    /// (``onOwnThread(_:)``), not from one of the cooperative pool's few threads, which would otherwise wait there for
    /// the spawn and for the lock that takes the test process's spawns one at a time.
    public static func start(
        directory: String, arguments: [String] = [], environment: [String: String] = [:], echo: Bool = true, launcher: [String] = []
    ) async throws -> DaemonProcess {
        try await onOwnThread {
            HandedOver(
                try DaemonProcess(directory: directory, arguments: arguments, environment: environment, echo: echo, launcher: launcher))
        }.value
    }

    /// As `init(directory:httpPort:arguments:environment:launcher:)`, spawning from a thread of its own as
    /// ``start(directory:arguments:environment:echo:launcher:)`` does.
    public static func start(
        directory: String, httpPort: Int, arguments: [String], environment: [String: String] = [:], launcher: [String] = []
    ) async throws -> DaemonProcess {
        try await onOwnThread {
            HandedOver(
                try DaemonProcess(
                    directory: directory, httpPort: httpPort, arguments: arguments, environment: environment, launcher: launcher))
        }.value
    }

    /// The next line of standard output, or `nil` at end of file or after 10 s without one.
    public func line() -> String? { lines.line() }

    /// The next line parsed as a JSON object.
    public func event() -> JSONValue? {
        line().flatMap { try? JSONParser.parse(Array($0.utf8)) }
    }

    /// As the synchronous `line()`, for an async test: the wait is on a thread of its own (``onOwnThread(_:)``), not
    /// on one of the cooperative pool's few threads, which a daemon slow to start or to answer would hold meanwhile.
    public func line() async -> String? { await lines.line() }

    /// As the synchronous `event()`, waiting as the async `line()` does.
    public func event() async -> JSONValue? {
        await line().flatMap { try? JSONParser.parse(Array($0.utf8)) }
    }

    /// Reads every remaining line on a thread of its own until end of file (so a daemon writing many lines
    /// never blocks on a full pipe); the returned box holds them once `done` is signalled.
    public func collectRemainingLines() -> PipeDrain {
        PipeDrain(output.fileHandleForReading.fileDescriptor, initial: lines.takeBuffered())
    }

    /// Sends SIGTERM and waits for the exit status.
    /// A daemon still running `timeout` after it (two minutes by default: a sanitizer's build stops slowly) is
    /// killed with SIGKILL, which its log then says, and its status is the signal's (9): a daemon that does not stop
    /// fails the test that stops it instead of holding the whole run.
    public func terminate() -> Int32 {
        terminate(timeout: .seconds(120))
    }

    /// As `terminate()`, with a daemon killed `timeout` after SIGTERM.
    public func terminate(timeout: Duration) -> Int32 {
        Self.stop(process, directory: directory, timeout: timeout)
        // It has ended, so this returns at once; it is what lets Foundation release the process and its pipes (a
        // process only waited for through its termination handler is kept, with its pipes' descriptors, for good).
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// As the synchronous `terminate()`, for an async test: the daemon is waited for on a thread of its own
    /// (``onOwnThread(_:)``), not on one of the cooperative pool's few threads, which a daemon slow to stop (seconds
    /// under a sanitizer) would hold from every other test meanwhile.
    public func terminate() async -> Int32 {
        await terminate(timeout: .seconds(120))
    }

    /// As `terminate()`, with a daemon killed `timeout` after SIGTERM.
    public func terminate(timeout: Duration) async -> Int32 {
        let (process, directory) = (self.process, directory)
        // The work throws nothing, so neither does onOwnThread here.
        _ = try? await onOwnThread { Self.stop(process, directory: directory, timeout: timeout) }
        // Here rather than on that thread, which ends: waitUntilExit() gives its thread a run loop, and a thread
        // ending with one makes Foundation allocate in its thread-exit destructor (a crash under Thread Sanitizer).
        // The daemon has ended, so this returns at once.
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// SIGTERM, a wait through the termination handler for at most `timeout`, then SIGKILL (said in the log).
    private static func stop(_ process: Process, directory: String, timeout: Duration) {
        kill(process.processIdentifier, SIGTERM)
        if !waitForExit(process, timeout: timeout) {
            kill(process.processIdentifier, SIGKILL)
            waitForExit(process)
            if let log = FileHandle(forWritingAtPath: "\(directory)/stderr.log") {
                log.seekToEndOfFile()
                log.write(Data("(the test killed the daemon with SIGKILL: it had not stopped \(timeout) after SIGTERM)\n".utf8))
                try? log.close()
            }
        }
    }

    /// What the daemon logged.
    public var log: String { (try? String(contentsOfFile: "\(directory)/stderr.log", encoding: .utf8)) ?? "" }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

/// One HTTP/1.1 request on a connection of its own (`Connection: close`); the status code and the body.
public func httpRequest(port: Int, _ method: String, _ path: String, body: String = "", secret: String? = nil) throws -> (
    status: Int, body: String
) {
    let client = try TestSocketClient(.tcp(host: "127.0.0.1", port: port))
    let authorization = secret.map { "Authorization: Bearer \($0)\r\n" } ?? ""
    client.send(
        "\(method) \(path) HTTP/1.1\r\nHost: x\r\n\(authorization)Content-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n\(body)"
    )
    let text = String(decoding: client.read { _ in false }, as: UTF8.self)
    let status = text.split(separator: " ", maxSplits: 2).dropFirst().first.flatMap { Int($0) } ?? 0
    let answer = text.range(of: "\r\n\r\n").map { String(text[$0.upperBound...]) } ?? ""
    return (status, answer)
}

/// The first `token` event a daemon run with `--echo` writes: its registration token and installation ID.
public func echoedToken(_ daemon: DaemonProcess) -> (token: String, installationID: String)? {
    while let event = daemon.event() {
        if event["event"] == "token", let token = event["token"]?.stringValue {
            return (token, event["installationID"]?.stringValue ?? "")
        }
    }
    return nil
}

/// As the synchronous `echoedToken(_:)`, for an async test: each line is waited for on a thread of its own (the
/// daemon's start takes seconds under a sanitizer), not on one of the cooperative pool's few threads.
public func echoedToken(_ daemon: DaemonProcess) async -> (token: String, installationID: String)? {
    while let event = await daemon.event() {
        if event["event"] == "token", let token = event["token"]?.stringValue {
            return (token, event["installationID"]?.stringValue ?? "")
        }
    }
    return nil
}

/// A daemon made on one thread and used on another: the thread that made it has ended before the caller resumes,
/// and nothing else holds it.
private struct HandedOver: @unchecked Sendable {
    // @unchecked Sendable: handed from the thread that made it to the caller once, never shared.
    let value: DaemonProcess
    init(_ value: DaemonProcess) { self.value = value }
}
