import CCurl

/// An `http://` or `https://` URL as ``HTTPClient`` sends to it, checked by curl's own URL parser.
///
/// Refused with ``HTTPClientError/invalidURL(_:reason:)``: other schemes, a URL curl cannot parse (spaces, a bad
/// port, no host), and user information (`user:password@`: give a secret in a header instead, where it stays out of
/// the logs). A fragment (`#...`) is never sent.
public struct HTTPURL: Sendable, Hashable, CustomStringConvertible {
    /// `http` or `https`.
    public let scheme: String
    /// The host as curl reads it (an IPv6 address in brackets).
    public let host: String
    /// The port, the scheme's default when the URL names none.
    public let port: Int
    /// The URL as sent, without a fragment.
    public let description: String

    public init(parsing url: String) throws(HTTPClientError) {
        func refuse(_ reason: String) -> HTTPClientError { .invalidURL(url, reason: reason) }
        guard let handle = curl_url() else {
            throw refuse(herald_curl_load_failure().map { String(cString: $0) } ?? "curl could not allocate a URL handle")
        }
        defer { curl_url_cleanup(handle) }
        let parsed = curl_url_set(handle, CURLUPART_URL, url, 0)
        guard parsed == CURLUE_OK else { throw refuse(String(cString: curl_url_strerror(parsed))) }
        func part(_ which: CURLUPart, flags: UInt32 = 0) -> String? {
            var text: UnsafeMutablePointer<CChar>?
            guard curl_url_get(handle, which, &text, flags) == CURLUE_OK, let text else { return nil }
            defer { curl_free(text) }
            return String(cString: text)
        }
        let scheme = part(CURLUPART_SCHEME)?.lowercased() ?? ""
        guard scheme == "http" || scheme == "https" else {
            throw refuse("only http:// and https:// URLs are supported, not \(scheme.isEmpty ? "this one" : "\(scheme)://")")
        }
        guard part(CURLUPART_USER) == nil, part(CURLUPART_PASSWORD) == nil else {
            throw refuse("user information in the URL is not supported; send the secret in a header (a bearer secret option) instead")
        }
        guard let host = part(CURLUPART_HOST), !host.isEmpty else { throw refuse("the URL names no host") }
        guard let portText = part(CURLUPART_PORT, flags: UInt32(CURLU_DEFAULT_PORT)), let port = Int(portText), (1...65535).contains(port)
        else {
            throw refuse("the port must be a number in 1...65535")
        }
        _ = curl_url_set(handle, CURLUPART_FRAGMENT, nil, 0)
        guard let full = part(CURLUPART_URL) else { throw refuse("curl cannot write the URL back") }
        self.scheme = scheme
        self.host = host
        self.port = port
        self.description = full
    }
}
