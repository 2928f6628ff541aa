/// Where a session takes the answers its handler gives: the HTTP/1.1 session writes them in request order, an
/// HTTP/2 session on their streams. Loop thread only.
public protocol HTTPResponseSink: AnyObject {
    /// The answer for `slot` (the place ``HTTPResponder/slot`` names). A session ignores an answer for a
    /// connection that has closed.
    func respond(_ response: HTTPResponse, slot: Int)
}

/// The answer slot of one request: its handler fills it exactly once, at once or later (after the bus or the
/// store answers), on the connection's loop thread. The session writes answers in the order its protocol needs
/// (HTTP/1.1: the order the requests came, however they complete). A responder outliving its connection is
/// harmless: its answer is dropped. It keeps its session (not the connection) alive until it is dropped.
public struct HTTPResponder: @unchecked Sendable {
    // @unchecked Sendable: it crosses into tasks that run on the loop (`Task(executorPreference: loop)`), and is
    // only used there; the sink's state lives on the loop thread.
    // A strong reference: loading a weak one costs a side-table lookup per answer, and the sink checks whether its
    // connection is still open anyway.
    let sink: any HTTPResponseSink
    /// The request's place: the HTTP/1.1 session's sequence number, or an HTTP/2 stream's identifier.
    public let slot: Int

    public init(sink: any HTTPResponseSink, slot: Int) {
        self.sink = sink
        self.slot = slot
    }

    /// Answers the request. Call it once, on the connection's loop thread.
    public func respond(_ response: HTTPResponse) {
        sink.respond(response, slot: slot)
    }
}
