/// The sample messages EchoReceiver feeds through the bus when run with no arguments (copies of the
/// project's test payloads). `REPLACE_WITH_TOKEN` is replaced with this instance's registration token.
enum Samples {
    struct Sample {
        enum Wire { case fcm, apns }
        let name: String
        let wire: Wire
        let body: String
    }

    static let all: [Sample] = [
        Sample(
            name: "the reference payload (APNs)", wire: .apns,
            body: #"""
                {"aps": {"alert": {"body": "great match!", "title": "Portugal vs. Denmark"}, "badge": 1}, "customKey": "customValue"}
                """#),
        Sample(
            name: "FCM notification to this token", wire: .fcm,
            body: #"""
                {"message": {"token": "REPLACE_WITH_TOKEN",
                  "notification": {"title": "Portugal vs. Denmark", "body": "great match!"},
                  "data": {"customKey": "customValue"},
                  "apns": {"payload": {"aps": {"badge": 1, "category": "MATCH_UPDATE"}}},
                  "fcm_options": {"analytics_label": "match-alerts"}}}
                """#),
        Sample(
            name: "FCM silent message to topic weather", wire: .fcm,
            body: #"""
                {"message": {"topic": "weather", "data": {"city": "Lisbon", "refresh": "forecast"},
                  "apns": {"headers": {"apns-priority": "5", "apns-push-type": "background"},
                           "payload": {"aps": {"content-available": 1}}}}}
                """#),
        Sample(
            name: "FCM data message to a condition", wire: .fcm,
            body: #"""
                {"message": {"condition": "'weather' in topics && ('news' in topics || !('sports' in topics))",
                  "data": {"kind": "digest", "count": "3"}}}
                """#),
        Sample(
            name: "a message that names no target (refused)", wire: .fcm,
            body: #"""
                {"message": {"data": {"kind": "lost"}}}
                """#),
    ]
}
