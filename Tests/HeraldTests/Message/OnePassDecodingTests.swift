import Foundation
import Testing

@testable import Herald

/// The FCM v1 decoder reads a body in one pass, without a `JSONValue` tree of the whole body. These tests hold it to
/// a reference that decodes the parsed tree, check by check in the same order: for every input both must accept the
/// same message (with `userInfo`'s keys in the same order) or refuse it with the same error.
@Suite("FCM v1 one-pass decoding agrees with decoding the parsed tree")
struct OnePassDecodingTests {
    @Test("tricky bodies: faults in several places, both spellings, data keys named like added keys, duplicates")
    func trickyBodies() {
        let bodies = [
            #"{"message": {"tokne": 1, "token": "t""#,
            #"{"message": {"token": 7, "notification": {"colour": 1}} "#,
            #"{"message": {"token": "t", "data": {"aps": "x"}, "notification": {"title": "a"}}}"#,
            #"{"message": {"data": {"fcm_options": "y", "k": "v"}, "token": "t", "notification": {"image": "i", "body": "b"}}}"#,
            #"{"message": {"data": {"k": "v", "aps": "x"}, "token": "t", "notification": {"image": "i"}}}"#,
            #"{"message": {"token": "t", "fcm_options": {"analytics_label": "a"}, "fcmOptions": {"analyticsLabel": "b"}}}"#,
            #"{"message": {"token": "t", "fcm_options": {"analytics_label": "a"}, "fcmOptions": null}}"#,
            #"{"message": {"token": "t", "fcmOptions": {"bad": 1}, "fcm_options": {"analytics_label": "a"}}}"#,
            #"{"validateOnly": true, "validate_only": false, "message": {"token": "t"}}"#,
            #"{"validate_only": null, "message": {"token": "t"}}"#,
            #"{"message": {"token": "t", "\u0074oken": "u"}}"#,
            #"{"message": {"t\u006fken": "t"}}"#,
            #"{"message": {"x": 1, "token": "t", "x": 2}}"#,
            #"{"message": {"token": "t", "data": {"a": "1", "\u0061": "2"}}}"#,
            #"{"message": {"token": "t", "data": {"from": "x", "a": 1}}}"#,
            #"{"message": {"token": "t", "data": {"a": null}}}"#,
            #"{"message": {"token": "t", "data": {"a": null, "a": "x"}}}"#,
            #"{"message": {"token": "t", "data": {"a": "x", "b": null, "b": "y"}}}"#,
            #"{"message": {"token": "t", "data": {"gcm.x": "1", "google.y": "2"}}}"#,
            #"{"message": null}"#,
            #"{"message": []}"#,
            #"{"message": {"notification": null, "data": null, "token": "t", "android": null}}"#,
            #"{"message": {"notification": 1, "data": 2, "token": "t"}}"#,
            #"{"message": {"notification": {"title": 1, "colour": 2}, "token": "t"}}"#,
            #"{"message": {"token": "t", "topic": "a", "condition": "'b' in topics"}}"#,
            #"{"message": {"token": ""}}"#,
            #"{"message": {"fid": ""}}"#,
            #"{"message": {"fid": "f", "notification": {"title": "x"}}}"#,
            #"{"message": {"topic": "bad topic!"}}"#,
            #"{"message": {"condition": "'a' in topics &&"}}"#,
            #"{"message": {"condition": "'a' in topics && 'b' in topics"}}"#,
            #"{"message": {"token": "t", "android": {"data": {"x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}}}}"#,
            #"{"message": {"token": "t", "android": {"colour": 1}, "webpush": 2}}"#,
            #"{"message": {"token": "t", "webpush": 2, "apns": {"headers": {"apns-priority": "7"}}}}"#,
            #"{"message": {"token": "t", "apns": {"headers": {"APNS-Priority": "5", "apns-expiration": "10"}, "payload": {"aps": {"badge": 2}, "k": 1}}}}"#,
            #"{"message": {"token": "t", "notification": {"title": "a"}, "apns": {"payload": {"aps": {"alert": {"body": "b"}}}}}}"#,
            #"{"message": {"token": "t", "apns": {"payload": {"gcm.x": 1}}}}"#,
            #"{"message": {"token": "t", "apns": {"fcm_options": {"analytics_label": "a"}}, "fcm_options": {}}}"#,
            #"{"message": {"token": "t", "name": {"anything": [1, 2]}}}"#,
            #"{"message": {"token": "t"}} x"#,
            #" {"message": {"token": "t"}} "#,
            #"{"message": {"token": "t"},}"#,
            #"{"message": {"token": "t"}, "extra": 1, "extra": 2}"#,
            #"{"extra": 1, "message": {"tokne": 1}}"#,
            #"{}"#, #"[]"#, #""x""#, #"nul"#, #"{"#, #"{"message""#, #"{"message":"#, #"{"message": {"token": "t", "data": {"#,
            #"{"message": {"token": "t", "data": {"k": "\ud800"}}}"#,
            #"{"message": {"token": "t", "data": {"k": 1e400}}}"#,
            #"{"message": {"token": "t", "notification": {"title": "\u00e9\n\"q\""}}}"#,
        ]
        for body in bodies {
            expectAgreement(Array(body.utf8))
        }
    }

    @Test("keys matched by their words: every length, near misses, long keys, escapes; strings kept, other values refused")
    func keysAndStringFields() {
        let bodies = [
            #"{"message": {"token": "t", "notificatioN": {}}}"#,
            #"{"message": {"token": "t", "notification!": {}}}"#,
            #"{"message": {"token": "t", "notificatio": {}}}"#,
            #"{"message": {"tokeN": "t"}}"#,
            #"{"message": {"topic": "a", "token": "t"}}"#,
            #"{"message": {"topix": "a", "token": "t"}}"#,
            #"{"message": {"token": "t", "fcm_optionz": {}}}"#,
            #"{"message": {"token": "t", "fcmOptions": {"analyticsLabel": "x"}}}"#,
            #"{"message": {"token": "t", "conditioN": "x"}}"#,
            #"{"message": {"condition": "'a' in topics", "token": null}}"#,
            #"{"message": {"token": "t", "a_key_longer_than_16": 1}}"#,
            #"{"message": {"token": "t", "restricted_package_name": 1}}"#,
            #"{"message": {"token": "t", "notification": {"titlE": "x"}}}"#,
            #"{"message": {"token": "t", "notification": {"tit": "x"}}}"#,
            #"{"message": {"token": "t", "notification": {"b": "x"}}}"#,
            #"{"message": {"token": "t", "notification": {"bo": "x"}}}"#,
            #"{"message": {"token": "t", "notification": {"": "x"}}}"#,
            #"{"message": {"token": "t", "": 1}}"#,
            #"{"": 1, "message": {"token": "t"}}"#,
            #"{"validateOnly": true, "message": {"token": "t"}}"#,
            #"{"validate_onlY": true, "message": {"token": "t"}}"#,
            #"{"validate_only": 1, "message": {"token": "t"}}"#,
            #"{"message": {"\u0074oken": "t", "notific\u0061tion": {"t\u0069tle": "x"}}}"#,
            #"{"message": {"token": "t\u00e9\n", "notification": {"title": "\u00e9", "body": "\ud83d\ude00", "image": "\/i"}}}"#,
            #"{"message": {"token": 1}}"#,
            #"{"message": {"token": {"a": 1}}}"#,
            #"{"message": {"token": ["t"]}}"#,
            #"{"message": {"token": true, "topic": null}}"#,
            #"{"message": {"fid": 1.5}}"#,
            #"{"message": {"topic": false}}"#,
            #"{"message": {"condition": []}}"#,
            #"{"message": {"token": null}}"#,
            #"{"message": {"token": "t", "notification": {"title": null, "body": 2}}}"#,
            #"{"message": {"token": "t", "notification": {"title": null, "body": null, "image": null}}}"#,
            #"{"message": {"token": "t", "notification": {"image": {"url": "x"}}}}"#,
            #"{"message": {"token": "t", "notification": {"title": [], "image": 1}}}"#,
            #"{"message": {"token": "t", "data": {"k": 1, "j": "x", "i": null}}}"#,
            #"{"message": {"token": "t", "data": {"k": {"a": 1}, "k": "x"}}}"#,
            #"{"message": {"token": "t", "data": {"k": "v", "from": 1}}}"#,
            #"{"message": {"token": "t", "data": {"google.c.a.m_l": "x"}}}"#,
            #"{"message": {"token": "t", "data": {"gcm.message_id": "x"}}}"#,
            #"{"message": {"token": "t", "fcm_options": {"analytics_label": "l"}, "data": {"k": "v"}}}"#,
            #"{"message": {"topic": "news", "data": {"k": "v"}, "notification": {"title": "x"}}}"#,
            #"{"message": {"token": "t", "x": 1, "y": 2, "x": 3}}"#,
            #"{"x": 1, "y": 2, "x": 3, "message": {"token": "t"}}"#,
            #"{"message": {"token": "t", "notification": {"x": 1, "x": 2}}}"#,
        ]
        for body in bodies {
            expectAgreement(Array(body.utf8))
        }
        for name in FCMSendRequest.Fields.message.names + FCMSendRequest.Fields.message.camelCaseNames {
            expectAgreement(Array(#"{"message": {"token": "t", "\#(name)": 1}}"#.utf8))
            expectAgreement(Array(#"{"message": {"token": "t", "\#(name)x": 1}}"#.utf8))
            expectAgreement(Array(#"{"message": {"token": "t", "\#(name.dropLast())": 1}}"#.utf8))
        }
    }

    @Test("a data key named like a key the notification adds keeps its value, and survives jsonBody()")
    func dataKeyNamedAPS() throws {
        let request = try decodeFCM(#"{"message": {"token": "t", "data": {"aps": "x"}, "notification": {"title": "a", "image": "i"}}}"#)
        #expect(request.message.userInfo.keys == ["aps", "fcm_options", UserInfoKey.messageID, UserInfoKey.from])
        #expect(request.message.userInfo["aps"] == "x")
        #expect(try FCMSendRequest.decode(request.jsonBody(), context: fixedContext) == request)
    }

    @Test("objects past the linear-search size: many data keys, many unknown keys, a duplicate among them")
    func largeObjects() {
        let keys = (0..<20).map { "\"k\($0)\": \"\($0)\"" }
        expectAgreement(Array(#"{"message": {"token": "t", "data": {\#(keys.joined(separator: ", "))}}}"#.utf8))
        expectAgreement(Array(#"{"message": {"token": "t", "data": {\#(keys.joined(separator: ", ")), "k3": "again"}}}"#.utf8))
        expectAgreement(Array(#"{"message": {"token": "t", \#(keys.joined(separator: ", "))}}"#.utf8))
        expectAgreement(Array(#"{"message": {"token": "t", \#(keys.joined(separator: ", ")), "k19": 1}}"#.utf8))
        let big = String(repeating: "x", count: 5000)
        expectAgreement(Array(#"{"message": {"token": "t", "data": {"k": "\#(big)"}}}"#.utf8))
        expectAgreement(Array(#"{"message": {"topic": "a", "data": {"k": "\#(big.prefix(2100))"}}}"#.utf8))
    }

    @Test("the fuzzing seeds and sample payloads, whole, cut short and with bytes changed")
    func seedsAndMutations() throws {
        var random = SplitMix(seed: 0x5EED)
        let significant = Array(#"{}[]",:\ 0x-n"#.utf8)
        for seed in try seeds() {
            expectAgreement(seed)
            for length in stride(from: 0, to: seed.count, by: max(1, seed.count / 40)) {
                expectAgreement(Array(seed.prefix(length)))
            }
            guard !seed.isEmpty else { continue }
            for _ in 0..<40 {
                var mutated = seed
                for _ in 0...(random.next() % 3) {
                    let position = Int(random.next() % UInt64(mutated.count))
                    switch random.next() % 3 {
                    case 0: mutated[position] = significant[Int(random.next() % UInt64(significant.count))]
                    case 1: mutated.remove(at: position)
                    default: mutated.insert(significant[Int(random.next() % UInt64(significant.count))], at: position)
                    }
                    if mutated.isEmpty { break }
                }
                expectAgreement(mutated)
            }
        }
    }

    private func seeds(filePath: String = #filePath) throws -> [[UInt8]] {
        let tests = URL(fileURLWithPath: filePath).deletingLastPathComponent().deletingLastPathComponent()
        let corpus = tests.deletingLastPathComponent().deletingLastPathComponent().appendingPathComponent("Fuzz/Corpus/fcm-v1")
        let payloads = tests.appendingPathComponent("Resources/payloads")
        var files: [URL] = []
        for directory in [corpus, payloads] {
            files += try FileManager.default.contentsOfDirectory(at: directory, includingPropertiesForKeys: nil)
                .filter { $0.pathExtension != "md" }
        }
        #expect(files.count > 50)
        return try files.sorted { $0.path < $1.path }.map { Array(try Data(contentsOf: $0)) }
    }
}

/// Both decoders on `body`: the same message with `userInfo`'s keys in the same order, or the same error.
private func expectAgreement(_ body: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
    let text = String(decoding: body, as: UTF8.self)
    let onePass = Result { () throws(MessageError) in try FCMSendRequest.decode(body, context: fixedContext) }
    let reference = Result { () throws(MessageError) in try TreeReference.decode(body, context: fixedContext) }
    switch (onePass, reference) {
    case (.success(let decoded), .success(let expected)):
        #expect(decoded == expected, "\(text)", sourceLocation: sourceLocation)
        #expect(decoded.message.userInfo.keys == expected.message.userInfo.keys, "\(text)", sourceLocation: sourceLocation)
    case (.failure(let error), .failure(let expected)):
        #expect(error == expected, "\(text)", sourceLocation: sourceLocation)
        #expect(error.message == expected.message, "\(text)", sourceLocation: sourceLocation)
    default:
        Issue.record("one pass: \(onePass), the tree: \(reference), for \(text)", sourceLocation: sourceLocation)
    }
}

/// A deterministic generator, so that a failure repeats.
private struct SplitMix {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

/// The reference: the FCM v1 decoder as it was written over the parsed tree, each check where it was.
private enum TreeReference {
    typealias Fields = FCMSendRequest.Fields

    static func decode(_ body: [UInt8], context: DecodingContext) throws(MessageError) -> FCMSendRequest {
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
        var validateOnly = false
        if let value = request.value("validate_only") {
            guard case .bool(let bool) = value else { throw MessageError(.wrongType(field: "validate_only", expected: "true or false")) }
            validateOnly = bool
        }
        return FCMSendRequest(message: message, validateOnly: validateOnly)
    }

    static func decodeMessage(_ value: JSONValue, context: DecodingContext) throws(MessageError) -> RemoteMessage {
        let message = try StrictObject(value, name: "message", fields: Fields.message)
        var targetName: String?
        for name in Fields.targets where message.value(name) != nil {
            guard targetName == nil else { throw MessageError(.multipleTargets(Fields.targets.filter { message.value($0) != nil })) }
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
        if let notification = try message.object("notification", fields: Fields.notification) {
            var alert = JSONObject()
            if let title = try notification.string("title") { alert["title"] = .string(title) }
            if let body = try notification.string("body") { alert["body"] = .string(body) }
            if !alert.isEmpty { userInfo["aps"] = .object(["alert": .object(alert)]) }
            if let image = try notification.string("image") { userInfo["fcm_options"] = .object(["image": .string(image)]) }
        }
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
