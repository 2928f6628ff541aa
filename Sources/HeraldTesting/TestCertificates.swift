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

    /// As ``init(in:)``, for an async test: the four `openssl` runs wait on a thread of their own
    /// (``onOwnThread(_:)``), not on one of the cooperative pool's few threads.
    public static func make(in directory: String) async throws -> TestCertificates {
        try await onOwnThread { try TestCertificates(in: directory) }
    }

    /// A certificate and key signed by the CA, as `NAME.pem` and `NAME-key.pem`: a server's for `localhost`,
    /// 127.0.0.1 and `::1`, or a client's. `serial` is the serial number (hex, as `openssl x509 -serial` prints it).
    /// `issue(name: "server", …)` replaces ``certificateFile`` and ``keyFile``. `subject` replaces `/CN=NAME` (in
    /// `openssl -subj` form); `extensions` is appended to the extensions file (openssl.cnf syntax: more extensions,
    /// then the sections they name). Returns the certificate and key paths.
    @discardableResult
    public func issue(
        name: String, serial: String, client: Bool = false, subject: String? = nil, extensions: String = ""
    ) throws -> (certificate: String, key: String) {
        let usage = client ? "extendedKeyUsage = clientAuth\n" : "extendedKeyUsage = serverAuth\n\(Self.names)\n"
        return try sign(name: name, serial: serial, subject: subject ?? "/CN=\(name)", extensions: usage + extensions)
    }

    /// As the synchronous `issue(name:serial:client:subject:extensions:)`, for an async test: `openssl` runs on a
    /// thread of its own (``onOwnThread(_:)``), not on one of the cooperative pool's.
    @discardableResult
    public func issue(
        name: String, serial: String, client: Bool = false, subject: String? = nil, extensions: String = ""
    ) async throws -> (certificate: String, key: String) {
        try await onOwnThread { try issue(name: name, serial: serial, client: client, subject: subject, extensions: extensions) }
    }

    /// A server certificate and key signed by the CA for exactly the DNS names `dnsNames` (its subjectAltName;
    /// wildcards as written, `*.example.test`), subject `CN=NAME`, as `NAME.pem` and `NAME-key.pem` (replaced when
    /// there): a certificate that SNI chooses by name. Returns the certificate and key paths.
    @discardableResult
    public func issueServer(name: String, serial: String, dnsNames: [String]) throws -> (certificate: String, key: String) {
        precondition(!dnsNames.isEmpty, "a certificate chosen by name has a name")
        let names = dnsNames.map { "DNS:\($0)" }.joined(separator: ",")
        return try sign(
            name: name, serial: serial, subject: "/CN=\(name)", extensions: "extendedKeyUsage = serverAuth\nsubjectAltName = \(names)\n")
    }

    /// As the synchronous `issueServer(name:serial:dnsNames:)`, for an async test: `openssl` runs on a thread of its
    /// own (``onOwnThread(_:)``).
    @discardableResult
    public func issueServer(name: String, serial: String, dnsNames: [String]) async throws -> (certificate: String, key: String) {
        try await onOwnThread { try issueServer(name: name, serial: serial, dnsNames: dnsNames) }
    }

    /// An APNs provider certificate signed by the CA, as Apple issues them: the subject's `UID` is `topics[0]` (the
    /// bundle ID); with more than one topic, Apple's extension 1.2.840.113635.100.6.3.6 lists them all, each followed
    /// by a sequence naming its kind. Returns the certificate and key paths (`NAME.pem`, `NAME-key.pem`).
    @discardableResult
    public func issueAPNsProvider(name: String, serial: String, topics: [String]) throws -> (certificate: String, key: String) {
        precondition(!topics.isEmpty, "a provider certificate names a topic")
        var extensions = ""
        if topics.count > 1 {
            extensions = "1.2.840.113635.100.6.3.6 = ASN1:SEQUENCE:apns_topics\n[apns_topics]\n"
            for (index, topic) in topics.enumerated() {
                extensions += "topic\(index) = UTF8:\(topic)\nkind\(index) = SEQUENCE:apns_kind\(index)\n"
            }
            for index in topics.indices {
                extensions += "[apns_kind\(index)]\nkind = UTF8:\(index == 0 ? "app" : topics[index].split(separator: ".").last ?? "app")\n"
            }
        }
        return try issue(
            name: name, serial: serial, client: true,
            subject: "/UID=\(topics[0])/CN=Apple Push Services: \(topics[0])/OU=TEAM123456", extensions: extensions)
    }

    /// As the synchronous `issueAPNsProvider(name:serial:topics:)`, for an async test: `openssl` runs on a thread of
    /// its own (``onOwnThread(_:)``).
    @discardableResult
    public func issueAPNsProvider(name: String, serial: String, topics: [String]) async throws -> (certificate: String, key: String) {
        try await onOwnThread { try issueAPNsProvider(name: name, serial: serial, topics: topics) }
    }

    /// A new P-256 key and a certificate for it signed by the CA (`NAME-key.pem`, `NAME.pem`, replaced when there):
    /// `subject` in `openssl -subj` form, `extensions` in openssl.cnf syntax after `basicConstraints = CA:FALSE`.
    private func sign(name: String, serial: String, subject: String, extensions: String) throws -> (certificate: String, key: String) {
        let key = "\(directory)/\(name)-key.pem"
        let request = "\(directory)/\(name).csr"
        let certificate = "\(directory)/\(name).pem"
        let extensionsFile = "\(directory)/\(name).ext"
        try Data(("basicConstraints = CA:FALSE\n" + extensions).utf8).write(to: URL(fileURLWithPath: extensionsFile))
        try Self.openssl([
            "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-subj", subject, "-keyout", key,
            "-out", request,
        ])
        try Self.openssl([
            "x509", "-req", "-in", request, "-CA", caFile, "-CAkey", "\(directory)/ca-key.pem", "-set_serial", "0x\(serial)",
            "-days", "1", "-extfile", extensionsFile, "-out", certificate,
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
