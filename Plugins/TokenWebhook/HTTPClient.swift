public import Herald

/// A small HTTP/1.1 client on Herald's event loop: one request per connection (`Connection: close`), plain
/// `http://` to numeric hosts or `localhost` (``HTTPEndpoint``), a deadline for the whole exchange (connect,
/// write and response), and prompt cancellation. No TLS, no DNS, no redirects, no keep-alive: enough to
/// tell an app server something and read its status, as ``TokenWebhook`` does.
///
/// ```swift
/// let client = HTTPClient(loop: herald.loop)
/// let response = try await client.send(HTTPRequest(method: "POST", endpoint: try HTTPEndpoint(parsing: "http://127.0.0.1:8000/token"),
///                                                  headers: [("Content-Type", "application/json")], body: Array(#"{"a":1}"#.utf8)),
///                                      timeout: .seconds(10))
/// print(response.status)
/// ```
public struct HTTPClient: Sendable {
    /// The loop the connections live on.
    public let loop: EventLoop
    /// How much of a response body is kept (the rest is read and dropped; ``HTTPResponse/bodyTruncated`` tells).
    public var maximumBodyBytes: Int

    public init(loop: EventLoop, maximumBodyBytes: Int = 64 * 1024) {
        self.loop = loop
        self.maximumBodyBytes = maximumBodyBytes
    }

    /// Sends `request` and returns the response, whatever its status. Callable from any context.
    ///
    /// Throws ``HTTPClientError`` (`connectFailed`, `timedOut`, `connectionClosed`, `malformedResponse`),
    /// `CancellationError` when the calling task is cancelled (the connection is closed at once), and
    /// `EventLoopError/shutDown` when the loop is shutting down.
    public func send(_ request: HTTPRequest, timeout: Duration) async throws -> HTTPResponse {
        try Task.checkCancellation()
        let exchange = HTTPExchange(
            loop: loop, endpoint: request.endpoint, request: try request.serialized(),
            timeout: timeout, maximumBodyBytes: maximumBodyBytes)
        return try await withTaskCancellationHandler {
            try await loop.submit { exchange.start() }
            return try await exchange.response()
        } onCancel: {
            exchange.cancel()
        }
    }
}

/// One HTTP request for ``HTTPClient``.
public struct HTTPRequest: Sendable {
    public var method: String
    public var endpoint: HTTPEndpoint
    /// Header fields besides `Host`, `Content-Length` and `Connection`, which the client writes itself.
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(method: String, endpoint: HTTPEndpoint, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.method = method
        self.endpoint = endpoint
        self.headers = headers
        self.body = body
    }

    /// The bytes on the wire. Throws ``HTTPClientError/invalidRequest(_:)`` for a method or header that would
    /// break the framing (a line end in a value, a name that is not a token).
    func serialized() throws -> [UInt8] {
        func isToken(_ text: String) -> Bool {
            !text.isEmpty
                && text.utf8.allSatisfy { byte in
                    (byte >= 0x30 && byte <= 0x39) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A)
                        || "!#$%&'*+-.^_`|~".utf8.contains(byte)
                }
        }
        guard isToken(method) else { throw HTTPClientError.invalidRequest("the method '\(method)' is not an HTTP token") }
        var head = "\(method) \(endpoint.target) HTTP/1.1\r\nHost: \(endpoint.hostHeader)\r\n"
        for (name, value) in headers {
            guard isToken(name) else { throw HTTPClientError.invalidRequest("the header name '\(name)' is not an HTTP token") }
            guard value.utf8.allSatisfy({ $0 == 0x09 || ($0 >= 0x20 && $0 != 0x7F) }) else {
                throw HTTPClientError.invalidRequest("the value of header '\(name)' holds a line end or control character")
            }
            head += "\(name): \(value)\r\n"
        }
        head += "Content-Length: \(body.count)\r\nConnection: close\r\n\r\n"
        return Array(head.utf8) + body
    }
}

/// Why an HTTP exchange failed. Every case but ``unsupportedURL(_:reason:)`` and ``invalidRequest(_:)`` may be
/// temporary: ``TokenWebhook`` retries them.
public enum HTTPClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The URL is not one the client can reach; the reason says what to do instead.
    case unsupportedURL(String, reason: String)
    /// The request cannot be written as HTTP/1.1.
    case invalidRequest(String)
    /// The connection could not be made (refused, unreachable, reset).
    case connectFailed(String, error: String)
    /// No complete response within the timeout.
    case timedOut(String, after: Duration)
    /// The connection ended before the response did, or broke while the request was written.
    case connectionClosed(String)
    /// The bytes that came back are not an HTTP/1.x response.
    case malformedResponse(String)

    public var description: String {
        switch self {
        case .unsupportedURL(let url, let reason): "unsupported URL '\(url)': \(reason)"
        case .invalidRequest(let reason): "invalid HTTP request: \(reason)"
        case .connectFailed(let endpoint, let error): "cannot connect to \(endpoint): \(error)"
        case .timedOut(let endpoint, let after): "no complete answer from \(endpoint) within \(after)"
        case .connectionClosed(let reason): "connection lost: \(reason)"
        case .malformedResponse(let reason): "malformed HTTP response: \(reason)"
        }
    }
}

/// One request and its response on the loop. The loop-side state is only touched on the loop thread; the
/// result is handed to the awaiting task through `shared`, whichever of the two comes first.
final class HTTPExchange: @unchecked Sendable {
    // @unchecked Sendable: `shared` is behind a lock; every other mutable member is only used on the loop thread
    // (start, the connection's callbacks, the timer and `complete` all run there).
    private struct Shared {
        var result: Result<HTTPResponse, any Error>?
        var continuation: CheckedContinuation<HTTPResponse, any Error>?
        var cancelled = false
    }

    private let shared = Locked(Shared())
    private let loop: EventLoop
    private let endpoint: HTTPEndpoint
    private let request: [UInt8]
    private let timeout: Duration
    private var parser: HTTPResponseParser
    private var connection: StreamConnection?
    private var timer: ScheduledTask?
    private var started = false
    private var finished = false

    init(loop: EventLoop, endpoint: HTTPEndpoint, request: [UInt8], timeout: Duration, maximumBodyBytes: Int) {
        self.loop = loop
        self.endpoint = endpoint
        self.request = request
        self.timeout = timeout
        self.parser = HTTPResponseParser(maximumBodyBytes: maximumBodyBytes)
    }

    /// Connects, writes the request and reads the response. Loop thread.
    func start() {
        loop.preconditionInEventLoop()
        guard !started, !finished else { return }
        started = true
        if shared.withLock({ $0.cancelled }) {
            complete(.failure(CancellationError()))
            return
        }
        let endpoint = self.endpoint
        let timeout = self.timeout
        timer = loop.scheduleTask(in: timeout) { [weak self] in
            self?.complete(.failure(HTTPClientError.timedOut("\(endpoint)", after: timeout)))
        }
        StreamConnection.connect(to: endpoint.address, on: loop) { [self] result in
            switch result {
            case .failure(let error):
                if let loopError = error as? EventLoopError {
                    complete(.failure(loopError))
                } else {
                    complete(.failure(HTTPClientError.connectFailed("\(endpoint)", error: "\(error)")))
                }
            case .success(let connection):
                guard !finished else {
                    connection.close()  // timed out or cancelled while connecting
                    return
                }
                self.connection = connection
                connection.onRead = { [self] bytes in
                    do {
                        if let response = try parser.feed(bytes) { complete(.success(response)) }
                    } catch {
                        complete(.failure(error))
                    }
                }
                connection.onEnd = { [self] in
                    complete(Result { try parser.finish() })
                }
                connection.onClose = { [self] error in
                    if let error {
                        complete(.failure(HTTPClientError.connectionClosed("\(error)")))
                    } else {
                        complete(.failure(EventLoopError.shutDown))  // closed by the loop's shutdown, not by us
                    }
                }
                connection.write(request)
                connection.startReading()
            }
        }
    }

    /// Stops the exchange from any thread: it ends with `CancellationError`, its connection closed.
    func cancel() {
        shared.withLock { $0.cancelled = true }
        loop.execute { [self] in
            guard started else { return }  // start() sees the flag
            complete(.failure(CancellationError()))
        }
    }

    /// The response, once the exchange has ended. Any context.
    func response() async throws -> HTTPResponse {
        try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<HTTPResponse, any Error>) in
            let ready: Result<HTTPResponse, any Error>? = shared.withLock { shared in
                if let result = shared.result { return result }
                shared.continuation = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }

    /// Ends the exchange once: stops the timer, closes the connection, hands the result over. Loop thread.
    private func complete(_ result: Result<HTTPResponse, any Error>) {
        guard !finished else { return }
        finished = true
        timer?.cancel()
        timer = nil
        if let connection {
            self.connection = nil
            connection.onClose = nil
            connection.close()
        }
        let waiting: CheckedContinuation<HTTPResponse, any Error>? = shared.withLock { shared in
            guard let continuation = shared.continuation else {
                shared.result = result
                return nil
            }
            shared.continuation = nil
            return continuation
        }
        waiting?.resume(with: result)
    }
}
