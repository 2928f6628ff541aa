public import Foundation

/// Certificates for TLS tests, made with the `openssl` command in a directory of the test's: a test CA, a server
/// certificate it signed for `127.0.0.1`, `::1` and `localhost`, and a self-signed certificate for the same names
/// that no one trusts.
public struct TestCertificates: Sendable {
    public let directory: String
    /// The test CA's certificate (PEM): the file a client trusts.
    public var caFile: String { "\(directory)/ca.pem" }
    /// The server certificate signed by the test CA.
    public var certificateFile: String { "\(directory)/server.pem" }
    /// The key of ``certificateFile``.
    public var keyFile: String { "\(directory)/server-key.pem" }
    /// A self-signed certificate for the same names.
    public var untrustedCertificateFile: String { "\(directory)/untrusted.pem" }
    /// The key of ``untrustedCertificateFile``.
    public var untrustedKeyFile: String { "\(directory)/untrusted-key.pem" }

    /// Makes the files in `directory` (P-256 keys, valid for a day). Throws ``TestSetupError`` with
    /// openssl's output when it fails.
    public init(in directory: String) throws {
        self.directory = directory
        func openssl(_ arguments: [String]) throws {
            let result = try runExecutable(URL(fileURLWithPath: "/usr/bin/env"), ["openssl"] + arguments)
            guard result.status == 0 else {
                throw TestSetupError(message: "openssl \(arguments.joined(separator: " ")) failed: \(result.error)")
            }
        }
        let newKey = ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1"]
        let names = ["-addext", "subjectAltName=IP:127.0.0.1,IP:::1,DNS:localhost"]
        try openssl(newKey + ["-keyout", "\(directory)/ca-key.pem", "-out", caFile, "-subj", "/CN=Herald Test CA"])
        try openssl(
            newKey + [
                "-CA", caFile, "-CAkey", "\(directory)/ca-key.pem", "-keyout", keyFile, "-out", certificateFile, "-subj", "/CN=localhost",
            ]
                + names)
        try openssl(newKey + ["-keyout", untrustedKeyFile, "-out", untrustedCertificateFile, "-subj", "/CN=localhost"] + names)
    }
}

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
    /// The port it listens on, on 127.0.0.1.
    public let port: Int
    /// `http://127.0.0.1:PORT` or `https://localhost:PORT`.
    public let baseURL: String
    private let process: Process
    private let input: FileHandle

    /// Starts the server, over TLS with `certificate` and `key` when given; with `http2`, the HTTP/2 server (which
    /// needs both, and a `python` with the h2 library: ``pythonEnvironment(with:sourceLocation:)``'s). Throws when
    /// it does not come up.
    public init(certificate: String? = nil, key: String? = nil, http2: Bool = false, python: URL? = nil) throws {
        let script = repositoryRoot.appendingPathComponent("Tests/HTTPClientPy/\(http2 ? "h2_server.py" : "test_http_server.py")").path
        let process = Process()
        process.executableURL = python ?? URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = (python == nil ? ["python3"] : []) + [script] + (certificate.map { ["--cert", $0, "--key", key ?? ""] } ?? [])
        let output = Pipe()
        let input = Pipe()
        process.standardOutput = output
        process.standardInput = input
        try process.run()
        let line = LineReader(output.fileHandleForReading.fileDescriptor).line()
        guard let line, line.hasPrefix("PORT "), let port = Int(line.dropFirst(5)) else {
            process.terminate()
            throw TestSetupError(message: "the Python HTTP server did not start (it printed \(line.debugDescription))")
        }
        self.process = process
        self.input = input.fileHandleForWriting
        self.port = port
        self.baseURL = certificate == nil ? "http://127.0.0.1:\(port)" : "https://localhost:\(port)"
    }

    /// Stops the server (closes its standard input) and waits for it to exit.
    public func stop() {
        try? input.close()
        process.waitUntilExit()
    }
}
