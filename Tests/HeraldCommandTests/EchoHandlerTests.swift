import Foundation
import Herald
import HeraldEchoHandler
import HeraldTesting
import Testing

@Suite("EchoHandler")
struct EchoHandlerTests {
    @Test("a response to a presented notification is one didReceiveResponse line with the action, the text and userInfo")
    func responseLine() async throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { close(fds[0]) }
        let herald = Herald(configuration: patientShutdown(.init(senderID: "1234567890")))
        try herald.register(EchoHandler(output: fds[1], installationID: { "fid-1" }))
        try herald.register(
            category: NotificationCategory(
                identifier: "CHAT",
                actions: [
                    NotificationAction(identifier: "REPLY", title: "Reply", textInputPlaceholder: "Say something")
                ]))
        try await herald.start()
        let token = try await herald.token()
        let request = try FCMSendRequest.decode(
            Array(
                #"""
                {"message": {"token": "\#(token)", "notification": {"title": "T"}, "apns": {"payload": {"aps": {"category": "CHAT"}}}}}
                """#.utf8), context: herald.decodingContext)
        guard case .success(let id) = await herald.deliver(request.message) else {
            Issue.record("not accepted")
            return
        }
        try await herald.waitUntilIdle()
        try await herald.respond(to: id, action: "REPLY", userText: "on my way")
        try await herald.waitUntilIdle()
        await herald.shutdown()
        close(fds[1])
        let lines = String(decoding: FileHandle(fileDescriptor: fds[0]).readDataToEndOfFile(), as: UTF8.self).split(separator: "\n")
        let events = lines.compactMap { try? JSONParser.parse(Array($0.utf8)) }
        #expect(events.map { $0["event"]?.stringValue ?? "?" } == ["token", "willPresent", "didReceiveResponse"])
        #expect(events.first?["installationID"] == "fid-1")
        let response = try #require(events.last)
        #expect(response["messageID"] == .string(id))
        #expect(response["action"] == "REPLY")
        #expect(response["userText"] == "on my way")
        #expect(response["userInfo"]?["aps"]?["category"] == "CHAT")
    }
}
