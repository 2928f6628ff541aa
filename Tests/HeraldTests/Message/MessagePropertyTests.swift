import PropertyBased
import Testing

@testable import Herald

/// Valid FCM messages, built from generated parts.
struct GeneratedMessage: Sendable, CustomStringConvertible {
    var title: String
    var body: String
    var data: [String: String]
    var badge: Int?
    var contentAvailable: Bool
    var category: String?
    var label: String?
    var topic: String?
    var collapseKey: String?

    var fcmBody: String {
        var message = JSONObject()
        if let topic { message["topic"] = .string(topic) } else { message["token"] = "token-1" }
        message["notification"] = ["title": .string(title), "body": .string(body)]
        if !data.isEmpty {
            message["data"] = .object(
                JSONObject(uniqueKeysWithValues: data.sorted { $0.key < $1.key }.map { ($0.key, JSONValue.string($0.value)) }))
        }
        var aps = JSONObject()
        if let badge { aps["badge"] = .int(Int64(badge)) }
        if contentAvailable { aps["content-available"] = 1 }
        if let category { aps["category"] = .string(category) }
        var apns: JSONObject = ["payload": ["aps": .object(aps)]]
        if let collapseKey { apns["headers"] = ["apns-collapse-id": .string(collapseKey)] }
        message["apns"] = .object(apns)
        if let label { message["fcm_options"] = ["analytics_label": .string(label)] }
        return JSONValue.object(["message": .object(message)]).jsonString()
    }

    var description: String { fcmBody }
}

/// Any characters but the surrogate range: controls, quotes and backslashes included, so escaping is exercised.
let anyText = Gen<Character>.character(in: "\u{01}"..."\u{D7FF}").string(of: 0...24)
let keyText = Gen<Character>.letterOrNumber.string(of: 1...12).map { UserInfoKey.isReservedDataKey($0) ? $0 + "x" : $0 }
/// A data key that is not one of those the notification adds to what the app sees (`aps`, `fcm_options`): a data key
/// named so keeps its value in place of the notification's, as OnePassDecodingTests' `dataKeyNamedAPS` checks, and the
/// typed views here would then rightly disagree with what was generated (seen once: a generated data key `aps`).
let dataKeyText = keyText.map { $0 == UserInfoKey.aps || $0 == "fcm_options" ? $0 + "x" : $0 }

let messageGenerator = zip(
    anyText, anyText,
    zip(dataKeyText, anyText).dictionary(ofAtMost: 0...6),
    Gen<Int>.int(in: 0...999).optional,
    Gen<Bool>.bool,
    keyText.optional,
    keyText.optional,
    keyText.optional,
    keyText.optional
).map { title, body, data, badge, contentAvailable, category, label, topic, collapseKey in
    GeneratedMessage(
        title: title, body: body, data: data, badge: badge, contentAvailable: contentAvailable,
        category: category, label: label, topic: topic, collapseKey: collapseKey)
}

@Suite("Property: any valid message survives decode → encode → decode unchanged")
struct MessagePropertyTests {
    @Test("FCM v1 round trip")
    func roundTrip() async {
        await propertyCheck(count: 300, input: messageGenerator) { generated in
            do {
                let first = try decodeFCM(generated.fcmBody)
                let second = try FCMSendRequest.decode(first.jsonBody(), context: fixedContext)
                #expect(second == first)
                #expect(second.message.aps == first.message.aps)
                #expect(second.message.data == first.message.data)
            } catch {
                Issue.record("a valid message was refused: \(error)")
            }
        }
    }

    @Test("typed views agree with what was sent")
    func views() async {
        await propertyCheck(count: 300, input: messageGenerator) { generated in
            guard let message = try? decodeFCM(generated.fcmBody).message else {
                Issue.record("refused \(generated)")
                return
            }
            #expect(message.aps.alert?.title == generated.title)
            #expect(message.aps.alert?.body == generated.body)
            #expect(message.aps.badge == generated.badge)
            #expect(message.aps.contentAvailable == generated.contentAvailable)
            #expect(message.data == generated.data)
            #expect(message.analyticsLabel == generated.label)
            #expect(message.collapseKey == generated.collapseKey)
            #expect(message.kind.contains(.display))
            #expect(message.kind.contains(.silent) == generated.contentAvailable)
            // The size limit counts without writing; the count must match what writing produces.
            #expect(JSONValue.object(message.userInfo).jsonByteCount == JSONValue.object(message.userInfo).jsonBytes().count)
        }
    }
}
