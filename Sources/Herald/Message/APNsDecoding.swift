/// The `apns-*` request headers that shape delivery, parsed and checked as APNs checks them.
public struct APNsHeaders: Sendable, Hashable {
    public var id: String?
    public var pushType: String?
    public var priority: MessagePriority?
    public var expiration: Int64?
    public var collapseID: String?
    public var topic: String?

    static let pushTypes: Set<String> = [
        "alert", "background", "voip", "complication", "fileprovider", "mdm", "location", "liveactivity", "pushtotalk", "widgets",
    ]

    /// Parses headers whose names are lower-cased. Throws the APNs-style ``MessageError`` for a bad value.
    public static func parse(_ headers: [String: String]) throws(MessageError) -> APNsHeaders {
        var parsed = APNsHeaders()
        if let id = headers["apns-id"] {
            guard isCanonicalUUID(id) else { throw MessageError(.badMessageID(id)) }
            parsed.id = id.lowercased()
        }
        if let pushType = headers["apns-push-type"] {
            guard pushTypes.contains(pushType) else { throw MessageError(.badPushType(pushType)) }
            parsed.pushType = pushType
        }
        if let priority = headers["apns-priority"] {
            switch priority {
            case "10": parsed.priority = .high
            case "5", "1": parsed.priority = .normal
            default: throw MessageError(.badPriority(priority))
            }
        }
        if let expiration = headers["apns-expiration"] {
            guard let seconds = Int64(expiration), seconds >= 0 else { throw MessageError(.badExpiration(expiration)) }
            parsed.expiration = seconds == 0 ? nil : seconds
        }
        if let collapseID = headers["apns-collapse-id"] {
            guard collapseID.utf8.count <= 64 else { throw MessageError(.badCollapseID(collapseID)) }
            parsed.collapseID = collapseID
        }
        parsed.topic = headers["apns-topic"]
        if parsed.pushType == "background", parsed.priority == .high { throw MessageError(.badPriority("10")) }
        return parsed
    }

    static func isCanonicalUUID(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard bytes.count == 36 else { return false }
        for (index, byte) in bytes.enumerated() {
            if [8, 13, 18, 23].contains(index) {
                guard byte == UInt8(ascii: "-") else { return false }
            } else {
                let isHex =
                    (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte)
                    || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte | 0x20)
                guard isHex else { return false }
            }
        }
        return true
    }
}

/// An APNs provider request: `POST /3/device/{token}` with a payload and `apns-*` headers.
public enum APNsRequest {
    /// Decodes and validates an APNs provider request into a message for `deviceToken`.
    /// `headers` are matched case-insensitively. The message ID is `apns-id` when given, otherwise a new one.
    public static func decode(
        payload body: [UInt8],
        headers: [String: String],
        deviceToken: String,
        context: DecodingContext
    ) throws(MessageError) -> RemoteMessage {
        guard !deviceToken.isEmpty else { throw MessageError(.invalidToken(deviceToken)) }
        guard !body.isEmpty else { throw MessageError(.emptyPayload) }
        guard body.count <= PayloadLimits.message else {
            throw MessageError(.payloadTooLarge(size: body.count, limit: PayloadLimits.message))
        }
        let parsedHeaders = try APNsHeaders.parse(headers.reduce(into: [:]) { $0[$1.key.lowercased()] = $1.value })
        let root: JSONValue
        do {
            root = try JSONParser.parse(body)
        } catch {
            throw MessageError(.malformedJSON(error))
        }
        guard case .object(var userInfo) = root else { throw MessageError(.wrongType(field: "payload", expected: "an object")) }
        if let aps = userInfo["aps"] { try APSValidation.validate(aps, path: "aps") }
        for (key, _) in userInfo where key != "aps" && UserInfoKey.isReservedDataKey(key) {
            throw MessageError(.reservedKey(key))
        }
        userInfo[UserInfoKey.messageID] = .string(parsedHeaders.id ?? context.makeMessageID())
        userInfo[UserInfoKey.from] = .string(context.senderID)
        return RemoteMessage(
            userInfo: userInfo,
            target: .token(deviceToken),
            collapseKey: parsedHeaders.collapseID,
            priority: parsedHeaders.priority ?? (parsedHeaders.pushType == "background" ? .normal : .high),
            expiration: parsedHeaders.expiration,
            receivedAt: context.now()
        )
    }
}
