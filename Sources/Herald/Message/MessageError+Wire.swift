extension MessageError.Status {
    /// The `google.rpc.Code` name Google puts in `error.status` beside FCM's own `errorCode`.
    public var googleStatus: String {
        switch self {
        case .invalidArgument: "INVALID_ARGUMENT"
        case .unregistered: "NOT_FOUND"
        case .senderIDMismatch: "PERMISSION_DENIED"
        case .quotaExceeded: "RESOURCE_EXHAUSTED"
        case .unavailable: "UNAVAILABLE"
        case .internal: "INTERNAL"
        }
    }
}

extension MessageError {
    /// The error in Google's shape, as FCM v1 answers it:
    /// `{"error": {"code": 404, "message": "...", "status": "NOT_FOUND", "details": [{"@type":
    /// "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": "UNREGISTERED"}]}}`.
    public var fcmErrorBody: JSONValue {
        [
            "error": [
                "code": .int(Int64(status.httpStatus)),
                "message": .string(message),
                "status": .string(status.googleStatus),
                "details": [
                    ["@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": .string(status.rawValue)]
                ],
            ]
        ]
    }
}

/// The success answer of an FCM v1 send: `{"name": "projects/{project}/messages/{id}"}`.
public func fcmSendResponse(project: String, messageID: String) -> JSONValue {
    ["name": .string("projects/\(project)/messages/\(messageID)")]
}

/// Appends ``fcmSendResponse(project:messageID:)`` as compact JSON, byte for byte what its `jsonBytes()` gives,
/// without building the value (receivers answer every message with it).
public func appendFCMSendResponse(project: String, messageID: String, to output: inout [UInt8]) {
    var project = project
    var messageID = messageID
    // The common case, neither string having a byte to escape: the answer's length is known, so it is appended
    // once and its five parts copied into place (five appends of their own cost more than the copying).
    let written = project.withUTF8 { projectBytes in
        messageID.withUTF8 { idBytes in
            appendUnescaped(project: UnsafeRawBufferPointer(projectBytes), messageID: UnsafeRawBufferPointer(idBytes), to: &output)
        }
    }
    guard !written else { return }
    // The fixed parts copied from their static bytes.
    JSONWriter.appendLiteral(#"{"name":"projects/"#, to: &output)
    JSONWriter.appendEscapedContents(project, to: &output)
    JSONWriter.appendLiteral("/messages/", to: &output)
    JSONWriter.appendEscapedContents(messageID, to: &output)
    JSONWriter.appendLiteral(#""}"#, to: &output)
}

/// Writes ``fcmSendResponse(project:messageID:)`` for many answers of one project, as
/// ``appendFCMSendResponse(project:messageID:to:)`` does, with the bytes before the message ID made once: for a
/// receiver's connection, which answers every message it accepts.
public struct FCMSendResponseWriter: Sendable {
    /// `{"name":"projects/{project}/messages/`.
    private let head: [UInt8]

    public init(project: String) {
        var head: [UInt8] = []
        JSONWriter.appendLiteral(#"{"name":"projects/"#, to: &head)
        JSONWriter.appendEscapedContents(project, to: &head)
        JSONWriter.appendLiteral("/messages/", to: &head)
        self.head = head
    }

    /// Appends the answer for `messageID`, byte for byte what `appendFCMSendResponse` appends.
    public func append(messageID: String, to output: inout [UInt8]) {
        output.append(contentsOf: head)
        var messageID = messageID
        let plain = messageID.withUTF8 { id -> Bool in
            guard let base = id.baseAddress, JSONWriter.firstByteToEscape(in: base, count: id.count, from: 0) == id.count else {
                return id.isEmpty
            }
            output.append(contentsOf: id)
            return true
        }
        if !plain { JSONWriter.appendEscapedContents(messageID, to: &output) }
        output.append(UInt8(ascii: "\""))
        output.append(UInt8(ascii: "}"))
    }

    /// The answer for `messageID` on its own, the bytes ``append(messageID:to:)`` appends: for an ID with nothing to
    /// escape (every ID Herald makes) allocated once at its size and copied into place, without counting it first.
    public func answer(messageID: String) -> [UInt8] {
        var messageID = messageID
        let plain = messageID.withUTF8 { id -> [UInt8]? in
            guard let idBase = id.baseAddress, JSONWriter.firstByteToEscape(in: idBase, count: id.count, from: 0) == id.count else {
                return nil
            }
            return head.withUnsafeBufferPointer { head in
                let count = head.count + id.count + 2
                return [UInt8](unsafeUninitializedCapacity: count) { output, initialized in
                    guard let start = output.baseAddress, let headBase = head.baseAddress else { return }
                    start.initialize(from: headBase, count: head.count)
                    (start + head.count).initialize(from: idBase, count: id.count)
                    start[count - 2] = UInt8(ascii: "\"")
                    start[count - 1] = UInt8(ascii: "}")
                    initialized = count
                }
            }
        }
        if let plain { return plain }
        var output: [UInt8] = []
        append(messageID: messageID, to: &output)
        return output
    }
}

/// ``appendFCMSendResponse(project:messageID:to:)`` when neither string has a byte JSON escapes and the answer is
/// at most 100 bytes; `false` (nothing appended) otherwise.
private func appendUnescaped(project: UnsafeRawBufferPointer, messageID: UnsafeRawBufferPointer, to output: inout [UInt8]) -> Bool {
    let head: StaticString = #"{"name":"projects/"#
    let middle: StaticString = "/messages/"
    let tail: StaticString = #""}"#
    // Room for the answer is made by appending as many bytes of these (a copy, where a repeated value is appended
    // byte by byte), then written over.
    let room: StaticString = "...................................................................................................."
    let count = head.utf8CodeUnitCount + project.count + middle.utf8CodeUnitCount + messageID.count + tail.utf8CodeUnitCount
    guard count <= room.utf8CodeUnitCount, let projectBase = project.baseAddress, let idBase = messageID.baseAddress,
        JSONWriter.firstByteToEscape(in: projectBase, count: project.count, from: 0) == project.count,
        JSONWriter.firstByteToEscape(in: idBase, count: messageID.count, from: 0) == messageID.count
    else { return false }
    let start = output.count
    output.append(contentsOf: UnsafeBufferPointer(start: room.utf8Start, count: count))
    output.withUnsafeMutableBytes { bytes in
        var at = bytes.baseAddress! + start
        at.copyMemory(from: head.utf8Start, byteCount: head.utf8CodeUnitCount)
        at += head.utf8CodeUnitCount
        at.copyMemory(from: projectBase, byteCount: project.count)
        at += project.count
        at.copyMemory(from: middle.utf8Start, byteCount: middle.utf8CodeUnitCount)
        at += middle.utf8CodeUnitCount
        at.copyMemory(from: idBase, byteCount: messageID.count)
        at += messageID.count
        at.copyMemory(from: tail.utf8Start, byteCount: tail.utf8CodeUnitCount)
    }
    return true
}

/// The number of bytes ``appendFCMSendResponse(project:messageID:to:)`` appends (a `Content-Length`), counted
/// without writing them.
public func fcmSendResponseByteCount(project: String, messageID: String) -> Int {
    // {"name":"projects/ + project + /messages/ + id + "}: 30 bytes and the two strings' escaped contents.
    30 + JSONWriter.escapedLength(project) - 2 + JSONWriter.escapedLength(messageID) - 2
}
