import Herald

/// The JSON a plugin gets for a message or a response, as `herald_plugin.h` documents it.
enum MessageJSON {
    /// `{"userInfo": ..., "messageID": ..., "from": ..., "topic": ..., "collapseKey": ..., "priority": ...,
    /// "expiration": ..., "receivedAt": ..., "isReplay": ...}`; members without a value are left out.
    static func envelope(_ message: RemoteMessage) -> JSONObject {
        var envelope: JSONObject = ["userInfo": .object(message.userInfo)]
        if let messageID = message.messageID { envelope["messageID"] = .string(messageID) }
        if let from = message.from { envelope["from"] = .string(from) }
        if let topic = message.topic { envelope["topic"] = .string(topic) }
        if let collapseKey = message.collapseKey { envelope["collapseKey"] = .string(collapseKey) }
        envelope["priority"] = .string(message.priority == .high ? "high" : "normal")
        if let expiration = message.expiration { envelope["expiration"] = .int(expiration) }
        envelope["receivedAt"] = .int(message.receivedAt)
        envelope["isReplay"] = .bool(message.isReplay)
        return envelope
    }

    static func bytes(_ message: RemoteMessage) -> [UInt8] {
        JSONValue.object(envelope(message)).jsonBytes()
    }

    /// The message's envelope with `"action"` and `"userText"` (a string or `null`).
    static func bytes(_ response: NotificationResponse) -> [UInt8] {
        var envelope = envelope(response.message)
        envelope["action"] = .string(response.actionIdentifier)
        envelope["userText"] = response.userText.map { .string($0) } ?? .null
        return JSONValue.object(envelope).jsonBytes()
    }
}
