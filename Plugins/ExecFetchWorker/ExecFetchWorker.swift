import CLibUV
import Glibc
public import Herald
import Logging

/// A background-fetch worker that runs a command for every silent (`content-available: 1`) message: the
/// message's `userInfo` as JSON on the command's standard input, its exit status as the fetch result.
///
/// ```swift
/// try herald.register(ExecFetchWorker(options: .init(command: "/usr/local/libexec/refresh-forecast",
///                                                    arguments: ["--cache", "/var/cache/weather"])))
/// ```
///
/// **Exit status.** `0` → `.newData`; `3` → `.noData`; any other status, a signal, a command that cannot be started
/// or one the worker had to end → `.failed` (``Options/newDataStatuses``, ``Options/noDataStatuses``). `3` is the
/// default for "no data" because it means nothing else: `1` and `2` are what failing programs and shells exit with,
/// 64–78 are `sysexits.h` errors, 126 and 127 are the shell's "cannot execute" and "not found".
///
/// **The command** runs with no shell: ``Options/command`` is the program (a bare name is looked up in `PATH` and a
/// relative path resolved against the daemon's working directory, once, at start), ``Options/arguments`` its
/// arguments. It inherits the daemon's environment (unless ``Options/inheritEnvironment`` is off) plus
/// ``Options/environment`` plus `HERALD_MESSAGE_ID`; it runs in ``Options/workingDirectory`` (default: the daemon's),
/// in a process group of its own.
///
/// **Output.** Standard output and standard error are logged line by line (level `info`, metadata `plugin`,
/// `message_id`, `pid` and `stream`: `stdout` or `stderr`), up to ``Options/maxCapturedOutputBytes`` per run; the rest is
/// read and dropped (and counted in the run's last log line), so a chatty command never blocks.
///
/// **Deadline.** When ``Options/timeout`` passes, or Herald cancels the fetch at its background-fetch deadline, or the
/// worker stops, the command's process group gets `SIGTERM`, then `SIGKILL` after ``Options/killGracePeriod``; the
/// result is `.failed`. `fetch` returns only once the child has been reaped and every libuv handle of the run closed:
/// no zombie, no leaked handle. The default timeout (25 s) plus the grace (2 s) ends within Herald's default deadline
/// (30 s), so the worker's own, clearer log line comes first.
///
/// **Concurrency.** At most ``Options/maxConcurrent`` commands run at once; further fetches wait their turn, first come
/// first served, and a fetch cancelled while waiting (Herald's deadline) gives up its turn and counts as `.failed`.
///
/// **Start.** `start` checks that the command exists, is a regular file and is executable by this user, that the
/// working directory exists, and that the options make sense; otherwise the instance does not start and the error
/// names the command or option (``ExecFetchWorkerError``). A command removed later fails its fetches (logged as an
/// error naming it).
public final class ExecFetchWorker: BackgroundFetchWorker, Sendable {
    public struct Options: Sendable {
        /// The program: an absolute path, a relative one (resolved at start against the working directory of the
        /// daemon) or a bare name (looked up in `PATH` at start).
        public var command: String
        /// Its arguments (`argv[1...]`); `argv[0]` is the command's path.
        public var arguments: [String]
        /// Variables added to the command's environment (they win over inherited ones; `HERALD_MESSAGE_ID` wins over them).
        public var environment: [String: String]
        /// Whether the command inherits the daemon's environment (as it was at start).
        public var inheritEnvironment: Bool
        /// Where the command runs; `nil` is the daemon's working directory.
        public var workingDirectory: String?
        /// How long one run may take before it is ended (`SIGTERM`, then `SIGKILL`) and counted `.failed`.
        public var timeout: Duration
        /// How long an ended command has between `SIGTERM` and `SIGKILL`.
        public var killGracePeriod: Duration
        /// How many commands run at once; further fetches wait their turn.
        public var maxConcurrent: Int
        /// Exit statuses that mean "new data" (`.newData`).
        public var newDataStatuses: Set<Int32>
        /// Exit statuses that mean "nothing new" (`.noData`). Every other status is `.failed`.
        public var noDataStatuses: Set<Int32>
        /// How many bytes of a run's output (standard output and error together) are logged; the rest is dropped.
        public var maxCapturedOutputBytes: Int
        /// The plugin's name in logs (`plugin=`); give each of several instances its own.
        public var name: String

        public init(
            command: String,
            arguments: [String] = [],
            environment: [String: String] = [:],
            inheritEnvironment: Bool = true,
            workingDirectory: String? = nil,
            timeout: Duration = .seconds(25),
            killGracePeriod: Duration = .seconds(2),
            maxConcurrent: Int = 4,
            newDataStatuses: Set<Int32> = [0],
            noDataStatuses: Set<Int32> = [3],
            maxCapturedOutputBytes: Int = 64 * 1024,
            name: String = "exec-fetch"
        ) {
            self.command = command
            self.arguments = arguments
            self.environment = environment
            self.inheritEnvironment = inheritEnvironment
            self.workingDirectory = workingDirectory
            self.timeout = timeout
            self.killGracePeriod = killGracePeriod
            self.maxConcurrent = maxConcurrent
            self.newDataStatuses = newDataStatuses
            self.noDataStatuses = noDataStatuses
            self.maxCapturedOutputBytes = maxCapturedOutputBytes
            self.name = name
        }
    }

    /// The environment variable that carries the message ID (`gcm.message_id`) to the command.
    public static let messageIDVariable = "HERALD_MESSAGE_ID"

    /// The options given at init; ``setLimits(timeout:maxConcurrent:)`` may since have changed the timeout and the
    /// concurrency in force (``limits``).
    public let options: Options

    private struct Started {
        var loop: EventLoop
        var logger: Logger
        /// The command, resolved to an absolute path.
        var path: String
        /// The base environment: inherited, plus the options' additions (`NAME=value` each, without the message ID).
        var environment: [(String, String)]
    }

    private struct State {
        var started: Started?
        var stopping = false
        var runs: [UInt64: RunControl] = [:]
        var nextRun: UInt64 = 0
        var idleWaiters: [CheckedContinuation<Void, Never>] = []
        /// The timeout and concurrency in force.
        var limits: (timeout: Duration, maxConcurrent: Int)
    }

    private let state: Locked<State>
    private let limit: ConcurrencyLimit

    public init(options: Options) {
        self.options = options
        self.state = Locked(State(limits: (options.timeout, options.maxConcurrent)))
        self.limit = ConcurrencyLimit(limit: max(1, options.maxConcurrent))
    }

    /// The timeout of a run and how many commands run at once, as now in force.
    public var limits: (timeout: Duration, maxConcurrent: Int) { state.withLock { $0.limits } }

    /// Changes the timeout and the concurrency while the worker runs (a daemon's reload: ``applyLiveSettings(_:)``).
    /// The timeout applies to runs started from now on; a higher concurrency lets waiting fetches start at once, a
    /// lower one lets running commands finish and starts no new one until fewer than `maxConcurrent` run.
    /// Callable from any thread.
    ///
    /// - Throws: ``ExecFetchWorkerError/invalidOption(name:value:allowed:)`` for a timeout that is not positive or a
    ///   concurrency below 1; nothing changes then.
    public func setLimits(timeout: Duration, maxConcurrent: Int) throws(ExecFetchWorkerError) {
        guard timeout > .zero else { throw .invalidOption(name: "timeout", value: Self.format(timeout), allowed: "a positive duration") }
        guard maxConcurrent >= 1 else { throw .invalidOption(name: "max-concurrent", value: "\(maxConcurrent)", allowed: "at least 1") }
        // Both under the state's lock, so that calls at once leave the limit and `limits` agreeing.
        state.withLock { state in
            state.limits = (timeout, maxConcurrent)
            limit.setLimit(maxConcurrent)
        }
    }

    public var descriptor: PluginDescriptor {
        PluginDescriptor(
            name: options.name,
            summary:
                "runs a command for each silent message: the message as JSON on its standard input, its exit status as the fetch result")
    }

    // MARK: Plugin

    public func start(_ context: PluginContext) async throws {
        try validateOptions()
        let path = try Self.resolveCommand(options.command)
        if let directory = options.workingDirectory { try Self.checkDirectory(directory) }
        var environment: [(String, String)] = []
        if options.inheritEnvironment { environment = Self.currentEnvironment() }
        for (name, value) in options.environment.sorted(by: { $0.key < $1.key }) {
            environment.removeAll { $0.0 == name }
            environment.append((name, value))
        }
        let started = Started(loop: context.loop, logger: context.logger, path: path, environment: environment)
        let limits = state.withLock { state in
            state.started = started
            state.stopping = false
            return state.limits
        }
        limit.reopen()
        context.logger.info(
            "ready",
            metadata: [
                "command": "\(path)", "max_concurrent": "\(limits.maxConcurrent)", "timeout": "\(Self.format(limits.timeout))",
            ])
    }

    /// Ends every running command (`SIGTERM`, then `SIGKILL` after the grace period), fails the fetches waiting for a
    /// turn, and returns once every child has been reaped and every handle closed.
    public func stop() async {
        let runs: [RunControl] = state.withLock { state in
            state.stopping = true
            return Array(state.runs.values)
        }
        limit.close()
        for run in runs { run.terminate(.stopped) }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let idle: Bool = state.withLock { state in
                if state.runs.isEmpty { return true }
                state.idleWaiters.append(continuation)
                return false
            }
            if idle { continuation.resume() }
        }
    }

    // MARK: Fetch

    public func fetch(_ message: RemoteMessage) async -> BackgroundFetchResult {
        guard let started = state.withLock({ $0.stopping ? nil : $0.started }) else {
            return .failed
        }
        var logger = started.logger
        logger[metadataKey: "message_id"] = "\(message.messageID ?? "")"
        let waiting = {
            logger.debug(
                "waiting for a turn: as many commands run as max-concurrent allows",
                metadata: ["max_concurrent": "\(self.limits.maxConcurrent)"])
        }
        guard await limit.acquire(waiting: waiting) else {
            logger.warning(
                "the fetch was cancelled (or the worker stopped) while it waited for its turn (max-concurrent \(limits.maxConcurrent)); counted as failed"
            )
            return .failed
        }
        defer { limit.release() }
        let control = RunControl()
        let run: (id: UInt64, timeout: Duration)? = state.withLock { state in
            guard !state.stopping else { return nil }
            state.nextRun += 1
            state.runs[state.nextRun] = control
            return (state.nextRun, state.limits.timeout)
        }
        guard let (id, timeout) = run else { return .failed }
        defer { finishRun(id) }

        var environment = started.environment
        environment.removeAll { $0.0 == Self.messageIDVariable }
        environment.append((Self.messageIDVariable, message.messageID ?? ""))
        let spec = RunSpec(
            path: started.path,
            argv: [started.path] + options.arguments,
            environment: environment.map { "\($0.0)=\($0.1)" },
            workingDirectory: options.workingDirectory,
            input: JSONValue.object(message.userInfo).jsonBytes(),
            timeout: timeout,
            killGracePeriod: options.killGracePeriod,
            maxCapturedOutputBytes: options.maxCapturedOutputBytes,
            newDataStatuses: options.newDataStatuses,
            noDataStatuses: options.noDataStatuses
        )
        return await withTaskCancellationHandler {
            await control.run(spec, on: started.loop, logger: logger).result
        } onCancel: {
            control.terminate(.cancelled)
        }
    }

    private func finishRun(_ id: UInt64) {
        let waiters: [CheckedContinuation<Void, Never>] = state.withLock { state in
            state.runs[id] = nil
            guard state.runs.isEmpty else { return [] }
            defer { state.idleWaiters.removeAll() }
            return state.idleWaiters
        }
        for waiter in waiters { waiter.resume() }
    }

    /// How many commands run now, and the most that ever ran at once (for tests and metrics).
    public var runningCommands: (now: Int, most: Int) { limit.holders }

    // MARK: Validation

    private func validateOptions() throws(ExecFetchWorkerError) {
        if options.command.isEmpty {
            throw .invalidOption(name: "command", value: "\"\"", allowed: "give the program to run")
        }
        if options.maxConcurrent < 1 {
            throw .invalidOption(name: "max-concurrent", value: "\(options.maxConcurrent)", allowed: "at least 1")
        }
        if options.timeout <= .zero {
            throw .invalidOption(name: "timeout", value: Self.format(options.timeout), allowed: "a positive duration")
        }
        if options.killGracePeriod < .zero {
            throw .invalidOption(
                name: "kill-grace-period", value: Self.format(options.killGracePeriod), allowed: "zero or a positive duration")
        }
        if options.maxCapturedOutputBytes < 0 {
            throw .invalidOption(name: "max-captured-bytes", value: "\(options.maxCapturedOutputBytes)", allowed: "zero or more")
        }
        for (name, statuses) in [("new-data-status", options.newDataStatuses), ("no-data-status", options.noDataStatuses)] {
            if let bad = statuses.first(where: { !(0...255).contains($0) }) {
                throw .invalidOption(name: name, value: "\(bad)", allowed: "exit statuses are 0 to 255")
            }
        }
        let both = options.newDataStatuses.intersection(options.noDataStatuses)
        if let status = both.min() {
            throw .invalidOption(name: "no-data-status", value: "\(status)", allowed: "a status cannot mean both new data and no data")
        }
        for name in options.environment.keys where name.isEmpty || name.contains("=") || name.utf8.contains(0) {
            throw .invalidOption(name: "environment", value: name, allowed: "variable names are not empty and contain no '='")
        }
    }

    /// The command as an absolute path: checked to exist, to be a regular file, and to be executable by this user.
    static func resolveCommand(_ command: String) throws(ExecFetchWorkerError) -> String {
        if command.contains("/") {
            let path = command.hasPrefix("/") ? command : currentDirectory().map { "\($0)/\(command)" } ?? command
            try checkExecutable(path, asGiven: command)
            return path
        }
        let searchPath = getenv("PATH").map { String(cString: $0) } ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in searchPath.split(separator: ":", omittingEmptySubsequences: false) {
            let candidate = "\(directory.isEmpty ? "." : String(directory))/\(command)"
            var info = stat()
            guard stat(candidate, &info) == 0, info.st_mode & S_IFMT == S_IFREG, access(candidate, X_OK) == 0 else { continue }
            return candidate.hasPrefix("/") ? candidate : currentDirectory().map { "\($0)/\(candidate)" } ?? candidate
        }
        throw .commandNotFound(command: command, searchPath: searchPath)
    }

    private static func checkExecutable(_ path: String, asGiven command: String) throws(ExecFetchWorkerError) {
        var info = stat()
        guard stat(path, &info) == 0 else {
            if errno == EACCES { throw .commandNotExecutable(path: path) }
            throw .commandNotFound(command: path, searchPath: nil)
        }
        guard info.st_mode & S_IFMT == S_IFREG else { throw .commandNotARegularFile(path: path) }
        guard access(path, X_OK) == 0 else { throw .commandNotExecutable(path: path) }
    }

    private static func checkDirectory(_ path: String) throws(ExecFetchWorkerError) {
        var info = stat()
        guard stat(path, &info) == 0 else {
            throw .workingDirectoryUnusable(path: path, reason: String(cString: strerror(errno)))
        }
        guard info.st_mode & S_IFMT == S_IFDIR else { throw .workingDirectoryUnusable(path: path, reason: "not a directory") }
        guard access(path, X_OK) == 0 else { throw .workingDirectoryUnusable(path: path, reason: "this user may not enter it") }
    }

    private static func currentDirectory() -> String? {
        guard let pointer = getcwd(nil, 0) else { return nil }
        defer { free(pointer) }
        return String(cString: pointer)
    }

    private static func currentEnvironment() -> [(String, String)] {
        var variables: [(String, String)] = []
        var entry = environ
        while let pointer = entry.pointee {
            let text = String(cString: pointer)
            if let equals = text.firstIndex(of: "=") {
                variables.append((String(text[..<equals]), String(text[text.index(after: equals)...])))
            }
            entry += 1
        }
        return variables
    }

    /// `25s`, `1.5s`, `250ms`: a duration as the options table writes it.
    static func format(_ duration: Duration) -> String {
        let (seconds, attoseconds) = duration.components
        let milliseconds = seconds * 1000 + attoseconds / 1_000_000_000_000_000
        if milliseconds % 1000 == 0 { return "\(milliseconds / 1000)s" }
        if milliseconds < 1000 { return "\(milliseconds)ms" }
        return "\(Double(milliseconds) / 1000)s"
    }
}

/// One fetch's run, as other threads see it: started on the loop, ended from any thread (cancellation, stop).
final class RunControl: Sendable {
    private struct State {
        var run: ChildRun?
        /// An end asked for before the run existed: the command is then never started.
        var pendingTermination: Termination?
        var loop: EventLoop?
    }

    private let state = Locked(State())
    private let outcome = Locked<(value: RunOutcome?, waiter: CheckedContinuation<RunOutcome, Never>?)>((nil, nil))

    /// Starts the command on `loop` and waits until it has finished (reaped, every handle closed).
    func run(_ spec: RunSpec, on loop: EventLoop, logger: Logger) async -> RunOutcome {
        do {
            try await loop.submit { [self] in
                let alreadyEnded: Termination? = state.withLock { state in
                    state.loop = loop
                    return state.pendingTermination
                }
                if let alreadyEnded {
                    logger.warning("not starting the command: \(alreadyEnded.text)")
                    fulfil(RunOutcome(ending: .notStarted(reason: alreadyEnded.text), termination: alreadyEnded, result: .failed))
                    return
                }
                let run = ChildRun(loop: loop, spec: spec, logger: logger) { [self] outcome in fulfil(outcome) }
                state.withLock { $0.run = run }
                run.start()
                // An end asked for meanwhile found the run already set, or will: terminate() is idempotent.
                if let ended = state.withLock({ $0.pendingTermination }) { run.terminate(ended) }
            }
        } catch {
            logger.error("cannot run the command: the event loop has shut down")
            return RunOutcome(ending: .notStarted(reason: "the event loop has shut down"), termination: nil, result: .failed)
        }
        return await withCheckedContinuation { (continuation: CheckedContinuation<RunOutcome, Never>) in
            let ready: RunOutcome? = outcome.withLock { outcome in
                if outcome.value == nil { outcome.waiter = continuation }
                return outcome.value
            }
            if let ready { continuation.resume(returning: ready) }
        }
    }

    /// Ends the command (or keeps it from starting). Callable from any thread; the first reason counts.
    func terminate(_ reason: Termination) {
        let target: (ChildRun, EventLoop)? = state.withLock { state in
            if state.pendingTermination == nil { state.pendingTermination = reason }
            guard let run = state.run, let loop = state.loop else { return nil }
            return (run, loop)
        }
        guard let (run, loop) = target else { return }
        loop.execute { run.terminate(reason) }
    }

    private func fulfil(_ value: RunOutcome) {
        let waiter: CheckedContinuation<RunOutcome, Never>? = outcome.withLock { outcome in
            outcome.value = value
            defer { outcome.waiter = nil }
            return outcome.waiter
        }
        waiter?.resume(returning: value)
    }
}
