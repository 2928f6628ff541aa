/// Why ``ExecFetchWorker`` refused to start: its command or its options cannot work. The description names the
/// command (or the option) and says what to fix; Herald wraps it in `HeraldError.pluginFailedToStart`.
public enum ExecFetchWorkerError: Error, Sendable, Hashable, CustomStringConvertible {
    /// The command does not exist. `searchPath` is the `PATH` searched for a bare name, `nil` for a path.
    case commandNotFound(command: String, searchPath: String?)
    /// The command exists but this user may not execute it.
    case commandNotExecutable(path: String)
    /// The command is not a regular file (a directory, a device, ...).
    case commandNotARegularFile(path: String)
    /// The working directory does not exist or is not a directory.
    case workingDirectoryUnusable(path: String, reason: String)
    /// An option has a value the worker cannot use.
    case invalidOption(name: String, value: String, allowed: String)

    public var description: String {
        switch self {
        case .commandNotFound(let command, nil):
            "exec-fetch: the command \(command) does not exist"
        case .commandNotFound(let command, let searchPath?):
            "exec-fetch: the command \(command) was not found in PATH (\(searchPath)); give its full path"
        case .commandNotExecutable(let path):
            "exec-fetch: the command \(path) is not executable by this user; make it executable (chmod +x) or run it through its interpreter (command /bin/sh, arguments [\(path)])"
        case .commandNotARegularFile(let path):
            "exec-fetch: the command \(path) is not a program (not a regular file)"
        case .workingDirectoryUnusable(let path, let reason):
            "exec-fetch: the working directory \(path) cannot be used: \(reason)"
        case .invalidOption(let name, let value, let allowed):
            "exec-fetch: option \(name) = \(value) is not allowed; \(allowed)"
        }
    }
}
