public import Foundation
public import Herald

/// A test certificate or test server that could not be set up: what went wrong, with the tool's output.
public struct TestSetupError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}

/// Python's `http.server` as a child process (`Tests/HTTPClientPy/test_http_server.py`): an HTTP/1.1 server no one
/// here wrote, in clear or over TLS, for the tests of HTTP clients. Its paths are in the script: `/echo`,
/// `/status/N`, `/bytes/N`, `/chunked/N`, `/slow`. Or, with `http2`, an HTTP/2 server over TLS on the h2 library
/// (`Tests/HTTPClientPy/h2_server.py`) that answers every request with its method, path, connection and stream.
public final class PythonHTTPServer: Sendable {
    /// The port it listens on, on 127.0.0.1 (or the host it was given).
    public let port: Int
    /// `http://127.0.0.1:PORT` or `https://localhost:PORT`; with another host, `http://HOST:PORT` or
    /// `https://HOST:PORT`.
    public let baseURL: String
    private let process: Process
    private let input: FileHandle

    /// Starts the server, over TLS with `certificate` and `key` when given; with `http2`, the HTTP/2 server (which
    /// needs both, and a `python` with the h2 library: ``pythonEnvironment(with:sourceLocation:)``'s). With
    /// `record` (HTTP/1.1 server only), every request is appended to that file too: ``recordedRequests(in:)``. With
    /// `host` (HTTP/1.1 server only), it listens on that loopback address instead, such as 127.0.0.2, an address
    /// that is not named `localhost` or `127.0.0.1` (``TestCertificates`` vouch for it too). Throws when it does not
    /// come up.
    public init(
        certificate: String? = nil, key: String? = nil, http2: Bool = false, python: URL? = nil, record: String? = nil,
        host: String = "127.0.0.1"
    ) throws {
        let script = repositoryRoot.appendingPathComponent("Tests/HTTPClientPy/\(http2 ? "h2_server.py" : "test_http_server.py")").path
        let process = Process()
        process.executableURL = python ?? URL(fileURLWithPath: "/usr/bin/env")
        process.arguments =
            (python == nil ? ["python3"] : []) + [script] + (certificate.map { ["--cert", $0, "--key", key ?? ""] } ?? [])
            + (record.map { ["--record", $0] } ?? []) + (host == "127.0.0.1" ? [] : ["--host", host])
        let output = Pipe()
        let input = Pipe()
        process.standardOutput = output
        process.standardInput = input
        try runWithNoSignalsBlocked(process)
        let line = LineReader(output.fileHandleForReading.fileDescriptor).line()
        guard let line, line.hasPrefix("PORT "), let port = Int(line.dropFirst(5)) else {
            process.terminate()
            throw TestSetupError(message: "the Python HTTP server did not start (it printed \(line.debugDescription))")
        }
        self.process = process
        self.input = input.fileHandleForWriting
        self.port = port
        if host != "127.0.0.1" {
            self.baseURL = "\(certificate == nil ? "http" : "https")://\(host):\(port)"
        } else {
            self.baseURL = certificate == nil ? "http://127.0.0.1:\(port)" : "https://localhost:\(port)"
        }
    }

    /// As `init`, for an async test: Python starts on a thread of its own (``onOwnThread(_:)``), not on one of the
    /// cooperative pool's few threads, which an interpreter slow to start (a second or more on a busy machine) would
    /// hold from every other test meanwhile.
    public static func start(
        certificate: String? = nil, key: String? = nil, http2: Bool = false, python: URL? = nil, record: String? = nil,
        host: String = "127.0.0.1"
    ) async throws -> PythonHTTPServer {
        try await onOwnThread {
            try PythonHTTPServer(certificate: certificate, key: key, http2: http2, python: python, record: record, host: host)
        }
    }

    /// The requests a server started with `record: file` received so far, oldest first, each a JSON object with
    /// `method`, `path`, `headers` (names in lower case) and `body`.
    public static func recordedRequests(in file: String) -> [JSONValue] {
        let text = (try? String(contentsOfFile: file, encoding: .utf8)) ?? ""
        return text.split(separator: "\n").compactMap { try? JSONParser.parse(Array($0.utf8)) }
    }

    /// Stops the server (closes its standard input) and waits for it to exit.
    public func stop() {
        try? input.close()
        waitUntilExitWithoutSpinning(process)
    }
}
