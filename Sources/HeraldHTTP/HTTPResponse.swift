public import HeraldJSON

/// One answer: a status, its fields and a body. A session adds what its framing needs (HTTP/1.1's status line,
/// `Content-Length` and `Connection: close`; HTTP/2's `:status` and `content-length`).
public struct HTTPResponse: Sendable {
    public var status: Int
    /// The `Content-Type` field; `nil` for none (an empty body usually has none).
    public var contentType: String?
    /// Further fields, written in this order after `Content-Type` and `Content-Length`.
    public var headers: [(name: String, value: String)]
    public var body: [UInt8]

    public init(status: Int, contentType: String? = nil, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.status = status
        self.contentType = contentType
        self.headers = headers
        self.body = body
    }

    /// The `Content-Type` of ``json(_:_:headers:)``.
    public static let jsonContentType = "application/json; charset=UTF-8"

    /// `value` written as compact JSON, `Content-Type: application/json; charset=UTF-8`.
    public static func json(_ status: Int, _ value: JSONValue, headers: [(name: String, value: String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, contentType: jsonContentType, headers: headers, body: value.jsonBytes())
    }

    /// `text` as `text/plain; charset=utf-8`.
    public static func text(_ status: Int, _ text: String, headers: [(name: String, value: String)] = []) -> HTTPResponse {
        HTTPResponse(status: status, contentType: "text/plain; charset=utf-8", headers: headers, body: Array(text.utf8))
    }
}

/// Status codes' reason phrases, in one table (RFC 9110's, and 429 and 431 of RFC 6585). HTTP/1.1 writes them in
/// its status line; HTTP/2 has none.
public enum HTTPStatus {
    /// The reason phrase of `status`; `Status` for a code the table does not know (the phrase means nothing to a
    /// client, which reads the code).
    public static func reasonPhrase(_ status: Int) -> String {
        switch status {
        case 100: "Continue"
        case 101: "Switching Protocols"
        case 200: "OK"
        case 201: "Created"
        case 202: "Accepted"
        case 204: "No Content"
        case 206: "Partial Content"
        case 301: "Moved Permanently"
        case 302: "Found"
        case 303: "See Other"
        case 304: "Not Modified"
        case 307: "Temporary Redirect"
        case 308: "Permanent Redirect"
        case 400: "Bad Request"
        case 401: "Unauthorized"
        case 403: "Forbidden"
        case 404: "Not Found"
        case 405: "Method Not Allowed"
        case 406: "Not Acceptable"
        case 408: "Request Timeout"
        case 409: "Conflict"
        case 410: "Gone"
        case 411: "Length Required"
        case 412: "Precondition Failed"
        case 413: "Payload Too Large"
        case 414: "URI Too Long"
        case 415: "Unsupported Media Type"
        case 417: "Expectation Failed"
        case 421: "Misdirected Request"
        case 422: "Unprocessable Content"
        case 426: "Upgrade Required"
        case 429: "Too Many Requests"
        case 431: "Request Header Fields Too Large"
        case 500: "Internal Server Error"
        case 501: "Not Implemented"
        case 502: "Bad Gateway"
        case 503: "Service Unavailable"
        case 504: "Gateway Timeout"
        case 505: "HTTP Version Not Supported"
        default: "Status"
        }
    }
}
