import HeraldJSON

/// A member of a send request that is read field by field when it is an object.
enum ScannedMember<Object> {
    /// Not there, or `null` (absent, as Google's JSON mapping reads it).
    case absent
    /// There, but not an object.
    case notObject
    case object(Object)
}

/// Whether a member that is read field by field is there, and an object; its fields are kept beside it.
enum ScannedKind {
    /// Not there, or `null`.
    case absent
    /// There, but not an object.
    case notObject
    case object
}

/// A field that is kept only when it is a string (a target, the notification's texts): its value is made into a
/// `String` once, and any other value is only known to be there.
enum ScannedString {
    /// Not there, or `null`.
    case absent
    case string(String)
    /// There, but not a string.
    case other

    var isPresent: Bool {
        if case .absent = self { return false }
        return true
    }

    /// This value, leaving `absent` in its place: the string moves to the message without a copy.
    mutating func take() -> ScannedString {
        var taken = ScannedString.absent
        swap(&taken, &self)
        return taken
    }
}

/// What one pass over an FCM v1 send body found, before any of it is checked for meaning: the body is known to be
/// JSON, and the checks then run in their own order on what was found (`FCMSendRequest.decode`).
///
/// Each field keeps the value of the later of its two spellings (`fcm_options`, `fcmOptions`), `nil` when that is
/// `null`, as `StrictObject` reads a field; an object's first unknown key is kept for the error that names it.
struct ScannedRequest {
    /// Whether the body is an object.
    var isObject = true
    var unknownKey: String?
    var messageKind = ScannedKind.absent
    /// The fields of `message`, when it is an object.
    var message = ScannedMessage()
    var validateOnly: JSONValue?
    /// The entries of `message.data`, in their order, whatever their values: the start of the message's `userInfo`.
    var userInfo = JSONObject()

    /// Reads the body at `reader` into this (empty) request. In place: the scanned message is large, and a copy of
    /// it costs more than reading it.
    mutating func scan(_ reader: inout JSONReader) throws(JSONParseError) {
        reader.start()
        guard reader.nextByte == UInt8(ascii: "{") else {
            _ = try reader.readValue()
            try reader.finish()
            isObject = false
            return
        }
        var unknownKey: String?
        try reader.readFields(FCMSendRequest.Fields.request, unknownKey: &unknownKey) { reader, field throws(JSONParseError) in
            // Positions in FCMSendRequest.Fields.request.
            if field == 0 {
                messageKind = try reader.readMessage(into: &message, userInfo: &userInfo)
            } else {
                validateOnly = try reader.readOptional()
            }
        }
        self.unknownKey = unknownKey
        try reader.finish()
    }
}

/// The fields of a send request's `message`, as `ScannedRequest` found them.
struct ScannedMessage {
    var unknownKey: String?
    var token = ScannedString.absent
    var fid = ScannedString.absent
    var topic = ScannedString.absent
    var condition = ScannedString.absent
    var notificationKind = ScannedKind.absent
    /// The fields of `notification`, when it is an object (read in place: a copy costs more than reading it).
    var notification = ScannedNotification()
    var data = ScannedMember<ScannedData>.absent
    var android: JSONValue?
    var webpush: JSONValue?
    var apns: JSONValue?
    var fcmOptions: JSONValue?

    /// Whether the target field at `index` of `FCMSendRequest.Fields.targets` is there (without copying it).
    func hasTarget(_ index: Int) -> Bool {
        switch index {
        case 0: token.isPresent
        case 1: fid.isPresent
        case 2: topic.isPresent
        default: condition.isPresent
        }
    }

    /// Takes the target field at `index` of `FCMSendRequest.Fields.targets` (see `ScannedString.take()`).
    mutating func takeTarget(_ index: Int) -> ScannedString {
        switch index {
        case 0: token.take()
        case 1: fid.take()
        case 2: topic.take()
        default: condition.take()
        }
    }
}

/// What `message.data` held besides its entries, which go to `userInfo` as they are read.
struct ScannedData {
    /// The first key whose value is not a string.
    var nonString: String?
    /// The first key a sender may not use (`UserInfoKey.isReservedDataKey`).
    var reservedKey: String?
}

/// The fields of `message.notification`, as `ScannedRequest` found them.
struct ScannedNotification {
    var unknownKey: String?
    var title = ScannedString.absent
    var body = ScannedString.absent
    var image = ScannedString.absent
}

extension JSONReader {
    /// The value at the reader, `nil` when it is `null`.
    fileprivate mutating func readOptional() throws(JSONParseError) -> JSONValue? {
        let value = try readValue()
        // Not `nil` in the conditional: JSONValue is itself expressible by `nil` (as `.null`).
        guard !value.isNull else { return Optional.none }
        return value
    }

    /// The value at the reader as a field kept only when it is a string.
    fileprivate mutating func readScannedString() throws(JSONParseError) -> ScannedString {
        guard nextByte == UInt8(ascii: "\"") else { return try readValue().isNull ? .absent : .other }
        return .string(try readString())
    }

    /// Reads a value that is not an object where an object is read field by field.
    fileprivate mutating func readOtherThanObject<Object>() throws(JSONParseError) -> ScannedMember<Object> {
        try readValue().isNull ? .absent : .notObject
    }

    /// Reads the object at the reader: calls `field` with the position in `fields` of each key that is one of
    /// them, at the key's value, and skips the values of other keys, keeping the first such key in `unknownKey`.
    /// A key that appears twice is refused, as the parser refuses it.
    fileprivate mutating func readFields(
        _ fields: FieldSet,
        unknownKey: inout String?,
        _ field: (inout JSONReader, Int) throws(JSONParseError) -> Void
    ) throws(JSONParseError) {
        guard try enterObject() else { return }
        var seen: UInt64 = 0
        var seenCamelCase: UInt64 = 0
        // Made only when the object has a key that is not a field.
        var unknownKeys: Set<String>?
        repeat {
            let keyStart = offset
            let key = try readKey()
            if let match = fields.match(key) {
                let bit: UInt64 = 1 << UInt64(match.position)
                guard (match.camelCase ? seenCamelCase : seen) & bit == 0 else {
                    throw JSONParseError(.duplicateKey(String(decoding: key, as: UTF8.self)), at: keyStart)
                }
                if match.camelCase { seenCamelCase |= bit } else { seen |= bit }
                try readColon()
                try field(&self, match.position)
            } else {
                let name = String(decoding: key, as: UTF8.self)
                if unknownKeys == nil {
                    unknownKeys = [name]
                } else if !unknownKeys!.insert(name).inserted {
                    throw JSONParseError(.duplicateKey(name), at: keyStart)
                }
                if unknownKey == nil { unknownKey = name }
                try readColon()
                _ = try readValue()
            }
        } while try !closesObject()
    }

    /// Reads `message` into `message`; its data entries go to `userInfo`.
    fileprivate mutating func readMessage(
        into message: inout ScannedMessage, userInfo: inout JSONObject
    ) throws(JSONParseError) -> ScannedKind {
        guard nextByte == UInt8(ascii: "{") else { return try readValue().isNull ? .absent : .notObject }
        var unknownKey: String?
        // Positions in FCMSendRequest.Fields.message.
        try readFields(FCMSendRequest.Fields.message, unknownKey: &unknownKey) { reader, field throws(JSONParseError) in
            switch field {
            case 0: _ = try reader.readValue()  // name: output only
            case 1: message.data = try reader.readData(into: &userInfo)
            case 2: message.notificationKind = try reader.readNotification(into: &message.notification)
            case 3: message.android = try reader.readOptional()
            case 4: message.webpush = try reader.readOptional()
            case 5: message.apns = try reader.readOptional()
            case 6: message.fcmOptions = try reader.readOptional()
            case 7: message.token = try reader.readScannedString()
            case 8: message.topic = try reader.readScannedString()
            case 9: message.condition = try reader.readScannedString()
            default: message.fid = try reader.readScannedString()
            }
        }
        message.unknownKey = unknownKey
        return .object
    }

    /// Reads `message.notification` into `notification` (empty until then).
    private mutating func readNotification(into notification: inout ScannedNotification) throws(JSONParseError) -> ScannedKind {
        guard nextByte == UInt8(ascii: "{") else { return try readValue().isNull ? .absent : .notObject }
        var unknownKey: String?
        // Positions in FCMSendRequest.Fields.notification.
        try readFields(FCMSendRequest.Fields.notification, unknownKey: &unknownKey) { reader, field throws(JSONParseError) in
            switch field {
            case 0: notification.title = try reader.readScannedString()
            case 1: notification.body = try reader.readScannedString()
            default: notification.image = try reader.readScannedString()
            }
        }
        notification.unknownKey = unknownKey
        return .object
    }

    /// Reads `message.data`, appending its entries to `userInfo` (empty until then), whatever their values.
    private mutating func readData(into userInfo: inout JSONObject) throws(JSONParseError) -> ScannedMember<ScannedData> {
        guard nextByte == UInt8(ascii: "{") else { return try readOtherThanObject() }
        var data = ScannedData()
        guard try enterObject() else { return .object(data) }
        // A few entries, and the keys the decoder adds: one allocation.
        userInfo.reserveCapacity(8)
        repeat {
            let keyStart = offset
            let keyBytes = try readKey()
            let key = String(decoding: keyBytes, as: UTF8.self)
            if userInfo.containsKey(key) { throw JSONParseError(.duplicateKey(key), at: keyStart) }
            if data.reservedKey == nil && Self.mayBeReserved(firstByte: keyBytes.first) && UserInfoKey.isReservedDataKey(key) {
                data.reservedKey = key
            }
            try readColon()
            let value: JSONValue
            if nextByte == UInt8(ascii: "\"") {
                value = .string(try readString())
            } else {
                value = try readValue()
                if data.nonString == nil { data.nonString = key }
            }
            userInfo.appendNew(key: key, value: value)
        } while try !closesObject()
        return .object(data)
    }

    /// Whether a key that starts with `firstByte` can be reserved: the reserved words and prefixes start with `f`,
    /// `g`, `m` or `n`, and a key whose first character is another ASCII character cannot equal one of them (the
    /// other keys are left to `UserInfoKey.isReservedDataKey`, which compares them as strings).
    private static func mayBeReserved(firstByte: UInt8?) -> Bool {
        switch firstByte {
        case UInt8(ascii: "f")?, UInt8(ascii: "g")?, UInt8(ascii: "m")?, UInt8(ascii: "n")?: true
        case let byte?: byte >= 0x80
        case nil: false
        }
    }
}
