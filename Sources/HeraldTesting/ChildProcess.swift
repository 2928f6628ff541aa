public import Foundation
import HeraldEventLoop

/// The directory holding the products built beside the running test bundle (`herald`, example executables,
/// plugin shared objects).
public let buildProductsDirectory = URL(fileURLWithPath: "/proc/self/exe").resolvingSymlinksInPath().deletingLastPathComponent()

/// Runs the built executable `name` (for `herald`, ``heraldExecutable``) with `arguments` to completion and returns its exit status, standard output
/// and standard error. Every `HERALD_` variable is removed from the inherited environment (tests set them on purpose);
/// `environment` adds or replaces variables; `input` is written to standard input, which is then closed. Both
/// output pipes are drained at once, so a chatty child never blocks.
public func runBuiltExecutable(
    _ name: String, _ arguments: [String], environment: [String: String] = [:], input: String? = nil
) throws -> (status: Int32, output: String, error: String) {
    let url = name == "herald" ? heraldExecutable : buildProductsDirectory.appendingPathComponent(name)
    return try runExecutable(url, arguments, environment: environment, input: input)
}

/// As `runBuiltExecutable(_:_:environment:input:)`, for the executable at `url` (a script's interpreter, say).
public func runExecutable(
    _ url: URL, _ arguments: [String], environment: [String: String] = [:], input: String? = nil
) throws -> (status: Int32, output: String, error: String) {
    let process = Process()
    process.executableURL = url
    process.arguments = arguments
    var merged = ProcessInfo.processInfo.environment
    // The child sees only the HERALD_ variables the test gives it (herald serve reads every HERALD_ setting).
    for name in merged.keys where name.hasPrefix("HERALD_") { merged[name] = nil }
    for (key, value) in environment { merged[key] = value }
    process.environment = merged
    let output = Pipe()
    let error = Pipe()
    let stdin = Pipe()
    process.standardOutput = output
    process.standardError = error
    process.standardInput = stdin
    // As a shell would start it: a child that runs `timeout` (or is sent a signal) must be able to receive it.
    try runWithNoSignalsBlocked(process)
    let errorText = PipeDrain(error.fileHandleForReading.fileDescriptor)
    // A child that exits without reading all of its input (s_client after a refused handshake) closes the pipe:
    // the write then fails with EPIPE, which the non-throwing write(_:) turns into a crash of the test process.
    if let input { try? stdin.fileHandleForWriting.write(contentsOf: Data(input.utf8)) }
    try stdin.fileHandleForWriting.close()
    let out = output.fileHandleForReading.readDataToEndOfFile()
    let err = errorText.bytes()
    process.waitUntilExit()
    return (process.terminationStatus, String(decoding: out, as: UTF8.self), String(decoding: err, as: UTF8.self))
}

/// As the synchronous `runBuiltExecutable(_:_:environment:input:)`, waiting for the child on a thread of its own
/// (``onOwnThread(_:)``): the form for an async test, whose body would otherwise hold one of the cooperative pool's
/// few threads for as long as the child runs.
public func runBuiltExecutable(
    _ name: String, _ arguments: [String], environment: [String: String] = [:], input: String? = nil
) async throws -> (status: Int32, output: String, error: String) {
    try await onOwnThread { try runBuiltExecutable(name, arguments, environment: environment, input: input) }
}

/// As the synchronous `runExecutable(_:_:environment:input:)`, waiting for the child on a thread of its own
/// (``onOwnThread(_:)``), not on one of the cooperative pool's.
public func runExecutable(
    _ url: URL, _ arguments: [String], environment: [String: String] = [:], input: String? = nil
) async throws -> (status: Int32, output: String, error: String) {
    try await onOwnThread { try runExecutable(url, arguments, environment: environment, input: input) }
}

/// Reads a pipe to its end on a thread of its own (after `initial`, bytes already read from it), so a child
/// writing much never blocks on a full pipe.
public final class PipeDrain: @unchecked Sendable {
    // @unchecked Sendable: `data` is written by the thread before `done` is signalled and read after the wait.
    private var data: [UInt8]
    private let done = DispatchSemaphore(value: 0)

    public init(_ fd: Int32, initial: [UInt8] = []) {
        data = initial
        Thread { [self] in
            var buffer = [UInt8](repeating: 0, count: 4096)
            while true {
                let count = read(fd, &buffer, buffer.count)
                if count < 0, errno == EINTR { continue }
                guard count > 0 else { break }
                data += buffer[0..<count]
            }
            done.signal()
        }.start()
    }

    /// Waits for end of file and returns everything read.
    public func bytes() -> [UInt8] {
        done.wait()
        return data
    }

    /// Waits for end of file and returns the lines read.
    public func lines() -> [String] {
        String(decoding: bytes(), as: UTF8.self).split(separator: "\n").map(String.init)
    }
}

/// A TCP port on 127.0.0.1 that was free a moment ago (bound and released), for a child to listen on.
///
/// Chosen below the kernel's ephemeral range (`net.ipv4.ip_local_port_range`, 32768–60999 by default), from 20000
/// up, and never the same twice in this process: a port from that range (what binding to port 0 gives) could be
/// taken, between this answer and the child's `listen`, by any outgoing connection of the tests running beside it
/// — a daemon once failed to start with `EADDRINUSE` that way. Falls back to a port the kernel chooses when none
/// below the range is free.
public func freeLoopbackPort() throws -> Int {
    let (low, high) = ephemeralPortRange()
    let candidates: ClosedRange<Int>? = low > 20_100 ? 20_000...(low - 1) : high < 65_000 ? (high + 1)...65_535 : nil
    for _ in 0..<64 {
        guard let port = candidates?.randomElement() else { break }
        guard handedOutPorts.withLock({ $0.insert(port).inserted }) else { continue }
        if let fd = try? boundLoopbackSocket(port: port) {
            close(fd.fd)
            return port
        }
    }
    let (fd, port) = try boundLoopbackSocket()
    close(fd)
    return port
}

/// Ports ``freeLoopbackPort()`` has answered in this process.
private let handedOutPorts = Locked<Set<Int>>([])

/// The kernel's range for ephemeral ports (outgoing connections, binds to port 0).
private func ephemeralPortRange() -> (low: Int, high: Int) {
    let fields = ((try? String(contentsOfFile: "/proc/sys/net/ipv4/ip_local_port_range", encoding: .utf8)) ?? "")
        .split(whereSeparator: { $0 == " " || $0 == "\t" || $0 == "\n" }).compactMap { Int($0) }
    return fields.count == 2 ? (fields[0], fields[1]) : (32_768, 60_999)
}

/// A TCP socket bound to a free port on 127.0.0.1 (`port`, or one the kernel chooses), not listening (close it when
/// done): a port where nothing answers (a connection is refused) and that no other test can take while it is held.
package func boundLoopbackSocket(port: Int = 0) throws -> (fd: Int32, port: Int) {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    address.sin_port = UInt16(port).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0 }
    }
    guard bound else {
        close(fd)
        throw POSIXError(.EADDRINUSE)
    }
    return (fd, Int(UInt16(bigEndian: address.sin_port)))
}

/// Starts `process` as a shell or systemd would: with no signal blocked. A child inherits the signal mask of the
/// thread that spawns it, and the test threads (Dispatch's) block SIGINT and SIGTERM among others, so a child
/// started from one would never see a signal its libuv loop watches; this spawns from a thread of its own with an
/// empty mask.
///
/// Spawns are also taken one at a time across the test process. Foundation's `Process.run` closes in the child the
/// descriptors it finds open just before it spawns; one another thread opens meanwhile — such as the socket through
/// which Foundation learns that another child ended — would be inherited, and a long-lived child holding it keeps
/// `waitUntilExit` of that other child waiting forever. Every test helper that starts a child goes through here.
public func runWithNoSignalsBlocked(_ process: Process) throws {
    let spawn = Spawn()
    Thread {
        var none = sigset_t()
        sigemptyset(&none)
        pthread_sigmask(SIG_SETMASK, &none, nil)
        spawnLock.lock()
        do { try process.run() } catch { spawn.error = error }
        spawnLock.unlock()
        spawn.done.signal()
    }.start()
    spawn.done.wait()
    if let error = spawn.error { throw error }
}

/// Waits until `process` has ended, without `waitUntilExit()`: that runs a run loop on the calling thread, and a
/// thread that ends with a run loop makes Foundation allocate in its thread-exit destructor, which crashes under
/// Thread Sanitizer (seen as a SEGV in the sanitizer's allocator when a test's helper thread ends).
public func waitForExit(_ process: Process) {
    _ = waitForExit(process, until: .distantFuture)
}

/// Waits at most `timeout` until `process` has ended (as ``waitForExit(_:)``). Answers whether it ended. (Call
/// `waitUntilExit()` after it has, on a thread that lives on: until then Foundation keeps the process and its pipes.)
public func waitForExit(_ process: Process, timeout: Duration) -> Bool {
    let nanoseconds = timeout.components.seconds * 1_000_000_000 + timeout.components.attoseconds / 1_000_000_000
    return waitForExit(process, until: .now() + .nanoseconds(Int(nanoseconds)))
}

/// Waits until `process` has ended, as `waitUntilExit()` does but without its busy wait: on a thread with no run-loop
/// sources (a test's), `waitUntilExit()` runs the run loop in a loop that returns at once each time, spinning a core
/// for as long as the child runs. This waits through the termination handler, then calls `waitUntilExit()`, which
/// returns at once and lets Foundation release the process and its pipes (without it their descriptors stay open).
package func waitUntilExitWithoutSpinning(_ process: Process) {
    _ = waitForExit(process, until: .distantFuture)
    process.waitUntilExit()
}

/// As the synchronous `waitUntilExitWithoutSpinning(_:)`, for async code: the wait is on a thread of its own
/// (``onOwnThread(_:)``), not on one of the cooperative pool's few threads; the final `waitUntilExit()` is on the
/// caller's thread, once the process has ended (it gives its thread a run loop, which a thread that ends must not
/// have: Foundation then allocates in its thread-exit destructor, a crash under Thread Sanitizer).
package func waitUntilExitWithoutSpinning(_ process: Process) async {
    // The work throws nothing, so neither does onOwnThread here.
    _ = try? await onOwnThread { waitForExit(process) }
    process.waitUntilExit()
}

private func waitForExit(_ process: Process, until deadline: DispatchTime) -> Bool {
    let ended = DispatchSemaphore(value: 0)
    process.terminationHandler = { _ in ended.signal() }
    guard process.isRunning else { return true }
    return ended.wait(timeout: deadline) == .success || !process.isRunning
}

/// Held while a child is spawned (see ``runWithNoSignalsBlocked(_:)``).
private let spawnLock = NSLock()

/// The outcome of one spawn on the thread of ``runWithNoSignalsBlocked(_:)``.
private final class Spawn: @unchecked Sendable {
    // @unchecked Sendable: `error` is written by the thread before `done` is signalled and read after the wait.
    var error: (any Error)?
    let done = DispatchSemaphore(value: 0)
}

/// Runs `work` — a blocking call, such as a client process the test waits for — on a thread of its own and returns
/// its result. Blocking inside a `Task` instead would hold one of the few threads of Swift's cooperative pool (two on
/// a two-core machine): two such tests at once would leave none for the test bodies that must answer the clients.
public func onOwnThread<Result: Sendable>(_ work: @escaping @Sendable () throws -> Result) async throws -> Result {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Swift.Result { try work() }) }.start()
    }
}
