import Foundation
import Testing

@testable import Herald

/// The sample payloads kept in the repo (copies of ../shared/testdata/payloads).
func samplePayload(_ name: String, filePath: String = #filePath) throws -> String {
    let url = URL(fileURLWithPath: filePath)
        .deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Resources/payloads/\(name)")
    return try String(contentsOf: url, encoding: .utf8)
}

let fixedContext = DecodingContext(senderID: "1234567890", makeMessageID: { "1700000000000001" }, now: { 1_700_000_000_000 })

func decodeFCM(_ body: String) throws(MessageError) -> FCMSendRequest {
    try FCMSendRequest.decode(Array(body.utf8), context: fixedContext)
}

func fcmError(_ body: String) -> MessageError? {
    do {
        _ = try decodeFCM(body)
        return nil
    } catch {
        return error
    }
}

@Suite("Golden decodes of the sample payloads")
struct GoldenDecodeTests {
    @Test("FCM notification to a token: the keys an Apple app sees, as in the reference payload")
    func notificationToken() throws {
        let request = try decodeFCM(try samplePayload("fcm-v1-notification-token.json"))
        let message = request.message
        let expected: JSONObject = [
            "aps": ["alert": ["title": "Portugal vs. Denmark", "body": "great match!"], "badge": 1, "category": "MATCH_UPDATE"],
            "customKey": "customValue",
            "google.c.a.m_l": "match-alerts",
            "gcm.message_id": "1700000000000001",
            "from": "1234567890",
        ]
        #expect(message.userInfo == expected)
        #expect(message.target == .token("REPLACE_WITH_TOKEN"))
        #expect(message.messageID == "1700000000000001")
        #expect(message.analyticsLabel == "match-alerts")
        #expect(message.kind == .display)
        #expect(message.aps.alert?.title == "Portugal vs. Denmark")
        #expect(message.aps.badge == 1)
        #expect(message.data == ["customKey": "customValue"])
        #expect(message.receivedAt == 1_700_000_000_000)
        #expect(!request.validateOnly)

        // A handler written against the reference payload finds every one of its keys with the same value.
        guard case .object(let seed) = try JSONParser.parse(Array(try samplePayload("seed-alert-apns.json").utf8)) else {
            Issue.record("seed is not an object")
            return
        }
        #expect(seed["customKey"] == message.userInfo["customKey"])
        #expect(seed["aps"]?["alert"] == message.userInfo["aps"]?["alert"])
        #expect(seed["aps"]?["badge"] == message.userInfo["aps"]?["badge"])
    }

    @Test("FCM silent message to a topic")
    func silentTopic() throws {
        let message = try decodeFCM(try samplePayload("fcm-v1-silent-topic.json")).message
        #expect(message.target == .topic("weather"))
        #expect(message.from == "/topics/weather")
        #expect(message.topic == "weather")
        #expect(message.kind == .silent)
        #expect(message.priority == .normal)
        #expect(message.data == ["city": "Lisbon", "refresh": "forecast"])
        #expect(message.userInfo["aps"] == ["content-available": 1])
    }

    @Test("FCM data message to a condition")
    func dataCondition() throws {
        let message = try decodeFCM(try samplePayload("fcm-v1-data-condition.json")).message
        #expect(message.target == .condition("'weather' in topics && ('news' in topics || !('sports' in topics))"))
        #expect(message.kind.isDataOnly)
        #expect(message.data == ["kind": "digest", "count": "3"])
        #expect(message.userInfo["aps"] == nil)
    }

    @Test("APNs provider alert with headers")
    func apnsAlert() throws {
        let headers = ["APNs-Priority": "10", "apns-collapse-id": "ci-main", "apns-expiration": "4102444800", "apns-push-type": "alert"]
        let message = try APNsRequest.decode(
            payload: Array(try samplePayload("apns-provider-alert.json").utf8), headers: headers,
            deviceToken: "device-token", context: fixedContext)
        let aps = message.aps
        #expect(aps.alert == APS.Alert(title: "Build finished", subtitle: "main", body: "All 312 tests passed"))
        #expect(aps.sound == .named("default"))
        #expect(aps.threadID == "ci")
        #expect(aps.category == "BUILD_RESULT")
        #expect(aps.interruptionLevel == .active)
        #expect(aps.relevanceScore == 0.5)
        #expect(message.userInfo["build"] == "8121")
        #expect(message.collapseKey == "ci-main")
        #expect(message.expiration == 4_102_444_800)
        #expect(message.priority == .high)
        #expect(message.target == .token("device-token"))
        #expect(message.from == "1234567890")
    }

    @Test("the reference payload itself, sent APNs-style")
    func seed() throws {
        let message = try APNsRequest.decode(
            payload: Array(try samplePayload("seed-alert-apns.json").utf8), headers: [:],
            deviceToken: "t", context: fixedContext)
        #expect(message.aps.alert?.body == "great match!")
        #expect(message.aps.badge == 1)
        #expect(message.customKeys == ["customKey": "customValue"])
        #expect(message.kind == .display)
    }

    @Test("camelCase field names are accepted, as Google's JSON mapping accepts them")
    func camelCase() throws {
        let request = try decodeFCM(
            #"{"message": {"token": "t", "fcmOptions": {"analyticsLabel": "l"}, "data": {"a": "b"}}, "validateOnly": true}"#)
        #expect(request.validateOnly)
        #expect(request.message.analyticsLabel == "l")
        // Both spellings of one field: the later one counts, whichever spelling it has.
        #expect(try decodeFCM(#"{"message": {"token": "t"}, "validate_only": false, "validateOnly": true}"#).validateOnly)
        #expect(try !decodeFCM(#"{"message": {"token": "t"}, "validateOnly": true, "validate_only": false}"#).validateOnly)
        #expect(
            try decodeFCM(#"{"message": {"token": "t", "fcm_options": {"analytics_label": "a"}, "fcmOptions": {"analyticsLabel": "b"}}}"#)
                .message.analyticsLabel == "b")
    }

    @Test("aps keys: critical sound, string alert, loc keys, flags")
    func apsViews() throws {
        let payload =
            #"{"aps": {"alert": "just a body", "sound": {"critical": 1, "name": "siren.caf", "volume": 0.8}, "mutable-content": 1, "content-available": 1, "target-content-id": "w1"}}"#
        let message = try APNsRequest.decode(payload: Array(payload.utf8), headers: [:], deviceToken: "t", context: fixedContext)
        #expect(message.aps.alert?.body == "just a body")
        #expect(message.aps.sound == .critical(name: "siren.caf", volume: 0.8))
        #expect(message.aps.mutableContent)
        #expect(message.aps.targetContentID == "w1")
        #expect(message.kind == [.display, .silent])
        let loc = #"{"aps": {"alert": {"loc-key": "GAME_PLAY_REQUEST_FORMAT", "loc-args": ["Jenna", "Frank"], "title-loc-key": "T"}}}"#
        let localized = try APNsRequest.decode(payload: Array(loc.utf8), headers: [:], deviceToken: "t", context: fixedContext)
        #expect(localized.aps.alert?.locKey == "GAME_PLAY_REQUEST_FORMAT")
        #expect(localized.aps.alert?.locArgs == ["Jenna", "Frank"])
        #expect(localized.aps.alert?.titleLocKey == "T")
    }
}

@Suite("Every validation error is typed and says what to fix")
struct ValidationErrorTests {
    @Test("malformed JSON, empty body, missing message")
    func structure() {
        let malformed = fcmError(#"{"message": {"token": "t",}}"#)
        if case .malformedJSON? = malformed?.reason {} else { Issue.record("expected malformedJSON, got \(String(describing: malformed))") }
        #expect(malformed?.status == .invalidArgument)
        #expect(malformed?.message.contains("byte") == true)
        #expect(fcmError("")?.reason == .emptyPayload)
        #expect(fcmError("{}")?.reason == .missingField("message"))
        #expect(fcmError("[]")?.reason == .wrongType(field: "", expected: "an object"))
    }

    @Test("unknown fields are refused with their path")
    func unknownFields() {
        #expect(fcmError(#"{"message": {"token": "t"}, "extra": 1}"#)?.reason == .unknownField("extra"))
        #expect(fcmError(#"{"message": {"token": "t", "tokne": "x"}}"#)?.reason == .unknownField("message.tokne"))
        #expect(
            fcmError(#"{"message": {"token": "t", "notification": {"title": "a", "colour": "red"}}}"#)?.reason
                == .unknownField("message.notification.colour"))
        let error = fcmError(#"{"message": {"token": "t", "tokne": "x"}}"#)
        #expect(error?.message == #"Invalid JSON payload received. Unknown name "tokne" at 'message.tokne': Cannot find field."#)
    }

    @Test("wrong types name the field and the expected type")
    func wrongTypes() {
        #expect(
            fcmError(#"{"message": {"token": "t", "data": {"count": 3}}}"#)?.reason
                == .wrongType(field: "message.data.count", expected: "a string (FCM map values are strings)"))
        #expect(
            fcmError(#"{"message": {"token": "t", "notification": {"title": 5}}}"#)?.reason
                == .wrongType(field: "message.notification.title", expected: "a string"))
        #expect(fcmError(#"{"message": {"token": 7}}"#)?.reason == .wrongType(field: "message.token", expected: "a string"))
        #expect(
            fcmError(#"{"message": {"token": "t", "apns": {"payload": {"aps": {"badge": "one"}}}}}"#)?.reason
                == .wrongType(field: "message.apns.payload.aps.badge", expected: "a non-negative integer"))
        #expect(
            fcmError(#"{"message": {"token": "t", "apns": {"payload": {"aps": {"alert": 1}}}}}"#)?.reason
                == .wrongType(field: "message.apns.payload.aps.alert", expected: "a string or an object"))
        #expect(
            fcmError(#"{"message": {"token": "t", "apns": {"payload": {"aps": {"content-available": 2}}}}}"#)?.reason
                == .wrongType(field: "message.apns.payload.aps.content-available", expected: "0 or 1"))
        #expect(
            fcmError(#"{"message": {"token": "t", "apns": {"payload": {"aps": {"interruption-level": "loud"}}}}}"#)?.reason
                == .wrongType(field: "message.apns.payload.aps.interruption-level", expected: "passive, active, time-sensitive or critical")
        )
        #expect(
            fcmError(#"{"message": {"token": "t"}, "validate_only": "yes"}"#)?.reason
                == .wrongType(field: "validate_only", expected: "true or false"))
    }

    @Test("exactly one target: none, two, an empty token")
    func targets() {
        #expect(fcmError(#"{"message": {"data": {"a": "b"}}}"#)?.reason == .noTarget)
        #expect(fcmError(#"{"message": {"token": "t", "topic": "news"}}"#)?.reason == .multipleTargets(["token", "topic"]))
        #expect(fcmError(#"{"message": {"fid": "f", "condition": "'a' in topics"}}"#)?.reason == .multipleTargets(["fid", "condition"]))
        #expect(fcmError(#"{"message": {"token": ""}}"#)?.reason == .invalidToken(""))
    }

    @Test("topic names and conditions")
    func topicsAndConditions() {
        #expect(fcmError(#"{"message": {"topic": "bad topic!"}}"#)?.reason == .invalidTopicName("bad topic!"))
        #expect(fcmError(#"{"message": {"topic": ""}}"#)?.reason == .invalidTopicName(""))
        #expect((try? decodeFCM(#"{"message": {"topic": "/topics/a-b_c.d~e%f"}}"#))?.message.target == .topic("a-b_c.d~e%f"))
        let six = "'a' in topics && 'b' in topics && 'c' in topics && 'd' in topics && 'e' in topics && 'f' in topics"
        if case .invalidCondition(_, let detail)? = fcmError(#"{"message": {"condition": "\#(six)"}}"#)?.reason {
            #expect(detail.contains("more than 5 topics"))
        } else {
            Issue.record("six topics accepted")
        }
        if case .invalidCondition(_, let detail)? = fcmError(#"{"message": {"condition": "'a' in topics &&"}}"#)?.reason {
            #expect(detail.contains("unexpected end"))
        } else {
            Issue.record("dangling && accepted")
        }
        if case .invalidCondition? = fcmError(#"{"message": {"condition": "('a' in topics"}}"#)?.reason {
        } else {
            Issue.record("unbalanced accepted")
        }
    }

    @Test("reserved data keys are refused")
    func reservedKeys() {
        for key in ["from", "message_type", "gcm.notification.x", "google.c.a.e", "notification"] {
            #expect(fcmError(#"{"message": {"token": "t", "data": {"\#(key)": "x"}}}"#)?.reason == .reservedKey(key))
        }
        #expect(fcmError(#"{"message": {"token": "t", "apns": {"payload": {"from": "spoof"}}}}"#)?.reason == .reservedKey("from"))
    }

    @Test("payload size: 4096 bytes, 2048 for topic messages")
    func sizes() {
        let big = String(repeating: "x", count: 4100)
        if case .payloadTooLarge(_, let limit)? = fcmError(#"{"message": {"token": "t", "data": {"a": "\#(big)"}}}"#)?.reason {
            #expect(limit == 4096)
        } else {
            Issue.record("4100-byte payload accepted")
        }
        let medium = String(repeating: "x", count: 3000)
        #expect((try? decodeFCM(#"{"message": {"token": "t", "data": {"a": "\#(medium)"}}}"#)) != nil)
        if case .payloadTooLarge(_, let limit)? = fcmError(#"{"message": {"topic": "news", "data": {"a": "\#(medium)"}}}"#)?.reason {
            #expect(limit == 2048)
        } else {
            Issue.record("3000-byte topic payload accepted")
        }
    }

    @Test("APNs headers: priority, expiration, collapse ID, apns-id, push type")
    func apnsHeaders() {
        func apnsError(_ headers: [String: String], payload: String = #"{"aps": {"alert": "hi"}}"#) -> MessageError? {
            do {
                _ = try APNsRequest.decode(payload: Array(payload.utf8), headers: headers, deviceToken: "t", context: fixedContext)
                return nil
            } catch {
                return error
            }
        }
        #expect(apnsError(["apns-priority": "7"])?.apnsReason == "BadPriority")
        #expect(apnsError(["apns-priority": "10", "apns-push-type": "background"])?.apnsReason == "BadPriority")
        #expect(apnsError(["apns-expiration": "tomorrow"])?.apnsReason == "BadExpirationDate")
        #expect(apnsError(["apns-collapse-id": String(repeating: "c", count: 65)])?.apnsReason == "BadCollapseId")
        #expect(apnsError(["apns-collapse-id": String(repeating: "c", count: 64)]) == nil)
        #expect(apnsError(["apns-id": "not-a-uuid"])?.apnsReason == "BadMessageId")
        #expect(apnsError(["apns-push-type": "carrier-pigeon"])?.apnsReason == "InvalidPushType")
        #expect(apnsError([:], payload: "")?.apnsReason == "PayloadEmpty")
        #expect(apnsError([:], payload: "{\"a\": \"\(String(repeating: "x", count: 4100))\"}")?.apnsReason == "PayloadTooLarge")
        #expect(apnsError([:], payload: "[1]")?.reason == .wrongType(field: "payload", expected: "an object"))
        #expect(apnsError([:], payload: "{\"aps\": ")?.apnsReason == "MalformedPayload")
        #expect(
            fcmError(#"{"message": {"token": "t", "apns": {"headers": {"apns-priority": "10", "apns-push-type": "background"}}}}"#)?.reason
                == .badPriority("10"))
    }

    @Test("errors map to FCM statuses and HTTP codes")
    func statuses() {
        #expect(MessageError(.unregistered(.token("x"))).status == .unregistered)
        #expect(MessageError(.senderMismatch(expected: "a", got: "b")).status.httpStatus == 403)
        #expect(MessageError(.busy(limit: 1)).status.httpStatus == 429)
        #expect(MessageError(.shuttingDown).status.httpStatus == 503)
        #expect(MessageError(.handlerFailed("x")).status.httpStatus == 500)
        #expect(MessageError(.noTarget).description.hasPrefix("INVALID_ARGUMENT: "))
    }
}

@Suite("Topic names and conditions")
struct TopicConditionTests {
    @Test(
        "topic names: valid, invalid, and the /topics/ prefix",
        arguments: [
            ("weather", "weather"), ("/topics/weather", "weather"), ("a-b_c.d~e%f", "a-b_c.d~e%f"),
            (String(repeating: "x", count: 900), String(repeating: "x", count: 900)),
        ])
    func validNames(raw: String, name: String) throws {
        #expect(try TopicName.validate(raw) == name)
    }

    @Test(
        "invalid topic names are refused with invalidTopicName",
        arguments: [
            "", "/topics/", "with space", "ümlaut", "semi;colon", String(repeating: "x", count: 901), "/topic/x",
        ])
    func invalidNames(raw: String) {
        #expect(throws: MessageError(.invalidTopicName(raw))) { try TopicName.validate(raw) }
    }

    @Test(
        "conditions evaluate as FCM's do",
        arguments: [
            ("'a' in topics", ["a"], true),
            ("'a' in topics", ["b"], false),
            ("!('a' in topics)", ["b"], true),
            ("'a' in topics && 'b' in topics", ["a"], false),
            ("'a' in topics || 'b' in topics", ["b"], true),
            ("'a' in topics || 'b' in topics && 'c' in topics", ["a"], true),
            ("('a' in topics || 'b' in topics) && 'c' in topics", ["a"], false),
            ("'weather' in topics && ('news' in topics || !('sports' in topics))", ["weather"], true),
            ("'weather' in topics && ('news' in topics || !('sports' in topics))", ["weather", "sports"], false),
            ("'weather' in topics && ('news' in topics || !('sports' in topics))", ["weather", "sports", "news"], true),
            ("\"a\" in topics", ["a"], true),
            ("!!'a' in topics", ["a"], true),
        ])
    func evaluate(condition: String, topics: [String], expected: Bool) throws {
        #expect(try TopicCondition.parse(condition).evaluate(subscribedTo: Set(topics)) == expected)
    }

    @Test(
        "malformed conditions are refused with what is wrong",
        arguments: [
            "", "'a' in topics &&", "'a' in topic", "'a' topics", "('a' in topics", "'a' in topics)", "'a in topics",
            "'a' in topics & 'b' in topics", "'bad name' in topics",
            "'a' in topics && 'b' in topics && 'c' in topics && 'd' in topics && 'e' in topics && 'f' in topics",
        ])
    func malformed(condition: String) {
        #expect(throws: MessageError.self) { try TopicCondition.parse(condition) }
    }
}
