// NATSProbe: the child process of the NATS crash test (Tests/HeraldNATSReceiverTests/NATSCrashTests.swift).
//
//   NATSProbe URL DIR   starts Herald on the SQLite store in DIR (durable inbox) with a NATSReceiver connected to
//                       the nats-server at URL, writes its registration token to DIR/token, and appends one line
//                       "<n> <replay 0|1>" to DIR/handled.log for every message it handles (data key `n`). Each
//                       handler takes a few milliseconds and at most 16 messages are in flight, so a stream of
//                       messages takes a while and the test can kill the process in the middle of it. Runs until
//                       killed.
//   NATSProbe URL DIR TOPIC   the same with stored topic delivery, subscribed to TOPIC before the token is written:
//                       it handles the topic's messages (JetStream, a durable consumer per topic) instead.

import Foundation
import Herald
import HeraldNATSReceiver
import HeraldSQLite

final class HandledLog: MessageHandler, @unchecked Sendable {
    // @unchecked Sendable: the file descriptor is written with single write(2) calls (O_APPEND).
    let fd: Int32
    init(path: String) { fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0o644) }

    func didReceive(_ message: RemoteMessage) async throws {
        // The child's workload, not a wait: 3 ms per message keeps a stream in progress when the test kills it.
        try await Task.sleep(for: .milliseconds(3))
        let line = "\(message.userInfo["n"]?.stringValue ?? "?") \(message.isReplay ? 1 : 0)\n"
        _ = line.withCString { write(fd, $0, strlen($0)) }
    }
}

let arguments = CommandLine.arguments
guard arguments.count == 3 || arguments.count == 4 else {
    FileHandle.standardError.write(Data("usage: NATSProbe URL DIR [TOPIC]\n".utf8))
    exit(2)
}
let directory = arguments[2]
var configuration = Herald.Configuration(senderID: "1")
configuration.projectID = "demo"
configuration.maxInFlight = 16
let herald = Herald(configuration: configuration, store: try SQLiteStore(directory: directory))
var options = NATSReceiver.Options(servers: [arguments[1]])
options.ackWait = .seconds(1)
options.redeliveryDelay = .milliseconds(50)
let topic = arguments.count == 4 ? arguments[3] : nil
if topic != nil { options.topicDelivery = .stored }
let receiver = NATSReceiver(options: options)
try herald.register(receiver)
try herald.register(HandledLog(path: directory + "/handled.log"))
try await herald.start()
let token = try await herald.token()
if let topic {
    try await herald.subscribe(toTopic: topic)
    try await receiver.flush()
}
try Data(token.utf8).write(to: URL(fileURLWithPath: directory + "/token.tmp"))
rename(directory + "/token.tmp", directory + "/token")
await herald.waitUntilStopped()
