import Foundation
import Herald

/// The `herald` executable built beside the test bundle.
let heraldExecutable = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent().appendingPathComponent("herald")

/// `herald serve` as a child process: standard output read line by line (with a 10 s limit per line),
/// standard error kept in a file of the data directory for failure messages.
final class DaemonProcess {
    let process = Process()
    let directory: String
    let httpPort: Int
    var socketPath: String { "\(directory)/herald.sock" }
    private let output = Pipe()
    private var pending: [UInt8] = []

    /// Starts `herald serve --echo` on a free loopback port with its data directory at `directory`.
    init(directory: String, arguments: [String] = [], environment: [String: String] = [:], echo: Bool = true) throws {
        self.directory = directory
        httpPort = try freeLoopbackPort()
        process.executableURL = heraldExecutable
        process.arguments = ["serve", "--http", "127.0.0.1:\(httpPort)", "--data-dir", directory, "--project-id", "demo"]
            + (echo ? ["--echo"] : []) + arguments
        var env = ProcessInfo.processInfo.environment
        env["HERALD_AUTH_TOKEN"] = nil
        for (key, value) in environment { env[key] = value }
        process.environment = env
        process.standardOutput = output
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        _ = FileManager.default.createFile(atPath: "\(directory)/stderr.log", contents: nil)
        process.standardError = FileHandle(forWritingAtPath: "\(directory)/stderr.log")
        try process.run()
    }

    /// The next line of standard output, or `nil` at end of file or after 10 s without one.
    func line() -> String? {
        let fd = output.fileHandleForReading.fileDescriptor
        while true {
            if let newline = pending.firstIndex(of: UInt8(ascii: "\n")) {
                let line = String(decoding: pending[..<newline], as: UTF8.self)
                pending.removeSubrange(...newline)
                return line
            }
            var descriptor = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
            guard poll(&descriptor, 1, 10_000) > 0 else { return nil }
            var buffer = [UInt8](repeating: 0, count: 4096)
            let count = read(fd, &buffer, buffer.count)
            guard count > 0 else { return nil }
            pending += buffer[0..<count]
        }
    }

    /// The next line parsed as a JSON object.
    func event() -> JSONValue? {
        line().flatMap { try? JSONParser.parse(Array($0.utf8)) }
    }

    /// Reads every remaining line on a thread of its own until end of file (so a daemon writing many lines
    /// never blocks on a full pipe); the returned box holds them once `done` is signalled.
    func collectRemainingLines() -> LineCollector {
        let collector = LineCollector(fd: output.fileHandleForReading.fileDescriptor, pending: pending)
        pending = []
        return collector
    }

    /// Sends SIGTERM and waits for the exit status.
    func terminate() -> Int32 {
        kill(process.processIdentifier, SIGTERM)
        process.waitUntilExit()
        return process.terminationStatus
    }

    /// What the daemon logged.
    var log: String { (try? String(contentsOfFile: "\(directory)/stderr.log", encoding: .utf8)) ?? "" }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (bound, read and released).
func freeLoopbackPort() throws -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else { throw POSIXError(.EADDRINUSE) }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// Runs `herald` with `arguments` to completion: exit status, standard output, standard error.
func runHerald(_ arguments: [String], environment: [String: String] = [:], input: String? = nil) throws -> (status: Int32, output: String, error: String) {
    let process = Process()
    process.executableURL = heraldExecutable
    process.arguments = arguments
    var env = ProcessInfo.processInfo.environment
    env["HERALD_AUTH_TOKEN"] = nil
    for (key, value) in environment { env[key] = value }
    process.environment = env
    let output = Pipe()
    let error = Pipe()
    let stdin = Pipe()
    process.standardOutput = output
    process.standardError = error
    process.standardInput = stdin
    try process.run()
    if let input { stdin.fileHandleForWriting.write(Data(input.utf8)) }
    try stdin.fileHandleForWriting.close()
    let out = output.fileHandleForReading.readDataToEndOfFile()
    let err = error.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
}

/// A fresh temporary directory, removed after `body`.
func withTemporaryDirectory<T>(_ body: (String) async throws -> T) async throws -> T {
    let path = "/tmp/herald-cmd-\(getpid())-\(UInt32.random(in: 0...UInt32.max))"
    try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try await body(path)
}

/// Lines read from a pipe on a thread until end of file.
final class LineCollector: @unchecked Sendable {
    // @unchecked Sendable: `lines` is written by the reading thread before `done` is signalled and read after.
    private var data: [UInt8]
    private let done = DispatchSemaphore(value: 0)

    init(fd: Int32, pending: [UInt8]) {
        data = pending
        Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 65536)
            while true {
                let count = read(fd, &buffer, buffer.count)
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { break }
                data += buffer[0..<count]
            }
            done.signal()
        }.start()
    }

    /// Waits for end of file and returns the lines.
    func lines() -> [String] {
        done.wait()
        return String(decoding: data, as: UTF8.self).split(separator: "\n").map(String.init)
    }
}

/// Calls `body` until it returns a value (or 10 s pass); the value, or `nil`.
func eventuallyValue<T>(_ body: () throws -> T?) async throws -> T? {
    let end = ContinuousClock.now + .seconds(10)
    while ContinuousClock.now < end {
        if let value = try body() { return value }
        try await Task.sleep(for: .milliseconds(20))
    }
    return try body()
}
