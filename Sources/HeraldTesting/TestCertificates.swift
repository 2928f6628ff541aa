import Foundation

/// Certificates for TLS tests, made with the `openssl` command in a directory of the test's: a test CA, a server
/// certificate it signed for `localhost`, 127.0.0.1, `::1` and 127.0.0.2, a self-signed certificate for the same names that no
/// one trusts, and on demand more certificates the CA signs (servers' with other serial numbers, clients').
public struct TestCertificates: Sendable {
    /// Where the files are.
    public let directory: String
    /// The test CA's certificate (PEM): what clients trust, and what a server asking for client certificates checks
    /// them by.
    public var caFile: String { "\(directory)/ca.pem" }
    /// The server certificate signed by the test CA.
    public var certificateFile: String { "\(directory)/server.pem" }
    /// The key of ``certificateFile``.
    public var keyFile: String { "\(directory)/server-key.pem" }
    /// A self-signed certificate for the same names.
    public var untrustedCertificateFile: String { "\(directory)/untrusted.pem" }
    /// The key of ``untrustedCertificateFile``.
    public var untrustedKeyFile: String { "\(directory)/untrusted-key.pem" }

    private static let names = "subjectAltName = DNS:localhost, IP:127.0.0.1, IP:::1, IP:127.0.0.2"

    /// Makes the CA, the server certificate and the untrusted one in `directory` (P-256 keys, valid for a day).
    /// Throws ``TestSetupError`` with openssl's output when it fails.
    public init(in directory: String) throws {
        self.directory = directory
        let newKey = ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"]
        try Self.openssl(newKey + ["-keyout", "\(directory)/ca-key.pem", "-out", caFile, "-subj", "/CN=Herald Test CA"])
        try issue(name: "server", serial: "1000")
        try Self.openssl(
            newKey + ["-keyout", untrustedKeyFile, "-out", untrustedCertificateFile, "-subj", "/CN=localhost", "-addext", Self.names])
    }

    /// A certificate and key signed by the CA, as `NAME.pem` and `NAME-key.pem`: a server's for `localhost`,
    /// 127.0.0.1 and `::1`, or a client's. `serial` is the serial number (hex, as `openssl x509 -serial` prints it).
    /// `issue(name: "server", …)` replaces ``certificateFile`` and ``keyFile``. Returns the certificate and key paths.
    @discardableResult
    public func issue(name: String, serial: String, client: Bool = false) throws -> (certificate: String, key: String) {
        let key = "\(directory)/\(name)-key.pem"
        let request = "\(directory)/\(name).csr"
        let certificate = "\(directory)/\(name).pem"
        let extensions = "\(directory)/\(name).ext"
        let usage = client ? "extendedKeyUsage = clientAuth\n" : "extendedKeyUsage = serverAuth\n\(Self.names)\n"
        try Data(("basicConstraints = CA:FALSE\n" + usage).utf8).write(to: URL(fileURLWithPath: extensions))
        try Self.openssl([
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=\(name)",
            "-keyout", key, "-out", request,
        ])
        try Self.openssl([
            "x509", "-req", "-in", request, "-CA", caFile, "-CAkey", "\(directory)/ca-key.pem", "-set_serial", "0x\(serial)",
            "-days", "1", "-extfile", extensions, "-out", certificate,
        ])
        return (certificate, key)
    }

    private static func openssl(_ arguments: [String]) throws {
        let result = try runExecutable(URL(fileURLWithPath: "/usr/bin/env"), ["openssl"] + arguments)
        guard result.status == 0 else {
            throw TestSetupError(message: "openssl \(arguments.joined(separator: " ")) failed: \(result.error)")
        }
    }
}
