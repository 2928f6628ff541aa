import COpenSSL
import Glibc

/// A client's certificate as the TLS handshake received it (``TLSDetails/peerCertificate``), read with OpenSSL's
/// DER decoder: the attributes of its subject and the strings an extension lists. With a client CA configured the
/// handshake has already checked it against the CA; this only reads it.
public struct PeerCertificate: Sendable, Equatable {
    /// The certificate, DER.
    public let der: [UInt8]

    /// The certificate in `der`; nothing is read until asked.
    public init(der: [UInt8]) {
        self.der = der
    }

    /// The values of the subject's user ID attribute (`UID`, 0.9.2342.19200300.100.1.1), in the subject's order:
    /// an APNs provider certificate's bundle ID. Empty when there is none or the bytes are not a certificate.
    public var subjectUserIDs: [String] {
        Self.lines(der.withUnsafeBufferPointer { herald_certificate_subject_values($0.baseAddress, $0.count, NID_userId) }) ?? []
    }

    /// The strings listed in the extension `oid` (dotted, `1.2.840.113635.100.6.3.6`), whose value is a DER
    /// `SEQUENCE`: its members of the string types (UTF8String, PrintableString, IA5String, VisibleString), in order;
    /// members of other types (nested sequences) are passed over. `nil` when the certificate has no such extension,
    /// its value is not a sequence, or the bytes are not a certificate.
    public func extensionStrings(oid: String) -> [String]? {
        Self.lines(der.withUnsafeBufferPointer { herald_certificate_extension_strings($0.baseAddress, $0.count, oid) })
    }

    /// The lines of a malloc'ed C string (freed here); `nil` for `NULL`.
    private static func lines(_ text: UnsafeMutablePointer<CChar>?) -> [String]? {
        guard let text else { return nil }
        defer { free(text) }
        return String(cString: text).split(separator: "\n").map(String.init)
    }
}

extension TLSDetails {
    /// The client's certificate, when it sent one.
    public var peer: PeerCertificate? { peerCertificate.map(PeerCertificate.init(der:)) }
}
