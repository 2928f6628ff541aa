/// A layer between a ``StreamConnection``'s socket and its user that transforms the bytes both ways: TLS, which
/// HeraldTLS implements. The user of the connection sees no difference: ``StreamConnection/onRead`` gets what the
/// filter decodes, ``StreamConnection/write(_:completion:)-(UnsafeRawBufferPointer,_)`` takes what it encodes,
/// ``StreamConnection/shutdownWriting(completion:)`` lets it say goodbye first.
///
/// A connection without a filter pays one test of an optional per read and per flush for the hook. Loop thread
/// only, as the connection. A filter is installed once, before the connection reads
/// (`StreamConnection/install(_:)`).
package protocol StreamFilter: AnyObject {
    /// Bytes read from the socket (valid during the call). The filter decodes them and hands the result to
    /// `StreamConnection/deliver(_:)` while `StreamConnection/isReading`; what it cannot deliver now it keeps
    /// until `readingResumed()`.
    func received(_ bytes: UnsafeRawBufferPointer)
    /// The peer closed its writing side. The filter calls `StreamConnection/deliverEnd()` when the user should
    /// see it, or closes the connection.
    func receivedEnd()
    /// The user's bytes of one turn of the loop, to encode and send with `StreamConnection/send(_:completion:)`;
    /// `completion` runs once they are sent (or failed).
    func write(_ bytes: UnsafeRawBufferPointer, completion: ((UVError?) -> Void)?)
    /// The user half-closes: the filter sends what ends its stream (TLS's close_notify) before the socket's
    /// end of file.
    func finishWriting()
    /// Reading was paused and is resumed: deliver what was kept.
    func readingResumed()
    /// The connection closed: cancel timers, free resources.
    func closed()
    /// The application protocol agreed with the peer (TLS's ALPN), once known.
    var applicationProtocol: String? { get }
}

/// What secures the connections a listener accepts (TLS, implemented by HeraldTLS's `TLSServerContext`).
/// A ``StreamServer``'s user calls ``secure(_:applicationProtocols:established:)`` on each TCP connection it
/// accepts, before it reads from it.
public protocol StreamSecurity: AnyObject, Sendable {
    /// Puts the security layer between `connection` (just accepted, not yet reading) and its user, and starts
    /// reading for the handshake. `established` runs (on the loop thread) once the handshake is complete, before
    /// any of the peer's data is delivered; a connection whose handshake fails or times out is closed instead
    /// (its `onClose` runs). Set ``StreamConnection/onRead`` before the handshake ends, at the latest in
    /// `established`.
    ///
    /// - Parameters:
    ///   - connection: the connection just accepted.
    ///   - applicationProtocols: the protocols the listener speaks, in order of preference, for the peer to choose
    ///     from (ALPN: `["h2", "http/1.1"]`); empty for a protocol without a name (no ALPN).
    ///   - established: runs once the handshake is complete; `nil` when the user waits for nothing.
    func secure(_ connection: StreamConnection, applicationProtocols: [String], established: (() -> Void)?)
}
