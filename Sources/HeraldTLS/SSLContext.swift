import COpenSSL
import Glibc

/// Why a TLS configuration cannot be used: the file and what is wrong with it.
public enum TLSConfigurationError: Error, Equatable, CustomStringConvertible {
    /// A file that cannot be opened (missing, no permission).
    case unreadable(what: String, path: String, reason: String)
    /// A file that OpenSSL cannot read as what it should hold (not PEM, another kind of object, damaged).
    case invalid(what: String, path: String, reason: String)
    /// The key file's key is not the certificate's.
    case keyMismatch(certificate: String, key: String)
    /// OpenSSL itself failed (out of memory).
    case openSSL(String)

    public var description: String {
        switch self {
        case .unreadable(let what, let path, let reason): "cannot read the TLS \(what) \(path): \(reason)"
        case .invalid(let what, let path, let reason): "the TLS \(what) \(path) cannot be used: \(reason)"
        case .keyMismatch(let certificate, let key):
            "the TLS key \(key) does not belong to the certificate \(certificate): give the key the certificate was made for"
        case .openSSL(let reason): "TLS: \(reason)"
        }
    }
}

/// The SSL_CTXs of one configuration: one per certificate and key, each with the same settings (TLS versions,
/// options, ALPN, client CA, session ID context), the default first. Each handshake begins in the default one; the
/// servername callback moves it to the first whose certificate matches the name the client asked for (SNI).
/// Immutable once made; freed when the last connection that began with it is gone (each TLSStream holds it).
final class SSLContext: @unchecked Sendable {
    // @unchecked Sendable: the SSL_CTXs and the SNI table are not changed after init; OpenSSL makes SSL_new on an
    // SSL_CTX and its callbacks thread-safe.
    /// The default context, the one every SSL begins with.
    let pointer: OpaquePointer
    /// The default certificate.
    let certificate: CertificateSummary
    /// Every context and its certificate, the default first.
    let served: [(context: OpaquePointer, certificate: CertificateSummary)]
    private let contexts: UnsafeMutableBufferPointer<OpaquePointer?>
    private let table: UnsafeMutablePointer<herald_sni_contexts>

    init(_ configuration: TLSServerContext.Configuration) throws(TLSConfigurationError) {
        var made: [(context: OpaquePointer, certificate: CertificateSummary)] = []
        do {
            let pairs =
                [CertificateFiles(certificateFile: configuration.certificateFile, keyFile: configuration.keyFile)]
                + configuration.sniCertificates
            for pair in pairs {
                let context = try Self.context(pair, clientCAFile: configuration.clientCAFile)
                made.append((context, Self.summary(of: SSL_CTX_get0_certificate(context))))
            }
        } catch {
            for (context, _) in made { SSL_CTX_free(context) }
            throw error
        }
        served = made
        pointer = made[0].context
        certificate = made[0].certificate
        contexts = .allocate(capacity: made.count)
        _ = contexts.initialize(from: made.map { Optional($0.context) })
        table = .allocate(capacity: 1)
        table.initialize(to: herald_sni_contexts(contexts: UnsafePointer(contexts.baseAddress), count: made.count))
        if made.count > 1 { herald_ssl_ctx_use_sni(pointer, table) }
    }

    /// The certificate of `context`, one of ``served``'s (the one a handshake ended in).
    func certificate(of context: OpaquePointer?) -> CertificateSummary {
        served.first { $0.context == context }?.certificate ?? certificate
    }

    /// A context with the certificate and key of `pair`, and the settings every context has.
    private static func context(_ pair: CertificateFiles, clientCAFile: String?) throws(TLSConfigurationError) -> OpaquePointer {
        ERR_clear_error()
        guard let pointer = SSL_CTX_new(TLS_server_method()) else { throw .openSSL("cannot create a TLS context: \(openSSLError())") }
        do {
            try configure(pointer, pair, clientCAFile: clientCAFile)
        } catch {
            SSL_CTX_free(pointer)
            throw error
        }
        return pointer
    }

    private static func configure(_ pointer: OpaquePointer, _ pair: CertificateFiles, clientCAFile: String?) throws(TLSConfigurationError) {
        herald_ssl_ctx_set_server_options(pointer)
        herald_ssl_ctx_release_idle_buffers(pointer)
        guard herald_ssl_ctx_set_min_tls12(pointer) == 1 else { throw .openSSL("cannot require TLS 1.2: \(openSSLError())") }
        herald_ssl_ctx_use_alpn_offers(pointer)
        let certificateFile = pair.certificateFile
        let keyFile = pair.keyFile
        try Self.checkReadable(certificateFile, what: "certificate file")
        guard SSL_CTX_use_certificate_chain_file(pointer, certificateFile) == 1 else {
            throw .invalid(what: "certificate file", path: certificateFile, reason: openSSLError())
        }
        try Self.checkReadable(keyFile, what: "key file")
        guard SSL_CTX_use_PrivateKey_file(pointer, keyFile, SSL_FILETYPE_PEM) == 1 else {
            let code = ERR_peek_last_error()
            if ERR_GET_LIB(code) == ERR_LIB_X509, ERR_GET_REASON(code) == X509_R_KEY_VALUES_MISMATCH {
                ERR_clear_error()
                throw .keyMismatch(certificate: certificateFile, key: keyFile)
            }
            throw .invalid(what: "key file", path: keyFile, reason: openSSLError())
        }
        guard SSL_CTX_check_private_key(pointer) == 1 else {
            ERR_clear_error()
            throw .keyMismatch(certificate: certificateFile, key: keyFile)
        }
        if let caFile = clientCAFile {
            try Self.checkReadable(caFile, what: "client CA file")
            guard SSL_CTX_load_verify_locations(pointer, caFile, nil) == 1, let names = SSL_load_client_CA_file(caFile) else {
                throw .invalid(what: "client CA file", path: caFile, reason: openSSLError())
            }
            SSL_CTX_set_client_CA_list(pointer, names)
            SSL_CTX_set_verify(pointer, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nil)
        }
        // Sessions resumed from OpenSSL's cache (TLS 1.2) must name the context they were made in; without a name a
        // resumption with client certificates on fails the handshake. The same name in every context: a handshake
        // moved to another certificate by SNI takes the name of the context it moved to.
        let name = Array("herald".utf8)
        _ = SSL_CTX_set_session_id_context(pointer, name, UInt32(name.count))
    }

    deinit {
        for (context, _) in served { SSL_CTX_free(context) }
        table.deinitialize(count: 1)
        table.deallocate()
        contexts.deallocate()
    }

    private static func checkReadable(_ path: String, what: String) throws(TLSConfigurationError) {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw .unreadable(what: what, path: path, reason: String(cString: strerror(errno))) }
        close(fd)
    }

    private static func summary(of certificate: OpaquePointer?) -> CertificateSummary {
        guard let certificate else { return CertificateSummary(serial: "", subject: "", notAfter: "", names: []) }
        var serial = ""
        if let number = ASN1_INTEGER_to_BN(X509_get_serialNumber(certificate), nil) {
            if let hex = BN_bn2hex(number) {
                serial = String(cString: hex)
                CRYPTO_free(hex, #fileID, #line)
            }
            BN_free(number)
        }
        var subject = ""
        if let name = X509_get_subject_name(certificate) {
            subject = printed { X509_NAME_print_ex($0, name, 0, herald_name_flags_one_line()) >= 0 }
        }
        let notAfter = printed { ASN1_TIME_print($0, X509_get0_notAfter(certificate)) == 1 }
        var names: [String] = []
        if let text = herald_certificate_dns_names(certificate) {
            names = String(cString: text).split(separator: "\n").map(String.init)
            free(text)
        }
        return CertificateSummary(serial: serial, subject: subject, notAfter: notAfter, names: names)
    }

    /// What `print` writes into a memory BIO, as text.
    private static func printed(_ print: (OpaquePointer) -> Bool) -> String {
        guard let bio = BIO_new(BIO_s_mem()) else { return "" }
        defer { BIO_free(bio) }
        guard print(bio) else { return "" }
        var data: UnsafeMutablePointer<CChar>?
        let count = herald_bio_contents(bio, &data)
        guard let data, count > 0 else { return "" }
        return String(decoding: UnsafeRawBufferPointer(start: data, count: count), as: UTF8.self)
    }
}

/// OpenSSL's error queue of this thread as one line (its reasons, oldest first), and emptied.
func openSSLError() -> String {
    var reasons: [String] = []
    while true {
        let code = ERR_get_error()
        if code == 0 { break }
        var buffer = [CChar](repeating: 0, count: 256)
        ERR_error_string_n(code, &buffer, buffer.count)
        reasons.append(String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
    }
    return reasons.isEmpty ? "unknown error" : reasons.joined(separator: "; ")
}
