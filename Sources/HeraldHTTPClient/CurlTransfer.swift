import CCurl
import CLibUV
import Glibc
import HeraldEventLoop

/// One request as a curl easy handle, and its response as it arrives. The easy handle and the response are used on
/// the loop thread only; the result reaches the awaiting task through `shared`, whichever of the two comes first.
final class CurlTransfer: @unchecked Sendable {
    // @unchecked Sendable: `shared` is behind a lock; every other mutable member is used on the loop thread only
    // (the engine's calls and curl's callbacks, which run inside the engine's calls).
    private struct Shared {
        var result: Result<HTTPResponse, any Error>?
        var continuation: CheckedContinuation<HTTPResponse, any Error>?
        var cancelled = false
    }

    /// curl's no_proxy list when the environment names the proxy: `no_proxy` (or `NO_PROXY`, as curl reads them)
    /// with the loopback names added, unless it is `*` (no proxy for anything). Setting the option replaces the
    /// variable, hence the merge.
    static let noProxyWithLoopback: String = {
        let loopback = "localhost,127.0.0.1,::1"
        // curl ignores blanks around the entries.
        let listed = ((getenv("no_proxy") ?? getenv("NO_PROXY")).map { String(cString: $0) } ?? "").filter { $0 != " " && $0 != "\t" }
        if listed == "*" { return listed }
        return listed.isEmpty ? loopback : "\(listed),\(loopback)"
    }()

    let request: PreparedRequest
    let timeout: Duration
    let maximumResponseBytes: Int
    private let shared = Locked(Shared())

    /// The easy handle while the transfer runs.
    private(set) var easy: UnsafeMutableRawPointer?
    private var headerList: UnsafeMutablePointer<curl_slist>?
    private let errorBuffer: UnsafeMutablePointer<CChar>
    private var headers: [(name: String, value: String)] = []
    private var body: [UInt8] = []
    private var tooLarge = false
    private var finished = false

    init(request: PreparedRequest, timeout: Duration, maximumResponseBytes: Int) {
        self.request = request
        self.timeout = timeout
        self.maximumResponseBytes = maximumResponseBytes
        errorBuffer = .allocate(capacity: Int(CURL_ERROR_SIZE))
        errorBuffer.initialize(repeating: 0, count: Int(CURL_ERROR_SIZE))
    }

    deinit {
        releaseEasyHandle()
        errorBuffer.deallocate()
    }

    var isCancelled: Bool { shared.withLock { $0.cancelled } }

    /// Marks the transfer cancelled, from any thread; the engine then ends it on the loop.
    func markCancelled() { shared.withLock { $0.cancelled = true } }

    /// Makes the easy handle of the request. Loop thread.
    func makeEasyHandle(configuration: HTTPClient.Configuration) throws -> UnsafeMutableRawPointer {
        guard let easy = curl_easy_init() else { throw HTTPClientError.failed(request.url.description, detail: "curl_easy_init failed") }
        self.easy = easy
        for line in request.headerLines { headerList = curl_slist_append(headerList, line) }
        let this = Unmanaged.passUnretained(self).toOpaque()
        var code = CURLE_OK
        func set(_ option: CURLoption, _ value: Int) {
            if code == CURLE_OK { code = herald_curl_easy_setopt_long(easy, option, value) }
        }
        func set(_ option: CURLoption, _ value: String) {
            if code == CURLE_OK { code = herald_curl_easy_setopt_pointer(easy, option, value) }
        }
        func set(_ option: CURLoption, pointer: UnsafeRawPointer?) {
            if code == CURLE_OK { code = herald_curl_easy_setopt_pointer(easy, option, pointer) }
        }
        set(CURLOPT_URL, request.url.description)
        set(CURLOPT_PROTOCOLS_STR, "http,https")
        set(CURLOPT_NOSIGNAL, 1)
        set(CURLOPT_ERRORBUFFER, pointer: errorBuffer)
        set(CURLOPT_HTTPHEADER, pointer: headerList)
        set(CURLOPT_TIMEOUT_MS, Int(min(timeout / .milliseconds(1), Double(Int32.max)).rounded(.up)))
        set(CURLOPT_HTTP_VERSION, Int(CURL_HTTP_VERSION_2TLS))
        set(CURLOPT_PIPEWAIT, 1)
        if let caFile = configuration.caFile { set(CURLOPT_CAINFO, caFile) }
        // Without one, curl reads the proxy variables of the environment (http_proxy, https_proxy, ...); loopback
        // names are added to its no_proxy list (see HTTPClient.Configuration.proxy).
        if let proxy = configuration.proxy {
            set(CURLOPT_PROXY, proxy)
        } else {
            set(CURLOPT_NOPROXY, Self.noProxyWithLoopback)
        }
        if maximumResponseBytes > 0, code == CURLE_OK {
            code = herald_curl_easy_setopt_offset(easy, CURLOPT_MAXFILESIZE_LARGE, curl_off_t(maximumResponseBytes))
        }
        if code == CURLE_OK {
            code = herald_curl_easy_setopt_write_function(easy, CURLOPT_WRITEFUNCTION) { data, size, count, transfer in
                let bytes = UnsafeRawBufferPointer(start: data, count: size * count)
                return Unmanaged<CurlTransfer>.fromOpaque(transfer!).takeUnretainedValue().received(body: bytes) ? size * count : 0
            }
        }
        set(CURLOPT_WRITEDATA, pointer: this)
        if code == CURLE_OK {
            code = herald_curl_easy_setopt_write_function(easy, CURLOPT_HEADERFUNCTION) { data, size, count, transfer in
                let bytes = UnsafeRawBufferPointer(start: data, count: size * count)
                Unmanaged<CurlTransfer>.fromOpaque(transfer!).takeUnretainedValue().received(headerLine: bytes)
                return size * count
            }
        }
        set(CURLOPT_HEADERDATA, pointer: this)
        if request.method == "HEAD" {
            set(CURLOPT_NOBODY, 1)
        } else if request.sendsBody {
            if code == CURLE_OK { code = herald_curl_easy_setopt_offset(easy, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(request.body.count)) }
            // curl copies the body: it needs no storage of ours while it is sent.
            request.body.withUnsafeBytes { bytes in
                set(CURLOPT_COPYPOSTFIELDS, pointer: bytes.baseAddress ?? UnsafeRawPointer(errorBuffer))
            }
            if request.method != "POST" { set(CURLOPT_CUSTOMREQUEST, request.method) }
        }
        guard code == CURLE_OK else {
            releaseEasyHandle()
            throw HTTPClientError.invalidRequest("curl refused an option: \(String(cString: curl_easy_strerror(code)))")
        }
        return easy
    }

    /// A piece of the body (curl's write callback); `false` past the limit, which makes curl stop with a write error.
    private func received(body bytes: UnsafeRawBufferPointer) -> Bool {
        guard body.count + bytes.count <= maximumResponseBytes else {
            tooLarge = true
            return false
        }
        body.append(contentsOf: bytes)
        return true
    }

    /// One line of the response head (curl's header callback): a status line starts the fields anew (after a
    /// `100 Continue`), the empty line is skipped, a line starting with a space continues the field before it.
    private func received(headerLine bytes: UnsafeRawBufferPointer) {
        var end = bytes.count
        while end > 0, bytes[end - 1] == UInt8(ascii: "\n") || bytes[end - 1] == UInt8(ascii: "\r") { end -= 1 }
        let line = String(decoding: bytes[..<end], as: UTF8.self)
        if line.hasPrefix("HTTP/") {
            headers = []
        } else if let first = line.first, first == " " || first == "\t", !headers.isEmpty {
            headers[headers.count - 1].value += " " + line.trimmingSpaces
        } else if let colon = line.firstIndex(of: ":") {
            headers.append((String(line[..<colon]), String(line[line.index(after: colon)...]).trimmingSpaces))
        }
    }

    /// The connections curl opened for this transfer so far (0 when it reused one). Loop thread.
    var connectionsOpened: Int {
        var opened = 0
        if let easy { _ = herald_curl_easy_getinfo_long(easy, CURLINFO_NUM_CONNECTS, &opened) }
        return opened
    }

    /// Ends the transfer with curl's result, once the engine has taken it out of the multi handle. Loop thread.
    func complete(_ code: CURLcode) {
        guard let easy else { return }
        let opened = connectionsOpened
        guard code == CURLE_OK else {
            let url = request.url.description
            if tooLarge {
                return finish(.failure(HTTPClientError.responseTooLarge(url, limit: maximumResponseBytes)))
            }
            var detail = String(cString: errorBuffer)
            var systemError = 0
            if herald_curl_easy_getinfo_long(easy, CURLINFO_OS_ERRNO, &systemError) == CURLE_OK, systemError > 0 {
                // curl's words do not always name the system's error (connection refused, unreachable, reset).
                let code = Int32(-systemError)
                detail += " (\(String(cString: uv_err_name(code))): \(String(cString: uv_strerror(code))))"
            }
            return finish(.failure(HTTPClientError(code: code, url: url, detail: detail, timeout: timeout, limit: maximumResponseBytes)))
        }
        var status = 0
        var version = 0
        _ = herald_curl_easy_getinfo_long(easy, CURLINFO_RESPONSE_CODE, &status)
        _ = herald_curl_easy_getinfo_long(easy, CURLINFO_HTTP_VERSION, &version)
        let versionName =
            switch version {
            case Int(CURL_HTTP_VERSION_1_0): "1.0"
            case Int(CURL_HTTP_VERSION_2_0): "2"
            case Int(CURL_HTTP_VERSION_3): "3"
            default: "1.1"
            }
        finish(.success(HTTPResponse(status: status, version: versionName, headers: headers, body: body, reusedConnection: opened == 0)))
    }

    /// Ends the transfer once: frees the easy handle and hands the result over. Loop thread (or the only owner).
    func finish(_ result: Result<HTTPResponse, any Error>) {
        guard !finished else { return }
        finished = true
        releaseEasyHandle()
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

    /// The response, once the transfer has ended. Any context.
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

    private func releaseEasyHandle() {
        if let easy {
            self.easy = nil
            curl_easy_cleanup(easy)
        }
        if let headerList {
            self.headerList = nil
            curl_slist_free_all(headerList)
        }
    }
}
