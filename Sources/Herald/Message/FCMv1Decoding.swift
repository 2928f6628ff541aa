/// An FCM HTTP v1 send request: `{"message": {...}, "validate_only": false}`.
public struct FCMSendRequest: Sendable, Hashable {
    /// The message, mapped to the keys an Apple app would see.
    public var message: RemoteMessage
    /// `validate_only`: check the message without delivering it.
    public var validateOnly: Bool

    /// Decodes and validates a send request body. Throws a ``MessageError`` naming the field at fault.
    ///
    /// Mapping (as FCM maps a message for an Apple device): `notification.title/body` become
    /// `aps.alert.title/body`; `apns.payload` is merged over that (its values win); each `data` entry becomes a
    /// top-level key; `gcm.message_id`, `from` (the sender ID, or `/topics/<name>`) and, with an analytics
    /// label, `google.c.a.m_l` are added. `apns.headers` give priority, expiration and collapse ID.
    public static func decode(_ body: [UInt8], context: DecodingContext) throws(MessageError) -> FCMSendRequest {
        guard !body.isEmpty else { throw MessageError(.emptyPayload) }
        let root: JSONValue
        do {
            root = try JSONParser.parse(body)
        } catch {
            throw MessageError(.malformedJSON(error))
        }
        let request = try StrictObject(root, fields: Fields.request)
        guard let messageValue = request.value("message") else { throw MessageError(.missingField("message")) }
        let message = try decodeMessage(messageValue, context: context)
        return FCMSendRequest(message: message, validateOnly: try request.bool("validate_only") ?? false)
    }

    /// The fields of each object of the FCM v1 send request.
    enum Fields {
        static let request = FieldSet(["message", "validate_only"])
        static let message = FieldSet([
            "name", "data", "notification", "android", "webpush", "apns", "fcm_options", "token", "topic", "condition", "fid",
        ])
        static let notification = FieldSet(["title", "body", "image"])
        static let android = FieldSet([
            "collapse_key", "priority", "ttl", "restricted_package_name", "data", "notification", "fcm_options", "direct_boot_ok",
            "bandwidth_constrained_ok", "restricted_satellite_ok",
        ])
        static let apns = FieldSet(["headers", "payload", "fcm_options", "live_activity_token"])
        static let apnsOptions = FieldSet(["analytics_label", "image"])
        static let options = FieldSet(["analytics_label"])
        static let targets = ["token", "fid", "topic", "condition"]
    }

    // One function on purpose: every field of FCM's `Message` read in one pass over the parsed object, on every message's path (fuzzed, ratcheted).
    static func decodeMessage(_ value: JSONValue, context: DecodingContext) throws(MessageError) -> RemoteMessage {
        let message = try StrictObject(value, name: "message", fields: Fields.message)

        // Exactly one target.
        var targetName: String?
        for name in Fields.targets where message.has(name) {
            guard targetName == nil else { throw MessageError(.multipleTargets(Fields.targets.filter { message.has($0) })) }
            targetName = name
        }
        guard let targetName else { throw MessageError(.noTarget) }
        let target: MessageTarget
        switch targetName {
        case "token":
            let token = try message.string("token") ?? ""
            guard !token.isEmpty else { throw MessageError(.invalidToken(token)) }
            target = .token(token)
        case "fid":
            let fid = try message.string("fid") ?? ""
            guard !fid.isEmpty else { throw MessageError(.invalidToken(fid)) }
            target = .installation(fid)
        case "topic":
            target = .topic(try TopicName.validate(try message.string("topic") ?? ""))
        default:
            let condition = try message.string("condition") ?? ""
            _ = try TopicCondition.parse(condition)
            target = .condition(condition)
        }

        var userInfo = JSONObject()
        // aps, fcm_options, the data keys, the message ID, from and a label: one allocation for all of them.
        userInfo.reserveCapacity((message.value("data")?.objectValue?.count ?? 0) + 5)
        // notification → aps.alert
        if let notification = try message.object("notification", fields: Fields.notification) {
            var alert = JSONObject()
            if let title = try notification.string("title") { alert["title"] = .string(title) }
            if let body = try notification.string("body") { alert["body"] = .string(body) }
            if !alert.isEmpty { userInfo["aps"] = .object(["alert": .object(alert)]) }
            if let image = try notification.string("image") { userInfo["fcm_options"] = .object(["image": .string(image)]) }
        }

        // data → top-level keys
        for (key, value) in try message.stringMap("data") ?? JSONObject() {
            guard !UserInfoKey.isReservedDataKey(key) else { throw MessageError(.reservedKey(key)) }
            userInfo[key] = value
        }

        var priority = MessagePriority.high
        var expiration: Int64?
        var collapseKey: String?
        var analyticsLabel: String?

        _ = try message.object("android", fields: Fields.android)
        if let webpush = message.value("webpush") {
            guard case .object = webpush else { throw MessageError(.wrongType(field: "message.webpush", expected: "an object")) }
        }

        if let apns = try message.object("apns", fields: Fields.apns) {
            var headers: [String: String] = [:]
            for (key, value) in try apns.stringMap("headers") ?? JSONObject() {
                if case .string(let string) = value { headers[key.lowercased()] = string }
            }
            let parsed = try APNsHeaders.parse(headers)
            priority = parsed.priority ?? priority
            expiration = parsed.expiration
            collapseKey = parsed.collapseID
            if let payload = try apns.freeObject("payload") {
                if let aps = payload["aps"] { try APSValidation.validate(aps, path: "message.apns.payload.aps") }
                for (key, _) in payload where key != "aps" && UserInfoKey.isReservedDataKey(key) {
                    throw MessageError(.reservedKey(key))
                }
                userInfo.merge(payload)
            }
            if let options = try apns.object("fcm_options", fields: Fields.apnsOptions) {
                analyticsLabel = try options.string("analytics_label")
            }
            if parsed.pushType == "background", parsed.priority == .high {
                throw MessageError(.badPriority("10"))
            }
        }
        if let options = try message.object("fcm_options", fields: Fields.options) {
            analyticsLabel = try options.string("analytics_label") ?? analyticsLabel
        }

        let size = payloadSize(userInfo)
        let limit = (target.isTopicLike ? PayloadLimits.topicMessage : PayloadLimits.message)
        guard size <= limit else { throw MessageError(.payloadTooLarge(size: size, limit: limit)) }

        if let analyticsLabel { userInfo[UserInfoKey.analyticsLabel] = .string(analyticsLabel) }
        userInfo[UserInfoKey.messageID] = .string(context.makeMessageID())
        switch target {
        case .topic(let name): userInfo[UserInfoKey.from] = .string("/topics/\(name)")
        default: userInfo[UserInfoKey.from] = .string(context.senderID)
        }
        return RemoteMessage(
            userInfo: userInfo, target: target, collapseKey: collapseKey, priority: priority,
            expiration: expiration, receivedAt: context.now()
        )
    }
}

extension MessageTarget {
    /// Topic and condition messages fan out and get the smaller payload limit.
    var isTopicLike: Bool {
        switch self {
        case .topic, .condition: true
        case .token, .installation: false
        }
    }
}

extension FCMSendRequest {
    /// The FCM v1 send body for this request, such that decoding it gives the same message back (with a new
    /// message ID): string custom keys go to `data`, `aps` and other custom keys to `apns.payload`, priority,
    /// expiration and collapse key to `apns.headers`, the analytics label to `fcm_options`.
    public func jsonBody() -> [UInt8] {
        var fields = JSONObject()
        switch message.target {
        case .token(let token): fields["token"] = .string(token)
        case .installation(let fid): fields["fid"] = .string(fid)
        case .topic(let name): fields["topic"] = .string(name)
        case .condition(let condition): fields["condition"] = .string(condition)
        }
        var data = JSONObject()
        var payload = JSONObject()
        for (key, value) in message.userInfo {
            switch key {
            case UserInfoKey.messageID, UserInfoKey.from, UserInfoKey.analyticsLabel:
                continue
            case UserInfoKey.aps:
                payload[key] = value
            default:
                if case .string = value { data[key] = value } else { payload[key] = value }
            }
        }
        if !data.isEmpty { fields["data"] = .object(data) }
        var headers: JSONObject = ["apns-priority": .string(String(message.priority.rawValue))]
        if let expiration = message.expiration { headers["apns-expiration"] = .string(String(expiration)) }
        if let collapseKey = message.collapseKey { headers["apns-collapse-id"] = .string(collapseKey) }
        var apns: JSONObject = ["headers": .object(headers)]
        if !payload.isEmpty { apns["payload"] = .object(payload) }
        fields["apns"] = .object(apns)
        if let label = message.analyticsLabel { fields["fcm_options"] = .object(["analytics_label": .string(label)]) }
        var root: JSONObject = ["message": .object(fields)]
        if validateOnly { root["validate_only"] = .bool(true) }
        return JSONValue.object(root).jsonBytes()
    }
}
