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
    // The fixed parts copied from their static bytes (one answer per message).
    JSONWriter.appendLiteral(#"{"name":"projects/"#, to: &output)
    JSONWriter.appendEscapedContents(project, to: &output)
    JSONWriter.appendLiteral("/messages/", to: &output)
    JSONWriter.appendEscapedContents(messageID, to: &output)
    JSONWriter.appendLiteral(#""}"#, to: &output)
}

/// The number of bytes ``appendFCMSendResponse(project:messageID:to:)`` appends (a `Content-Length`), counted
/// without writing them.
public func fcmSendResponseByteCount(project: String, messageID: String) -> Int {
    // {"name":"projects/ + project + /messages/ + id + "}: 30 bytes and the two strings' escaped contents.
    30 + JSONWriter.escapedLength(project) - 2 + JSONWriter.escapedLength(messageID) - 2
}
