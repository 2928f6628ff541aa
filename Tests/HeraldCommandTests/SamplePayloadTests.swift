import Foundation
import Herald
import HeraldTesting
import Testing

/// The project's copies of the sample payloads (Tests/HeraldTests/Resources/payloads).
private let payloads = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .appendingPathComponent("HeraldTests/Resources/payloads")

private func sample(_ name: String, token: String) throws -> String {
    try String(contentsOf: payloads.appendingPathComponent(name), encoding: .utf8).replacingOccurrences(
        of: "REPLACE_WITH_TOKEN", with: token)
}

/// One line: the sample JSON without its line breaks (the socket takes one object per line).
private func oneLine(_ json: String) throws -> String {
    try JSONParser.parse(Array(json.utf8)).jsonString()
}

@Suite("Each sample payload over each receiver reaches the right handler, answered with exactly the documented JSON", .serialized)
struct SamplePayloadTests {
    /// FCM v1 samples and the echo event each must produce.
    static let fcmSamples: [(file: String, event: String)] = [
        ("fcm-v1-notification-token.json", "willPresent"),
        ("fcm-v1-data-condition.json", "message"),
        ("fcm-v1-silent-topic.json", "backgroundFetch"),
    ]

    @Test("FCM v1 samples over HTTP and over the socket; APNs samples over the APNs route")
    func everySampleEveryReceiver() async throws {
        try await withTemporaryDirectory { directory in
            let daemon = try await DaemonProcess.start(directory: directory)
            let token = try #require(await daemon.event()?["token"]?.stringValue)
            // The condition sample needs 'weather' and 'news'; the silent sample is for 'weather'.
            for topic in ["weather", "news"] {
                #expect(try await runHerald(["topics", "subscribe", "--data-dir", directory, topic]).status == 0)
            }
            for (file, event) in Self.fcmSamples {
                let body = try sample(file, token: token)
                // HTTP: 200 and exactly {"name": "projects/demo/messages/<id>"}.
                let http = try TestSocketClient(.tcp(host: "127.0.0.1", port: daemon.httpPort))
                http.send(
                    "POST /v1/projects/demo/messages:send HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n"
                        + body)
                let response = String(decoding: http.read { _ in false }, as: UTF8.self)
                #expect(response.hasPrefix("HTTP/1.1 200"), "\(file): \(response)")
                let answer = try JSONParser.parse(Array((response.components(separatedBy: "\r\n\r\n").last ?? "").utf8))
                #expect(answer.objectValue?.keys == ["name"], "\(file)")
                let id = try #require(answer["name"]?.stringValue?.split(separator: "/").last.map(String.init))
                #expect(answer["name"]?.stringValue == "projects/demo/messages/\(id)")
                let viaHTTP = try #require(await daemon.event())
                #expect(viaHTTP["event"]?.stringValue == event, "\(file) over HTTP")
                #expect(viaHTTP["messageID"]?.stringValue == id)

                // The socket: one line in, exactly one answer line of the same shape out.
                let socket = try TestSocketClient(.unix(path: daemon.socketPath))
                socket.send(try oneLine(body) + "\n")
                let line = try #require(socket.readLines(1).first)
                let socketAnswer = try JSONParser.parse(Array(line.utf8))
                #expect(socketAnswer.objectValue?.keys == ["name"], "\(file): \(line)")
                #expect(socketAnswer["name"]?.stringValue?.hasPrefix("projects/demo/messages/") == true)
                let viaSocket = try #require(await daemon.event())
                #expect(viaSocket["event"]?.stringValue == event, "\(file) over the socket")
            }
            for file in ["apns-provider-alert.json", "seed-alert-apns.json"] {
                let body = try sample(file, token: token)
                let apns = try TestSocketClient(.tcp(host: "127.0.0.1", port: daemon.httpPort))
                apns.send(
                    "POST /3/device/\(token) HTTP/1.1\r\nHost: x\r\napns-push-type: alert\r\nContent-Length: \(body.utf8.count)\r\nConnection: close\r\n\r\n"
                        + body)
                let response = String(decoding: apns.read { _ in false }, as: UTF8.self)
                #expect(response.hasPrefix("HTTP/1.1 200"), "\(file): \(response)")
                let apnsID = response.split(separator: "\r\n").first { $0.lowercased().hasPrefix("apns-id:") }
                #expect(apnsID != nil, "\(file): \(response)")
                let presented = try #require(await daemon.event())
                #expect(presented["event"] == "willPresent", "\(file)")
                #expect(presented["userInfo"]?["aps"]?["alert"] != nil)
            }
            #expect(await daemon.terminate() == 0)
        }
    }
}
