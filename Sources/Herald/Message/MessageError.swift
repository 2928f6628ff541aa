/// Why a message was refused, in terms the sender can act on. Receivers turn it into their wire format:
/// Google's error shape with ``status`` for the FCM endpoint, ``apnsReason`` for the APNs-style endpoint.
public struct MessageError: Error, Sendable, Equatable, CustomStringConvertible {
    /// FCM v1's error codes (`details[].errorCode`).
    public enum Status: String, Sendable, Equatable {
        case invalidArgument = "INVALID_ARGUMENT"
        case unregistered = "UNREGISTERED"
        case senderIDMismatch = "SENDER_ID_MISMATCH"
        case quotaExceeded = "QUOTA_EXCEEDED"
        case unavailable = "UNAVAILABLE"
        case `internal` = "INTERNAL"

        /// The HTTP status FCM answers with.
        public var httpStatus: Int {
            switch self {
            case .invalidArgument: 400
            case .unregistered: 404
            case .senderIDMismatch: 403
            case .quotaExceeded: 429
            case .unavailable: 503
            case .internal: 500
            }
        }
    }

    /// What exactly was wrong.
    public enum Reason: Sendable, Equatable {
        case malformedJSON(JSONParseError)
        case emptyPayload
        case unknownField(String)
        case wrongType(field: String, expected: String)
        case missingField(String)
        case noTarget
        case multipleTargets([String])
        case invalidToken(String)
        case invalidTopicName(String)
        case invalidCondition(String, detail: String)
        case reservedKey(String)
        case payloadTooLarge(size: Int, limit: Int)
        case badPriority(String)
        case badExpiration(String)
        case badCollapseID(String)
        case badMessageID(String)
        case badPushType(String)
        case unregistered(MessageTarget)
        /// The token was this instance's, and stopped being its registration token (deleted or replaced) at the
        /// time given, in milliseconds since 1970: FCM's `UNREGISTERED`, APNs' 410 `Unregistered`.
        case tokenRetired(String, at: Int64)
        case senderMismatch(expected: String, got: String)
        case busy(limit: Int)
        case shuttingDown
        case storeUnavailable(String)
        case handlerFailed(String)
    }

    public var reason: Reason

    public init(_ reason: Reason) {
        self.reason = reason
    }

    /// The FCM status for the reason.
    public var status: Status {
        switch reason {
        case .unregistered, .tokenRetired: .unregistered
        case .senderMismatch: .senderIDMismatch
        case .busy: .quotaExceeded
        case .shuttingDown, .storeUnavailable: .unavailable
        case .handlerFailed: .internal
        default: .invalidArgument
        }
    }

    /// The APNs `reason` for the same failure (APNs has no reason for malformed JSON; Herald says `MalformedPayload`).
    public var apnsReason: String {
        switch reason {
        case .malformedJSON, .wrongType, .unknownField, .missingField, .reservedKey, .noTarget, .multipleTargets,
            .invalidTopicName, .invalidCondition:
            "MalformedPayload"
        case .emptyPayload: "PayloadEmpty"
        case .payloadTooLarge: "PayloadTooLarge"
        case .invalidToken, .unregistered: "BadDeviceToken"
        case .tokenRetired: "Unregistered"
        case .badPriority: "BadPriority"
        case .badExpiration: "BadExpirationDate"
        case .badCollapseID: "BadCollapseId"
        case .badMessageID: "BadMessageId"
        case .badPushType: "InvalidPushType"
        case .senderMismatch: "BadTopic"
        case .busy: "TooManyRequests"
        case .shuttingDown: "Shutdown"
        case .storeUnavailable: "ServiceUnavailable"
        case .handlerFailed: "InternalServerError"
        }
    }

    /// A sentence for the sender: what was wrong and, where it helps, what is allowed.
    public var message: String {
        switch reason {
        case .malformedJSON(let error): "Invalid JSON payload received. \(error)"
        case .emptyPayload: "The request body is empty."
        case .unknownField(let path):
            "Invalid JSON payload received. Unknown name \"\(path.split(separator: ".").last ?? "")\" at '\(path)': Cannot find field."
        case .wrongType(let field, let expected): "Invalid value at '\(field)': expected \(expected)."
        case .missingField(let field): "Missing required field '\(field)'."
        case .noTarget: "The message must name exactly one target: 'token', 'fid', 'topic' or 'condition'; it names none."
        case .multipleTargets(let names):
            "The message must name exactly one target: 'token', 'fid', 'topic' or 'condition'; it names \(names.map { "'\($0)'" }.joined(separator: ", "))."
        case .invalidToken(let token): "The registration token '\(token)' is not valid: it must be a non-empty string."
        case .invalidTopicName(let name):
            "Invalid topic name '\(name)': a topic name matches [a-zA-Z0-9-_.~%]{1,900}, optionally after '/topics/'."
        case .invalidCondition(let condition, let detail): "Invalid condition \"\(condition)\": \(detail)."
        case .reservedKey(let key):
            "Invalid data key '\(key)': 'from', 'message_type', 'notification' and keys starting with 'google.' or 'gcm.' are reserved."
        case .payloadTooLarge(let size, let limit): "The message payload is \(size) bytes; at most \(limit) are allowed."
        case .badPriority(let value): "Invalid apns-priority '\(value)': use 10, 5 or 1, and 5 or 1 for background pushes."
        case .badExpiration(let value): "Invalid apns-expiration '\(value)': use seconds since 1970, or 0."
        case .badCollapseID(let value): "Invalid apns-collapse-id '\(value.prefix(80))': at most 64 bytes."
        case .badMessageID(let value): "Invalid apns-id '\(value)': use a UUID in its canonical 8-4-4-4-12 form."
        case .badPushType(let value): "Invalid apns-push-type '\(value)'."
        case .unregistered(let target): "Requested entity was not found: no registration here for \(target)."
        case .tokenRetired(let token, _):
            "Requested entity was not found: no registration here for \(MessageTarget.token(token)); it was deleted or replaced."
        case .senderMismatch(let expected, let got): "The sender ID or project '\(got)' does not match this instance's '\(expected)'."
        case .busy(let limit): "Herald is at its limit of \(limit) messages in flight; retry with backoff."
        case .shuttingDown: "Herald is shutting down and takes no new messages; retry another instance or later."
        case .storeUnavailable(let detail): "Herald could not store the message durably, so it did not accept it; retry later. (\(detail))"
        case .handlerFailed(let detail): "Internal error: \(detail)"
        }
    }

    public var description: String { "\(status.rawValue): \(message)" }
}
