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
    ///
    /// The body is read in one pass straight into the message: the strings and values it keeps are made once,
    /// and only the members kept as they are (`apns`, `android`, `webpush`, `fcm_options`) become `JSONValue`s.
    /// Nothing is checked for meaning before the whole body is known to be JSON, so a body that is both malformed
    /// and wrong is refused as malformed, and of several faults the one reported is the first in the order of
    /// the checks below, wherever each is in the body.
    public static func decode(_ body: [UInt8], context: DecodingContext) throws(MessageError) -> FCMSendRequest {
        guard !body.isEmpty else { throw MessageError(.emptyPayload) }
        // Returned straight from the closure: a `Result` around it would be copied out, the message field by field.
        do {
            return try body.withUnsafeBytes { bytes in try decode(bytes, context: context) }
        } catch let error as MessageError {
            throw error
        } catch {
            preconditionFailure("decoding throws MessageError only; withUnsafeBytes erased its type")
        }
    }

    private static func decode(_ body: UnsafeRawBufferPointer, context: DecodingContext) throws(MessageError) -> FCMSendRequest {
        var request = ScannedRequest()
        do {
            var reader = try JSONReader(body)
            try request.scan(&reader)
        } catch {
            throw MessageError(.malformedJSON(error))
        }
        // The only reference to the data entries' storage, so that adding to them does not copy it.
        var userInfo = JSONObject()
        swap(&userInfo, &request.userInfo)
        guard request.isObject else { throw MessageError(.wrongType(field: "", expected: "an object")) }
        if let key = request.unknownKey { throw MessageError(.unknownField(key)) }
        let message: RemoteMessage
        switch request.messageKind {
        case .absent: throw MessageError(.missingField("message"))
        case .notObject: throw MessageError(.wrongType(field: "message", expected: "an object"))
        case .object:
            message = try decodeMessage(&request.message, userInfo: consume userInfo, bodySize: body.count, context: context)
        }
        var validateOnly = false
        if let value = request.validateOnly {
            guard case .bool(let bool) = value else { throw MessageError(.wrongType(field: "validate_only", expected: "true or false")) }
            validateOnly = bool
        }
        return FCMSendRequest(message: consume message, validateOnly: validateOnly)
    }

    /// The fields of each object of the FCM v1 send request. The order of `request`, `message` and
    /// `notification` is that of the positions `ScannedRequest` reads them by.
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

    // One function on purpose: every field of FCM's `Message` checked in one place, in the order the errors are
    // reported, on every message's path (fuzzed, ratcheted).
    //
    // `userInfo` holds the data entries when it is called; taken (not borrowed) so that the message is built around it
    // without a copy. The strings the message keeps are taken out of `message` in the same way.
    @inline(__always)
    static func decodeMessage(
        _ message: inout ScannedMessage, userInfo: consuming JSONObject, bodySize: Int, context: DecodingContext
    ) throws(MessageError) -> RemoteMessage {
        if let key = message.unknownKey { throw MessageError(.unknownField("message.\(key)")) }

        // Exactly one target.
        var targetIndex: Int?
        for index in 0..<4 where message.hasTarget(index) {
            guard targetIndex == nil else {
                let present = Fields.targets.indices.filter { message.hasTarget($0) }
                throw MessageError(.multipleTargets(present.map { Fields.targets[$0] }))
            }
            targetIndex = index
        }
        guard let targetIndex else { throw MessageError(.noTarget) }
        guard case .string(let targetString) = message.takeTarget(targetIndex) else {
            throw MessageError(.wrongType(field: "message.\(Fields.targets[targetIndex])", expected: "a string"))
        }
        let target: MessageTarget
        switch targetIndex {
        case 0:
            guard !targetString.isEmpty else { throw MessageError(.invalidToken(targetString)) }
            target = .token(targetString)
        case 1:
            guard !targetString.isEmpty else { throw MessageError(.invalidToken(targetString)) }
            target = .installation(targetString)
        case 2:
            target = .topic(try TopicName.validate(targetString))
        default:
            _ = try TopicCondition.parse(targetString)
            target = .condition(targetString)
        }

        // The data entries are already in place; aps, fcm_options, the message ID, from and a label: room for them.
        userInfo.reserveCapacity(userInfo.count + 5)
        // notification → aps.alert, ahead of the data keys (a data key of the same name keeps its value)
        var placed = 0
        switch message.notificationKind {
        case .absent: break
        case .notObject: throw MessageError(.wrongType(field: "message.notification", expected: "an object"))
        case .object:
            if let key = message.notification.unknownKey { throw MessageError(.unknownField("message.notification.\(key)")) }
            let title = try string(message.notification.title.take(), field: "message.notification.title")
            let body = try string(message.notification.body.take(), field: "message.notification.body")
            // Built from array literals: one allocation each, at its final size.
            let alertMembers: [JSONObject.Member]
            switch (title, body) {
            case (let title?, let body?):
                alertMembers = [.init(key: "title", value: .string(title)), .init(key: "body", value: .string(body))]
            case (let title?, nil): alertMembers = [.init(key: "title", value: .string(title))]
            case (nil, let body?): alertMembers = [.init(key: "body", value: .string(body))]
            case (nil, nil): alertMembers = []
            }
            if !alertMembers.isEmpty {
                let alert = JSONObject(uniqueEntries: alertMembers, index: nil)
                let aps = JSONObject(uniqueEntries: [.init(key: "alert", value: .object(alert))], index: nil)
                userInfo.place(key: UserInfoKey.aps, at: placed, orInsert: .object(aps))
                placed += 1
            }
            if let image = try string(message.notification.image.take(), field: "message.notification.image") {
                userInfo.place(key: "fcm_options", at: placed, orInsert: ["image": .string(image)])
            }
        }

        // data → top-level keys
        switch message.data {
        case .absent: break
        case .notObject: throw MessageError(.wrongType(field: "message.data", expected: "an object of strings"))
        case .object(let data):
            if let key = data.nonString {
                throw MessageError(.wrongType(field: "message.data.\(key)", expected: "a string (FCM map values are strings)"))
            }
            if let key = data.reservedKey { throw MessageError(.reservedKey(key)) }
        }

        var priority = MessagePriority.high
        var expiration: Int64?
        var collapseKey: String?
        var analyticsLabel: String?
        var payloadMerged = false

        if let android = message.android {
            _ = try StrictObject(android, parentPath: "message", name: "android", fields: Fields.android)
        }
        if let webpush = message.webpush {
            guard case .object = webpush else { throw MessageError(.wrongType(field: "message.webpush", expected: "an object")) }
        }

        if let apnsValue = message.apns {
            let apns = try StrictObject(apnsValue, parentPath: "message", name: "apns", fields: Fields.apns)
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
                payloadMerged = true
            }
            if let options = try apns.object("fcm_options", fields: Fields.apnsOptions) {
                analyticsLabel = try options.string("analytics_label")
            }
        }
        if let optionsValue = message.fcmOptions {
            let options = try StrictObject(optionsValue, parentPath: "message", name: "fcm_options", fields: Fields.options)
            analyticsLabel = try options.string("analytics_label") ?? analyticsLabel
        }

        let limit = (target.isTopicLike ? PayloadLimits.topicMessage : PayloadLimits.message)
        // Without `apns.payload`, `userInfo` written compactly is shorter than the body plus 64 bytes: each string is
        // written in at most the bytes the body spent on it (the writer escapes only what a body must escape), and
        // the only structure added is `aps` and `alert` around the title and body and `fcm_options` around the image
        // (under 50 bytes more than `notification`'s keys). Counting is needed only when that could pass the limit.
        if payloadMerged || bodySize + 64 > limit {
            let size = payloadSize(userInfo)
            guard size <= limit else { throw MessageError(.payloadTooLarge(size: size, limit: limit)) }
        }

        // None of the keys Herald adds can be there yet: data and apns.payload keys of those names were refused above.
        if let analyticsLabel { userInfo.appendNew(key: UserInfoKey.analyticsLabel, value: .string(analyticsLabel)) }
        userInfo.appendNew(key: UserInfoKey.messageID, value: .string(context.makeMessageID()))
        switch target {
        case .topic(let name): userInfo.appendNew(key: UserInfoKey.from, value: .string("/topics/\(name)"))
        default: userInfo.appendNew(key: UserInfoKey.from, value: .string(context.senderID))
        }
        return RemoteMessage(
            userInfo: consume userInfo, target: target, collapseKey: collapseKey, priority: priority,
            expiration: expiration, receivedAt: context.now()
        )
    }

    /// The string `value` is (`nil` when it is absent), or the error that names `field`.
    private static func string(_ value: ScannedString, field: String) throws(MessageError) -> String? {
        switch value {
        case .absent: return nil
        case .string(let string): return string
        case .other: throw MessageError(.wrongType(field: field, expected: "a string"))
        }
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
    /// message ID): string values go to `data` (a string `aps` too, which only `data` gives), other values (`aps` among
    /// them) to `apns.payload`, priority, expiration and collapse key to `apns.headers`, the analytics label to
    /// `fcm_options`.
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
            default:
                // `aps` too: an object goes to the payload, a string can only have come from `data`.
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
