import CLibUV
import Glibc
import Herald
import Logging

/// Why the worker ended a run itself.
enum Termination: Sendable, Equatable {
    /// The worker's own timeout passed.
    case timeout(Duration)
    /// The fetch task was cancelled: Herald's background-fetch deadline passed.
    case cancelled
    /// The plugin (or the loop) is stopping.
    case stopped

    var text: String {
        switch self {
        case .timeout(let limit): "it ran past the timeout (\(ExecFetchWorker.format(limit)))"
        case .cancelled: "the fetch was cancelled (Herald's background-fetch deadline passed)"
        case .stopped: "the worker is stopping"
        }
    }

    var label: String {
        switch self {
        case .timeout: "timeout"
        case .cancelled: "cancelled"
        case .stopped: "stopped"
        }
    }
}

/// Everything one run needs, fixed when it is created.
struct RunSpec: Sendable {
    /// The program, an absolute path.
    var path: String
    /// `argv`, with `argv[0]` (the path) first.
    var argv: [String]
    /// The child's whole environment, `NAME=value` each.
    var environment: [String]
    var workingDirectory: String?
    /// What goes to the child's standard input.
    var input: [UInt8]
    var timeout: Duration
    var killGracePeriod: Duration
    var maxCapturedOutputBytes: Int
    var newDataStatuses: Set<Int32>
    var noDataStatuses: Set<Int32>
}

/// How a run ended.
struct RunOutcome: Sendable {
    enum Ending: Sendable, Equatable {
        case exited(status: Int64)
        case signaled(Int32)
        case notStarted(reason: String)
    }

    var ending: Ending
    var termination: Termination?
    var result: BackgroundFetchResult
}

/// One child process: spawned with `uv_spawn`, its standard input fed from the message, its standard output and
/// error logged line by line, killed when it overruns, reaped by libuv. Four libuv handles per run (the process and
/// three pipes), created, used and closed on the loop thread, each freed in its close callback; the run reports its
/// outcome once every one of them has closed, so that a finished run leaves neither a zombie nor a handle behind.
///
/// The child is the leader of a process group of its own (`UV_PROCESS_DETACHED`, i.e. `setsid`), so that ending it
/// ends what it started too: a shell script's `sleep` would otherwise outlive the script and keep its output open.
final class ChildRun: @unchecked Sendable {
    // @unchecked Sendable: created, used and finished on the loop thread only (checked in start(); libuv calls
    // back on that thread). Other threads only hold the reference and hand calls to the loop with execute.

    /// How long the output pipes are still read after the command exited, for what a process it left behind
    /// still holds open; then they are closed.
    static let outputDrainPeriod: Duration = .seconds(1)
    static let readBufferBytes = 16 * 1024

    private let loop: EventLoop
    private let spec: RunSpec
    private var logger: Logger
    private let finish: @Sendable (RunOutcome) -> Void

    private var process: ExternalHandle?
    private var input: ExternalHandle?
    private var output: ExternalHandle?
    private var errors: ExternalHandle?
    private var openHandles = 0
    private var pid: Int32 = 0
    private var exit: RunOutcome.Ending?
    private var termination: Termination?
    private var notStarted: String?
    private var timeoutTask: ScheduledTask?
    private var killTask: ScheduledTask?
    private var drainTask: ScheduledTask?
    private var readBuffer = UnsafeMutableRawBufferPointer(start: nil, count: 0)
    private var pendingLine: [[UInt8]] = [[], []]
    private var capturedBytes = 0
    private var discardedBytes = 0
    private var finished = false
    private let startedAt = ContinuousClock.now

    /// `finish` runs on the loop thread once, after every handle of the run has closed.
    init(loop: EventLoop, spec: RunSpec, logger: Logger, finish: @escaping @Sendable (RunOutcome) -> Void) {
        self.loop = loop
        self.spec = spec
        self.logger = logger
        self.finish = finish
    }

    // MARK: Starting

    /// Creates the pipes, spawns the command, starts reading its output and writing its input, arms the timeout.
    func start() {
        loop.preconditionInEventLoop()
        do {
            input = try makePipe()
            output = try makePipe()
            errors = try makePipe()
        } catch {
            failBeforeSpawn("cannot create a pipe for the command: \(error)")
            return
        }
        let process: ExternalHandle
        do {
            process = try spawn()
        } catch {
            failBeforeSpawn("cannot run \(spec.path): \(error)")
            return
        }
        process.context = self
        process.onClose = { [self] in handleClosed() }
        process.onShutdown = { [self] in loopIsShuttingDown() }
        openHandles += 1
        self.process = process
        pid = process.pointer.assumingMemoryBound(to: uv_process_t.self).pointee.pid
        logger[metadataKey: "pid"] = "\(pid)"
        logger.debug("command started", metadata: ["command": "\(spec.path)"])

        readBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Self.readBufferBytes, alignment: 16)
        startReading(output!)
        startReading(errors!)
        writeInput()
        timeoutTask = loop.scheduleTask(in: spec.timeout) { [self] in terminate(.timeout(spec.timeout)) }
    }

    private func makePipe() throws -> ExternalHandle {
        let pipe = try ExternalHandle(loop: loop, byteCount: herald_uv_pipe_size(), operation: "create a pipe") { loop, raw in
            uv_pipe_init(loop, raw.assumingMemoryBound(to: uv_pipe_t.self), 0)
        }
        pipe.context = self
        pipe.onClose = { [self] in handleClosed() }
        openHandles += 1
        return pipe
    }

    private func spawn() throws -> ExternalHandle {
        let stdin = input!.pointer.assumingMemoryBound(to: uv_pipe_t.self)
        let stdout = output!.pointer.assumingMemoryBound(to: uv_pipe_t.self)
        let stderr = errors!.pointer.assumingMemoryBound(to: uv_pipe_t.self)
        return try withCStringArray(spec.argv) { argv in
            try withCStringArray(spec.environment) { environment in
                try withOptionalCString(spec.workingDirectory) { directory in
                    try ExternalHandle(
                        loop: loop, byteCount: herald_uv_process_size(), operation: "run \(spec.path)", initializedOnFailure: true
                    ) { loop, raw in
                        herald_uv_spawn_piped(
                            loop, raw.assumingMemoryBound(to: uv_process_t.self),
                            { process, status, signal in
                                let owner = ExternalHandle.owner(of: UnsafeMutableRawPointer(process!))
                                (owner.context as! ChildRun).didExit(status: status, signal: signal)
                            }, argv[0], argv, environment, directory, UInt32(UV_PROCESS_DETACHED.rawValue), stdin, stdout, stderr)
                    }
                }
            }
        }
    }

    /// The command never ran: close the pipes; the run finishes once they have closed.
    private func failBeforeSpawn(_ reason: String) {
        notStarted = reason
        for pipe in [input, output, errors] { pipe?.close() }
        if openHandles == 0 { complete() }
    }

    // MARK: Input

    private final class InputWrite {
        let request = UnsafeMutablePointer<uv_write_t>.allocate(capacity: 1)
        let storage: UnsafeMutableRawBufferPointer
        let run: ChildRun

        init(run: ChildRun, bytes: [UInt8]) {
            self.run = run
            storage = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 1)
            storage.copyBytes(from: bytes)
        }

        deinit {
            storage.deallocate()
            request.deallocate()
        }
    }

    /// Writes the message to the child's standard input, then closes it (the child reads to end of file).
    private func writeInput() {
        guard let input else { return }
        guard !spec.input.isEmpty else {
            input.close()
            return
        }
        let write = InputWrite(run: self, bytes: spec.input)
        write.request.pointee.data = Unmanaged.passRetained(write).toOpaque()
        var buffer = uv_buf_t(base: write.storage.baseAddress!.assumingMemoryBound(to: CChar.self), len: write.storage.count)
        let result = uv_write(write.request, herald_as_stream(input.pointer), &buffer, 1) { request, status in
            let write = Unmanaged<InputWrite>.fromOpaque(request!.pointee.data).takeRetainedValue()
            write.run.inputWritten(status: status)
        }
        if result < 0 {
            Unmanaged<InputWrite>.fromOpaque(write.request.pointee.data).release()
            inputWritten(status: result)
        }
    }

    private func inputWritten(status: Int32) {
        // EPIPE: the command exited (or closed its input) without reading it all; ECANCELED: the pipe closed first.
        if status < 0, status != Int32(UV_EPIPE.rawValue), status != Int32(UV_ECANCELED.rawValue) {
            logger.warning(
                "cannot write the message to the command's standard input",
                metadata: [
                    "error": "\(UVError(code: status, operation: "write to the command's standard input"))"
                ])
        }
        input?.close()
    }

    // MARK: Output

    private func startReading(_ pipe: ExternalHandle) {
        let result = uv_read_start(
            herald_as_stream(pipe.pointer),
            { handle, _, buffer in
                let run = ExternalHandle.owner(of: UnsafeMutableRawPointer(handle!)).context as! ChildRun
                buffer!.pointee = uv_buf_t(base: run.readBuffer.baseAddress!.assumingMemoryBound(to: CChar.self), len: run.readBuffer.count)
            },
            { stream, count, buffer in
                let owner = ExternalHandle.owner(of: UnsafeMutableRawPointer(stream!))
                (owner.context as! ChildRun).didRead(from: owner, count: count, buffer: buffer!)
            })
        if result < 0 {
            logger.warning("cannot read the command's output", metadata: ["error": "\(UVError(code: result, operation: "read"))"])
            pipe.close()
        }
    }

    private func streamIndex(of pipe: ExternalHandle) -> Int { pipe === output ? 0 : 1 }

    private func didRead(from pipe: ExternalHandle, count: Int, buffer: UnsafePointer<uv_buf_t>) {
        let stream = streamIndex(of: pipe)
        if count > 0 {
            capture(UnsafeRawBufferPointer(start: buffer.pointee.base, count: count), stream: stream)
        } else if count < 0 {
            if count != Int(UV_EOF.rawValue) {
                logger.debug(
                    "reading the command's output failed", metadata: ["error": "\(UVError(code: Int32(count), operation: "read"))"])
            }
            flushPendingLine(stream)
            pipe.close()
        }
    }

    /// Logs complete lines; keeps at most ``RunSpec/maxCapturedOutputBytes`` of the run's output (both streams),
    /// counting the rest as discarded. Reading goes on either way, so a chatty command never blocks on a full pipe.
    private func capture(_ bytes: UnsafeRawBufferPointer, stream: Int) {
        let room = max(0, spec.maxCapturedOutputBytes - capturedBytes)
        let kept = min(room, bytes.count)
        if kept > 0 {
            capturedBytes += kept
            pendingLine[stream].append(contentsOf: bytes[..<kept])
            var start = pendingLine[stream].startIndex
            while let newline = pendingLine[stream][start...].firstIndex(of: UInt8(ascii: "\n")) {
                logLine(pendingLine[stream][start..<newline], stream: stream)
                start = newline + 1
            }
            pendingLine[stream].removeSubrange(..<start)
        }
        if kept < bytes.count {
            if discardedBytes == 0 {
                flushPendingLine(0)
                flushPendingLine(1)
                logger.notice(
                    "the command's output passed max-captured-bytes; the rest of it is not logged",
                    metadata: [
                        "max_captured_bytes": "\(spec.maxCapturedOutputBytes)"
                    ])
            }
            discardedBytes += bytes.count - kept
        }
    }

    private func flushPendingLine(_ stream: Int) {
        guard !pendingLine[stream].isEmpty else { return }
        logLine(pendingLine[stream][...], stream: stream)
        pendingLine[stream].removeAll()
    }

    private func logLine(_ line: ArraySlice<UInt8>, stream: Int) {
        var line = line
        if line.last == UInt8(ascii: "\r") { line = line.dropLast() }
        logger.info("\(String(decoding: line, as: UTF8.self))", metadata: ["stream": stream == 0 ? "stdout" : "stderr"])
    }

    // MARK: Ending

    /// libuv reaped the child (its exit callback).
    private func didExit(status: Int64, signal: Int32) {
        exit = signal != 0 ? .signaled(signal) : .exited(status: status)
        timeoutTask?.cancel()
        killTask?.cancel()
        process?.close()
        if termination != nil {
            // What the command started may still be running in its process group: end it too.
            _ = uv_kill(-pid, SIGKILL)
        }
        input?.close()
        let outputOpen = [output, errors].contains { $0.map { !$0.isClosed } ?? false }
        if outputOpen {
            drainTask = loop.scheduleTask(in: Self.outputDrainPeriod) { [self] in closeOutputAfterExit() }
        }
    }

    private func closeOutputAfterExit() {
        let open = [output, errors].compactMap { $0 }.filter { !$0.isClosed }
        guard !open.isEmpty else { return }
        logger.warning("the command exited, but its output is still held open (by a process it left running?); no longer reading it")
        for pipe in open {
            flushPendingLine(streamIndex(of: pipe))
            pipe.close()
        }
    }

    /// Ends the command: `SIGTERM` to its process group, `SIGKILL` after the grace period. The run then finishes
    /// when libuv has reaped it. Loop thread; does nothing once the command has exited or is being ended.
    func terminate(_ reason: Termination) {
        loop.preconditionInEventLoop()
        guard !finished, pid != 0, exit == nil, termination == nil else { return }
        termination = reason
        timeoutTask?.cancel()
        logger.warning(
            "ending the command with SIGTERM: \(reason.text)",
            metadata: [
                "kill_grace_period": "\(ExecFetchWorker.format(spec.killGracePeriod))"
            ])
        signalGroup(SIGTERM)
        killTask = loop.scheduleTask(in: spec.killGracePeriod) { [self] in
            guard exit == nil else { return }
            logger.warning("the command is still running after the grace period; sending SIGKILL")
            signalGroup(SIGKILL)
        }
    }

    /// The loop is closing while the command runs: there is no time for a grace period. The process handle stays
    /// open (and keeps the loop running) until libuv has reaped the child; then it closes as usual.
    private func loopIsShuttingDown() {
        guard exit == nil else { return }
        if termination == nil {
            termination = .stopped
            logger.warning("the event loop is shutting down; ending the command with SIGKILL")
        }
        signalGroup(SIGKILL)
    }

    private func signalGroup(_ signal: Int32) {
        if uv_kill(-pid, signal) < 0, let process, !process.isClosed {
            _ = uv_process_kill(process.pointer.assumingMemoryBound(to: uv_process_t.self), signal)
        }
    }

    private func handleClosed() {
        openHandles -= 1
        if openHandles == 0 { complete() }
    }

    /// Every handle has closed: log how it went and report the outcome.
    private func complete() {
        guard !finished else { return }
        finished = true
        flushPendingLine(0)
        flushPendingLine(1)
        timeoutTask?.cancel()
        killTask?.cancel()
        drainTask?.cancel()
        readBuffer.deallocate()
        readBuffer = UnsafeMutableRawBufferPointer(start: nil, count: 0)
        process = nil
        input = nil
        output = nil
        errors = nil

        let outcome = makeOutcome()
        report(outcome)
        // One turn of the loop later: close callbacks of this turn (a failed spawn's process handle) have all run.
        let finish = self.finish
        loop.execute { finish(outcome) }
    }

    private func makeOutcome() -> RunOutcome {
        if let notStarted {
            return RunOutcome(ending: .notStarted(reason: notStarted), termination: nil, result: .failed)
        }
        let ending = exit ?? .notStarted(reason: "no exit status")
        let result: BackgroundFetchResult
        switch ending {
        case .exited(let status) where termination == nil:
            if let status = Int32(exactly: status), spec.newDataStatuses.contains(status) {
                result = .newData
            } else if let status = Int32(exactly: status), spec.noDataStatuses.contains(status) {
                result = .noData
            } else {
                result = .failed
            }
        default:
            result = .failed
        }
        return RunOutcome(ending: ending, termination: termination, result: result)
    }

    private func report(_ outcome: RunOutcome) {
        let milliseconds = (ContinuousClock.now - startedAt).components
        let duration = milliseconds.seconds * 1000 + milliseconds.attoseconds / 1_000_000_000_000_000
        var metadata: Logger.Metadata = ["result": "\(outcome.result.rawValue)", "duration_ms": "\(duration)"]
        if discardedBytes > 0 { metadata["discarded_output_bytes"] = "\(discardedBytes)" }
        switch outcome.ending {
        case .notStarted(let reason):
            logger.error("\(reason)", metadata: metadata)
        case .exited(let status):
            metadata["exit_status"] = "\(status)"
            if let termination {
                metadata["ended_by"] = "\(termination.label)"
                logger.warning("the command was ended: \(termination.text)", metadata: metadata)
            } else if outcome.result == .failed {
                logger.warning("the command failed", metadata: metadata)
            } else {
                logger.info("the command finished", metadata: metadata)
            }
        case .signaled(let signal):
            metadata["signal"] = "\(signal)"
            if let termination {
                metadata["ended_by"] = "\(termination.label)"
                logger.warning("the command was ended: \(termination.text)", metadata: metadata)
            } else {
                logger.warning("the command was killed by signal \(signal)", metadata: metadata)
            }
        }
    }
}

// MARK: C strings

/// Calls `body` with a `NULL`-terminated array of C strings (`argv`, `envp`), freed afterwards.
func withCStringArray<R>(_ strings: [String], _ body: (UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>) throws -> R) rethrows -> R {
    var pointers: [UnsafeMutablePointer<CChar>?] = strings.map { strdup($0) }
    pointers.append(nil)
    defer { for pointer in pointers { free(pointer) } }
    return try pointers.withUnsafeMutableBufferPointer { try body($0.baseAddress!) }
}

/// Calls `body` with `string` as a C string, or with `nil`.
func withOptionalCString<R>(_ string: String?, _ body: (UnsafePointer<CChar>?) throws -> R) rethrows -> R {
    guard let string else { return try body(nil) }
    return try string.withCString { try body($0) }
}
