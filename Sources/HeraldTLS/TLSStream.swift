import CLibUV
import COpenSSL
public import HeraldEventLoop

/// TLS on one accepted connection: an SSL object between two memory BIOs. The ciphertext the connection reads is
/// written into the input BIO; what OpenSSL decrypts is handed to the connection's user; what the user writes in a
/// turn of the loop is encrypted at the connection's flush (one record for a small answer) and what lands in the
/// output BIO is sent at once. Loop thread only, as its connection.
final class TLSStream: StreamFilter, @unchecked Sendable {
    // @unchecked Sendable: only the handshake timer's closure crosses into a @Sendable context, and it runs on the
    // loop thread, where all of the stream's state lives.

    private enum State { case handshaking, open, failed }

    /// Keeps the SSL_CTX the handshake began with (the SSL holds a reference too; this one is for ``details``).
    private let context: SSLContext
    private let ssl: OpaquePointer
    /// The memory BIOs, replaced by new ones when a large read or write grew them (see ``keptBufferCapacity``).
    private var input: OpaquePointer
    private var output: OpaquePointer
    /// How deep ``sendOutput(_:completion:)`` is in itself (a send's completion can write again), and how many of the
    /// output BIO's bytes it has handed to the connection since the BIO was last emptied.
    private var sendDepth = 0
    private var outputSent = 0
    /// The listener's ALPN offer, which the C select callback reads through the SSL's app data.
    private let offer: UnsafeMutablePointer<herald_alpn_offer>
    private let offerBytes: UnsafeMutableBufferPointer<UInt8>
    private weak var connection: StreamConnection?
    private let onFailure: (HandshakeFailureReason, String, String) -> Void
    private var state = State.handshaking
    private var timer: ScheduledTask?
    /// Runs once when the handshake completes.
    var established: (() -> Void)?
    /// What the user wrote before the handshake was complete, sent once it is.
    private var early: [UInt8] = []
    private var earlyCompletions: [(UVError?) -> Void] = []
    /// The peer's end (close_notify or end of file) has been seen, and told to the user.
    private var peerEnded = false
    private var endDelivered = false
    private var drainScheduled = false
    private(set) var applicationProtocol: String?

    init(
        context: SSLContext, connection: StreamConnection, applicationProtocols: [String],
        onFailure: @escaping (HandshakeFailureReason, String, String) -> Void
    ) throws(TLSConfigurationError) {
        let wire = applicationProtocols.flatMap { name -> [UInt8] in
            let bytes = Array(name.utf8)
            precondition((1...255).contains(bytes.count), "an ALPN protocol name has 1 to 255 bytes: '\(name)'")
            return [UInt8(bytes.count)] + bytes
        }
        ERR_clear_error()
        guard let ssl = SSL_new(context.pointer) else { throw .openSSL("cannot begin a TLS session: \(openSSLError())") }
        let input = Self.memoryBIO()
        let output = Self.memoryBIO()
        guard let input, let output else {
            for bio in [input, output] { if let bio { BIO_free(bio) } }
            SSL_free(ssl)
            throw .openSSL("cannot create the TLS session's buffers")
        }
        SSL_set_bio(ssl, input, output)  // the SSL owns both from here
        SSL_set_accept_state(ssl)
        self.context = context
        self.ssl = ssl
        self.input = input
        self.output = output
        self.connection = connection
        self.onFailure = onFailure
        offerBytes = .allocate(capacity: max(wire.count, 1))
        _ = offerBytes.initialize(from: wire)
        offer = .allocate(capacity: 1)
        offer.initialize(to: herald_alpn_offer(protocols: UnsafePointer(offerBytes.baseAddress), length: UInt32(wire.count)))
        _ = herald_ssl_set_alpn_offer(ssl, offer)
    }

    deinit {
        SSL_free(ssl)
        offer.deallocate()
        offerBytes.deallocate()
    }

    /// Arms the handshake timeout.
    func start(timeout: Duration) {
        guard let connection else { return }
        timer = connection.eventLoop.scheduleTask(in: timeout) { [weak self] in
            guard let self, self.state == .handshaking else { return }
            self.fail(.timedOut, "no complete handshake within \(timeout) of the connection")
        }
    }

    // MARK: StreamFilter

    func received(_ bytes: UnsafeRawBufferPointer) {
        guard let connection, state != .failed, let base = bytes.baseAddress else { return }
        _ = BIO_write(input, base, Int32(bytes.count))
        process(connection)
        replaceInputIfGrown()
    }

    func receivedEnd() {
        guard let connection else { return }
        switch state {
        case .handshaking:
            fail(.closed, "the client closed the connection during the handshake")
        case .open:
            peerEnded = true
            process(connection)
        case .failed:
            connection.close()
        }
    }

    func write(_ bytes: UnsafeRawBufferPointer, completion: ((UVError?) -> Void)?) {
        guard let connection, let base = bytes.baseAddress else {
            completion?(Self.cancelled)
            return
        }
        switch state {
        case .handshaking:
            early.append(contentsOf: bytes)
            if let completion { earlyCompletions.append(completion) }
        case .failed:
            completion?(Self.cancelled)
        case .open:
            clearOpenSSLErrors()
            let written = SSL_write(ssl, base, Int32(bytes.count))
            guard written > 0 else {
                let error = UVError(code: Int32(UV_EPROTO.rawValue), operation: "encrypt for \(connection.label): \(openSSLError())")
                sendOutput(connection)
                completion?(error)
                state = .failed
                connection.close()
                return
            }
            sendOutput(connection, completion: completion)
        }
    }

    func finishWriting() {
        guard state == .open, let connection else { return }
        clearOpenSSLErrors()
        _ = SSL_shutdown(ssl)  // 0: close_notify sent, the peer's not yet seen; nothing to wait for here
        sendOutput(connection)
    }

    func readingResumed() {
        guard state == .open, !drainScheduled, let connection else { return }
        guard peerEnded || BIO_ctrl_pending(input) > 0 || SSL_pending(ssl) > 0 else { return }
        drainScheduled = true
        // Later, not inside resumeReading(): the user that resumed may be in the middle of its own work.
        connection.eventLoop.execute { [weak self] in
            guard let self, let connection = self.connection else { return }
            self.drainScheduled = false
            if connection.isOpen { self.process(connection) }
            self.replaceInputIfGrown()
        }
    }

    func closed() {
        timer?.cancel()
        timer = nil
        established = nil
        if state == .handshaking { state = .failed }
        if state == .open {
            // Freed without our close_notify, the SSL would take its session out of OpenSSL's cache (TLS 1.0's rule),
            // and a TLS 1.2 client resuming by session ID would get a full handshake each time: users close without
            // shutdownWriting (HTTP when the client ends first, an idle timeout). A session that completed its
            // handshake stays resumable, as TLS 1.1 and later allow; a connection that failed drops it.
            SSL_set_shutdown(ssl, SSL_get_shutdown(ssl) | SSL_SENT_SHUTDOWN)
        }
        let completions = earlyCompletions
        earlyCompletions = []
        early = []
        for completion in completions { completion(Self.cancelled) }
    }

    // MARK: The handshake and the records

    private static let cancelled = UVError(code: Int32(UV_ECANCELED.rawValue), operation: "write to a closed connection")

    /// Moves the handshake on, then hands the user what has been decrypted while it reads.
    private func process(_ connection: StreamConnection) {
        if state == .handshaking {
            handshake(connection)
            guard state == .open, connection.isOpen else { return }
        }
        readRecords(connection)
    }

    private func handshake(_ connection: StreamConnection) {
        clearOpenSSLErrors()
        let result = SSL_do_handshake(ssl)
        if result == 1 {
            sendOutput(connection)
            state = .open
            timer?.cancel()
            timer = nil
            var selected: UnsafePointer<UInt8>?
            var length: UInt32 = 0
            SSL_get0_alpn_selected(ssl, &selected, &length)
            if let selected, length > 0 {
                applicationProtocol = String(decoding: UnsafeBufferPointer(start: selected, count: Int(length)), as: UTF8.self)
            }
            let established = self.established
            self.established = nil
            established?()
            guard connection.isOpen else { return }
            if !early.isEmpty {
                let bytes = early
                let completions = earlyCompletions
                early = []
                earlyCompletions = []
                bytes.withUnsafeBytes { write($0, completion: completions.isEmpty ? nil : { error in completions.forEach { $0(error) } }) }
            }
            return
        }
        let error = SSL_get_error(ssl, result)
        if error == SSL_ERROR_WANT_READ {
            sendOutput(connection)
            return
        }
        let detail = error == SSL_ERROR_SSL ? openSSLError() : "TLS error \(error): \(openSSLError())"
        // The alert OpenSSL wrote goes out before the connection closes.
        sendOutput(connection)
        fail(.refused, detail)
    }

    /// Decrypts into the loop's read buffer (free again: the ciphertext was copied into the input BIO) and delivers
    /// up to a buffer's worth per call, as a plain connection delivers a read, while the user reads.
    private func readRecords(_ connection: StreamConnection) {
        let buffer = connection.eventLoop.readBuffer
        while connection.isOpen, connection.isReading {
            var filled = 0
            var status = SSL_ERROR_NONE
            while filled < buffer.count {
                clearOpenSSLErrors()
                let count = SSL_read(ssl, buffer.baseAddress! + filled, Int32(buffer.count - filled))
                if count > 0 {
                    filled += Int(count)
                    // With no ciphertext left to read and nothing buffered in the SSL, another SSL_read would only
                    // find the input empty and ask for more: the answer is known without the call. A request that
                    // arrives alone is one record, so this is one SSL_read a request instead of two.
                    if BIO_ctrl_pending(input) == 0, SSL_has_pending(ssl) == 0 {
                        status = SSL_ERROR_WANT_READ
                        break
                    }
                } else {
                    status = SSL_get_error(ssl, count)
                    break
                }
            }
            // TLS 1.3 may answer records (a key update): what OpenSSL wrote goes out now.
            sendOutput(connection)
            if filled > 0 { connection.deliver(UnsafeRawBufferPointer(start: buffer.baseAddress, count: filled)) }
            guard connection.isOpen else { return }
            switch status {
            case SSL_ERROR_NONE:
                continue  // the buffer was full: more may be waiting
            case SSL_ERROR_WANT_READ:
                if peerEnded, !endDelivered, connection.isReading {
                    endDelivered = true
                    connection.deliverEnd()
                }
                return
            case SSL_ERROR_ZERO_RETURN:
                // close_notify: the peer's stream ends here, whatever follows it.
                peerEnded = true
                if !endDelivered {
                    endDelivered = true
                    connection.deliverEnd()
                }
                return
            default:
                // A damaged or forged record: the stream cannot go on.
                ERR_clear_error()
                state = .failed
                connection.close()
                return
            }
        }
    }

    /// Sends what OpenSSL wrote into the output BIO.
    ///
    /// `connection.send` runs `completion` before it returns when the kernel takes every byte at once, and a completion
    /// may write again through this stream (writing, then closing, flushes what the connection gathered) before the
    /// BIO is emptied: its records are appended behind the ones just sent. The nested call sends only those, at once
    /// (a close that follows must find them queued), and leaves emptying the BIO to the outermost call.
    private func sendOutput(_ connection: StreamConnection, completion: ((UVError?) -> Void)? = nil) {
        var data: UnsafeMutablePointer<CChar>?
        let count = herald_bio_contents(output, &data)
        let start = outputSent
        guard count > start, let data else {
            completion?(nil)
            return
        }
        outputSent = count
        sendDepth += 1
        connection.send(UnsafeRawBufferPointer(start: data + start, count: count - start), completion: completion)
        sendDepth -= 1
        guard sendDepth == 0 else { return }
        outputSent = 0
        _ = herald_bio_reset(output)
        // A BIO's room grows to about 4/3 of what it is asked to hold: only a flight past 3/4 of the kept room can have
        // taken it past that.
        if count > Self.keptBufferCapacity / 4 * 3, herald_bio_capacity(output) > Self.keptBufferCapacity, let fresh = Self.memoryBIO() {
            SSL_set0_wbio(ssl, fresh)  // frees the grown one
            output = fresh
        }
    }

    /// The most room a memory BIO is left with between records. A memory BIO keeps the room it grew to for the largest
    /// size it held (the bytes of one read, the records of one write) until it is freed: without this, an idle
    /// keep-alive connection that once took a 60 KB body held another 80 KB for it until it closed.
    static let keptBufferCapacity = 16 * 1024

    /// A new, empty memory BIO that asks the caller to retry when it is read empty.
    private static func memoryBIO() -> OpaquePointer? {
        guard let bio = BIO_new(BIO_s_mem()) else { return nil }
        herald_bio_retry_when_empty(bio)
        return bio
    }

    /// The room the memory BIOs have (what they keep while empty), for the tests.
    var memoryBufferCapacities: (input: Int, output: Int) {
        (herald_bio_capacity(input), herald_bio_capacity(output))
    }

    /// Replaces the input BIO when reads grew its room past ``keptBufferCapacity``, once OpenSSL has read everything
    /// from it.
    private func replaceInputIfGrown() {
        guard herald_bio_capacity(input) > Self.keptBufferCapacity, BIO_ctrl_pending(input) == 0, let fresh = Self.memoryBIO()
        else { return }
        SSL_set0_rbio(ssl, fresh)  // frees the grown one
        input = fresh
    }

    private func fail(_ reason: HandshakeFailureReason, _ detail: String) {
        guard state != .failed else { return }
        state = .failed
        timer?.cancel()
        timer = nil
        established = nil
        guard let connection else { return }
        onFailure(reason, detail, connection.label)
        connection.close()
    }

    // MARK: Details

    var details: TLSDetails? {
        guard state == .open else { return nil }
        let version = SSL_get_version(ssl).map { String(cString: $0) } ?? ""
        let cipher = SSL_get_current_cipher(ssl).flatMap { SSL_CIPHER_get_name($0) }.map { String(cString: $0) } ?? ""
        let serverName = SSL_get_servername(ssl, TLSEXT_NAMETYPE_host_name).map { String(cString: $0) }
        var peerCertificate: [UInt8]?
        if let certificate = SSL_get0_peer_certificate(ssl) {
            let length = i2d_X509(certificate, nil)
            if length > 0 {
                var bytes = [UInt8](repeating: 0, count: Int(length))
                bytes.withUnsafeMutableBufferPointer { buffer in
                    var cursor: UnsafeMutablePointer<UInt8>? = buffer.baseAddress
                    _ = i2d_X509(certificate, &cursor)
                }
                peerCertificate = bytes
            }
        }
        return TLSDetails(
            protocolVersion: version, cipher: cipher, applicationProtocol: applicationProtocol, serverName: serverName,
            peerCertificate: peerCertificate, certificate: context.certificate(of: SSL_get_SSL_CTX(ssl)))
    }
}

/// Empties this thread's OpenSSL error queue before an I/O call, as `SSL_get_error` needs (it reads the queue): looked at
/// first, since the queue is almost always empty and `ERR_clear_error` clears all of its sixteen entries whatever they
/// hold (two frees each), about five times the cost of finding it empty — three times a request over TLS.
/// `ERR_peek_error` is 0 exactly when `SSL_get_error` would find no error queued.
@inline(__always)
func clearOpenSSLErrors() {
    if ERR_peek_error() != 0 { ERR_clear_error() }
}

/// What a connection's TLS handshake agreed on.
public struct TLSDetails: Sendable, Equatable {
    /// `TLSv1.2` or `TLSv1.3`.
    public let protocolVersion: String
    /// OpenSSL's name of the cipher suite (`TLS_AES_256_GCM_SHA384`).
    public let cipher: String
    /// The protocol chosen by ALPN (`h2`, `http/1.1`), or `nil` when the client offered none the listener speaks.
    public let applicationProtocol: String?
    /// The host name the client asked for (SNI), if it sent one.
    public let serverName: String?
    /// The client's certificate (DER) when it sent one (it must, with a client CA configured).
    public let peerCertificate: [UInt8]?
    /// The server certificate this connection's handshake used.
    public let certificate: CertificateSummary
}

extension StreamConnection {
    /// What the TLS handshake agreed on, once it is complete; `nil` for a plain connection or before then. Loop
    /// thread.
    public var tls: TLSDetails? {
        (filter as? TLSStream)?.details
    }
}
