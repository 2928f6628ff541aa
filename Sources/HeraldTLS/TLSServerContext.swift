import COpenSSL
import Glibc
public import HeraldEventLoop
public import Logging

/// TLS for the connections a listener accepts, on OpenSSL 3 through memory BIOs: the handshake and the records
/// run on the connection's own loop, in the read and flush callbacks it already has (no thread of its own).
///
/// TLS 1.2 and 1.3 only; ALPN chosen from what each listener offers (``secure(_:applicationProtocols:established:)``);
/// SNI chooses among the certificates (``Configuration/sniCertificates``; the name the client asked for is in
/// ``TLSDetails/serverName``, the certificate chosen in ``TLSDetails/certificate``); client certificates required and
/// checked against a CA file when ``Configuration/clientCAFile`` is set (mutual TLS).
///
/// One context may serve several listeners. ``reload()`` reads every file again (for `SIGHUP`): new handshakes use
/// the new certificates, connections already open keep theirs. A handshake that does not finish within
/// ``Configuration/handshakeTimeout`` is closed. Failed handshakes are counted (``handshakeFailures``) and logged
/// once per stretch of failures, never once per connection: a scan or a flood writes a line a minute, not one per
/// client. Thread-safe.
public final class TLSServerContext: StreamSecurity, @unchecked Sendable {
    // @unchecked Sendable: `configuration` and `logger` are immutable; the SSL_CTX in use and the failure counts are
    // behind locks. An SSL_CTX may be shared by threads once set up (OpenSSL locks what it changes).

    /// Where the certificate, its key and the client CA come from, and how long a handshake may take.
    public struct Configuration: Sendable, Equatable {
        /// The certificate chain, PEM: the server's certificate first, then the intermediates.
        public var certificateFile: String
        /// The certificate's private key, PEM.
        public var keyFile: String
        /// CA certificates (PEM) that client certificates must be signed by; `nil`: no client certificate asked for.
        public var clientCAFile: String?
        /// More certificates and keys, chosen by the name the client asks for (SNI): a handshake gets the first of
        /// ``certificateFile`` and these whose certificate's names match it (subjectAltName DNS names, or the
        /// subject's common name when there are none; `*.example.org` matches one label), and ``certificateFile``
        /// when none does or the client sends no name. Each has the same settings (TLS versions, ALPN, client CA).
        public var sniCertificates: [CertificateFiles] = []
        /// A connection whose handshake is not complete this long after it was accepted is closed.
        public var handshakeTimeout: Duration = .seconds(10)

        public init(certificateFile: String, keyFile: String, clientCAFile: String? = nil) {
            self.certificateFile = certificateFile
            self.keyFile = keyFile
            self.clientCAFile = clientCAFile
        }
    }

    /// The settings the context was made with (``reload()`` reads the same files again).
    public let configuration: Configuration
    private let logger: Logger
    private let current: Locked<SSLContext>
    private let failures = Locked(HandshakeFailures())

    /// Reads the certificate, the key and the client CA file.
    ///
    /// - Parameters:
    ///   - configuration: the files and the handshake timeout.
    ///   - logger: where failed handshakes are reported (once per stretch).
    /// - Throws: ``TLSConfigurationError`` naming the file that cannot be read or used, or a key that does not
    ///   belong to the certificate.
    public init(configuration: Configuration, logger: Logger = Logger(label: "herald.tls")) throws(TLSConfigurationError) {
        self.configuration = configuration
        self.logger = logger
        current = Locked(try SSLContext(configuration))
    }

    /// The certificate in use: its serial number (hex), subject and end of validity, as a log line shows them.
    public var certificate: CertificateSummary { current.withLock { $0.certificate } }

    /// Every certificate in use, the default (``certificate``) first, then those of
    /// ``Configuration/sniCertificates`` in order; each with the DNS names it serves.
    public var certificates: [CertificateSummary] { current.withLock { $0.served.map { $0.certificate } } }

    /// Reads the files again and uses them for the handshakes that begin from now on; connections already open (or
    /// in their handshake) go on with the certificate they began with. On failure nothing changes and the error says
    /// why (the files may be half written: try again once they are whole). Any thread; it reads files, so not on a
    /// loop that serves clients when it can be avoided.
    public func reload() throws(TLSConfigurationError) {
        let fresh = try SSLContext(configuration)
        current.withLock { $0 = fresh }
    }

    /// Failed handshakes since the context was made, by why they failed.
    public var handshakeFailures: HandshakeFailureCounts {
        failures.withLock { $0.total }
    }

    public func secure(_ connection: StreamConnection, applicationProtocols: [String], established: (() -> Void)?) {
        let context = current.withLock { $0 }
        let stream: TLSStream
        do {
            stream = try TLSStream(context: context, connection: connection, applicationProtocols: applicationProtocols) {
                [weak self] reason, detail, peer in
                self?.handshakeFailed(reason, detail: detail, peer: peer, loop: connection.eventLoop)
            }
        } catch {
            handshakeFailed(.refused, detail: "\(error)", peer: connection.label, loop: connection.eventLoop)
            connection.close()
            return
        }
        stream.established = established
        connection.install(stream)
        stream.start(timeout: configuration.handshakeTimeout)
        connection.startReading()
    }

    // MARK: Failure reports

    /// How often a stretch of failures is summed up in the log.
    static let reportInterval: Duration = .seconds(60)

    private func handshakeFailed(_ reason: HandshakeFailureReason, detail: String, peer: String, loop: EventLoop) {
        let first = failures.withLock { failures in
            failures.total.add(reason)
            failures.sinceReport.add(reason)
            failures.lastDetail = detail
            guard !failures.reporting else { return false }
            failures.reporting = true
            failures.sinceReport = HandshakeFailureCounts()
            return true
        }
        guard first else { return }
        logger.warning(
            "TLS handshake failed; further failures are counted and summed up once a minute while they go on",
            metadata: ["reason": "\(reason)", "peer": "\(peer)", "error": "\(detail)"])
        scheduleReport(on: loop)
    }

    private func scheduleReport(on loop: EventLoop) {
        loop.scheduleTask(in: Self.reportInterval) { [weak self] in
            guard let self else { return }
            let stretch = self.failures.withLock { failures -> (HandshakeFailureCounts, String)? in
                let counts = failures.sinceReport
                failures.sinceReport = HandshakeFailureCounts()
                if counts.all == 0 {
                    failures.reporting = false
                    return nil
                }
                return (counts, failures.lastDetail)
            }
            guard let (counts, detail) = stretch else { return }
            self.logger.warning(
                "TLS handshakes failed in the last minute",
                metadata: [
                    "failed": "\(counts.all)", "refused": "\(counts.refused)", "timedOut": "\(counts.timedOut)",
                    "closed": "\(counts.closed)", "lastError": "\(detail)",
                ])
            self.scheduleReport(on: loop)
        }
    }

    private struct HandshakeFailures {
        var total = HandshakeFailureCounts()
        var sinceReport = HandshakeFailureCounts()
        var lastDetail = ""
        /// A stretch of failures is under way: its first was logged, the rest are summed up by the report timer.
        var reporting = false
    }
}

/// Why a handshake failed.
public enum HandshakeFailureReason: String, Sendable, CustomStringConvertible {
    /// The client's messages were refused: not TLS, a protocol version below 1.2, no cipher in common, no client
    /// certificate or one the CA did not sign.
    case refused
    /// The handshake was not complete within the timeout.
    case timedOut = "timed-out"
    /// The client closed the connection before the handshake was complete.
    case closed

    public var description: String { rawValue }
}

/// Failed handshakes, by reason.
public struct HandshakeFailureCounts: Sendable, Equatable {
    public var refused = 0
    public var timedOut = 0
    public var closed = 0

    public init() {}

    /// Every failed handshake.
    public var all: Int { refused + timedOut + closed }

    mutating func add(_ reason: HandshakeFailureReason) {
        switch reason {
        case .refused: refused += 1
        case .timedOut: timedOut += 1
        case .closed: closed += 1
        }
    }

    /// The count of `reason`.
    public subscript(reason: HandshakeFailureReason) -> Int {
        switch reason {
        case .refused: refused
        case .timedOut: timedOut
        case .closed: closed
        }
    }
}

/// A certificate as logs show it.
public struct CertificateSummary: Sendable, Equatable {
    /// The serial number in hexadecimal, as `openssl x509 -serial` prints it.
    public let serial: String
    /// The subject, one line (`CN = herald.example`).
    public let subject: String
    /// The end of the validity period, as OpenSSL prints it (`Nov 24 12:00:00 2027 GMT`).
    public let notAfter: String
    /// The DNS names of its subjectAltName extension, in order (wildcards as written, `*.example.org`); empty when
    /// it has none.
    public let names: [String]
}

/// A certificate chain file and its key file (PEM), as ``TLSServerContext/Configuration`` takes them.
public struct CertificateFiles: Sendable, Equatable {
    /// The certificate chain, PEM: the server's certificate first, then the intermediates.
    public var certificateFile: String
    /// The certificate's private key, PEM.
    public var keyFile: String

    public init(certificateFile: String, keyFile: String) {
        self.certificateFile = certificateFile
        self.keyFile = keyFile
    }
}
