import CLibUV

/// An error reported by libuv, carrying libuv's error name (`ECONNREFUSED`, `EADDRINUSE`, ...),
/// its text, and the operation that failed.
///
/// Compare errors by ``code`` (or with the static constants below); ``name`` and ``message`` are for people.
public struct UVError: Error, Sendable, Equatable, CustomStringConvertible {
    /// libuv's negative error code (`UV_ECONNREFUSED`, ...).
    public let code: Int32
    /// What Herald was doing when libuv answered with the error, for example `listen on /run/herald.sock`.
    public let operation: String

    public init(code: Int32, operation: String) {
        self.code = code
        self.operation = operation
    }

    /// libuv's name for the error, for example `ECONNREFUSED`.
    public var name: String { String(cString: uv_err_name(code)) }

    /// libuv's text for the error, for example `connection refused`.
    public var message: String { String(cString: uv_strerror(code)) }

    public var description: String { "\(name): \(message) (\(operation))" }

    /// Two errors are equal when libuv's code is; the operation is context for people.
    public static func == (lhs: UVError, rhs: UVError) -> Bool { lhs.code == rhs.code }

    public static let addressInUse = UVError(code: Int32(UV_EADDRINUSE.rawValue), operation: "")
    public static let connectionRefused = UVError(code: Int32(UV_ECONNREFUSED.rawValue), operation: "")
    public static let connectionReset = UVError(code: Int32(UV_ECONNRESET.rawValue), operation: "")
    public static let brokenPipe = UVError(code: Int32(UV_EPIPE.rawValue), operation: "")
    public static let endOfFile = UVError(code: Int32(UV_EOF.rawValue), operation: "")
    public static let cancelled = UVError(code: Int32(UV_ECANCELED.rawValue), operation: "")
    public static let invalidArgument = UVError(code: Int32(UV_EINVAL.rawValue), operation: "")
    public static let notFound = UVError(code: Int32(UV_ENOENT.rawValue), operation: "")
    public static let tooManyOpenFiles = UVError(code: Int32(UV_EMFILE.rawValue), operation: "")
    public static let notConnected = UVError(code: Int32(UV_ENOTCONN.rawValue), operation: "")

    /// Throws a ``UVError`` when `result` is a libuv error code (negative); returns it otherwise.
    @discardableResult
    static func check(_ result: Int32, _ operation: @autoclosure () -> String) throws(UVError) -> Int32 {
        if result < 0 { throw UVError(code: result, operation: operation()) }
        return result
    }
}

/// Errors of the event loop itself, as opposed to the operating-system errors in ``UVError``.
public enum EventLoopError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The loop has begun shutting down (or has shut down) and takes no new work of this kind.
    case shutDown
    /// The loop is already running; `run()` and `start()` may be called once.
    case alreadyRunning
    /// The blocking pool's queue is full; try again later or raise `BlockingPool` limits.
    case poolExhausted(limit: Int)
    /// The loop thread could not be created.
    case threadCreationFailed(errno: Int32)

    public var description: String {
        switch self {
        case .shutDown: "the event loop is shutting down or has shut down"
        case .alreadyRunning: "the event loop is already running; run() and start() may be called once"
        case .poolExhausted(let limit): "the blocking pool queue is full (\(limit) jobs waiting)"
        case .threadCreationFailed(let code): "could not create the event loop thread (errno \(code))"
        }
    }
}
