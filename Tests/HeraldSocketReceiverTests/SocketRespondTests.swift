import Foundation
import Herald
import HeraldSocketReceiver
import HeraldTesting
import Testing

/// Answers `willPresent` with a banner and keeps every response.
final class RespondingHandler: NotificationHandler, Sendable {
    let responses = Locked<[NotificationResponse]>([])
    func willPresent(_ message: RemoteMessage) async -> PresentationOptions { [.banner, .list] }
    func didReceive(_ response: NotificationResponse) async { responses.withLock { $0.append(response) } }
}

@Suite("SocketReceiver: respond requests")
struct SocketRespondTests {
    @Test("a respond line reaches the notification handlers; unknown messages, actions and bad requests are named")
    func respond() async throws {
        var configuration = Herald.Configuration(senderID: "1234567890")
        configuration.projectID = "demo"
        let herald = Herald(configuration: patientShutdown(configuration))
        let receiver = SocketReceiver(options: .init(addresses: [.unix(path: socketPath())]))
        let handler = RespondingHandler()
        let sink = RecordingSink()
        try herald.register(
            category: NotificationCategory(identifier: "chat", actions: [NotificationAction(identifier: "like", title: "Like")]))
        try await withStarted(herald, plugins: [receiver, handler, sink]) { herald in
            let token = try await herald.token()
            let client = try TestSocketClient(try await receiver.listeningAddresses()[0])
            client.send(
                #"{"message": {"token": "\#(token)", "notification": {"title": "hi"}, "apns": {"payload": {"aps": {"category": "chat"}}}}}"#
                    + "\n")
            let sent = try JSONParser.parse(Array(try #require(client.readLines(1).first).utf8))
            let id = try #require(sent["name"]?.stringValue?.split(separator: "/").last.map(String.init))
            try await herald.waitUntilIdle()

            client.send(#"{"respond": {"message_id": "\#(id)", "action": "like"}}"# + "\n")
            client.send(#"{"respond": {"message_id": "\#(id)", "action": "dismiss"}}"# + "\n")
            client.send(#" { "respond": {"message_id": "\#(id)", "text": "typed"}}"# + "\n")
            client.send(#"{"respond": {"message_id": "nope"}}"# + "\n")
            client.send(#"{"respond": {"message_id": "\#(id)", "action": "share"}}"# + "\n")
            client.send(#"{"respond": {"message_id": "\#(id)", "colour": "red"}}"# + "\n")
            client.send(#"{"respond": {"action": "like"}}"# + "\n")
            let answers = client.readLines(7).compactMap { try? JSONParser.parse(Array($0.utf8)) }
            #expect(answers.count == 7)
            #expect(answers[0]["responded"]?["action"] == "like")
            #expect(answers[1]["responded"]?["action"] == .string(NotificationResponse.dismissActionIdentifier))
            #expect(answers[2]["responded"]?["action"] == .string(NotificationResponse.defaultActionIdentifier))
            #expect(answers[3]["error"]?["status"] == "NOT_FOUND")
            #expect(answers[3]["error"]?["message"]?.stringValue?.contains("nope") == true)
            #expect(answers[4]["error"]?["status"] == "INVALID_ARGUMENT")
            #expect(answers[4]["error"]?["message"]?.stringValue?.contains("'share'") == true)
            #expect(answers[5]["error"]?["message"]?.stringValue?.contains("'colour'") == true)
            #expect(answers[6]["error"]?["message"]?.stringValue?.contains("message_id") == true)

            let responses = handler.responses.withLock { $0 }
            #expect(
                responses.map(\.actionIdentifier) == [
                    "like", NotificationResponse.dismissActionIdentifier, NotificationResponse.defaultActionIdentifier,
                ])
            #expect(responses.last?.userText == "typed")
            #expect(
                await eventually { sink.events(named: .notificationOpen).count == 2 && sink.events(named: .notificationDismiss).count == 1 }
            )
        }
    }

    @Test("an app_state line sets the bus's application state and is answered with it; another value is refused")
    func appState() async throws {
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")))
        let receiver = SocketReceiver(options: .init(addresses: [.unix(path: socketPath())]))
        try await withStarted(herald, plugins: [receiver]) { herald in
            let client = try TestSocketClient(try await receiver.listeningAddresses()[0])
            client.send(#"{"app_state": "background"}"# + "\n")
            client.send(#"{"app_state": "asleep"}"# + "\n")
            client.send(#"{"app_state": "active", "extra": 1}"# + "\n")
            let answers = client.readLines(3).compactMap { try? JSONParser.parse(Array($0.utf8)) }
            #expect(answers.count == 3)
            #expect(answers.first?["app_state"] == "background")
            #expect(herald.applicationState == .background)
            for refused in answers.dropFirst() {
                #expect(refused["error"]?["status"] == "INVALID_ARGUMENT")
                #expect(refused["error"]?["message"]?.stringValue?.contains(#"{"app_state": "active"}"#) == true)
            }
        }
    }
}
