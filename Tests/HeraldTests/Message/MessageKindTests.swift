import Testing

@testable import Herald

@Suite("RemoteMessage.kind")
struct MessageKindTests {
    @Test("kind agrees with the decoded aps for every shape of alert, sound, badge and content-available")
    func agreesWithAPS() throws {
        let alerts = [nil, #""Hi""#, #"{"title": "T"}"#, "1", "null"]
        let sounds = [nil, #""default""#, #"{"name": "x", "critical": 1}"#, "true"]
        let badges = [nil, "3", #""3""#]
        let available = [nil, "1", "0", #""1""#]
        for alert in alerts {
            for sound in sounds {
                for badge in badges {
                    for contentAvailable in available {
                        var fields: [String] = []
                        if let alert { fields.append(#""alert": \#(alert)"#) }
                        if let sound { fields.append(#""sound": \#(sound)"#) }
                        if let badge { fields.append(#""badge": \#(badge)"#) }
                        if let contentAvailable { fields.append(#""content-available": \#(contentAvailable)"#) }
                        let aps = try JSONParser.parse(Array("{\(fields.joined(separator: ", "))}".utf8))
                        let message = RemoteMessage(userInfo: ["aps": aps], target: .token("t"))
                        var expected: MessageKind = []
                        if message.aps.isDisplay { expected.insert(.display) }
                        if message.aps.contentAvailable { expected.insert(.silent) }
                        #expect(message.kind == expected, "\(fields)")
                    }
                }
            }
        }
        #expect(RemoteMessage(userInfo: ["k": "v"], target: .token("t")).kind == [])
        #expect(RemoteMessage(userInfo: ["aps": "not an object"], target: .token("t")).kind == [])
    }
}
