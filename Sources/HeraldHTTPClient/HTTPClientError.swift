import CCurl

/// Why a request of ``HTTPClient`` failed. Each case names the URL and says what went wrong in curl's words.
///
/// ``invalidURL(_:reason:)`` and ``invalidRequest(_:)`` are the caller's mistakes and fail before anything is sent;
/// every other case may be temporary and is worth retrying, except ``certificateRejected(_:detail:)``, which needs
/// a person (a wrong CA file, an expired or mismatched certificate).
public enum HTTPClientError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The URL is not one the client can reach; the reason says why.
    case invalidURL(String, reason: String)
    /// The request cannot be sent as given (a method or header that would break the framing, a bad limit).
    case invalidRequest(String)
    /// The host name did not resolve.
    case resolveFailed(String, detail: String)
    /// No connection could be made (refused, unreachable).
    case connectFailed(String, detail: String)
    /// The TLS handshake failed for a reason other than the server's certificate (no common protocol or cipher,
    /// a server that does not speak TLS).
    case tlsFailed(String, detail: String)
    /// The server's certificate was not trusted: unknown issuer, expired, or for another name.
    case certificateRejected(String, detail: String)
    /// No complete response within the request's timeout.
    case timedOut(String, after: Duration)
    /// The response body is longer than the request's limit.
    case responseTooLarge(String, limit: Int)
    /// The connection ended or broke before the response did.
    case connectionLost(String, detail: String)
    /// What came back is not a valid HTTP response (bad framing, a broken HTTP/2 stream).
    case malformedResponse(String, detail: String)
    /// Any other failure curl reports.
    case failed(String, detail: String)

    public var description: String {
        switch self {
        case .invalidURL(let url, let reason): "invalid URL '\(url)': \(reason)"
        case .invalidRequest(let reason): "invalid HTTP request: \(reason)"
        case .resolveFailed(let url, let detail): "cannot resolve the host of \(url): \(detail)"
        case .connectFailed(let url, let detail): "cannot connect to \(url): \(detail)"
        case .tlsFailed(let url, let detail): "TLS handshake with \(url) failed: \(detail)"
        case .certificateRejected(let url, let detail): "the certificate of \(url) is not trusted: \(detail)"
        case .timedOut(let url, let after): "no complete answer from \(url) within \(after)"
        case .responseTooLarge(let url, let limit): "the answer of \(url) is longer than the limit of \(limit) bytes"
        case .connectionLost(let url, let detail): "connection to \(url) lost: \(detail)"
        case .malformedResponse(let url, let detail): "malformed HTTP response from \(url): \(detail)"
        case .failed(let url, let detail): "request to \(url) failed: \(detail)"
        }
    }

    /// The error for curl's `code`; `detail` is curl's error buffer (its message for the code when empty).
    init(code: CURLcode, url: String, detail rawDetail: String, timeout: Duration, limit: Int) {
        let detail = rawDetail.isEmpty ? String(cString: curl_easy_strerror(code)) : rawDetail
        switch code {
        case CURLE_URL_MALFORMAT:
            self = .invalidURL(url, reason: detail)
        case CURLE_COULDNT_RESOLVE_HOST, CURLE_COULDNT_RESOLVE_PROXY:
            self = .resolveFailed(url, detail: detail)
        case CURLE_COULDNT_CONNECT:
            self = .connectFailed(url, detail: detail)
        case CURLE_OPERATION_TIMEDOUT:
            self = .timedOut(url, after: timeout)
        case CURLE_PEER_FAILED_VERIFICATION, CURLE_SSL_CACERT_BADFILE, CURLE_SSL_PINNEDPUBKEYNOTMATCH, CURLE_SSL_ISSUER_ERROR,
            CURLE_SSL_INVALIDCERTSTATUS:
            self = .certificateRejected(url, detail: detail)
        case CURLE_SSL_CONNECT_ERROR, CURLE_SSL_CERTPROBLEM, CURLE_SSL_CIPHER, CURLE_SSL_ENGINE_NOTFOUND, CURLE_SSL_ENGINE_SETFAILED,
            CURLE_SSL_ENGINE_INITFAILED, CURLE_SSL_SHUTDOWN_FAILED, CURLE_SSL_CRL_BADFILE, CURLE_USE_SSL_FAILED:
            self = .tlsFailed(url, detail: detail)
        case CURLE_FILESIZE_EXCEEDED:
            self = .responseTooLarge(url, limit: limit)
        case CURLE_RECV_ERROR where detail.contains("chunked-encoding"):
            // curl reports a broken chunked framing as a receive error; the connection did not fail.
            self = .malformedResponse(url, detail: detail)
        case CURLE_GOT_NOTHING, CURLE_SEND_ERROR, CURLE_RECV_ERROR, CURLE_PARTIAL_FILE:
            self = .connectionLost(url, detail: detail)
        // The URL was checked before: an unsupported protocol here is an answer in none (HTTP/0.9, a bad status line).
        case CURLE_UNSUPPORTED_PROTOCOL, CURLE_WEIRD_SERVER_REPLY, CURLE_HTTP2, CURLE_HTTP2_STREAM, CURLE_BAD_CONTENT_ENCODING,
            CURLE_HTTP_RETURNED_ERROR:
            self = .malformedResponse(url, detail: detail)
        default:
            self = .failed(url, detail: detail)
        }
    }
}
