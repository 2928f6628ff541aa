/// What answers a server's requests: a session (HTTP/1.1 or HTTP/2) reads each request whole and hands it to
/// ``handle(_:responder:)``. ``HTTPRouter`` is one, a route table.
///
/// Every method is called on the connection's loop thread.
public protocol HTTPRequestHandler: AnyObject {
    /// Answers `request` through `responder`, at once or later.
    func handle(_ request: HTTPRequest, responder: HTTPResponder)

    /// Called with the head of a request whose client waits to be told to send the body (`Expect: 100-continue`),
    /// its ``HTTPRequest/body`` empty: answers through `responder` and returns `true` when the request is refused
    /// whatever its body (unauthorized, no such route); the session then closes the connection after the answer,
    /// the body unread. Returns `false` to have the body read (the client is sent `100 Continue`) and
    /// ``handle(_:responder:)`` called as usual. By default, `false`.
    func handleHead(_ request: HTTPRequest, responder: HTTPResponder) -> Bool

    /// The answer to a request the session refuses itself (malformed, over a limit, too slow). By default the
    /// error's message as plain text.
    func response(to error: HTTPRequestError) -> HTTPResponse
}

extension HTTPRequestHandler {
    public func handleHead(_ request: HTTPRequest, responder: HTTPResponder) -> Bool { false }

    public func response(to error: HTTPRequestError) -> HTTPResponse {
        .text(error.status, error.message + "\n")
    }
}

/// A request a session refuses before any handler sees it; the connection closes after the answer.
public enum HTTPRequestError: Error, Sendable, Equatable {
    /// The parser could not read the request (http_parser's error name, `HPE_INVALID_METHOD` for example): 400.
    case unparsable(String)
    /// The parser read it, but RFC 9112 says a server must refuse it (folded lines, a space before a colon, no or
    /// two `Host` fields, a bare CR in a chunked body's framing): 400, with what was wrong.
    case malformed(String)
    /// The request line and fields are over ``HTTPServerLimits/maximumHeaderBytes``: 431.
    case headerTooLarge(limit: Int)
    /// The body (announced, or counted as it came) is over ``HTTPServerLimits/maximumBodyBytes``: 413.
    case bodyTooLarge(size: Int, limit: Int)
    /// The request did not arrive whole within ``HTTPServerLimits/requestTimeout`` of its first byte: 408.
    case timedOut(Duration)
    /// An `Expect` other than `100-continue`: 417.
    case unsupportedExpectation(String)

    /// The status the refusal is answered with.
    public var status: Int {
        switch self {
        case .unparsable, .malformed: 400
        case .headerTooLarge: 431
        case .bodyTooLarge: 413
        case .timedOut: 408
        case .unsupportedExpectation: 417
        }
    }

    /// What went wrong, in a sentence for the client.
    public var message: String {
        switch self {
        case .unparsable(let name): "Malformed HTTP request (\(name))."
        case .malformed(let detail): "Malformed HTTP request: \(detail)"
        case .headerTooLarge(let limit): "The request line and headers are over \(limit) bytes; at most \(limit) are allowed."
        case .bodyTooLarge(let size, let limit): "The request body is \(size) bytes; at most \(limit) are allowed."
        case .timedOut(let timeout): "The request did not arrive within \(timeout) of its first byte."
        case .unsupportedExpectation(let expectation): "Unsupported expectation \"\(expectation)\"; only 100-continue is."
        }
    }
}
