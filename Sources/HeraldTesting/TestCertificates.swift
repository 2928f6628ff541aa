import Foundation

/// A certificate authority made for one test with the `openssl` command, and the certificates it signs: a server
/// certificate for `localhost` and 127.0.0.1, client certificates, each with its key, as PEM files in `directory`.
public struct TestCertificates: Sendable {
    /// Where the files are.
    public let directory: String
    /// The CA's certificate: what clients trust, and what a server asking for client certificates checks them by.
    public var caFile: String { "\(directory)/ca.pem" }

    /// Makes a CA (P-256 keys, one day of validity) in `directory`.
    public init(directory: String) throws {
        self.directory = directory
        try Self.openssl([
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1",
            "-subj", "/CN=Herald Test CA", "-keyout", "\(directory)/ca.key", "-out", caFile,
        ])
    }

    /// A certificate and key signed by the CA: a server's for `localhost` and 127.0.0.1, or a client's. `serial` is
    /// the serial number (hex, as `openssl x509 -serial` prints it). Returns the certificate and key paths.
    @discardableResult
    public func issue(name: String, serial: String, client: Bool = false) throws -> (certificate: String, key: String) {
        let key = "\(directory)/\(name).key"
        let request = "\(directory)/\(name).csr"
        let certificate = "\(directory)/\(name).pem"
        let extensions = "\(directory)/\(name).ext"
        let usage =
            client
            ? "extendedKeyUsage = clientAuth\n"
            : "extendedKeyUsage = serverAuth\nsubjectAltName = DNS:localhost, IP:127.0.0.1\n"
        try Data(("basicConstraints = CA:FALSE\n" + usage).utf8).write(to: URL(fileURLWithPath: extensions))
        try Self.openssl([
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", "/CN=\(name)",
            "-keyout", key, "-out", request,
        ])
        try Self.openssl([
            "x509", "-req", "-in", request, "-CA", caFile, "-CAkey", "\(directory)/ca.key", "-set_serial", "0x\(serial)",
            "-days", "1", "-extfile", extensions, "-out", certificate,
        ])
        return (certificate, key)
    }

    /// Runs `openssl` with `arguments`; throws its standard error when it fails.
    public static func openssl(_ arguments: [String], input: String? = nil) throws {
        let result = try runExecutable(URL(fileURLWithPath: "/usr/bin/openssl"), arguments, input: input)
        guard result.status == 0 else { throw TestCertificateError(message: "openssl \(arguments.first ?? ""): \(result.error)") }
    }
}

/// `openssl` failed while making a test certificate.
public struct TestCertificateError: Error, CustomStringConvertible {
    public let message: String
    public var description: String { message }
}
